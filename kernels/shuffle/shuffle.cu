// Bijective shuffle (Mitchell et al. 2022) for CuPy RawModule: VariablePhilox / LCG on [0, 2^b), fused flag + scan +
// gather in one pass with a decoupled look-back scan (each element read once and written once), and batched small
// permutations (one warp per permutation). Same bit-exact results as kernels/shuffle/cpu.py.
typedef unsigned long long u64;
typedef unsigned int u32;

#define M0_LO 0xB1CE6E93u
#define M0_HI 0xD2B74407u
#define GOLDEN 0x9E3779B97F4A7C15ULL
#define BLOCK 256
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
// in 32-bit operations spread over both integer pipes:
//   hi = umulhi(L, M0_LO) + L * M0_HI (mod 2^32);
//   odd b:  R' = (L * (2 M0_LO) + (R >> lbits)) & rmask, since lo << 1 has a zero low bit and R >> lbits is 0 or 1;
//           on alternate rounds (ALT) R >> lbits is umulhi(R, 2^(32 - lbits)) on the multiply pipe, not the shifter;
//   even b: R' = L * M0_LO left unmasked: the next round reads only its low lbits (through the masked xor; an even
//           round never shifts R), and the caller masks the final R once.
template <bool ODD, bool ALT>
__device__ __forceinline__ void vp_round(u32& L, u32& R, u32 k, int lbits, u32 lmask, u32 rmask, u32 tmul) {
  const u32 hi = __umulhi(L, M0_LO) + L * M0_HI;
  const u32 nl = (hi ^ k ^ R) & lmask;
  if (ODD) {
    const u32 t = ALT ? __umulhi(R, tmul) : (R >> lbits);
    R = (L * (M0_LO << 1) + t) & rmask;
  } else {
    R = L * M0_LO;
  }
  L = nl;
}

struct Split {
  int lbits, rbits;
  u32 lmask, rmask, tmul;
  __device__ __forceinline__ explicit Split(int n_bits)
      : lbits(n_bits / 2), rbits(n_bits - n_bits / 2), lmask((u32)((1ULL << (n_bits / 2)) - 1)),
        rmask((u32)((1ULL << (n_bits - n_bits / 2)) - 1)), tmul(1u << (32 - n_bits / 2)) {}
};

// Runtime round count (keys in shared memory): rounds != 24 and the batched kernel.
template <bool ODD>
__device__ __forceinline__ u64 vphilox_rt(u64 x, const Split& S, int rounds, const u32* keys) {
  u32 L = (u32)(x >> S.rbits), R = (u32)x & S.rmask;
  for (int i = 0; i < rounds; ++i) vp_round<ODD, false>(L, R, keys[i], S.lbits, S.lmask, S.rmask, S.tmul);
  return ((u64)L << S.rbits) | (u64)(R & S.rmask);
}

__device__ __forceinline__ u64 vphilox(u64 x, const Split& S, int rounds, const u32* keys) {
  return S.rbits > S.lbits ? vphilox_rt<true>(x, S, rounds, keys) : vphilox_rt<false>(x, S, rounds, keys);
}

// ITEMS consecutive indices base.. through a ROUNDS-round VariablePhilox with the keys in registers, fully unrolled,
// so the ITEMS independent round chains interleave. y[j] = f(base + j); bit j of flags: base + j < n and y[j] < m.
template <int ROUNDS, bool ODD, int ITEMS, typename IDX>
__device__ __forceinline__ void eval_fixed(IDX (&y)[ITEMS], u32& flags, u32& cnt, u64 base, u64 n, u64 m,
                                           const Split& S, const u32 (&k)[ROUNDS]) {
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) {
    const u64 i = base + j;
    u32 L = (u32)(i >> S.rbits), R = (u32)i & S.rmask;
#pragma unroll
    for (int r = 0; r < ROUNDS; ++r) {
      if (r & 1) vp_round<ODD, true>(L, R, k[r], S.lbits, S.lmask, S.rmask, S.tmul);
      else vp_round<ODD, false>(L, R, k[r], S.lbits, S.lmask, S.rmask, S.tmul);
    }
    const u64 v = ((u64)L << S.rbits) | (u64)(R & S.rmask);
    const u32 f = (i < n) & (v < m);
    y[j] = (IDX)v;
    cnt += f;
    flags |= f << j;
  }
}

