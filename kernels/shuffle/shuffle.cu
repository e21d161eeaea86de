// Bijective shuffle (Mitchell et al. 2022) for CuPy RawModule: VariablePhilox / LCG on [0, 2^b), fused flag + scan +
// gather in one pass with a decoupled look-back scan (each element read once and written once), and batched small
// permutations (one warp per permutation). Same bit-exact results as kernels/shuffle/cpu.py.
typedef unsigned long long u64;
typedef unsigned int u32;

#define M0_LO 0xB1CE6E93u
#define M0_HI 0xD2B74407u
#define GOLDEN 0x9E3779B97F4A7C15ULL
#define BLOCK 256
#define ITEMS 16
#define TILE (BLOCK * ITEMS)
#define MAX_ROUNDS 64
#define ST_AGG (1ULL << 62)
#define ST_INC (2ULL << 62)
#define VAL_MASK ((1ULL << 62) - 1)

struct __align__(16) V16 { u32 x, y, z, w; };

struct Bij {
  u64 a, c, mask;      // LCG parameters (use_lcg)
  int lbits, rbits;    // VariablePhilox split
  int rounds, use_lcg;
};

// One VariablePhilox round: p = M0 * L mod 2^64 (hi = bits 32..63, lo = bits 0..31); the odd bit of R moves into lo.
__device__ __forceinline__ void vp_round(u32& L, u32& R, u32 k, int lbits, u32 lmask, u32 rmask, int shift) {
  u64 p = (u64)L * M0_LO;
  u32 lo = (u32)p;
  u32 hi = (u32)(p >> 32) + M0_HI * L;
  lo = (lo << shift) | (R >> lbits);
  L = (hi ^ k ^ R) & lmask;
  R = lo & rmask;
}

__device__ __forceinline__ u64 vphilox(u64 x, int lbits, int rbits, int rounds, const u32* keys) {
  const u32 lmask = (u32)((1ULL << lbits) - 1), rmask = (u32)((1ULL << rbits) - 1);
  u32 L = (u32)(x >> rbits), R = (u32)(x & rmask);
#pragma unroll 4
  for (int i = 0; i < rounds; ++i) vp_round(L, R, keys[i], lbits, lmask, rmask, rbits - lbits);
  return ((u64)L << rbits) | (u64)R;
}

// Same function with a compile-time round count: fully unrolled, keys held in registers.
template <int ROUNDS>
__device__ __forceinline__ u64 vphilox_fixed(u64 x, int lbits, int rbits, u32 lmask, u32 rmask, int shift,
                                             const u32 (&k)[ROUNDS]) {
  u32 L = (u32)(x >> rbits), R = (u32)x & rmask;
#pragma unroll
  for (int i = 0; i < ROUNDS; ++i) vp_round(L, R, k[i], lbits, lmask, rmask, shift);
  return ((u64)L << rbits) | (u64)R;
}

__device__ __forceinline__ u64 bij_eval(u64 i, const Bij& B, const u32* keys) {
  if (B.use_lcg) return (B.a * i + B.c) & B.mask;
  return vphilox(i, B.lbits, B.rbits, B.rounds, keys);
}

__device__ __forceinline__ u64 ld_status(const u64* p) { return *((volatile const u64*)p); }

// out[(P + r) * d + c] = in[src[r] * d + c] for the block's agg staged rows; coalesced writes, one row read per source.
template <typename W>
__device__ __forceinline__ void gather_rows(const W* __restrict__ in, W* __restrict__ out, long long d, const u64* src,
                                            u32 agg, u64 P) {
  if (d == 1) {
    for (u32 r = threadIdx.x; r < agg; r += BLOCK) out[P + r] = in[src[r]];
  } else if (d > 1) {
    const u64 tot = (u64)agg * d;
    for (u64 e = threadIdx.x; e < tot; e += BLOCK) {
      u64 r = e / d, c = e - r * d;
      out[(P + r) * d + c] = in[src[r] * d + c];
    }
  }
}

