// Fast moment sketch (variant "fast", the default): one read of X (n, d) row-major, raw power sums about a fixed
// per-column centre, no merge or re-centring in the hot loop.
// Centre: c_f, the (weighted) mean of a strided row sample, computed on the host side before the launch; a column
// whose final mean lies more than 0.1 standard deviations from c_f is re-sketched about its mean (gpu_fast.py), so
// the shift from c_f to the mean never amplifies rounding. A column constant in the sample gets c_f = that value
// exactly (constant columns stay exact).
// Thread layout: a block covers a tile of cw <= NT columns; thread t owns column t % cw and every kr-th row of the
// block's row strip (kr = NT / cw), so a warp reads consecutive addresses of X. Each thread keeps
// S_k = sum w (x - c)^k, k = 1..L, and the weight (an integer count without weights). Powers: d, d^2..d^P by P-1
// products, then q_j = (d^P)^j; S_{jP+a} += d^a q_j is one FMA (about L + 2 sqrt(L) FP64 operations per value
// instead of 2L). The block adds its kr threads per column (same centre: plain sums) and writes the partial
// [W, S1..SL, min, max]; reduce_sums adds the partials of each column. The host turns the sums into the mean and
// central sums (binomial shift by S1/W).
// float -> double: integer bit operations (the INT pipe) for normal floats and zeros, F2F (a quarter-rate FP64-pipe
// conversion on sm_80/sm_90) only for subnormals (FAST_BITCVT=1).
// Distinct values: the host marks columns whose strided sample already has more than `cap` distinct values as done
// (over = 1: they cost nothing); the remaining candidate columns keep a per-block hash set in shared memory
// (slot >= 0; lookups of a batch are issued together, misses take the insert path) or, past the shared budget,
// probe the global table as sketch.cu does (slot -1). A set that passes `cap` values stops its column's tracking.
// Known limitation: CuPy compiles with -ftz=true, so float32 subnormals (|x| < 1.18e-38) are read as zero here (and
// in sketch.cu); see docs/xgboost_ext.md.

#include "sketch.cu"

#ifndef FAST_MINB
#define FAST_MINB 2
#endif
#ifndef FAST_BITCVT
#define FAST_BITCVT 1
#endif

#define EMPTY32 0xffffffffu

template <typename T> struct FastKey;
template <> struct FastKey<float> {
    typedef unsigned int K;
    static __device__ __forceinline__ K empty() { return EMPTY32; }
    static __device__ __forceinline__ K of(float x) { return __float_as_uint(x + 0.0f); }  // -0 -> +0
    static __device__ __forceinline__ double value(K k) { return (double)__uint_as_float(k); }
    static __device__ __forceinline__ unsigned int fold(K k) { return k; }
    static __device__ __forceinline__ float nan() { return __uint_as_float(0x7fc00000u); }
};
template <> struct FastKey<double> {
    typedef unsigned long long K;
    static __device__ __forceinline__ K empty() { return EMPTY_KEY; }
    static __device__ __forceinline__ K of(double x) { return (unsigned long long)__double_as_longlong(x + 0.0); }
    static __device__ __forceinline__ double value(K k) { return __longlong_as_double((long long)k); }
    static __device__ __forceinline__ unsigned int fold(K k) { return (unsigned int)(k ^ (k >> 32)); }
    static __device__ __forceinline__ double nan() { return QNAN; }
};

// float bits -> double bits for normal floats and +-0 (subnormals: flagged, converted by the caller)
__device__ __forceinline__ double bits_to_double(float x, bool &sub) {
    const unsigned int u = __float_as_uint(x);
    const unsigned int mag = u & 0x7fffffffu;
    sub = mag != 0u && mag < 0x00800000u;
    unsigned int hi = (((u >> 3) & 0x0fffffffu) + 0x38000000u) | (u & 0x80000000u);
    unsigned int lo = u << 29;
    hi = mag ? hi : (u & 0x80000000u);
    lo = mag ? lo : 0u;
    return __hiloint2double((int)hi, (int)lo);
}