__device__ __forceinline__ u64 ld_status(const u64* p) { return *((volatile const u64*)p); }

// out[(P + r) * d + c] = in[src[r] * d + c] for the block's agg staged rows; coalesced writes, one row read per source.
template <typename W, typename IDX>
__device__ __forceinline__ void gather_rows(const W* __restrict__ in, W* __restrict__ out, long long d, const IDX* src,
                                            u32 agg, u64 P) {
  if constexpr (!IsNone<W>::value) {
    const u64 tot = (u64)agg * d;
    for (u64 e = threadIdx.x; e < tot; e += BLOCK) {
      u64 r = e / d, c = e - r * d;
      out[(P + r) * d + c] = in[(u64)src[r] * d + c];
    }
  }
}

// out1[j*d1 + c] = in1[f(i_j)*d1 + c] (and likewise for the second array; idx_out[j] = f(i_j)), where i_j is the
// j-th index of [0, 2^n_bits) with f(i) < m. Words W1/W2 let rows move as 1..16-byte units; None = no array.
// ROUNDS > 0: VariablePhilox with that many rounds, unrolled; 0: VariablePhilox with `rounds` rounds; -1: LCG.
// IDX: u32 when n_bits <= 32, else u64. ROWS = false: one word per row (keys, pairs): the sources are loaded into
// registers before the look-back (their latency overlaps it) and written from there; ROWS: rows of d words each,
// gathered after the look-back.
// ws[0] is the tile counter (0 between launches: the block that draws the last tile resets it), ws[1 + t] tile t's
// status word; tag is this launch's tag (see TAG_SHIFT).
template <typename W1, typename W2, int ROUNDS, int ITEMS, typename IDX, bool ROWS>
__global__ void __launch_bounds__(BLOCK) bij_shuffle(const W1* __restrict__ in1, W1* __restrict__ out1, long long d1,
                                                      const W2* __restrict__ in2, W2* __restrict__ out2, long long d2,
                                                      long long* __restrict__ idx_out, const u32* __restrict__ gkeys,
                                                      u64 m, int n_bits, int rounds, u64 lcg_a, u64 lcg_c, u64* ws,
                                                      u64 tag) {
  constexpr int TILE = BLOCK * ITEMS;
  constexpr bool HAS1 = !IsNone<W1>::value, HAS2 = !IsNone<W2>::value;
  const u64 n = 1ULL << n_bits;
  const u64 n_tiles = (n + TILE - 1) / TILE;
  u64* status = ws + 1;
  __shared__ u32 keys[MAX_ROUNDS];
  __shared__ IDX sidx[TILE];
  __shared__ u32 warp_tot[BLOCK / 32];
  __shared__ u64 s_tile, s_prefix;
  __shared__ u32 s_agg;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int nr = ROUNDS > 0 ? ROUNDS : rounds;
  if (ROUNDS >= 0 && tid < nr) keys[tid] = gkeys[tid];
  if (tid == 0) {
    const u64 t = atomicAdd(ws, 1ULL);
    if (t == n_tiles - 1) atomicExch(ws, 0ULL);  // every block has drawn its tile: ready for the next launch
    s_tile = t;
  }
  __syncthreads();
  const u64 tile = s_tile;
  const u64 base = tile * TILE + (u64)tid * ITEMS;
  const Split S(n_bits);

  // 1. evaluate the bijection on this thread's ITEMS consecutive indices; flag the images below m
  IDX y[ITEMS];
  u32 flags = 0, cnt = 0;
  if constexpr (ROUNDS > 0) {
    u32 k[ROUNDS];
#pragma unroll
    for (int r = 0; r < ROUNDS; ++r) k[r] = keys[r];
    if (S.rbits > S.lbits) eval_fixed<ROUNDS, true, ITEMS, IDX>(y, flags, cnt, base, n, m, S, k);
    else eval_fixed<ROUNDS, false, ITEMS, IDX>(y, flags, cnt, base, n, m, S, k);
  } else {
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
      const u64 i = base + j;
      const u64 v = ROUNDS < 0 ? ((lcg_a * i + lcg_c) & (n - 1)) : vphilox(i, S, nr, keys);
      const u32 f = (i < n) & (v < m);
      y[j] = (IDX)v;
      cnt += f;
      flags |= f << j;
    }
  }
  // 2. block exclusive scan of the per-thread counts; publish the tile's aggregate at once
  u32 incl = cnt;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    u32 v = __shfl_up_sync(FULL_MASK, incl, o);
    if (lane >= o) incl += v;
  }
  if (lane == 31) warp_tot[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    u32 w = (lane < BLOCK / 32) ? warp_tot[lane] : 0, wi = w;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      u32 v = __shfl_up_sync(FULL_MASK, wi, o);
      if (lane >= o) wi += v;
    }
    if (lane < BLOCK / 32) warp_tot[lane] = wi - w;  // exclusive warp offsets
    if (lane == BLOCK / 32 - 1) {
      s_agg = wi;
      atomicExch(&status[tile], (tag << TAG_SHIFT) | ((tile == 0 ? FLAG_INC : FLAG_AGG) << FLAG_SHIFT) | (u64)wi);
    }
  }
  __syncthreads();
  const u32 agg = s_agg;
  // 3. stage the surviving sources in shared memory, in order
  u32 pos = warp_tot[warp] + incl - cnt;