// out1[j*d1 + c] = in1[f(i_j)*d1 + c] (and likewise for the second array; idx_out[j] = f(i_j)), where i_j is the
// j-th index of [0, n) with f(i) < m. Words W1/W2 let rows move as 1..16-byte units.
template <typename W1, typename W2, int ROUNDS>
__global__ void __launch_bounds__(BLOCK) bij_shuffle(const W1* __restrict__ in1, W1* __restrict__ out1, long long d1,
                                                      const W2* __restrict__ in2, W2* __restrict__ out2, long long d2,
                                                      long long* __restrict__ idx_out, u64 m, u64 n, u64 lcg_a,
                                                      u64 lcg_c, int lbits, int rbits, int rounds, int use_lcg,
                                                      u64* status) {
  // status[0] is the tile counter, status[1 + t] tile t's look-back word, the round keys follow the n_tiles words
  u32* tile_counter = (u32*)status;
  const u32* gkeys = (const u32*)(status + 1 + (n + TILE - 1) / TILE);
  status += 1;
  Bij B;
  B.a = lcg_a; B.c = lcg_c; B.mask = n - 1; B.lbits = lbits; B.rbits = rbits; B.rounds = rounds; B.use_lcg = use_lcg;
  __shared__ u32 keys[MAX_ROUNDS];
  __shared__ u64 src[TILE];
  __shared__ u32 warp_tot[BLOCK / 32];
  __shared__ u64 s_tile, s_prefix;
  __shared__ u32 s_agg;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (tid < B.rounds) keys[tid] = gkeys[tid];
  if (tid == 0) s_tile = atomicAdd(tile_counter, 1u);
  __syncthreads();
  const u64 tile = s_tile;
  const u64 base = tile * TILE + (u64)tid * ITEMS;

  // 1. evaluate the bijection on this thread's ITEMS consecutive indices; flag the images below m
  u64 y[ITEMS];
  u32 cnt = 0;
  bool done = false;
  if constexpr (ROUNDS > 0) {
    u32 k[ROUNDS];
#pragma unroll
    for (int r = 0; r < ROUNDS; ++r) k[r] = keys[r];
    const u32 lmask = (u32)((1ULL << lbits) - 1), rmask = (u32)((1ULL << rbits) - 1);
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
      u64 i = base + j;
      y[j] = (i < n) ? vphilox_fixed<ROUNDS>(i, lbits, rbits, lmask, rmask, rbits - lbits, k) : m;
      cnt += (y[j] < m);
    }
    done = true;
  }
  if (!done) {
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
      u64 i = base + j;
      y[j] = (i < n) ? bij_eval(i, B, keys) : m;
      cnt += (y[j] < m);
    }
  }
  // 2. block exclusive scan of the per-thread counts
  u32 incl = cnt;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    u32 v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  if (lane == 31) warp_tot[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    u32 w = (lane < BLOCK / 32) ? warp_tot[lane] : 0, wi = w;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      u32 v = __shfl_up_sync(0xffffffffu, wi, o);
      if (lane >= o) wi += v;
    }
    if (lane < BLOCK / 32) warp_tot[lane] = wi - w;  // exclusive warp offsets
    if (lane == BLOCK / 32 - 1) s_agg = wi;
  }
  __syncthreads();
  const u32 agg = s_agg;
  u32 pos = warp_tot[warp] + incl - cnt;
  // 3. stage the surviving sources in shared memory, in order
#pragma unroll
  for (int j = 0; j < ITEMS; ++j)
    if (y[j] < m) src[pos++] = y[j];

  // 4. decoupled look-back for this tile's global offset
  if (warp == 0) {
    u64 excl = 0;
    if (tile == 0) {
      if (lane == 0) atomicExch(&status[0], ST_INC | (u64)agg);
    } else {
      if (lane == 0) atomicExch(&status[tile], ST_AGG | (u64)agg);
      long long pred = (long long)tile - 1;
      while (true) {
        long long idx = pred - lane;
        u64 s = (idx >= 0) ? ld_status(&status[idx]) : ST_INC;
        u32 flag = (u32)(s >> 62);
        if (__any_sync(0xffffffffu, flag == 0)) continue;
        u32 inc_mask = __ballot_sync(0xffffffffu, flag == 2);
        int first = inc_mask ? __ffs(inc_mask) - 1 : 31;
        u64 v = (lane <= first) ? (s & VAL_MASK) : 0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        excl += __shfl_sync(0xffffffffu, v, 0);
        if (inc_mask) break;
        pred -= 32;
      }
      if (lane == 0) atomicExch(&status[tile], ST_INC | (excl + agg));
    }
    if (lane == 0) s_prefix = excl;
  }
  __syncthreads();
  const u64 P = s_prefix;

  // 5. gather rows into contiguous output positions
  if (idx_out)
    for (u32 r = tid; r < agg; r += BLOCK) idx_out[P + r] = (long long)src[r];
  gather_rows(in1, out1, d1, src, agg, P);
  gather_rows(in2, out2, d2, src, agg, P);
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
  const int lbits = n_bits / 2, rbits = n_bits - n_bits / 2;
  const u64 n = 1ULL << n_bits, ud = (u64)d;
  long long* o = out + r * d;
  u64 cnt = 0;
  for (u64 b = 0; b < n; b += 32) {
    u64 i = b + lane;
    u64 y = (i < n) ? vphilox(i, lbits, rbits, rounds, keys[warp]) : ud;
    bool f = y < ud;
    u32 mask = __ballot_sync(0xffffffffu, f);
    if (f) o[cnt + __popc(mask & ((1u << lane) - 1u))] = (long long)y;
    cnt += __popc(mask);
  }
}
