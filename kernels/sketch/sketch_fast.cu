// Fast moment sketch (variant "fast"): one read of X (n, d) row-major, no per-chunk Pebay merge in the hot loop.
// Thread layout: a block covers a tile of cw <= NT columns; thread t owns column t % cw and every kr-th row of the
// block's row strip (kr = NT / cw), so a warp reads consecutive addresses of X. Each thread keeps the power sums
// S_k = sum w (x - c)^k, k = 0..L, about a shift c: c starts at the thread's first valid value (constant columns stay
// exact) and moves to the running mean every RC batches by a Taylor shift (L(L+1)/2 FMAs, no divisions). At the end
// the block shifts all threads of a column to their common mean, adds them and writes the partial [W, mean, M2..ML,
// min, max] that reduce_partials (sketch.cu, included) merges across blocks with Pebay's formula.
// Distinct values: the host marks columns whose strided sample already has more than `cap` distinct values as done
// (over = 1); the remaining candidate columns keep a per-block hash set in shared memory (slot >= 0) or, past the
// shared budget, probe the global table as sketch.cu does (slot -1). Shared sets are flushed to the global table once.

#include "sketch.cu"

#ifndef FAST_MINB
#define FAST_MINB 2
#endif

#define EMPTY32 0xffffffffu

template <typename T> struct FastKey;
template <> struct FastKey<float> {
    typedef unsigned int K;
    static __device__ __forceinline__ K empty() { return EMPTY32; }
    static __device__ __forceinline__ K of(float x) { return __float_as_uint(x + 0.0f); }  // -0 -> +0
    static __device__ __forceinline__ double value(K k) { return (double)__uint_as_float(k); }
    static __device__ __forceinline__ unsigned int fold(K k) { return k; }
};
template <> struct FastKey<double> {
    typedef unsigned long long K;
    static __device__ __forceinline__ K empty() { return EMPTY_KEY; }
    static __device__ __forceinline__ K of(double x) { return (unsigned long long)__double_as_longlong(x + 0.0); }
    static __device__ __forceinline__ double value(K k) { return __longlong_as_double((long long)k); }
    static __device__ __forceinline__ unsigned int fold(K k) { return (unsigned int)(k ^ (k >> 32)); }
};

// S[0..L] about c  ->  about c' (delta = c - c'): S'_k = sum_i C(k, i) S_i delta^(k-i), as L bidiagonal passes.
template <int L>
__device__ __forceinline__ void taylor_shift(double *S, double delta) {
#pragma unroll
    for (int i = 0; i < L; ++i) {
#pragma unroll
        for (int k = L; k > i; --k) S[k] = fma(delta, S[k - 1], S[k]);
    }
}