template <typename T, int U> struct ToDouble {
    static __device__ __forceinline__ void run(const T *x, double *out) {
#pragma unroll
        for (int u = 0; u < U; ++u) out[u] = (double)x[u];
    }
};
template <int U> struct ToDouble<float, U> {
    static __device__ __forceinline__ void run(const float *x, double *out) {
#if FAST_BITCVT
        bool any_sub = false;
#pragma unroll
        for (int u = 0; u < U; ++u) {
            bool s;
            out[u] = bits_to_double(x[u], s);
            any_sub |= s;
        }
        if (__builtin_expect(any_sub, 0)) {
#pragma unroll
            for (int u = 0; u < U; ++u) out[u] = (double)x[u];
        }
#else
#pragma unroll
        for (int u = 0; u < U; ++u) out[u] = (double)x[u];
#endif
    }
};

// P = floor(sqrt(L + 1)): powers d..d^P by products, blocks of P orders per further product
template <int L> struct Plan {
    static constexpr int isqrt(int v, int m) { return (m + 1) * (m + 1) <= v ? isqrt(v, m + 1) : m; }
    static constexpr int P = isqrt(L + 1, 1);
};

// S[k] += wt * dl^k for k = 1..L (wt = 1 without weights; the compiler drops the products by 1)
template <int L, bool HAS_W>
__device__ __forceinline__ void add_powers(double *S, double dl, double wt) {
    constexpr int P = Plan<L>::P;
    double pw[P + 1];
    pw[1] = dl;
#pragma unroll
    for (int a = 2; a <= P; ++a) pw[a] = pw[a - 1] * dl;
    double cw[P];  // coefficient of block term a: wt * d^a (a >= 1)
#pragma unroll
    for (int a = 1; a < P; ++a) cw[a] = HAS_W ? wt * pw[a] : pw[a];
#pragma unroll
    for (int a = 1; a < P && a <= L; ++a) S[a] = HAS_W ? fma(wt, pw[a], S[a]) : S[a] + pw[a];
    double q = pw[P];
#pragma unroll
    for (int j = 1; j * P <= L; ++j) {
        if (j > 1) q *= pw[P];
#pragma unroll
        for (int a = 0; a < P; ++a) {
            const int k = j * P + a;
            if (k <= L) {
                if (a == 0) S[k] = HAS_W ? fma(wt, q, S[k]) : S[k] + q;
                else S[k] = fma(cw[a], q, S[k]);
            }
        }
    }
}

// 0: key present, 1: inserted, 2: table full (more distinct values than it can hold)
template <typename K>
__device__ __forceinline__ int shared_insert(K *tab, int ts, K key, K empty, unsigned int h) {
    for (int probe = 0; probe < ts; ++probe) {
        K cur = ((volatile K *)tab)[h];
        if (cur == key) return 0;
        if (cur == empty) {
            K old = atomicCAS(tab + h, empty, key);
            if (old == empty) return 1;
            if (old == key) return 0;
        }
        h = (h + 1) & (unsigned int)(ts - 1);
    }
    return 2;
}

