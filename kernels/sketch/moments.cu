// The GPU moment sketch (moments and distinct sets): three launches and no host round trip before the result.
//
// 1. sketch_prep (one block per column): a sample of SAMPLE_ROWS rows (runs of SAMPLE_RUN consecutive rows spread
//    evenly over X) gives the column's centre c_f (the weighted sample mean; the value itself where the sample is
//    constant, so constant columns stay exact; 0 where the sample holds no valid value) and whether the column can
//    have at most `cap` distinct values (its sample's values set at most cap bits of a hashed bitmap, a lower bound
//    of their distinct count). It also resets the work arrays: over[f] = !candidate, count[f] = 0, the candidate's
//    global table row, *bad = 0.
// 2. sketch_tiles: one read of X (n, d) row-major. Each block owns a strip of rows and a tile of cw <= NT columns;
//    the strip is streamed through shared memory in tiles of RT = kr * V rows by cp.async, NS stages deep (thread
//    t sums column t % cw over rows t / cw, t / cw + kr, ...). Per value: S_k += w (x - c)^k
//    for k = 1..L by the FMA power plan (powers d..d^P, then blocks of P orders per product), the weight (an integer
//    count without weights), min and max. A thread sums its V values in chunks of 16 in straight-line code (their
//    power chains interleave); each warp picks one path per chunk by vote (a lone thread on another path would make
//    the warp run both): finite values, whose FP32 min / max (NaN-propagating) come first and tell the path; or the
//    same with NaN, inf and zero weights masked to add nothing (inf still raises).
//    Distinct values: the values of the block's tracked columns (candidates not yet over) in a tile are spread
//    evenly over all threads and looked up after the sums: a value at its home slot or the next one of the
//    column's per-block hash set in shared memory is known; otherwise the insert path runs (the first nslots
//    columns of the tile have shared sets, the rest use the global table). A set passing cap values raises the
//    global over flag; after each tile warp 0 drops the columns found over (here, or by the global flag, whose load
//    goes out before the sums so its latency never holds the block) from the list, so a continuous column stops
//    costing anything once any block has seen cap + 1 values of it.
// 2b. sketch_bulk (sm_90+, the default where X is one column tile with 16-byte aligned tiles): the same sums and
//    tracking, the tiles copied by the bulk copy engine (one cp.async.bulk per tile, completing on an mbarrier) and
//    no block-wide barrier in the loop; values looked up by their raw bits; see its section below.
//    Both read kernels seed their shared sets with the sample's distinct values (sketch_prep), so few values take
//    the insert path.
// 3. sketch_finish (one block per column): adds the block partials, turns the power sums about c into the mean and
//    the central sums (binomial shift by delta = S_1 / W), flags a column for re-sketching about its mean when
//    |delta| > tol * sd (a centre that far off would amplify rounding in the shift; _gpu_moments.py does it), and
//    writes the sorted distinct set, all into one buffer in pinned host memory (no copy back).
//
// float32 input: CuPy compiles with -ftz=true, which flushes subnormal floats in C++ float -> double conversions and in
// FP32 instructions. Floats are converted by cvt.f64.f32 without .ftz (exact, subnormals included) and compared by
// min / max without .ftz, or on order-preserving integer keys; -0.0 is folded by bits.

// Shared helpers: the empty key of the global distinct tables, IEEE specials, a 64-bit mixer and the insert into
// a column's global distinct set (open addressing, abandoned once it holds more than cap values).
#define EMPTY_KEY 0x7ff8dead0000beefULL
#define POS_INF __longlong_as_double(0x7ff0000000000000LL)
#define NEG_INF __longlong_as_double((long long)0xfff0000000000000ULL)
#define QNAN __longlong_as_double(0x7ff8000000000000LL)

__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
    z ^= z >> 33; z *= 0xff51afd7ed558ccdULL; z ^= z >> 33; z *= 0xc4ceb9fe1a85ec53ULL; z ^= z >> 33;
    return z;
}

// Insert x into feature f's table; true once the set holds more than cap values. table: (d, tsize) keys, count: (d,), over: (d,)
__device__ bool distinct_insert(double x, int f, unsigned long long *table, int tsize, int *count, int *over, int cap) {
    const unsigned long long key = (unsigned long long)__double_as_longlong(x);
    unsigned long long *t = table + (size_t)f * tsize;
    unsigned int h = (unsigned int)(mix64(key) & (unsigned long long)(tsize - 1));
    for (int probe = 0; probe < 32; ++probe) {
        unsigned long long cur = t[h];
        if (cur == key) return false;
        if (cur == EMPTY_KEY) {
            unsigned long long old = atomicCAS(t + h, EMPTY_KEY, key);
            if (old == EMPTY_KEY) {
                int c = atomicAdd(count + f, 1);
                if (c + 1 > cap) { atomicExch(over + f, 1); return true; }
                return false;
            }
            if (old == key) return false;
        }
        h = (h + 1) & (tsize - 1);
    }
    atomicExch(over + f, 1);  // a probe chain this long at load factor <= 1/4: more than cap values anyway
    return true;
}


#ifndef FAST_MINB
#define FAST_MINB 2
#endif

#define EMPTY32 0xffffffffu
#define MAX_SLOTS 64
#define PREP_THREADS 256
#define PREP_PER 16  // sample values per prep thread: SAMPLE_ROWS <= PREP_THREADS * PREP_PER
#define POS_INF_F __int_as_float(0x7f800000)
#define NEG_INF_F __int_as_float((int)0xff800000u)

// ------------------------------------------------------------------------ exact float -> double, whatever -ftz says
__device__ __forceinline__ double cvt_f64(float x) {  // one F2F; exact for every float (NaN stays NaN)
    double r;
    asm("cvt.f64.f32 %0, %1;" : "=d"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ double f2d_exact(unsigned int u) { return cvt_f64(__uint_as_float(u)); }
// FP32 min (MAX = false) or max that returns NaN if an input is NaN (sm_80+; before, the non-NaN input), subnormals
// kept
template <bool MAX> __device__ __forceinline__ float mnx_nan_f32(float a, float b) {
    float r;
#if __CUDA_ARCH__ >= 800
    if (MAX) asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    else asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
#else
    if (MAX) asm("max.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    else asm("min.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
#endif
    return r;
}
__device__ __forceinline__ float fma0_f32(float x, float z) {  // z + x * 0: NaN once x is inf or NaN
    float r;
    asm("fma.rn.f32 %0, %1, 0f00000000, %2;" : "=f"(r) : "f"(x), "f"(z));
    return r;
}
// order-preserving integer key of a non-NaN float (-0.0 sorts just below +0.0) and its inverse
__device__ __forceinline__ int f_order(unsigned int u) { const int s = (int)u; return s ^ ((s >> 31) & 0x7fffffff); }
__device__ __forceinline__ unsigned int f_unorder(int k) { return (unsigned int)(k ^ ((k >> 31) & 0x7fffffff)); }

// finite value as an exact double
__device__ __forceinline__ bool exact_double(float x, double &xd) {
    xd = cvt_f64(x);
    return (__float_as_uint(x) & 0x7fffffffu) < 0x7f800000u;
}
__device__ __forceinline__ bool exact_double(double x, double &xd) {
    xd = x;
    return ((unsigned int)__double2hiint(x) & 0x7ff00000u) != 0x7ff00000u;
}

// ------------------------------------------------------------------------ cp.async (sm_80+; plain copies before)
__device__ __forceinline__ unsigned int smem_addr(const void *p) {
    unsigned int a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}
template <int B> __device__ __forceinline__ void cp_async(void *s, const void *g);
template <> __device__ __forceinline__ void cp_async<16>(void *s, const void *g) {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(s)), "l"(g) : "memory");
#else
    *(int4 *)s = *(const int4 *)g;
#endif
}
template <> __device__ __forceinline__ void cp_async<8>(void *s, const void *g) {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_addr(s)), "l"(g) : "memory");
#else
    *(long long *)s = *(const long long *)g;
#endif
}
template <> __device__ __forceinline__ void cp_async<4>(void *s, const void *g) {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(s)), "l"(g) : "memory");
#else
    *(int *)s = *(const int *)g;
#endif
}
__device__ __forceinline__ void cp_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N> __device__ __forceinline__ void cp_wait() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// a flag another block may set: read at the device's coherence point (L2), no ordering implied
__device__ __forceinline__ int ld_relaxed(const int *p) {
    int v;
    asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}