#pragma unroll
  for (int j = 0; j < ITEMS; ++j)
    if ((flags >> j) & 1u) sidx[pos++] = y[j];
  __syncthreads();

  // 4. one-word rows: load the sources now, so that their latency overlaps the look-back
  W1 v1[ROWS ? 1 : ITEMS];
  W2 v2[ROWS ? 1 : ITEMS];
  if constexpr (!ROWS) {
#pragma unroll
    for (int q = 0; q < ITEMS; ++q) {
      const u32 r = (u32)(q * BLOCK + tid);
      if (r < agg) {
        const IDX s = sidx[r];
        if constexpr (HAS1) v1[q] = in1[s];
        if constexpr (HAS2) v2[q] = in2[s];
      }
    }
  }

  // 5. decoupled look-back for this tile's global offset
  if (warp == 0) {
    u64 excl = 0;
    if (tile > 0) {
      long long pred = (long long)tile - 1;
      while (true) {
        const long long idx = pred - lane;
        const u64 s = (idx >= 0) ? ld_status(&status[idx]) : ((tag << TAG_SHIFT) | (FLAG_INC << FLAG_SHIFT));
        const u32 flag = ((s >> TAG_SHIFT) == tag) ? (u32)(s >> FLAG_SHIFT) & 3u : 0u;
        if (__any_sync(FULL_MASK, flag == 0)) continue;
        const u32 inc_mask = __ballot_sync(FULL_MASK, flag == (u32)FLAG_INC);
        const int first = inc_mask ? __ffs(inc_mask) - 1 : 31;
        u64 v = (lane <= first) ? (s & VAL_MASK) : 0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(FULL_MASK, v, o);
        excl += __shfl_sync(FULL_MASK, v, 0);
        if (inc_mask) break;
        pred -= 32;
      }
      if (lane == 0) atomicExch(&status[tile], (tag << TAG_SHIFT) | (FLAG_INC << FLAG_SHIFT) | (excl + agg));
    }
    if (lane == 0) s_prefix = excl;
  }
  __syncthreads();
  const u64 P = s_prefix;

  // 6. write into contiguous output positions
  if constexpr (ROWS) {
    if (idx_out)
      for (u32 r = tid; r < agg; r += BLOCK) idx_out[P + r] = (long long)sidx[r];
    gather_rows(in1, out1, d1, sidx, agg, P);
    gather_rows(in2, out2, d2, sidx, agg, P);
  } else {
#pragma unroll
    for (int q = 0; q < ITEMS; ++q) {
      const u32 r = (u32)(q * BLOCK + tid);
      if (r < agg) {
        if (idx_out) idx_out[P + r] = (long long)sidx[r];
        if constexpr (HAS1) out1[P + r] = v1[q];
        if constexpr (HAS2) out2[P + r] = v2[q];
      }
    }
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
