// Bijective shuffle (Mitchell et al. 2022) for CuPy RawModule: VariablePhilox / LCG on [0, 2^b), fused flag + scan +
// gather in one pass with a decoupled look-back scan (each element read once and written once), and batched small
// permutations (one warp per permutation). Same bit-exact results as kernels/shuffle/cpu.py.
typedef unsigned long long u64;
typedef unsigned int u32;

#define M0_LO 0xB1CE6E93u
#define M0_HI 0xD2B74407u
#define GOLDEN 0x9E3779B97F4A7C15ULL
#ifndef BLOCK
#define BLOCK 256  // threads per block (gpu._BLOCK)
#endif
#define PRAGMA_STR(x) #x
#define UNROLL(n) _Pragma(PRAGMA_STR(unroll n))
#ifndef UNROLL_J
#define UNROLL_J 2  // unrolling of the runtime-rounds / LCG evaluation loop
#endif
#ifndef CHAINS
#define CHAINS 4  // independent round chains interleaved per thread on the unrolled path
#endif
#ifndef STREAM_OUT
#define STREAM_OUT 1  // outputs stored with the evict-first hint (st.global.cs), so the sources keep the L2
#endif
#ifndef PREFETCH
#define PREFETCH 1  // one-word rows: sources loaded into registers before the look-back
#endif
#ifndef LB_K
#define LB_K 1  // status words per lane and look-back step (32 * LB_K tiles per step; wider is slower: docs/design/shuffle.md)
#endif
#define MAX_ROUNDS 64
#define FULL_MASK 0xffffffffu
// Look-back status word: tag (20 bits) | flag (2 bits) | value (42 bits). The host gives every launch on a workspace
// a new tag, so words left by earlier launches read as "not ready" and the status array needs no clearing per launch.
#define TAG_SHIFT 44
#define FLAG_SHIFT 42
#define FLAG_AGG 1ULL
#define FLAG_INC 2ULL
#define VAL_MASK ((1ULL << 42) - 1)

struct __align__(16) V16 { u32 x, y, z, w; };
struct None {};  // an absent array
template <typename T> struct IsNone { static constexpr bool value = false; };
template <> struct IsNone<None> { static constexpr bool value = true; };

// One VariablePhilox round of the paper's listing (p = M0 * L mod 2^64, hi = p >> 32, lo = p mod 2^32):
//   L' = (hi ^ k ^ R) & lmask,   R' = ((lo << (rbits - lbits)) | (R >> lbits)) & rmask,
// in 32-bit operations: hi = umulhi(L, M0_LO) + L * M0_HI (mod 2^32);
//   odd b:  R' = (L * (2 M0_LO) + (R >> lbits)) & rmask, since lo << 1 has a zero low bit and R >> lbits is 0 or 1;
//   even b: R' = L * M0_LO left unmasked: the next round reads only its low lbits (through the masked xor; an even
//           round never shifts R), and the caller masks the final R once.
// (The unrolled 24-round path of bij_shuffle runs odd b in a cheaper left-aligned form: eval_fixed.)
template <bool ODD>
__device__ __forceinline__ void vp_round(u32& L, u32& R, u32 k, int lbits, u32 lmask, u32 rmask) {
  const u32 hi = __umulhi(L, M0_LO) + L * M0_HI;
  const u32 nl = (hi ^ k ^ R) & lmask;
  if (ODD) {
    R = (L * (M0_LO << 1) + (R >> lbits)) & rmask;
  } else {
    R = L * M0_LO;
  }
  L = nl;
}

struct Split {
  int lbits, rbits;
  u32 lmask, rmask;
  __device__ __forceinline__ explicit Split(int n_bits)
      : lbits(n_bits / 2), rbits(n_bits - n_bits / 2), lmask((u32)((1ULL << (n_bits / 2)) - 1)),
        rmask((u32)((1ULL << (n_bits - n_bits / 2)) - 1)) {}
};