// grid (gx, n_tiles), block NT, dynamic shared memory: max(nslots * ts * sizeof(K), NT * L * 8) bytes.
// center (d,): the per-column shift. slot (d,): -2 untracked, -1 global table, >= 0 shared set index (< nslots).
// part (gx, d, L + 3): [W, S1..SL, min, max] about center.
template <typename T, int L, int NT, int U, bool HAS_W>
__global__ void __launch_bounds__(NT, (L <= 16 ? FAST_MINB : 4))
sketch_fast(const T *__restrict__ X, const double *__restrict__ w, long long n, int d, int ct, long long rows_per_block,
            const double *__restrict__ center, double *__restrict__ part, int *__restrict__ bad,
            const int *__restrict__ slot, int nslots, int ts, int tshift, unsigned long long *table, int tsize,
            int *count, int *over, int cap) {
    typedef typename FastKey<T>::K K;
    extern __shared__ __align__(16) unsigned char fast_smem[];
    __shared__ double sW[NT], sLo[NT], sHi[NT];
    __shared__ int sCnt[64], sOver[64], sCol[64];
    K *tabs = (K *)fast_smem;
    const K EMPTY = FastKey<T>::empty();

    const int t = threadIdx.x;
    const int tile0 = blockIdx.y * ct;
    const int cw = min(ct, d - tile0);
    const int kr = NT / cw;
    const int rg = t / cw;
    const int col = t - rg * cw;
    const bool active = rg < kr;
    const int f = tile0 + col;
    const long long r_begin = (long long)blockIdx.x * rows_per_block;
    const long long r_end = min(n, r_begin + rows_per_block);

    for (int i = t; i < nslots * ts; i += NT) tabs[i] = EMPTY;
    if (t < 64) { sCnt[t] = 0; sOver[t] = 0; sCol[t] = -1; }
    __syncthreads();
    const int my_slot = active ? slot[f] : -2;
    if (my_slot >= 0 && rg == 0) sCol[my_slot] = f;
    bool track = my_slot >= -1 && cap > 0 && !*((volatile int *)(over + f));
    K *my_tab = tabs + (my_slot >= 0 ? my_slot : 0) * ts;
    const double c = active ? center[f] : 0.0;

    double S[L + 1];
#pragma unroll
    for (int k = 0; k <= L; ++k) S[k] = 0.0;
    long long cnt = 0;
    T lo = (T)POS_INF, hi = (T)NEG_INF;
    int any_bad = 0;
    int batch = 0;
    const long long step = (long long)kr * U;
    const T tnan = FastKey<T>::nan();

    T xn[U];
    double wn[HAS_W ? U : 1];
    long long r0 = r_begin + rg;
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const long long r = r0 + (long long)u * kr;
        const bool in = active && r < r_end;
        xn[u] = in ? X[r * d + f] : tnan;
        if (HAS_W) wn[HAS_W ? u : 0] = in ? w[r] : 0.0;
    }
    for (; active && r0 < r_end; r0 += step) {
        T xv[U];
        double wv[HAS_W ? U : 1];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            xv[u] = xn[u];
            if (HAS_W) wv[HAS_W ? u : 0] = wn[HAS_W ? u : 0];
        }
        // prefetch the next batch while this one is summed
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const long long r = r0 + step + (long long)u * kr;
            const bool in = r < r_end;
            xn[u] = in ? X[r * d + f] : tnan;
            if (HAS_W) wn[HAS_W ? u : 0] = in ? w[r] : 0.0;
        }
        double xd[U];
        ToDouble<T, U>::run(xv, xd);
        unsigned int valid = 0u;
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const T x = xv[u];
            bool ok = !isnan(x);
            if (ok && isinf(x)) { any_bad = 1; ok = false; }
            const double wt = HAS_W ? wv[HAS_W ? u : 0] : 1.0;
            if (HAS_W) ok = ok && wt > 0.0;
            if (ok) {
                valid |= 1u << u;
                lo = x < lo ? x : lo;
                hi = x > hi ? x : hi;
            }
            const double dl = ok ? xd[u] - c : 0.0;
            add_powers<L, HAS_W>(S, dl, ok ? wt : 0.0);
            if (HAS_W) S[0] += ok ? wt : 0.0;
            else cnt += ok ? 1 : 0;
        }
        if (track && valid) {
            if (my_slot >= 0) {
                K keys[U];
                unsigned int miss = 0u;
#pragma unroll
                for (int u = 0; u < U; ++u) {  // all lookups of the batch at once; present keys end here
                    keys[u] = FastKey<T>::of(xv[u]);
                    const unsigned int h = (FastKey<T>::fold(keys[u]) * 0x9E3779B1u) >> tshift;
                    if (((valid >> u) & 1u) && ((volatile K *)my_tab)[h] != keys[u]) miss |= 1u << u;
                }
                if (miss) {
#pragma unroll
                    for (int u = 0; u < U; ++u) {
                        if (((miss >> u) & 1u) && track) {
                            const unsigned int h = (FastKey<T>::fold(keys[u]) * 0x9E3779B1u) >> tshift;
                            const int res = shared_insert<K>(my_tab, ts, keys[u], EMPTY, h);
                            if (res == 2 || (res == 1 && atomicAdd(sCnt + my_slot, 1) + 1 > cap)) {
                                sOver[my_slot] = 1;
                                track = false;
                            }
                        }
                    }
                }
                track = track && !*((volatile int *)(sOver + my_slot));
            } else {
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    if (track && ((valid >> u) & 1u)) {
                        if (distinct_insert(FastKey<T>::value(FastKey<T>::of(xv[u])), f, table, tsize, count, over, cap))
                            track = false;
                    }
                }
            }
            if ((++batch & 31) == 0) track = track && !*((volatile int *)(over + f));  // another block overflowed it
        }
    }
    if (any_bad) atomicExch(bad, 1);
    __syncthreads();  // every shared-set insert is done
    // flush the shared distinct sets into the global table
    for (int i = t; i < nslots * ts; i += NT) {
        const int s = i / ts;
        const int fs = sCol[s];
        const K key = tabs[i];
        if (fs < 0 || key == EMPTY || sOver[s]) continue;
        if (*((volatile int *)(over + fs))) continue;
        distinct_insert(FastKey<T>::value(key), fs, table, tsize, count, over, cap);
    }
    if (t < nslots && sCol[t] >= 0 && sOver[t]) atomicExch(over + sCol[t], 1);
    __syncthreads();
    // block sums per column: the kr threads of a column share its centre, so their sums simply add
    double *buf = (double *)fast_smem;  // reuses the shared sets: (L, NT)
    sW[t] = active ? (HAS_W ? S[0] : (double)cnt) : 0.0;
    sLo[t] = (double)lo;
    sHi[t] = (double)hi;