// ------------------------------------------------------------------------ distinct-set keys
template <typename T> struct FastKey;
template <> struct FastKey<float> {
    typedef unsigned int K;
    static __device__ __forceinline__ K empty() { return EMPTY32; }
    // finite values only; -0.0 -> +0.0 (by bits: x + 0.0f would flush subnormals under -ftz)
    static __device__ __forceinline__ bool of(float x, K &k) {
        const unsigned int u = __float_as_uint(x);
        const unsigned int mag = u & 0x7fffffffu;
        k = mag ? u : 0u;
        return mag < 0x7f800000u;
    }
    static __device__ __forceinline__ double value(K k) { return f2d_exact(k); }
    static __device__ __forceinline__ unsigned int fold(K k) { return k; }
    static __device__ __forceinline__ K bits(float x) { return __float_as_uint(x); }
    // the NaN bit patterns a bulk-read set may hold as aliases (the quiet NaNs of NumPy / CuPy, their negative, and
    // CUDA's canonical NaN): a value with these bits is then known without the insert path
    static __device__ __forceinline__ bool nan_alias(K k) {
        return k == 0x7fc00000u || k == 0xffc00000u || k == 0x7fffffffu;
    }
    // a key of a distinct value (not an alias: -0.0 or a NaN pattern; nor the empty key, itself a NaN pattern)
    static __device__ __forceinline__ bool real(K k) { return (k & 0x7fffffffu) < 0x7f800000u && k != 0x80000000u; }
};
template <> struct FastKey<double> {
    typedef unsigned long long K;
    static __device__ __forceinline__ K empty() { return EMPTY_KEY; }
    static __device__ __forceinline__ bool of(double x, K &k) {
        const unsigned long long b = (unsigned long long)__double_as_longlong(x);
        k = (b << 1) ? b : 0ull;
        return ((b >> 52) & 0x7ffull) != 0x7ffull;
    }
    static __device__ __forceinline__ double value(K k) { return __longlong_as_double((long long)k); }
    static __device__ __forceinline__ unsigned int fold(K k) { return (unsigned int)(k ^ (k >> 32)); }
    static __device__ __forceinline__ K bits(double x) { return (unsigned long long)__double_as_longlong(x); }
    static __device__ __forceinline__ bool nan_alias(K k) {
        return k == 0x7ff8000000000000ull || k == 0xfff8000000000000ull || k == 0x7fffffffffffffffull;
    }
    static __device__ __forceinline__ bool real(K k) {
        return ((k >> 52) & 0x7ffull) != 0x7ffull && k != 0x8000000000000000ull;
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
    for (int a = 2; a <= P; ++a) pw[a] = pw[a / 2] * pw[a - a / 2];  // depth log2(a): short dependency chains
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

// Per-thread accumulator of one column: S[1..L] about c, S[0] = weight sum (weights given), min, max, the count of
// invalid values (no weights: weight = values seen - invalid), whether an inf was seen.
template <int L, bool HAS_W> struct PowerSums {
    double S[L + 1];
    int ninv;
    bool bad;
    __device__ __forceinline__ void init_sums() {
#pragma unroll
        for (int k = 0; k <= L; ++k) S[k] = 0.0;
        ninv = 0;
        bad = false;
    }
    __device__ __forceinline__ void put(double dl, double wt) {  // one value at distance dl from the centre
        add_powers<L, HAS_W>(S, dl, wt);
        if (HAS_W) S[0] += wt;
    }
    __device__ __forceinline__ void put_invalid() {  // NaN, inf or a zero weight: adds exactly nothing
        put(0.0, 0.0);
        ++ninv;
    }
};
template <typename T, int L, bool HAS_W> struct Moments;
template <int L, bool HAS_W> struct Moments<float, L, HAS_W> : PowerSums<L, HAS_W> {
    int lo, hi;
    __device__ __forceinline__ void init() {
        this->init_sums();
        lo = 0x7fffffff;
        hi = (int)0x80000000;
    }
    __device__ __forceinline__ void minmax(unsigned int u) {
        const int k = f_order(u);
        lo = min(lo, k);
        hi = max(hi, k);
    }
    __device__ __forceinline__ void add(float x, double wt, double c) {
        const unsigned int u = __float_as_uint(x);
        const unsigned int mag = u & 0x7fffffffu;
        if (__builtin_expect(mag < 0x7f800000u && (!HAS_W || wt > 0.0), 1)) {  // finite
            minmax(u);
            this->put(cvt_f64(x) - c, wt);
            return;
        }
        this->bad |= mag == 0x7f800000u;
        this->put_invalid();
    }
    // which straight-line path a chunk can take, and its min and max: FP32 min / max that return NaN if an input is
    // NaN (sm_80+; before, z + x * 0 is NaN once x is inf or NaN), so a chunk of finite values has finite min and max
    struct Class {
        float mn = POS_INF_F, mx = NEG_INF_F;
#if __CUDA_ARCH__ < 800
        float z = 0.0f;
#endif
        bool wpos = true;
        __device__ __forceinline__ void see(float x, double wt) {
            mn = mnx_nan_f32<false>(mn, x);
            mx = mnx_nan_f32<true>(mx, x);
#if __CUDA_ARCH__ < 800
            z = fma0_f32(x, z);
#endif
            if (HAS_W) wpos = wpos && wt > 0.0;
        }
        __device__ __forceinline__ void see2(float x0, float x1, double w0, double w1) {
            mn = mnx_nan_f32<false>(mn, mnx_nan_f32<false>(x0, x1));
            mx = mnx_nan_f32<true>(mx, mnx_nan_f32<true>(x0, x1));
#if __CUDA_ARCH__ < 800
            z = fma0_f32(x1, fma0_f32(x0, z));
#endif
            if (HAS_W) wpos = wpos && w0 > 0.0 && w1 > 0.0;
        }
        __device__ __forceinline__ bool plain() const {
            const bool fin = (__float_as_uint(mn) & 0x7f800000u) != 0x7f800000u &&
                             (__float_as_uint(mx) & 0x7f800000u) != 0x7f800000u;
#if __CUDA_ARCH__ < 800
            return fin && z == 0.0f && wpos;
#else
            return fin && wpos;
#endif
        }
    };
    // min and max of a plain chunk: the class's
    template <int N> __device__ __forceinline__ void minmax_chunk(const Class &cls, const float *) {
        lo = min(lo, f_order(__float_as_uint(cls.mn)));
        hi = max(hi, f_order(__float_as_uint(cls.mx)));
    }
    // a plain chunk's sums (minmax_chunk does min and max)
    __device__ __forceinline__ void add_fast(float x, double wt, double c) { this->put(cvt_f64(x) - c, wt); }
    // branch-free: any float, NaN / inf / zero weights adding exactly nothing (inf raises later)
    __device__ __forceinline__ void add_masked(float x, double wt, double c) {
        const unsigned int u = __float_as_uint(x);
        const unsigned int mag = u & 0x7fffffffu;
        const bool ok = mag < 0x7f800000u && (!HAS_W || wt > 0.0);
        this->bad |= mag == 0x7f800000u;
        const int k = f_order(u);
        lo = min(lo, ok ? k : 0x7fffffff);
        hi = max(hi, ok ? k : (int)0x80000000);
        this->ninv += ok ? 0 : 1;
        this->put(ok ? cvt_f64(x) - c : 0.0, ok ? wt : 0.0);
    }
    __device__ __forceinline__ double lo_value() const { return lo == 0x7fffffff ? POS_INF : f2d_exact(f_unorder(lo)); }
    __device__ __forceinline__ double hi_value() const {
        return hi == (int)0x80000000 ? NEG_INF : f2d_exact(f_unorder(hi));
    }
};
template <int L, bool HAS_W> struct Moments<double, L, HAS_W> : PowerSums<L, HAS_W> {
    double lo, hi;
    __device__ __forceinline__ void init() {
        this->init_sums();
        lo = POS_INF;
        hi = NEG_INF;
    }
    static __device__ __forceinline__ bool fast(double x) {
        return ((unsigned int)__double2hiint(x) & 0x7ff00000u) != 0x7ff00000u;
    }
    struct Class {  // finite doubles: plain; NaN / inf / zero weights: masked
        int hmax = 0;
        bool wpos = true;
        __device__ __forceinline__ void see(double x, double wt) {
            hmax = max(hmax, __double2hiint(x) & 0x7fffffff);
            if (HAS_W) wpos = wpos && wt > 0.0;
        }
        __device__ __forceinline__ void see2(double x0, double x1, double w0, double w1) {
            see(x0, w0);
            see(x1, w1);
        }
        __device__ __forceinline__ bool plain() const { return hmax < 0x7ff00000 && wpos; }
    };
    // min and max of a plain chunk (finite doubles)
    template <int N> __device__ __forceinline__ void minmax_chunk(const Class &, const double *xv) {
#pragma unroll
        for (int v = 0; v < N; ++v) {
            lo = fmin(lo, xv[v]);
            hi = fmax(hi, xv[v]);
        }
    }
    __device__ __forceinline__ void add_fast(double x, double wt, double c) { this->put(x - c, wt); }
    __device__ __forceinline__ void add_masked(double x, double wt, double c) {
        const bool ok = fast(x) && (!HAS_W || wt > 0.0);
        this->bad |= (__double2hiint(x) & 0x7fffffff) == 0x7ff00000 && __double2loint(x) == 0;
        lo = fmin(lo, ok ? x : QNAN);  // fmin / fmax ignore a NaN operand
        hi = fmax(hi, ok ? x : QNAN);
        this->ninv += ok ? 0 : 1;
        this->put(ok ? x - c : 0.0, ok ? wt : 0.0);
    }
    __device__ __forceinline__ void add(double x, double wt, double c) {
        if (__builtin_expect(fast(x) && (!HAS_W || wt > 0.0), 1)) {
            lo = fmin(lo, x);
            hi = fmax(hi, x);
            add_fast(x, wt, c);
            return;
        }
        this->bad |= ((unsigned int)__double2hiint(x) & 0x7fffffffu) == 0x7ff00000u && __double2loint(x) == 0;
        this->put_invalid();
    }
    __device__ __forceinline__ double lo_value() const { return lo; }
    __device__ __forceinline__ double hi_value() const { return hi; }
};

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

// The home slot of a key in a sketch_tiles set of 2^(32 - tshift) slots.
template <typename T>
__device__ __forceinline__ unsigned int tiles_slot(typename FastKey<T>::K key, int tshift) {
    return (FastKey<T>::fold(key) * 0x9E3779B1u) >> tshift;
}

// One distinct value of column f into its block set (slot sl >= 0) or the global table (sl = -1); true once the
// column has more than cap values (its tracking stops).
template <typename T>
__device__ __forceinline__ bool track_insert(typename FastKey<T>::K key, int sl, typename FastKey<T>::K *tab, int ts,
                                             int tshift, typename FastKey<T>::K EMPTY, int *sCnt, int *sOver, int f,
                                             unsigned long long *table, int tsize, int *count, int *over, int cap) {
    if (sl >= 0) {
        const unsigned int h = tiles_slot<T>(key, tshift);
        const int res = shared_insert<typename FastKey<T>::K>(tab, ts, key, EMPTY, h);
        if (res == 2 || (res == 1 && atomicAdd(sCnt + sl, 1) + 1 > cap)) {
            sOver[sl] = 1;
            atomicExch(over + f, 1);
            return true;
        }
        return false;
    }
    return distinct_insert(FastKey<T>::value(key), f, table, tsize, count, over, cap);
}

// ------------------------------------------------------------------------ 1. centres, candidates, resets
// Sample row i of k: all rows when k = n; else runs of SAMPLE_RUN consecutive rows at k / SAMPLE_RUN evenly spread
// places (k a multiple of SAMPLE_RUN: a strided sample of single rows cost a TLB miss per value).
// tests/_sketch_gpu.sample_rows mirrors it.
#ifndef SAMPLE_RUN
#define SAMPLE_RUN 64
#endif
__device__ __forceinline__ long long sample_row(int i, long long n, int k) {
    if (i >= k) return 0;
    if (n == k) return i;
    return (long long)(i / SAMPLE_RUN) * n / (k / SAMPLE_RUN) + i % SAMPLE_RUN;
}

// grid (d), block PREP_THREADS, dynamic shared memory tsp * 8 bytes (tsp = 0: every column is a candidate, no
// seed): first a bitmap of 32 * tsp bits. Each valid sampled value sets the bit its key hashes to; the set bits are a
// lower bound of the sample's distinct values, so more than cap of them prove the column has more than cap. For the
// other columns a hash set of tsp entries then collects the sampled keys (the seed of the read's sets).
template <typename T, bool HAS_W>
__global__ void __launch_bounds__(PREP_THREADS)
sketch_prep(const T *__restrict__ X, const double *__restrict__ w, long long n, int d, int k, int cap, int tsp,
            double *__restrict__ center, int *__restrict__ over, int *__restrict__ count,
            unsigned long long *__restrict__ table, int tsize, int *__restrict__ bad,
            unsigned long long *__restrict__ seed, int *__restrict__ seed_n) {
    typedef typename FastKey<T>::K K;
    extern __shared__ unsigned int pbits[];
    __shared__ double rS[PREP_THREADS / 32], rW[PREP_THREADS / 32], rLo[PREP_THREADS / 32], rHi[PREP_THREADS / 32];
    __shared__ int rN[PREP_THREADS / 32], rB[PREP_THREADS / 32], sCand, sDist;
    const int f = blockIdx.x, t = threadIdx.x, lane = t & 31, wid = t >> 5;
    if (f == 0 && t == 0) *bad = 0;
    for (int i = t; i < tsp; i += PREP_THREADS) pbits[i] = 0u;
    T xs[PREP_PER];
    double ws[HAS_W ? PREP_PER : 1];
#pragma unroll
    for (int u = 0; u < PREP_PER; ++u) {  // all loads first: they overlap
        const int i = t + u * PREP_THREADS;
        const long long r = sample_row(i, n, k);
        xs[u] = i < k ? X[r * d + f] : (T)0;
        if (HAS_W) ws[HAS_W ? u : 0] = i < k ? w[r] : 0.0;
    }
    __syncthreads();
    double sx = 0.0, sw = 0.0, lo = POS_INF, hi = NEG_INF;
    int nv = 0;
    const unsigned long long hmask = 32ull * (unsigned long long)tsp - 1ull;
#pragma unroll
    for (int u = 0; u < PREP_PER; ++u) {
        if (t + u * PREP_THREADS >= k) continue;
        double xd;
        const bool fin = exact_double(xs[u], xd);
        const double wt = HAS_W ? ws[HAS_W ? u : 0] : 1.0;
        if (!fin || !(wt > 0.0)) continue;
        sx += wt * xd;
        sw += wt;
        lo = fmin(lo, xd);
        hi = fmax(hi, xd);
        ++nv;
        if (tsp > 0) {
            K key;
            FastKey<T>::of(xs[u], key);  // finite here; -0.0 -> +0.0
            const unsigned int h = (unsigned int)(mix64(key) & hmask);
            const unsigned int m = 1u << (h & 31u);
            unsigned int *wp = pbits + (h >> 5);
            if (!(*(volatile unsigned int *)wp & m)) atomicOr(wp, m);  // repeated values mostly skip the atomic
        }
    }
    __syncthreads();  // the bitmap is complete
    int nb = 0;
    for (int i = t; i < tsp; i += PREP_THREADS) nb += __popc(pbits[i]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        sx += __shfl_down_sync(0xffffffffu, sx, o);
        sw += __shfl_down_sync(0xffffffffu, sw, o);
        lo = fmin(lo, __shfl_down_sync(0xffffffffu, lo, o));
        hi = fmax(hi, __shfl_down_sync(0xffffffffu, hi, o));
        nv += __shfl_down_sync(0xffffffffu, nv, o);
        nb += __shfl_down_sync(0xffffffffu, nb, o);
    }
    if (lane == 0) { rS[wid] = sx; rW[wid] = sw; rLo[wid] = lo; rHi[wid] = hi; rN[wid] = nv; rB[wid] = nb; }
    __syncthreads();
    if (t == 0) {
        double S = 0.0, W = 0.0, L0 = POS_INF, H0 = NEG_INF;
        int N = 0, B = 0;
        for (int i = 0; i < PREP_THREADS / 32; ++i) {
            S += rS[i]; W += rW[i]; L0 = fmin(L0, rLo[i]); H0 = fmax(H0, rHi[i]); N += rN[i]; B += rB[i];
        }
        double c = S / W;
        if (L0 == H0) c = L0;                      // constant sample: the value itself
        if (!isfinite(c)) c = 0.5 * L0 + 0.5 * H0;  // overflowing sums: the mid-range
        if (N == 0) c = 0.0;                        // nothing valid sampled: the finish step re-sketches if needed
        center[f] = c;
        const int cand = cap > 0 && (tsp == 0 || B <= cap);
        over[f] = !cand;
        count[f] = 0;
        sCand = cand;
        sDist = 0;
        if (!(cand && tsp > 0)) seed_n[f] = 0;
    }
    __syncthreads();
    if (sCand && tsp > 0) {
        // a candidate's sampled distinct values (their keys), the seed of the read blocks' sets: a shared hash set of
        // tsp 8-byte entries over the bitmap (counted: done), then listed in seed[f * cap ..]; more than cap of them
        // (the bitmap's bound is only a lower one) and the column is no candidate after all
        unsigned long long *ptab = (unsigned long long *)pbits;
        for (int i = t; i < tsp; i += PREP_THREADS) ptab[i] = EMPTY_KEY;
        __syncthreads();
#pragma unroll
        for (int u = 0; u < PREP_PER; ++u) {
            K key;
            if (t + u * PREP_THREADS >= k || !FastKey<T>::of(xs[u], key)) continue;
            if (HAS_W && !(ws[HAS_W ? u : 0] > 0.0)) continue;
            if (*((volatile int *)&sDist) > cap) break;
            if (shared_insert<unsigned long long>(ptab, tsp, (unsigned long long)key, EMPTY_KEY,
                                                  (unsigned int)(mix64(key) & (unsigned long long)(tsp - 1))) == 1)
                atomicAdd(&sDist, 1);
        }
        __syncthreads();
        const int nd = sDist;
        if (nd > cap) {
            if (t == 0) { over[f] = 1; seed_n[f] = 0; sCand = 0; }
        } else {
            if (t == 0) { seed_n[f] = nd; sDist = 0; }
            __syncthreads();
            for (int i = t; i < tsp; i += PREP_THREADS) {
                const unsigned long long key = ptab[i];
                if (key != EMPTY_KEY) seed[(size_t)f * cap + atomicAdd(&sDist, 1)] = key;
            }
        }
        __syncthreads();
    }
    if (sCand)
        for (int i = t; i < tsize; i += PREP_THREADS) table[(size_t)f * tsize + i] = EMPTY_KEY;
}

// The sampled distinct values of the tracked columns with a shared set (sketch_prep's seed) into those sets, counted;
// home(key): a key's first slot. At most cap values per column, so no set passes cap here.
template <typename K, int NT, typename Home>
__device__ __forceinline__ void seed_sets(K *tabs, int nsl, int ts, const int *sCol, int *sCnt,
                                          const unsigned long long *__restrict__ seed, const int *__restrict__ seed_n,
                                          int cap, K EMPTY, Home home) {
    for (int sl = 0; sl < nsl; ++sl) {
        const int f = sCol[sl];
        const int m = f >= 0 ? seed_n[f] : 0;
        for (int i = (int)threadIdx.x; i < m; i += NT) {
            const K key = (K)seed[(size_t)f * cap + i];
            if (shared_insert<K>(tabs + sl * ts, ts, key, EMPTY, home(key)) == 1) atomicAdd(sCnt + sl, 1);
        }
    }
}

// ------------------------------------------------------------------------ distinct lookups of the bulk read
// Bulk-read sets are hashed in buckets of two slots (8 bytes for float keys, 16 for double keys), so one shared
// load looks a value up (buckets of four float keys, one 16-byte load, measured slower: more bank conflicts). The
// bucket of a key in a set of ts = 2^(32 - tshift) slots, hshift = tshift + Bucket<K>::LOG: the key byte-swapped
// (floats of round values differ only in their high bits), times a Fibonacci constant, top bits. Its first slot:
// bucket << LOG.
#define LOOKUP_GROUP 8  // items looked up together (all loads, then all lookups)
template <typename K> struct Pair2;
template <> struct Pair2<unsigned int> { typedef uint2 P; };
template <> struct Pair2<unsigned long long> { typedef ulonglong2 P; };
template <typename K> struct Bucket {
    typedef typename Pair2<K>::P P;
    static constexpr int LOG = 1;  // two slots
    // both slots compared (no short circuit, so the bucket stays one vector load): 1 if k is in neither
    static __device__ __forceinline__ unsigned int lacks(const P &p, K k) {
        return (unsigned int)(p.x != k) & (unsigned int)(p.y != k);
    }
};
template <typename T>
__device__ __forceinline__ unsigned int bucket_of(typename FastKey<T>::K key, int hshift) {
    const unsigned int f = __byte_perm(FastKey<T>::fold(key), 0u, 0x0123u);  // byte swap: the high bits go low
    return (f * 0x9E3779B1u) >> hshift;
}
// The first slot of a key's bucket in a bulk-read set of 2^(32 - tshift) slots.
template <typename T>
__device__ __forceinline__ unsigned int bulk_slot(typename FastKey<T>::K key, int tshift) {
    constexpr int LOG = Bucket<typename FastKey<T>::K>::LOG;
    return bucket_of<T>(key, tshift + LOG) << LOG;
}

// G items (rows r, r + rstep, ...: values ip[0], ip[istep], ...) of which the first `left` are real (the others
// repeat the first): all loads first, then all lookups, so a group costs two shared-memory round trips.
template <typename T, bool HAS_W, int G>
__device__ __forceinline__ bool lookup_group(const typename Bucket<typename FastKey<T>::K>::P *bk, const T *ip,
                                             int istep, const double *wt, int r, int rstep, int hshift, int left) {
    typedef typename FastKey<T>::K K;
    K raw[G];
    bool pos[G];
#pragma unroll
    for (int u = 0; u < G; ++u) {
        const int v = u < left ? u : 0;
        raw[u] = FastKey<T>::bits(ip[v * istep]);
        pos[u] = !HAS_W || wt[r + v * rstep] > 0.0;
    }
    unsigned int miss = 0u;
#pragma unroll
    for (int u = 0; u < G; ++u)
        miss |= (unsigned int)pos[u] & Bucket<K>::lacks(bk[bucket_of<T>(raw[u], hshift)], raw[u]);
    return miss != 0u;
}
// A thread's tracked items of one tile, rows r0, r0 + rstep, ... (items of them) of one column (ip: its first value;
// istep: elements from one item to the next), looked up by their raw bits in the column's shared set (tab), one
// load of the bucket each. True if a value (of positive weight) is not in its bucket: new, displaced by a collision,
// or a NaN or -0.0 without its alias yet (the insert path skips NaN and inf and folds -0.0 to +0.0).
template <typename T, bool HAS_W>
__device__ __forceinline__ bool lookup_items(const typename FastKey<T>::K *tab, const T *ip, int istep,
                                             const double *wt, int r0, int rstep, int items, int hshift) {
    typedef typename Bucket<typename FastKey<T>::K>::P P;
    constexpr int G = LOOKUP_GROUP;
    const P *bk = (const P *)tab;
    bool miss = false;
    int i = 0;
    for (; i + G <= items; i += G)
        miss |= lookup_group<T, HAS_W, G>(bk, ip + i * istep, istep, wt, r0 + i * rstep, rstep, hshift, G);
    if (i < items)
        miss |= lookup_group<T, HAS_W, G>(bk, ip + i * istep, istep, wt, r0 + i * rstep, rstep, hshift, items - i);
    return miss;
}

// The insert path for a thread's items (rows tr0, tr0 + rstep, ... < rows of column lc; shared set sl, or the
// global table for sl < 0), after a miss; stops once the column is over cap.
template <typename T, bool HAS_W>
__device__ __noinline__ void track_inserts(const T *tile, const double *wt, int rows, int cw, int lc, int sl, int tr0,
                                           int rstep, typename FastKey<T>::K *tabs, int ts, int tshift, int *sCnt,
                                           int *sOver, unsigned long long *table, int tsize, int *count, int *over,
                                           int cap) {
    typedef typename FastKey<T>::K K;
    const K EMPTY = FastKey<T>::empty();
    K *tab = tabs + (sl >= 0 ? sl : 0) * ts;
    for (int r = tr0; r < rows; r += rstep) {
        if (HAS_W && !(wt[r] > 0.0)) continue;
        const T x = tile[r * cw + lc];
        const K raw = FastKey<T>::bits(x);
        K key;
        if (!FastKey<T>::of(x, key)) {  // NaN or inf: counts nothing; a common NaN gets its alias
            if (sl >= 0 && FastKey<T>::nan_alias(raw))
                shared_insert<K>(tab, ts, raw, EMPTY, bulk_slot<T>(raw, tshift));
            continue;
        }
        bool done;
        if (sl >= 0) {
            const int res = shared_insert<K>(tab, ts, key, EMPTY, bulk_slot<T>(key, tshift));
            done = res == 2 || (res == 1 && atomicAdd(sCnt + sl, 1) + 1 > cap);
            if (done) {
                sOver[sl] = 1;
                atomicExch(over + lc, 1);
            } else if (raw != key) {  // -0.0: its alias, after +0.0 itself
                shared_insert<K>(tab, ts, raw, EMPTY, bulk_slot<T>(raw, tshift));
            }
        } else {
            done = distinct_insert(FastKey<T>::value(key), lc, table, tsize, count, over, cap);
        }
        if (done) return;
    }
}

// ------------------------------------------------------------------------ the sums of one tile (both read kernels)
// Thread t sums column t % cw over the tile's rows rg, rg + kr, ... (V of them in a full tile): in chunks of VB values
// in straight-line code, each warp on one path chosen by vote (a thread alone on another path would make the warp run
// both), or value by value without FASTPATH.
template <typename T, int L, int V, bool HAS_W, bool FASTPATH>
__device__ __forceinline__ void sum_full_tile(Moments<T, L, HAS_W> &acc, const T *tile, const double *wt, int t, int KC,
                                              int kr, int rg, double c) {
    constexpr int VB = V < 16 ? V : 16;  // values per straight-line chunk (their power chains interleave)
    static_assert(V % VB == 0, "vals must be a multiple of 16 above 16");
    if (!FASTPATH) {
#pragma unroll
        for (int v = 0; v < V; ++v) acc.add(tile[t + v * KC], HAS_W ? wt[rg + v * kr] : 1.0, c);
        return;
    }
    const char *tb = (const char *)(tile + t);
    const int kcb = KC * (int)sizeof(T);  // byte offsets (h + v) * kcb: fewer address instructions than tp[v * KC]
#pragma unroll 1
    for (int h = 0; h < V; h += VB) {
        T xv[VB];
        double wv[HAS_W ? VB : 1];
        typename Moments<T, L, HAS_W>::Class cls;
#pragma unroll
        for (int v = 0; v < VB; ++v) {
            xv[v] = *(const T *)(tb + (h + v) * kcb);
            if (HAS_W) wv[HAS_W ? v : 0] = wt[rg + (h + v) * kr];
        }
#pragma unroll
        for (int v = 0; v + 1 < VB; v += 2)
            cls.see2(xv[v], xv[v + 1], HAS_W ? wv[HAS_W ? v : 0] : 1.0, HAS_W ? wv[HAS_W ? v + 1 : 0] : 1.0);
        if (VB & 1) cls.see(xv[VB - 1], HAS_W ? wv[HAS_W ? VB - 1 : 0] : 1.0);
        if (__builtin_expect(__all_sync(__activemask(), cls.plain()), 1)) {  // finite values, positive weights
#pragma unroll
            for (int v = 0; v < VB; ++v) acc.add_fast(xv[v], HAS_W ? wv[HAS_W ? v : 0] : 1.0, c);
            acc.template minmax_chunk<VB>(cls, xv);
        } else {  // also NaN, inf (raises later), zero weights
#pragma unroll
            for (int v = 0; v < VB; ++v) acc.add_masked(xv[v], HAS_W ? wv[HAS_W ? v : 0] : 1.0, c);
        }
    }
}
// a tile of fewer rows than a full one (the strip's last): value by value; returns the values seen
template <typename T, int L, int V, bool HAS_W>
__device__ __forceinline__ int sum_partial_tile(Moments<T, L, HAS_W> &acc, const T *tile, const double *wt, int t,
                                                int KC, int kr, int rg, int rows, double c) {
    int seen = 0;
#pragma unroll
    for (int v = 0; v < V; ++v) {
        const int r = rg + v * kr;
        if (r < rows) {
            acc.add(tile[t + v * KC], HAS_W ? wt[r] : 1.0, c);
            ++seen;
        }
    }
    return seen;
}

// The block's sums per column into part row prow + col: the kr threads of a column share its centre, so their sums
// simply add (buf: NT * L doubles of shared memory no longer in use)
template <typename T, int L, int NT, bool HAS_W>
__device__ __forceinline__ void block_partials(const Moments<T, L, HAS_W> &acc, int nproc, bool active, int rg, int col,
                                               int cw, int kr, size_t prow, double *buf, double *sW, double *sLo,
                                               double *sHi, double *__restrict__ part) {
    const int t = threadIdx.x;
    sW[t] = active ? (HAS_W ? acc.S[0] : (double)(nproc - acc.ninv)) : 0.0;
    sLo[t] = active ? acc.lo_value() : POS_INF;
    sHi[t] = active ? acc.hi_value() : NEG_INF;
#pragma unroll
    for (int k = 0; k < L; ++k) buf[k * NT + t] = active ? acc.S[k + 1] : 0.0;
    __syncthreads();
    if (active && rg == 0) {
        double a[L];
#pragma unroll
        for (int k = 0; k < L; ++k) a[k] = 0.0;
        double Wb = 0.0, blo = POS_INF, bhi = NEG_INF;
        for (int g = 0; g < kr; ++g) {
            const int tt = g * cw + col;
            Wb += sW[tt];
#pragma unroll
            for (int k = 0; k < L; ++k) a[k] += buf[k * NT + tt];
            blo = fmin(blo, sLo[tt]);
            bhi = fmax(bhi, sHi[tt]);
        }
        double *p = part + (prow + col) * (L + 3);
        p[0] = Wb;
#pragma unroll
        for (int k = 0; k < L; ++k) p[1 + k] = a[k];
        p[L + 1] = blo;
        p[L + 2] = bhi;
    }
}

// The end of both read kernels, after a barrier: the inf flag; the block's shared distinct sets into the global table
// (the global over flags read once per slot); the block's partial sums (block_partials).
template <typename T, int L, int NT, bool HAS_W>
__device__ __forceinline__ void block_end(const Moments<T, L, HAS_W> &acc, int nproc, bool active, int rg, int col,
                                          int cw, int kr, size_t prow, unsigned char *smem,
                                          const typename FastKey<T>::K *tabs, int nslots, int ts, int tshift,
                                          const int *sCol, int *sOver, double *sW, double *sLo, double *sHi, int *bad,
                                          unsigned long long *table, int tsize, int *count, int *over, int cap,
                                          double *__restrict__ part) {
    typedef typename FastKey<T>::K K;
    const int t = threadIdx.x;
    if (acc.bad) atomicExch(bad, 1);
    if (t < nslots && sCol[t] >= 0 && !sOver[t] && ld_relaxed(over + sCol[t])) sOver[t] = 1;
    __syncthreads();
    for (int i = t; i < nslots * ts; i += NT) {
        const int s = i >> (32 - tshift);  // ts = 2^(32 - tshift)
        const int fs = sCol[s];
        const K key = tabs[i];
        if (fs < 0 || !FastKey<T>::real(key) || sOver[s]) continue;  // empty slots and aliases hold no value
        distinct_insert(FastKey<T>::value(key), fs, table, tsize, count, over, cap);
    }
    __syncthreads();
    block_partials<T, L, NT, HAS_W>(acc, nproc, active, rg, col, cw, kr, prow, (double *)smem, sW, sLo, sHi, part);
}

// The start of both read kernels: empty shared distinct sets and slot state, and this thread's place in the block's
// list of tracked columns (the tile's columns wanting it, in column order; the first nslots get a shared set, the rest
// the global table): -1 for a thread not wanting one, the list's length in tot. Holds a block-wide barrier.
template <typename K, int NT>
__device__ __forceinline__ int tracked_position(bool want, K *tabs, int nslots, int ts, K EMPTY, int *sCnt, int *sOver,
                                                int *sCol, int *sWarp, int &tot) {
    const int t = threadIdx.x, lane = t & 31, wid = t >> 5;
    for (int i = t; i < nslots * ts; i += NT) tabs[i] = EMPTY;
    if (t < MAX_SLOTS) { sCnt[t] = 0; sOver[t] = 0; sCol[t] = -1; }
    const unsigned int wb = __ballot_sync(0xffffffffu, want);
    if (lane == 0) sWarp[wid] = __popc(wb);
    __syncthreads();
    int base = 0;
    tot = 0;
    for (int i = 0; i < NT / 32; ++i) {
        if (i < wid) base += sWarp[i];
        tot += sWarp[i];
    }
    return want ? base + __popc(wb & ((1u << lane) - 1u)) : -1;
}

// A block's part of the read: rows [r_begin, r_end) of a tile of cw columns, in tiles of RT = kr * V rows; thread t
// sums column col = t % cw over rows rg, rg + kr, ... of each tile (active: t < KC = kr * cw).
template <int NT, int V> struct Strip {
    int cw, kr, KC, rg, col, RT, ntiles;
    bool active;
    long long r_begin, r_end;
    __device__ __forceinline__ Strip(int cw_, long long n, long long rows_per_block) {
        cw = cw_;
        kr = NT / cw;
        KC = kr * cw;
        rg = (int)threadIdx.x / cw;
        col = (int)threadIdx.x - rg * cw;
        active = (int)threadIdx.x < KC;
        RT = kr * V;
        r_begin = (long long)blockIdx.x * rows_per_block;
        r_end = min(n, r_begin + rows_per_block);
        ntiles = (int)((r_end - r_begin + RT - 1) / RT);
    }
};

// ------------------------------------------------------------------------ 2. the read
// grid (gx, n_tiles), block NT, dynamic shared memory: max(NS * (stage_elems * sizeof(T) + wstage * 8) +
// nslots * ts * sizeof(K), NT * L * 8) bytes. part (gx, d, L + 3): [W, S1..SL, min, max] about center.
template <typename T, int L, int NT, int V, int NS, bool HAS_W, bool FASTPATH>
__global__ void __launch_bounds__(NT, (L <= 16 ? FAST_MINB : 4))
sketch_tiles(const T *__restrict__ X, const double *__restrict__ w, long long n, int d, int ct, long long rows_per_block,
             int vec16, int stage_elems, int wstage, const double *__restrict__ center, double *__restrict__ part,
             int *__restrict__ bad, int nslots, int ts, int tshift, unsigned long long *table, int tsize, int *count,
             int *over, int cap, const unsigned long long *__restrict__ seed, const int *__restrict__ seed_n) {
    typedef typename FastKey<T>::K K;
    extern __shared__ __align__(128) unsigned char fast_smem[];
    T *stage = (T *)fast_smem;
    double *wst = (double *)(fast_smem + (size_t)NS * stage_elems * sizeof(T));
    K *tabs = (K *)(wst + (size_t)NS * wstage);
    __shared__ double sW[NT], sLo[NT], sHi[NT];
    __shared__ int sCnt[MAX_SLOTS], sOver[MAX_SLOTS], sCol[MAX_SLOTS];
    __shared__ int lstC[NT], lstS[NT], sWarp[NT / 32], sNtr;
    const K EMPTY = FastKey<T>::empty();

    const int t = threadIdx.x, lane = t & 31, wid = t >> 5;
    const int tile0 = blockIdx.y * ct;
    const Strip<NT, V> g(min(ct, d - tile0), n, rows_per_block);
    const int cw = g.cw, kr = g.kr, KC = g.KC, rg = g.rg, col = g.col, RT = g.RT, ntiles = g.ntiles;
    const bool active = g.active;
    const long long r_begin = g.r_begin, r_end = g.r_end;

    {
        int tot;
        const int pos = tracked_position<K, NT>(cap > 0 && t < cw && !*((volatile int *)(over + tile0 + t)), tabs,
                                                nslots, ts, EMPTY, sCnt, sOver, sCol, sWarp, tot);
        if (pos >= 0) {
            const int s = pos < nslots ? pos : -1;
            lstC[pos] = t;
            lstS[pos] = s;
            if (s >= 0) sCol[s] = tile0 + t;
        }
        if (t == 0) sNtr = tot;
    }
    __syncthreads();
    seed_sets<K, NT>(tabs, nslots, ts, sCol, sCnt, seed, seed_n, cap, EMPTY,
                     [&](K key) { return tiles_slot<T>(key, tshift); });
    __syncthreads();

    const double c = active ? center[tile0 + col] : 0.0;
    Moments<T, L, HAS_W> acc;
    acc.init();
    int nproc = 0;
    int ntr = -1, tj = 0, tr0 = 0, rstep = 1;
    bool tact = false;

    auto issue = [&](int k) {  // tile k -> stage k % NS
        const int s = k % NS;
        const long long row0 = r_begin + (long long)k * RT;
        const int rows = (int)min((long long)RT, r_end - row0);
        T *dst = stage + (size_t)s * stage_elems;
        if (cw == d) {  // the tile is one contiguous piece of X
            const T *src = X + row0 * d;
            const int elems = rows * d;
            int i0 = 0;
            if (vec16) {
                constexpr int E = 16 / sizeof(T);
                const int nvec = elems / E;
                for (int i = t; i < nvec; i += NT) cp_async<16>(dst + i * E, src + i * E);
                i0 = nvec * E;
            }
            for (int i = i0 + t; i < elems; i += NT) cp_async<(int)sizeof(T)>(dst + i, src + i);
        } else if (cw == NT) {
            for (int r = 0; r < rows; ++r) cp_async<(int)sizeof(T)>(dst + r * NT + t, X + (row0 + r) * d + tile0 + t);
        } else {
            for (int i = t; i < rows * cw; i += NT) {
                const int r = i / cw;
                cp_async<(int)sizeof(T)>(dst + i, X + (row0 + r) * d + tile0 + (i - r * cw));
            }
        }
        if (HAS_W) {
            double *wd = wst + (size_t)s * wstage;
            for (int i = t; i < rows; i += NT) cp_async<8>(wd + i, w + row0 + i);
        }
    };

#pragma unroll
    for (int k = 0; k < NS - 1; ++k) {
        if (k < ntiles) issue(k);
        cp_commit();
    }
    for (int k = 0; k < ntiles; ++k) {
        if (k + NS - 1 < ntiles) issue(k + NS - 1);
        cp_commit();
        cp_wait<NS - 1>();
        __syncthreads();  // tile k is in shared memory; the list is settled
        const int s = k % NS;
        const long long row0 = r_begin + (long long)k * RT;
        const int rows = (int)min((long long)RT, r_end - row0);
        const T *tile = stage + (size_t)s * stage_elems;
        const double *wt = wst + (size_t)s * wstage;
        const int nt_now = sNtr;
        if (nt_now != ntr) {  // tracked items of a tile: (row, list entry); thread t takes entry t % ntr
            ntr = nt_now;
            tact = ntr > 0;
            if (tact) {
                rstep = NT / ntr;
                tj = t % ntr;
                tr0 = t / ntr;
                tact = t < rstep * ntr;
            }
        }
        // warp 0: the over flag (set by any block) of one tracked column per lane, round robin over the list when it
        // has more than 32 entries; loaded now, looked at only after this tile's sums, so the global round trip
        // never holds the block (a flag read late only drops a column a tile later)
        int ovj = -1, ovf = 0;
        if (wid == 0 && ntr > 0) {
            const int j = lane + (ntr > 32 ? 32 * (k % ((ntr + 31) >> 5)) : 0);
            if (j < ntr) {
                ovj = j;
                ovf = ld_relaxed(over + tile0 + lstC[j]);
            }
        }
        if (active && rows == RT) {
            sum_full_tile<T, L, V, HAS_W, FASTPATH>(acc, tile, wt, t, KC, kr, rg, c);
            nproc += V;
        } else if (active) {
            nproc += sum_partial_tile<T, L, V, HAS_W>(acc, tile, wt, t, KC, kr, rg, rows, c);
        }
        // distinct tracking: this thread's items (rows tr0, tr0 + rstep, ... of list entry tj). A value found at its
        // home slot or the next is known; otherwise (or for columns in the global table) the insert path runs
        if (tact) {
            const int lc = lstC[tj], sl = lstS[tj];
            bool miss = sl < 0;
            if (!miss) {
                const K *tabp = tabs + sl * ts;
                const unsigned int msk = (unsigned int)(ts - 1);
                const T *ip = tile + tr0 * cw + lc;
                const int istep = rstep * cw;
#pragma unroll 4
                for (int r = tr0; r < rows; r += rstep, ip += istep) {
                    K key;
                    const bool fin = FastKey<T>::of(*ip, key) && (!HAS_W || wt[r] > 0.0);
                    const unsigned int hh = tiles_slot<T>(key, tshift);
                    const K p0 = tabp[hh], p1 = tabp[(hh + 1) & msk];
                    miss |= fin && p0 != key && p1 != key;
                }
            }
            if (miss) {
                K *tab = tabs + (sl >= 0 ? sl : 0) * ts;
                bool done = false;
                for (int r = tr0; !done && r < rows; r += rstep) {
                    K key;
                    if (!FastKey<T>::of(tile[r * cw + lc], key)) continue;
                    if (HAS_W && !(wt[r] > 0.0)) continue;
                    if (sl >= 0 && ((volatile K *)tab)[tiles_slot<T>(key, tshift)] == key)
                        continue;
                    done = track_insert<T>(key, sl, tab, ts, tshift, EMPTY, sCnt, sOver, tile0 + lc, table, tsize,
                                           count, over, cap);
                }
            }
        }
        __syncthreads();  // stage s is free; every insert of this tile is done
        if (wid == 0 && ntr > 0) {  // drop columns that went over (here or in another block) from the list
            unsigned int dead = 0u;
#pragma unroll
            for (int m = 0; m < NT / 32; ++m) {
                const int j = lane + 32 * m;
                if (j < ntr && ((j == ovj && ovf != 0) || (lstS[j] >= 0 && sOver[lstS[j]]))) dead |= 1u << m;
            }
            if (__any_sync(0xffffffffu, dead != 0u)) {
                int nn = 0;
                for (int m = 0; m < NT / 32 && 32 * m < ntr; ++m) {
                    const int j = lane + 32 * m;
                    const bool keep = j < ntr && !((dead >> m) & 1u);
                    const int cj = keep ? lstC[j] : 0, sj = keep ? lstS[j] : 0;
                    const unsigned int kb = __ballot_sync(0xffffffffu, keep);
                    __syncwarp();
                    if (keep) {
                        const int pos = nn + __popc(kb & ((1u << lane) - 1u));
                        lstC[pos] = cj;
                        lstS[pos] = sj;
                    }
                    nn += __popc(kb);
                    __syncwarp();
                }
                if (lane == 0) sNtr = nn;
            }
        }
    }
    cp_wait<0>();
    __syncthreads();
    block_end<T, L, NT, HAS_W>(acc, nproc, active, rg, col, cw, kr, (size_t)blockIdx.x * d + tile0, fast_smem, tabs,
                               nslots, ts, tshift, sCol, sOver, sW, sLo, sHi, bad, table, tsize, count, over, cap,
                               part);
}

// ------------------------------------------------------------------------ 2b. the read through the bulk copy engine
// sm_90+, for X whose column tile is every column (d <= NT) and whose tiles are 16-byte aligned: each full tile is
// one contiguous piece of X, copied into its stage by one cp.async.bulk that completes on the stage's mbarrier. No
// block-wide barrier in the loop: a warp waits only for its tile's data. The last warp to finish a tile (a shared
// counter) refills that stage with the tile NS further on, and writes the stage's list of tracked columns (the
// previous one minus the columns found over, here or in another block: each warp loads the global flags of up to 32
// list entries at the start of a tile, so the refill never waits for them);
// the stage's mbarrier completes when the data has landed and that warp has arrived, which publishes the list too.
// A strip's last, partial tile is read straight from global memory (no copy, same layout). Distinct sets: buckets
// of two slots (one 8- or 16-byte shared load looks a value up); the insert path probes slot by slot from the bucket.
__device__ __forceinline__ void mbar_init(unsigned long long *b, unsigned int count) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(b)), "r"(count) : "memory");
#endif
}
__device__ __forceinline__ void mbar_expect_tx(unsigned long long *b, unsigned int bytes) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(b)), "r"(bytes) : "memory");
#endif
}
__device__ __forceinline__ void mbar_arrive(unsigned long long *b) {  // release: writes before it are published
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(smem_addr(b)) : "memory");
#endif
}
__device__ __forceinline__ void mbar_wait(unsigned long long *b, unsigned int parity) {  // acquire
#if __CUDA_ARCH__ >= 900
    unsigned int done = 0;
    while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2; "
                     "selp.u32 %0, 1, 0, p; }"
                     : "=r"(done)
                     : "r"(smem_addr(b)), "r"(parity)
                     : "memory");