// Runtime round count (keys in shared memory): rounds != 24 and the batched kernel.
template <bool ODD>
__device__ __forceinline__ u64 vphilox_rt(u64 x, const Split& S, int rounds, const u32* keys) {
  u32 L = (u32)(x >> S.rbits), R = (u32)x & S.rmask;
  for (int i = 0; i < rounds; ++i) vp_round<ODD>(L, R, keys[i], S.lbits, S.lmask, S.rmask);
  return ((u64)L << S.rbits) | (u64)(R & S.rmask);
}

__device__ __forceinline__ u64 vphilox(u64 x, const Split& S, int rounds, const u32* keys) {
  return S.rbits > S.lbits ? vphilox_rt<true>(x, S, rounds, keys) : vphilox_rt<false>(x, S, rounds, keys);
}

// CH indices i0, i0 + STRIDE, ... through a ROUNDS-round VariablePhilox with the keys in registers, fully unrolled:
// the CH round chains are independent, so they interleave (instruction-level parallelism within a warp). Odd b runs on
// left-aligned halves (sh = 32 - rbits): Ls = L << sh and Rs = (R << sh) + junk below bit sh. Then, with
// (lo, hi0) = Ls * M0_LO from one wide multiply (lo = (L*M0_LO mod 2^32) << sh, hi0 = (umulhi(L, M0_LO) << sh) + junk):
//   Ls' = ((hi0 + Ls*M0_HI) ^ (k << sh) ^ Rs) & (lmask << sh)   (the mask drops every junk bit, and R's top bit);
//   Rs' = 2*lo + (Rs >> lbits)                                  (= R' << sh + junk: mod 2^32 is the rmask, R's top
//         bit lands on bit sh and its other bits and the junk below it, with no carry: 2*lo has sh + 1 zero low bits),
// so an odd round is a wide multiply, two multiply-adds, a shift and two logic ops, with no masking of R.
// ka holds the keys shifted left by sh for odd b. IDX: u32 when b <= 32 (all index arithmetic in 32 bits), else u64.
template <int ROUNDS, bool ODD, int CH, int STRIDE, typename IDX>
__device__ __forceinline__ void eval_fixed(IDX (&v)[CH], IDX i0, const Split& S, int sh, const u32 (&ka)[ROUNDS]) {
  u32 L[CH], R[CH];
  const u32 lm = S.lmask << sh;
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const IDX i = i0 + (IDX)(c * STRIDE);
    L[c] = (u32)(i >> S.rbits) << sh;
    R[c] = ODD ? (u32)(i << sh) : (u32)i & S.rmask;
  }
#pragma unroll
  for (int r = 0; r < ROUNDS; ++r) {
#pragma unroll
    for (int c = 0; c < CH; ++c) {
      if constexpr (ODD) {
        const u64 p = (u64)L[c] * M0_LO;
        const u32 hi = (u32)(p >> 32) + L[c] * M0_HI;
        const u32 nl = (hi ^ ka[r] ^ R[c]) & lm;
        R[c] = ((u32)p << 1) + (R[c] >> S.lbits);
        L[c] = nl;
      } else {
        vp_round<false>(L[c], R[c], ka[r], S.lbits, S.lmask, S.rmask);
      }
    }
  }
#pragma unroll
  for (int c = 0; c < CH; ++c)
    v[c] = ODD ? ((IDX)(L[c] >> sh) << S.rbits) | (IDX)(R[c] >> sh) : ((IDX)L[c] << S.rbits) | (IDX)(R[c] & S.rmask);
}

// Output stores: with STREAM_OUT, evict-first (each output word is written once and not read back).
template <typename W>
__device__ __forceinline__ void st_out(W* p, const W& v) {
#if STREAM_OUT
  if constexpr (sizeof(W) == 16) __stcs(reinterpret_cast<uint4*>(p), *reinterpret_cast<const uint4*>(&v));
  else __stcs(p, v);
#else
  *p = v;
#endif
}

__device__ __forceinline__ u64 ld_status(const u64* p) { return *((volatile const u64*)p); }