#pragma unroll
    for (int k = 0; k < L; ++k) buf[k * NT + t] = active ? S[k + 1] : 0.0;
    __syncthreads();
    if (active && rg == 0) {
        double acc[L];
#pragma unroll
        for (int k = 0; k < L; ++k) acc[k] = 0.0;
        double Wb = 0.0, blo = POS_INF, bhi = NEG_INF;
        for (int g = 0; g < kr; ++g) {
            const int tt = g * cw + col;
            Wb += sW[tt];
#pragma unroll
            for (int k = 0; k < L; ++k) acc[k] += buf[k * NT + tt];
            blo = fmin(blo, sLo[tt]);
            bhi = fmax(bhi, sHi[tt]);
        }
        double *p = part + ((size_t)blockIdx.x * d + f) * (L + 3);
        p[0] = Wb;
#pragma unroll
        for (int k = 0; k < L; ++k) p[1 + k] = acc[k];
        p[L + 1] = blo;
        p[L + 2] = bhi;
    }
}

// One block of RT threads per column: strided sums over the partials, then a shared-memory tree (fixed order).
// out (d, L + 3): [W, S1..SL, min, max].
template <int L, int RT>
__global__ void reduce_sums(const double *__restrict__ part, int nblk, int d, double *__restrict__ out) {
    const int f = blockIdx.x, t = threadIdx.x;
    double s[L + 1];
#pragma unroll
    for (int k = 0; k <= L; ++k) s[k] = 0.0;
    double lo = POS_INF, hi = NEG_INF;
    for (int b = t; b < nblk; b += RT) {
        const double *p = part + ((size_t)b * d + f) * (L + 3);
#pragma unroll
        for (int k = 0; k <= L; ++k) s[k] += p[k];
        lo = fmin(lo, p[L + 1]);
        hi = fmax(hi, p[L + 2]);
    }
    __shared__ double sh[RT][L + 3];
#pragma unroll
    for (int k = 0; k <= L; ++k) sh[t][k] = s[k];
    sh[t][L + 1] = lo;
    sh[t][L + 2] = hi;
    __syncthreads();
    for (int stride = RT / 2; stride > 0; stride >>= 1) {
        if (t < stride) {
#pragma unroll
            for (int k = 0; k <= L; ++k) sh[t][k] += sh[t + stride][k];
            sh[t][L + 1] = fmin(sh[t][L + 1], sh[t + stride][L + 1]);
            sh[t][L + 2] = fmax(sh[t][L + 2], sh[t + stride][L + 2]);
        }
        __syncthreads();
    }
    if (t < L + 3) out[(size_t)f * (L + 3) + t] = sh[0][t];
}