// 0: key present, 1: inserted, 2: table full (more distinct values than it can hold)
template <typename K>
__device__ __forceinline__ int shared_insert(K *tab, int ts, K key, K empty, unsigned int h) {
    for (int probe = 0; probe < ts; ++probe) {
        K cur = tab[h];
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

// grid (gx, n_tiles), block NT, dynamic shared memory: max(nslots * ts * sizeof(K), NT * (L - 1) * 8) bytes.
// slot (d,): -2 untracked, -1 global table, >= 0 shared set index within the tile (< nslots).
template <typename T, int L, int NT, int U, int RC, bool HAS_W>
__global__ void __launch_bounds__(NT, (L <= 16 ? FAST_MINB : 4))
sketch_fast(const T *__restrict__ X, const double *__restrict__ w, long long n, int d, int ct, long long rows_per_block,
            double *__restrict__ part, int *__restrict__ bad, const int *__restrict__ slot, int nslots, int ts,
            int tshift, unsigned long long *table, int tsize, int *count, int *over, int cap) {
    typedef typename FastKey<T>::K K;
    extern __shared__ __align__(16) unsigned char fast_smem[];
    __shared__ double sW[NT], sMean[NT];
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
    int my_slot = active ? slot[f] : -2;
    if (my_slot >= 0 && rg == 0) sCol[my_slot] = f;
    bool track = my_slot >= -1 && cap > 0 && !*((volatile int *)(over + f));
    K *my_tab = tabs + (my_slot >= 0 ? my_slot : 0) * ts;
    K last = EMPTY;

    double S[L + 1];
#pragma unroll
    for (int k = 0; k <= L; ++k) S[k] = 0.0;
    double c = 0.0;
    bool started = false;
    T lo = (T)POS_INF, hi = (T)NEG_INF;
    int any_bad = 0;
    int batch = 0;
    const long long step = (long long)kr * U;
    for (long long r0 = r_begin + rg; r0 < r_end; r0 += step) {
        T xv[U];
        double wv[HAS_W ? U : 1];
        unsigned int inr = 0u;
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const long long r = r0 + (long long)u * kr;
            xv[u] = (T)0;
            if (active && r < r_end) {
                xv[u] = X[r * d + f];
                if (HAS_W) wv[HAS_W ? u : 0] = w[r];
                inr |= 1u << u;
            }
        }
        unsigned int valid = 0u;
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const T x = xv[u];
            bool ok = ((inr >> u) & 1u) && !isnan(x);
            if (ok && isinf(x)) { any_bad = 1; ok = false; }
            double p = 1.0;
            if (HAS_W) { p = wv[HAS_W ? u : 0]; ok = ok && p > 0.0; }
            if (ok) {
                valid |= 1u << u;
                lo = x < lo ? x : lo;
                hi = x > hi ? x : hi;
                if (!started) { c = (double)x; started = true; }
            }
            const double dl = ok ? (double)x - c : 0.0;
            p = ok ? p : 0.0;
            S[0] += p;
#pragma unroll
            for (int k = 1; k <= L; ++k) { p *= dl; S[k] += p; }
        }
        if (++batch == RC) {
            batch = 0;
            if (S[0] > 0.0) {
                const double off = S[1] / S[0];
                taylor_shift<L>(S, -off);
                c += off;
            }
        }
        if (track) {
#pragma unroll
            for (int u = 0; u < U; ++u) {
                if (track && ((valid >> u) & 1u)) {
                    const K key = FastKey<T>::of(xv[u]);
                    if (key != last) {
                        last = key;
                        if (my_slot >= 0) {
                            const unsigned int h = (FastKey<T>::fold(key) * 0x9E3779B1u) >> tshift;
                            const int res = shared_insert<K>(my_tab, ts, key, EMPTY, h);
                            if (res == 2 || (res == 1 && atomicAdd(sCnt + my_slot, 1) + 1 > cap)) sOver[my_slot] = 1;
                        } else {
                            if (distinct_insert(FastKey<T>::value(key), f, table, tsize, count, over, cap)) track = false;
                        }
                    }
                }
            }
            if (my_slot >= 0) track = track && !*((volatile int *)(sOver + my_slot));
        }
    }
    if (any_bad) atomicExch(bad, 1);

    // block merge: common mean of the column's kr threads, shift each thread there, add
    const double Wt = S[0];
    const double mt = Wt > 0.0 ? c + S[1] / Wt : 0.0;
    sW[t] = active ? Wt : 0.0;
    sMean[t] = mt;
    __syncthreads();  // also: every shared-set insert is done
    double Wb = 0.0, mb = 0.0;
    if (active) {
        double ref = 0.0, acc = 0.0;
        bool have = false;
        for (int g = 0; g < kr; ++g) {
            const double wg = sW[g * cw + col];
            if (wg <= 0.0) continue;
            if (!have) { ref = sMean[g * cw + col]; have = true; }
            Wb += wg;
            acc += wg * (sMean[g * cw + col] - ref);
        }
        mb = Wb > 0.0 ? ref + acc / Wb : 0.0;
        if (Wt > 0.0) taylor_shift<L>(S, c - mb);
    }
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
    double *buf = (double *)fast_smem;  // reuses the shared sets: (L - 1, NT)
    sW[t] = (double)lo;
    sMean[t] = (double)hi;
#pragma unroll
    for (int k = 0; k < L - 1; ++k) buf[k * NT + t] = (active && Wt > 0.0) ? S[k + 2] : 0.0;
    __syncthreads();
    if (active && rg == 0) {
        double M[L - 1];
#pragma unroll
        for (int k = 0; k < L - 1; ++k) M[k] = 0.0;
        double blo = POS_INF, bhi = NEG_INF;
        for (int g = 0; g < kr; ++g) {
            const int tt = g * cw + col;
#pragma unroll
            for (int k = 0; k < L - 1; ++k) M[k] += buf[k * NT + tt];
            blo = fmin(blo, sW[tt]);
            bhi = fmax(bhi, sMean[tt]);
        }
        double *p = part + ((size_t)blockIdx.x * d + f) * (L + 3);
        p[0] = Wb;
        p[1] = mb;
#pragma unroll
        for (int k = 0; k < L - 1; ++k) p[2 + k] = M[k];
        p[L + 1] = blo;
        p[L + 2] = bhi;
    }
}