// One warp: out[(P + r) * d + c] = in[src[r] * d + c] for its cnt (<= 32) staged rows; coalesced writes.
template <typename W, typename IDX>
__device__ __forceinline__ void gather_rows(const W* __restrict__ in, W* __restrict__ out, u64 d, const IDX* src,
                                            u32 cnt, u64 P) {
  if constexpr (!IsNone<W>::value) {
    const u32 ud = (u32)d, tot = cnt * ud;  // the caller keeps 32 * d < 2^32
    for (u32 e = threadIdx.x & 31; e < tot; e += 32) {
      const u32 r = e / ud, c = e - r * ud;
      st_out(&out[(P + r) * ud + c], in[(u64)src[r] * ud + c]);
    }
  }
}

// The fused shuffle: out1[j*d1 + c] = in1[f(i_j)*d1 + c] (and likewise for the second array; idx_out[j] = f(i_j)),
// where i_j is the j-th index of [0, 2^n_bits) with f(i) < m. Words W1/W2 let rows move as 1..16-byte units; None =
// no array. ROUNDS > 0: VariablePhilox with that many rounds, unrolled; 0: VariablePhilox with `rounds` rounds; -1:
// LCG, whose multiplier and increment are the two u64 words at gkeys. IDX: u32 when n_bits <= 32, else u64.
// A tile is TILE = BLOCK * ITEMS consecutive indices; thread t of warp w evaluates index tile*TILE + j*BLOCK + t for
// j < ITEMS, so segment (j, w) is 32 consecutive indices. Each warp compacts its surviving images per segment with a
// ballot into stage[j*BLOCK + w*32 + rank] and their count into seg[j*WARPS + w]: no image waits in a register, so
// the round chains run with few registers (high occupancy). One scan over the ITEMS*WARPS segment counts (in index
// order) gives each segment's offset in the tile; each warp then moves its own segments.
// ws[0] is the tile counter (0 between launches), ws[1 + t] tile t's status word; tag is this launch's tag (see
// TAG_SHIFT). The small scalars travel packed in one word (fewer launch arguments, less host time per launch):
// shape = n_bits | rounds << 8 | d1 << 16 | d2 << 40 (d1, d2 < 2^24 words per row).
template <typename W1, typename W2, int ITEMS, typename IDX>
struct Tile {
  static constexpr int TILE = BLOCK * ITEMS, WARPS = BLOCK / 32, NSEG = ITEMS * WARPS, PER = (NSEG + 31) / 32;
  static constexpr bool HAS1 = !IsNone<W1>::value, HAS2 = !IsNone<W2>::value, IDXONLY = !HAS1 && !HAS2;
  // 1. evaluate the bijection on the tile's indices; compact each warp's surviving images per segment
  template <int ROUNDS>
  static __device__ __forceinline__ void eval(u64 tile, u64 n, u64 m, const Split& S, int sh,
                                              const u32 (&ka)[ROUNDS > 0 ? ROUNDS : 1], const u32* keys, int nr,
                                              const u32* gkeys, IDX* stage, u32* seg) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const u64 base = tile * TILE + (u64)tid;
    const u32 lt_mask = (1u << lane) - 1u;
    auto put = [&](int j, u64 i, u64 v) {
      const bool f = (i < n) & (v < m);
      const u32 bal = __ballot_sync(FULL_MASK, f);
      if (f) stage[j * BLOCK + warp * 32 + __popc(bal & lt_mask)] = (IDX)v;
      if (lane == 0) seg[j * WARPS + warp] = __popc(bal);
    };
    if constexpr (ROUNDS > 0) {
      constexpr int CH = ITEMS < CHAINS ? ITEMS : CHAINS;
      const IDX ib = (IDX)base;
      if (S.rbits > S.lbits) {
        for (int j = 0; j < ITEMS; j += CH) {
          IDX v[CH];
          eval_fixed<ROUNDS, true, CH, BLOCK, IDX>(v, ib + (IDX)(j * BLOCK), S, sh, ka);
#pragma unroll
          for (int c = 0; c < CH; ++c) put(j + c, base + (u64)(j + c) * BLOCK, v[c]);
        }
      } else {
        for (int j = 0; j < ITEMS; j += CH) {
          IDX v[CH];
          eval_fixed<ROUNDS, false, CH, BLOCK, IDX>(v, ib + (IDX)(j * BLOCK), S, 0, ka);
#pragma unroll
          for (int c = 0; c < CH; ++c) put(j + c, base + (u64)(j + c) * BLOCK, v[c]);
        }
      }
    } else {
      const u64* lcg = reinterpret_cast<const u64*>(gkeys);  // ROUNDS < 0: (multiplier, increment)
UNROLL(UNROLL_J)
      for (int j = 0; j < ITEMS; ++j) {
        const u64 i = base + (u64)j * BLOCK;
        put(j, i, ROUNDS < 0 ? ((lcg[0] * i + lcg[1]) & (n - 1)) : vphilox(i, S, nr, keys));
      }
    }
  }

  // 2. (warp 0) exclusive scan of the segment counts (index order); publish the tile's aggregate at once
  static __device__ __forceinline__ void scan(u32* seg, u64 tile, u64* status, u64 tag) {
    const int lane = threadIdx.x & 31;
    u32 c[PER], sum = 0;
#pragma unroll
    for (int q = 0; q < PER; ++q) {
      const int s = lane * PER + q;
      c[q] = s < NSEG ? seg[s] : 0u;
      sum += c[q];
    }
    u32 incl = sum;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const u32 v = __shfl_up_sync(FULL_MASK, incl, o);
      if (lane >= o) incl += v;
    }
    u32 run = incl - sum;