#endif
}
__device__ __forceinline__ void bulk_copy(void *dst, const void *src, unsigned int bytes, unsigned long long *bar) {
#if __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)) : "memory");
#else
    __trap();  // the host launches this kernel on sm_90+ only
#endif
}
__device__ __forceinline__ void fence_async_shared() {
#if __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
// grid (gx), block NT, dynamic shared memory as sketch_tiles' (NS stages of stage_elems values and wstage weights,
// then nslots sets of ts keys; at least NT * L doubles). Same partials as sketch_tiles.
template <typename T, int L, int NT, int V, int NS, bool HAS_W, bool FASTPATH>
__global__ void __launch_bounds__(NT, (L <= 16 ? FAST_MINB : 4))
sketch_bulk(const T *__restrict__ X, const double *__restrict__ w, long long n, int d, long long rows_per_block,
            int stage_elems, int wstage, const double *__restrict__ center, double *__restrict__ part,
            int *__restrict__ bad, int nslots, int ts, int tshift, unsigned long long *table, int tsize, int *count,
            int *over, int cap, const unsigned long long *__restrict__ seed, const int *__restrict__ seed_n) {
    typedef typename FastKey<T>::K K;
    constexpr int NW = NT / 32;
    extern __shared__ __align__(128) unsigned char fast_smem[];
    T *stage = (T *)fast_smem;
    double *wst = (double *)(fast_smem + (size_t)NS * stage_elems * sizeof(T));
    K *tabs = (K *)(wst + (size_t)NS * wstage);
    __shared__ __align__(8) unsigned long long full[NS];
    __shared__ double sW[NT], sLo[NT], sHi[NT];
    __shared__ int sCnt[MAX_SLOTS], sOver[MAX_SLOTS], sCol[MAX_SLOTS];
    __shared__ int lst[NS][NT];  // tracked columns per stage: column | (slot + 1) << 16
    __shared__ int sNtr[NS], sDone[NS], sWarp[NW];
    const K EMPTY = FastKey<T>::empty();

    const int t = threadIdx.x, lane = t & 31;
    const Strip<NT, V> g(d, n, rows_per_block);
    const int cw = g.cw, kr = g.kr, KC = g.KC, rg = g.rg, col = g.col, RT = g.RT, ntiles = g.ntiles;
    const bool active = g.active;
    const long long r_begin = g.r_begin, r_end = g.r_end;
    const unsigned int tile_bytes = (unsigned int)(RT * cw * sizeof(T)), w_bytes = HAS_W ? (unsigned int)(RT * 8) : 0u;

    if (t == 0) {
#pragma unroll
        for (int s = 0; s < NS; ++s) mbar_init(full + s, 1);
    }
    {
        int tot;
        const int pos = tracked_position<K, NT>(cap > 0 && t < cw && !*((volatile int *)(over + t)), tabs, nslots, ts,
                                                EMPTY, sCnt, sOver, sCol, sWarp, tot);
        if (pos >= 0) {
            const int sl = pos < nslots ? pos : -1;
#pragma unroll
            for (int s = 0; s < NS; ++s) lst[s][pos] = t | ((sl + 1) << 16);
            if (sl >= 0) sCol[sl] = t;
        }
        if (t < NS) { sNtr[t] = tot; sDone[t] = 0; }
    }
    __syncthreads();  // sets, lists and barriers ready
    auto fill = [&](int k) {  // one thread: tile k's data into stage k % NS (a partial tile needs none)
        const int s = k % NS;
        const long long row0 = r_begin + (long long)k * RT;
        if (r_end - row0 >= RT) {
            mbar_expect_tx(full + s, tile_bytes + w_bytes);
            bulk_copy(stage + (size_t)s * stage_elems, X + row0 * cw, tile_bytes, full + s);
            if (HAS_W) bulk_copy(wst + (size_t)s * wstage, w + row0, w_bytes, full + s);
        }
    };
    if (t == 0) {
        for (int k = 0; k < NS && k < ntiles; ++k) {
            fill(k);
            mbar_arrive(full + k);
        }
    }
    seed_sets<K, NT>(tabs, nslots, ts, sCol, sCnt, seed, seed_n, cap, EMPTY,
                     [&](K key) { return bulk_slot<T>(key, tshift); });
    __syncthreads();  // the sets hold the sample's values

    const double c = active ? center[col] : 0.0;
    Moments<T, L, HAS_W> acc;
    acc.init();
    int nproc = 0;
    int g_ntr = -1, rstep = NT, tj = 0, tr0 = 0, items_full = 0, ovr = 0;  // tracking geometry for list length g_ntr
    for (int k = 0; k < ntiles; ++k) {
        const int s = k % NS;
        mbar_wait(full + s, (unsigned int)(k / NS) & 1u);
        const long long row0 = r_begin + (long long)k * RT;
        const int rows = (int)min((long long)RT, r_end - row0);
        const bool whole = rows == RT;
        const T *tile = stage + (size_t)s * stage_elems;
        const double *wt = wst + (size_t)s * wstage;
        // distinct tracking: list entry tj takes threads tj * rstep .. + rstep - 1 (rstep <= NT / ntr), thread tj *
        // rstep + tr0 its rows tr0, tr0 + rstep, ... (a warp's lookups mostly hit one column's set: repeated values
        // are broadcasts); looked up after the sums, a miss runs the inserts. The geometry changes only with ntr.
        const int ntr = sNtr[s];
        if (ntr != g_ntr) {
            g_ntr = ntr;
            // items per thread: what NT / ntr threads per column need, rounded up to whole lookup groups (a
            // group's unused items cost as much as real ones); then the fewest threads per column for that
            const int itm = ntr > 0 ? (RT + NT / ntr - 1) / (NT / ntr) : 1;
            const int itg = (itm + LOOKUP_GROUP - 1) / LOOKUP_GROUP * LOOKUP_GROUP;
            rstep = (RT + itg - 1) / itg;
            tj = t / rstep;
            tr0 = t - tj * rstep;
            items_full = (RT - tr0 + rstep - 1) / rstep;
            ovr = 0;
        }
        // the global over flag of list entry ovj (lane, round robin over lists longer than 32), loaded now and used
        // only if this warp refills the stage: the load's latency never holds the refill
        if (ntr > 32 && ++ovr * 32 >= ntr) ovr = 0;
        const int ovj = lane + 32 * ovr;
        const int ovf = ovj < ntr ? ld_relaxed(over + (lst[s][ovj] & 0xffff)) : 0;
        const bool tracking = tj < ntr;
        int lc = 0, sl = -1;
        if (tracking) {
            const int e = lst[s][tj];
            lc = e & 0xffff;
            sl = (e >> 16) - 1;
        }
        if (whole) {
            if (active) {
                sum_full_tile<T, L, V, HAS_W, FASTPATH>(acc, tile, wt, t, KC, kr, rg, c);
                nproc += V;
            }
            if (tracking && (sl < 0 || lookup_items<T, HAS_W>(tabs + sl * ts, tile + tr0 * cw + lc, rstep * cw, wt, tr0,
                                                              rstep, items_full, tshift + Bucket<K>::LOG)))
                track_inserts<T, HAS_W>(tile, wt, rows, cw, lc, sl, tr0, rstep, tabs, ts, tshift, sCnt, sOver, table,
                                        tsize, count, over, cap);
        } else {
            const T *gt = X + row0 * cw;
            const double *gw = w + row0;
            if (active) nproc += sum_partial_tile<T, L, V, HAS_W>(acc, gt, gw, t, KC, kr, rg, rows, c);
            if (tracking && (sl < 0 || lookup_items<T, HAS_W>(tabs + sl * ts, gt + tr0 * cw + lc, rstep * cw, gw, tr0,
                                                              rstep, rows > tr0 ? (rows - tr0 + rstep - 1) / rstep : 0,
                                                              tshift + Bucket<K>::LOG)))
                track_inserts<T, HAS_W>(gt, gw, rows, cw, lc, sl, tr0, rstep, tabs, ts, tshift, sCnt, sOver, table,
                                        tsize, count, over, cap);
        }
        // done with stage s: the last warp refills it with tile k + NS and writes its list
        __syncwarp();
        int last = 0;
        if (lane == 0) {
            __threadfence_block();
            last = atomicAdd(sDone + s, 1) == NW - 1;
        }
        if (__shfl_sync(0xffffffffu, last, 0) && k + NS < ntiles) {
            __threadfence_block();
            if (lane == 0) {
                sDone[s] = 0;
                fence_async_shared();
                fill(k + NS);
            }
            const int n0 = sNtr[s];
            int nn = 0;
            for (int j0 = 0; j0 < n0; j0 += 32) {
                const int j = j0 + lane;
                const int e = j < n0 ? lst[s][j] : 0;
                const int sl = (e >> 16) - 1;
                const bool keep = j < n0 && !(sl >= 0 && ((volatile int *)sOver)[sl]) && !(j == ovj && ovf);
                const unsigned int kb = __ballot_sync(0xffffffffu, keep);
                if (keep) lst[s][nn + __popc(kb & ((1u << lane) - 1u))] = e;  // nn + rank <= j: no entry overwritten unread
                nn += __popc(kb);
                __syncwarp();
            }
            if (lane == 0) {
                sNtr[s] = nn;
                mbar_arrive(full + s);
            }
        }
    }
    __syncthreads();  // every copy has landed (each was waited for) and every insert is done
    block_end<T, L, NT, HAS_W>(acc, nproc, active, rg, col, cw, kr, blockIdx.x * (size_t)d, fast_smem, tabs, nslots,
                               ts, tshift, sCol, sOver, sW, sLo, sHi, bad, table, tsize, count, over, cap, part);
}

// ------------------------------------------------------------------------ 3. sums -> moments, distinct sets
// grid (d), block RT, dynamic shared memory capx * 8 bytes. res row f (stride L + 5 + capx):
// [W, mean, M2..ML, min, max, redo, n_distinct, capx sorted distinct values (NaN padded)]; res[d * stride] = *bad.
// n_distinct: the set size, -1 once over cap; with cap = 0, -1 for a column with data and 0 for an empty one (as
// the CPU twin); with capx = 0 < cap the host sorts the kept tables itself.
template <int L, int RT>
__global__ void sketch_finish(const double *__restrict__ part, int nblk, int d, const double *__restrict__ center,
                              const int *__restrict__ over, const int *__restrict__ count,
                              const unsigned long long *__restrict__ table, int tsize, int cap, int capx, double tol,
                              const int *__restrict__ bad, double *__restrict__ res) {
    extern __shared__ double fvals[];
    __shared__ double sh[RT / 32][L + 3];
    __shared__ double tot[L + 3];
    __shared__ double pw[L + 1];
    __shared__ double sDelta, sM2;
    __shared__ int nk;
    const int f = blockIdx.x, t = threadIdx.x, lane = t & 31, wid = t >> 5;
    const int stride = L + 5 + capx;
    double *out = res + (size_t)f * stride;
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
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {  // within the warp, then the warps' sums in warp order
#pragma unroll
        for (int k = 0; k <= L; ++k) s[k] += __shfl_down_sync(0xffffffffu, s[k], o);
        lo = fmin(lo, __shfl_down_sync(0xffffffffu, lo, o));
        hi = fmax(hi, __shfl_down_sync(0xffffffffu, hi, o));
    }
    if (lane == 0) {
#pragma unroll
        for (int k = 0; k <= L; ++k) sh[wid][k] = s[k];
        sh[wid][L + 1] = lo;
        sh[wid][L + 2] = hi;
    }
    __syncthreads();
    if (t < L + 3) {
        double a = sh[0][t];
        for (int i = 1; i < RT / 32; ++i)
            a = t <= L ? a + sh[i][t] : (t == L + 1 ? fmin(a, sh[i][t]) : fmax(a, sh[i][t]));
        tot[t] = a;
    }
    __syncthreads();
    const double W = tot[0];
    if (t == 0) {
        const double delta = W > 0.0 ? tot[1] / W : 0.0;
        pw[0] = 1.0;
        for (int e = 1; e <= L; ++e) pw[e] = pw[e - 1] * -delta;
        sDelta = delta;
        nk = 0;
    }
    __syncthreads();
    // M_k = sum_{i=0}^{k} C(k, i) S_i (-delta)^(k-i), S_0 = W: one thread per order
    if (t >= 2 && t <= L) {
        double a = W * pw[t];
        unsigned int cb = 1u;  // C(t, i), exact in 32 bits up to t = 24 (C(24, 12) * 12 < 2^32)
        for (int i = 1; i <= t; ++i) {
            cb = cb * (unsigned int)(t - i + 1) / (unsigned int)i;
            a += (double)cb * tot[i] * pw[t - i];
        }
        a = W > 0.0 ? a : 0.0;
        out[t] = a;
        if (t == 2) sM2 = a;
    }
    __syncthreads();
    if (t == 0) {
        const double delta = sDelta;
        out[0] = W;
        out[1] = W > 0.0 ? center[f] + delta : 0.0;
        out[L + 1] = tot[L + 1];
        out[L + 2] = tot[L + 2];
        const double sd = sqrt(fmax(sM2, 0.0) / W);
        out[L + 3] = (W > 0.0 && !(fabs(delta) <= tol * sd)) ? 1.0 : 0.0;
        if (f == 0) res[(size_t)d * stride] = (double)*bad;
    }
    const bool keep = cap > 0 && !over[f] && count[f] <= cap;
    if (capx > 0) {
        if (keep) {
            for (int i = t; i < tsize; i += RT) {
                const unsigned long long key = table[(size_t)f * tsize + i];
                if (key != EMPTY_KEY) {
                    const int p = atomicAdd(&nk, 1);
                    if (p < capx) fvals[p] = __longlong_as_double((long long)key);
                }
            }
        }
        __syncthreads();
        const int m = keep ? min(nk, capx) : 0;
        for (int i = t; i < m; i += RT) {  // rank sort: the values are distinct
            const double v = fvals[i];
            int rank = 0;
            for (int j = 0; j < m; ++j) rank += fvals[j] < v;
            out[L + 5 + rank] = v;
        }
        for (int i = m + t; i < capx; i += RT) out[L + 5 + i] = QNAN;
        if (t == 0) out[L + 4] = keep ? (double)m : -1.0;
    } else if (t == 0) {
        out[L + 4] = cap > 0 ? (keep ? (double)count[f] : -1.0) : (W > 0.0 ? -1.0 : 0.0);
    }
}