#pragma unroll
    for (int q = 0; q < PER; ++q) {
      const int s = lane * PER + q;
      if (s < NSEG) seg[s] = run;
      run += c[q];
    }
    if (lane == 31) {
      seg[NSEG] = incl;
      atomicExch(&status[tile], (tag << TAG_SHIFT) | ((tile == 0 ? FLAG_INC : FLAG_AGG) << FLAG_SHIFT) | (u64)incl);
    }
  }

  // 3. one-word rows: this warp's sources (and, for the index alone, the images) into registers
  static __device__ __forceinline__ void load(const W1* __restrict__ in1, const W2* __restrict__ in2,
                                              const IDX* stage, const u32* seg, W1 (&v1)[ITEMS], W2 (&v2)[ITEMS],
                                              IDX (&sv)[ITEMS]) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
      const int s = j * WARPS + warp;
      if (lane < (int)(seg[s + 1] - seg[s])) {
        const IDX src = stage[j * BLOCK + warp * 32 + lane];
        if constexpr (HAS1) v1[j] = in1[src];
        if constexpr (HAS2) v2[j] = in2[src];
        if constexpr (IDXONLY) sv[j] = src;
      }
    }
  }

  // 4. (warp 0) decoupled look-back for the tile's global offset; publishes its inclusive prefix, returns the offset.
  // A step reads the LB_K * 32 status words before `pred` (lane l: pred - l*LB_K - q, q < LB_K, all loads in flight
  // at once), retries until all are ready, sums the values down to the nearest inclusive prefix, and goes on past the
  // window when it holds none. The known part of the prefix advances by up to LB_K * 32 tiles per L2 round trip.
  static __device__ __forceinline__ u64 lookback(u64 tile, u32 agg, u64* status, u64 tag) {
    const int lane = threadIdx.x & 31;
    u64 excl = 0;
    if (tile > 0) {
      long long pred = (long long)tile - 1;
      while (true) {
        u64 s[LB_K];
        u32 fl[LB_K];
        bool wait = false;
#pragma unroll
        for (int q = 0; q < LB_K; ++q) {
          const long long idx = pred - lane * LB_K - q;
          s[q] = (idx >= 0) ? ld_status(&status[idx]) : ((tag << TAG_SHIFT) | (FLAG_INC << FLAG_SHIFT));
          fl[q] = ((s[q] >> TAG_SHIFT) == tag) ? (u32)(s[q] >> FLAG_SHIFT) & 3u : 0u;
          wait |= fl[q] == 0;
        }
        if (__any_sync(FULL_MASK, wait)) continue;
        int qi = LB_K;  // this lane's nearest inclusive prefix
#pragma unroll
        for (int q = LB_K - 1; q >= 0; --q) qi = fl[q] == (u32)FLAG_INC ? q : qi;
        const u32 inc_mask = __ballot_sync(FULL_MASK, qi < LB_K);
        const int first = inc_mask ? __ffs(inc_mask) - 1 : 31;
        u64 v = 0;
#pragma unroll
        for (int q = 0; q < LB_K; ++q) v += (lane < first || (lane == first && q <= qi)) ? (s[q] & VAL_MASK) : 0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(FULL_MASK, v, o);
        excl += __shfl_sync(FULL_MASK, v, 0);
        if (inc_mask) break;
        pred -= 32 * LB_K;
      }
      if (lane == 0) atomicExch(&status[tile], (tag << TAG_SHIFT) | (FLAG_INC << FLAG_SHIFT) | (excl + agg));
    }
    return excl;
  }

  // 5. one-word rows: each warp writes its segments (from the registers of step 3) at their output positions
  static __device__ __forceinline__ void store(W1* __restrict__ out1, W2* __restrict__ out2,
                                               long long* __restrict__ idx_out, const u32* seg, u64 P,
                                               const W1 (&v1)[ITEMS], const W2 (&v2)[ITEMS], const IDX (&sv)[ITEMS]) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
      const int s = j * WARPS + warp;
      if (lane < (int)(seg[s + 1] - seg[s])) {
        const u64 o = P + seg[s] + lane;
        if constexpr (HAS1) st_out(&out1[o], v1[j]);
        if constexpr (HAS2) st_out(&out2[o], v2[j]);
        if constexpr (IDXONLY) {
          if (idx_out) st_out(&idx_out[o], (long long)sv[j]);
        }
      }
    }
  }
};

// Round keys into shared memory (shifted left by sh for odd b on the unrolled path: eval_fixed) and registers.
template <int ROUNDS>
__device__ __forceinline__ void load_keys(u32* keys, u32 (&ka)[ROUNDS > 0 ? ROUNDS : 1], const u32* gkeys, int nr,
                                          int sh) {
  if (ROUNDS >= 0 && (int)threadIdx.x < nr) keys[threadIdx.x] = gkeys[threadIdx.x] << sh;
  __syncthreads();
  if constexpr (ROUNDS > 0) {
#pragma unroll
    for (int r = 0; r < ROUNDS; ++r) ka[r] = keys[r];
  }
}

// One tile per block: evaluate, scan, (one-word rows: load the sources), look back, move the rows. ROWS = false: one
// word per row (keys, pairs, the index): the sources are loaded into registers before the look-back (their latency
// overlaps it) and written from there; ROWS: rows of d words each, gathered after the look-back. MINB: the launch
// bounds' minimum of resident blocks per SM (0: none). The block that draws the last tile resets the tile counter.
template <typename W1, typename W2, int ROUNDS, int ITEMS, typename IDX, bool ROWS, int MINB>
__global__ void __launch_bounds__(BLOCK, MINB) bij_shuffle(const W1* __restrict__ in1, W1* __restrict__ out1,
                                                            const W2* __restrict__ in2, W2* __restrict__ out2,
                                                            long long* __restrict__ idx_out,
                                                            const u32* __restrict__ gkeys, u64 m, u64 shape, u64* ws,
                                                            u64 tag) {
  using T = Tile<W1, W2, ITEMS, IDX>;
  const int n_bits = (int)(shape & 0xff), rounds = (int)((shape >> 8) & 0xff);
  const u64 d1 = (shape >> 16) & 0xffffff, d2 = shape >> 40;
  const u64 n = 1ULL << n_bits;
  const u64 n_tiles = (n + T::TILE - 1) / T::TILE;
  u64* status = ws + 1;
  __shared__ u32 keys[MAX_ROUNDS];
  __shared__ IDX stage[T::TILE];
  __shared__ u32 seg[T::NSEG + 1];  // counts, then exclusive offsets; seg[NSEG] = the tile's total
  __shared__ u64 s_tile, s_prefix;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int nr = ROUNDS > 0 ? ROUNDS : rounds;
  const Split S(n_bits);
  const int sh = (ROUNDS > 0 && S.rbits > S.lbits) ? 32 - S.rbits : 0;
  if (tid == 0) {
    const u64 t = atomicAdd(ws, 1ULL);
    if (t == n_tiles - 1) atomicExch(ws, 0ULL);  // every block has drawn its tile: ready for the next launch
    s_tile = t;
  }
  u32 ka[ROUNDS > 0 ? ROUNDS : 1];
  load_keys<ROUNDS>(keys, ka, gkeys, nr, sh);  // (its barrier also publishes s_tile)
  const u64 tile = s_tile;
  T::template eval<ROUNDS>(tile, n, m, S, sh, ka, keys, nr, gkeys, stage, seg);
  __syncthreads();
  if (warp == 0) T::scan(seg, tile, status, tag);
  __syncthreads();
  constexpr bool PF = !ROWS && PREFETCH;
  W1 v1[ITEMS];
  W2 v2[ITEMS];
  IDX sv[ITEMS];
  if constexpr (PF) T::load(in1, in2, stage, seg, v1, v2, sv);
  if (warp == 0) {
    const u64 excl = T::lookback(tile, seg[T::NSEG], status, tag);
    if (lane == 0) s_prefix = excl;
  }
  __syncthreads();
  const u64 P = s_prefix;
  if constexpr (PF) {
    T::store(out1, out2, idx_out, seg, P, v1, v2, sv);
  } else {
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
      const int s = j * T::WARPS + warp;
      const u32 off = seg[s], cnt = seg[s + 1] - off;
      const IDX* src = stage + j * BLOCK + warp * 32;
      const u64 o = P + off;
      if (idx_out && lane < (int)cnt) st_out(&idx_out[o + lane], (long long)src[lane]);
      if constexpr (ROWS) {
        gather_rows(in1, out1, d1, src, cnt, o);
        gather_rows(in2, out2, d2, src, cnt, o);
      } else if (lane < (int)cnt) {
        const IDX s2 = src[lane];
        if constexpr (T::HAS1) st_out(&out1[o + lane], in1[s2]);
        if constexpr (T::HAS2) st_out(&out2[o + lane], in2[s2]);
      }
    }
  }
}

// Persistent blocks of BLOCK threads that evaluate and move rows plus one control warp, software-pipelined across
// tiles (one-word rows: keys, pairs, the index). While the BLOCK threads evaluate the bijection on the block's next
// tile (the loads of the current tile in flight in their registers), the control warp looks back for the current
// tile; then the BLOCK threads write the current tile while the control warp scans the next one, publishes its
// aggregate and draws the tile after it. So the look-back latency hides behind the round chains, and the random loads
// behind both. The grid is at most the number of resident blocks; each block draws one ticket past the last tile and
// the block that draws the launch's last ticket resets the counter. Deadlock-free: a drawn tile's aggregate is
// published after its evaluation and the look-back of a lower tile, by induction on the lowest tile in a look-back.
template <typename W1, typename W2, int ROUNDS, int ITEMS, typename IDX, int MINB>
__global__ void __launch_bounds__(BLOCK + 32, MINB) bij_shuffle_ctl(const W1* __restrict__ in1, W1* __restrict__ out1,
                                                                     const W2* __restrict__ in2, W2* __restrict__ out2,
                                                                     long long* __restrict__ idx_out,
                                                                     const u32* __restrict__ gkeys, u64 m, u64 shape,
                                                                     u64* ws, u64 tag) {
  using T = Tile<W1, W2, ITEMS, IDX>;
  const int n_bits = (int)(shape & 0xff), rounds = (int)((shape >> 8) & 0xff);
  const u64 n = 1ULL << n_bits;
  const u64 n_tiles = (n + T::TILE - 1) / T::TILE;
  const u64 last_ticket = n_tiles + gridDim.x - 1;
  u64* status = ws + 1;
  __shared__ u32 keys[MAX_ROUNDS];
  __shared__ IDX stage[T::TILE];
  __shared__ u32 seg[2][T::NSEG + 1];
  __shared__ u64 s_tile[2], s_prefix;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const bool ctl = warp == T::WARPS;
  const int nr = ROUNDS > 0 ? ROUNDS : rounds;
  const Split S(n_bits);
  const int sh = (ROUNDS > 0 && S.rbits > S.lbits) ? 32 - S.rbits : 0;
  auto draw = [&](int b) {  // control warp, lane 0
    const u64 t = atomicAdd(ws, 1ULL);
    if (t == last_ticket) atomicExch(ws, 0ULL);
    s_tile[b] = t;
  };
  if (tid == BLOCK) draw(0);
  u32 ka[ROUNDS > 0 ? ROUNDS : 1];
  load_keys<ROUNDS>(keys, ka, gkeys, nr, sh);
  u64 tile = s_tile[0];
  if (tile >= n_tiles) return;
  if (!ctl) T::template eval<ROUNDS>(tile, n, m, S, sh, ka, keys, nr, gkeys, stage, seg[0]);
  __syncthreads();
  if (ctl) {
    T::scan(seg[0], tile, status, tag);
    if (lane == 0) draw(1);
  }
  __syncthreads();
  W1 v1[ITEMS];
  W2 v2[ITEMS];
  IDX sv[ITEMS];
  int b = 0;
  while (true) {
    const u64 next = s_tile[b ^ 1];
    if (!ctl) T::load(in1, in2, stage, seg[b], v1, v2, sv);
    __syncthreads();  // stage read
    if (ctl) {
      const u64 excl = T::lookback(tile, seg[b][T::NSEG], status, tag);
      if (lane == 0) s_prefix = excl;
    } else if (next < n_tiles) {
      T::template eval<ROUNDS>(next, n, m, S, sh, ka, keys, nr, gkeys, stage, seg[b ^ 1]);
    }
    __syncthreads();
    if (!ctl) {
      T::store(out1, out2, idx_out, seg[b], s_prefix, v1, v2, sv);
    } else if (next < n_tiles) {
      T::scan(seg[b ^ 1], next, status, tag);
      if (lane == 0) draw(b);
    }
    if (next >= n_tiles) break;
    __syncthreads();
    tile = next;
    b ^= 1;
  }
}

__device__ __forceinline__ u32 row_key(u64 base, u64 row, int rounds, int j) {
  u64 z = base + (row * (u64)rounds + (u64)j + 1ULL) * GOLDEN;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return (u32)(z >> 32);
}

// k permutations of range(d): row r (global r = row0 + local) keyed by row_key(base, r, .), one warp per row.
extern "C" __global__ void __launch_bounds__(BLOCK) batched_perm(long long* __restrict__ out, long long k, long long d,
                                                                  u64 row0, u64 base, int rounds, int n_bits) {
  __shared__ u32 keys[BLOCK / 32][MAX_ROUNDS];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long r = (long long)blockIdx.x * (BLOCK / 32) + warp;
  if (r >= k) return;
  for (int j = lane; j < rounds; j += 32) keys[warp][j] = row_key(base, row0 + (u64)r, rounds, j);
  __syncwarp();
  const Split S(n_bits);
  const u64 n = 1ULL << n_bits, ud = (u64)d;
  long long* o = out + r * d;
  u64 cnt = 0;
  for (u64 b = 0; b < n; b += 32) {
    u64 i = b + lane;
    u64 y = (i < n) ? vphilox(i, S, rounds, keys[warp]) : ud;
    bool f = y < ud;
    u32 mask = __ballot_sync(FULL_MASK, f);
    if (f) o[cnt + __popc(mask & ((1u << lane) - 1u))] = (long long)y;
    cnt += __popc(mask);
  }
}
