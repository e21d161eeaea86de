// Moment sketch on the GPU: one read of X (n, d) row-major. Each thread keeps a running (W, mean, M2..ML) for one
// feature over a strided set of rows, folding in chunks of R values held in registers (chunk mean, chunk central sums,
// then Pebay's weighted merge). The block merges its BY threads per feature in shared memory and writes a partial;
// reduce_partials merges the partials of each feature. The same pass keeps a bounded distinct-value set per feature
// (an open-addressing table in global memory, abandoned once a feature has more than `cap` distinct values).

#ifndef MINB
#define MINB 1
#endif
#define EMPTY_KEY 0x7ff8dead0000beefULL
#define POS_INF __longlong_as_double(0x7ff0000000000000LL)
#define NEG_INF __longlong_as_double((long long)0xfff0000000000000ULL)
#define QNAN __longlong_as_double(0x7ff8000000000000LL)

template <int L>
__device__ __forceinline__ void merge_into(double &wa, double &ma, double *Ma, double wb, double mb, const double *Mb) {
    if (wb <= 0.0) return;
    if (wa <= 0.0) {
        wa = wb; ma = mb;
#pragma unroll
        for (int k = 0; k < L - 1; ++k) Ma[k] = Mb[k];
        return;
    }
    const double w = wa + wb;
    const double delta = mb - ma;
    const double a = -wb * delta / w;
    const double b = wa * delta / w;
    // descending k keeps Ma[2..k-1] old while M_k is formed; Horner in a and b needs no power tables
#pragma unroll
    for (int k = L; k >= 2; --k) {
        double ha = 0.0, hb = 0.0;
        double c = 1.0;  // C(k, i) for i = 0, then built upward; Horner needs them from i = k-2 down
        double cs[L + 1];
#pragma unroll
        for (int i = 0; i <= k - 2; ++i) { cs[i] = c; c = c * (double)(k - i) / (double)(i + 1); }
#pragma unroll
        for (int i = k - 2; i >= 0; --i) {
            ha = ha * a + cs[i] * Ma[k - i - 2];
            hb = hb * b + cs[i] * Mb[k - i - 2];
        }
        double ak = 1.0, bk = 1.0;
#pragma unroll
        for (int i = 0; i < k; ++i) { ak *= a; bk *= b; }
        Ma[k - 2] = wa * ak + wb * bk + ha + hb;
    }
    wa = w;
    ma = ma + wb / w * delta;
}

__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
    z ^= z >> 33; z *= 0xff51afd7ed558ccdULL; z ^= z >> 33; z *= 0xc4ceb9fe1a85ec53ULL; z ^= z >> 33;
    return z;
}

// Insert x into feature f's table; returns nothing. table: (d, tsize) keys, count: (d,), over: (d,)
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

// grid (nblk_rows, ceil(d/32)), block (32, BY). part: (nblk_rows, d, L+3) = [W, mean, M2..ML, min, max]
template <typename T, int L, int BY, int R, bool HAS_W>
__global__ void __launch_bounds__(32 * BY, MINB) sketch_partial(const T *__restrict__ X, const double *__restrict__ w, long long n, int d,
                               long long rows_per_block, double *__restrict__ part, int *__restrict__ bad,
                               unsigned long long *table, int tsize, int *count, int *over, int cap) {
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int f = blockIdx.y * 32 + tx;
    const long long r_begin = (long long)blockIdx.x * rows_per_block;
    const long long r_end = min(n, r_begin + rows_per_block);
    double W = 0.0, mu = 0.0, M[L - 1];
#pragma unroll
    for (int k = 0; k < L - 1; ++k) M[k] = 0.0;
    double lo = POS_INF, hi = NEG_INF;
    int any_bad = 0;
    double last = QNAN;
    const bool active = f < d;
    int overflowed = active ? *((volatile int *)(over + f)) : 1;
    for (long long r0 = r_begin + ty; r0 < r_end; r0 += (long long)BY * R) {
        T xv[R];
        double wv[HAS_W ? R : 1];  // weights only when given; otherwise a validity bit mask
        unsigned int valid = 0u;
#pragma unroll
        for (int i = 0; i < R; ++i) {
            const long long r = r0 + (long long)i * BY;
            T x = (T)0;
            double wr = 0.0;
            if (active && r < r_end) {
                x = X[r * d + f];
                wr = HAS_W ? w[r] : 1.0;
                if (isnan(x)) { wr = 0.0; x = (T)0; }
                else if (isinf(x)) { any_bad = 1; wr = 0.0; x = (T)0; }
                if (HAS_W && wr == 0.0) x = (T)0;
            }
            xv[i] = x;
            if (HAS_W) wv[HAS_W ? i : 0] = wr;
            if (wr > 0.0) valid |= (1u << i);
        }
#define WGT(i) (HAS_W ? wv[HAS_W ? (i) : 0] : (((valid >> (i)) & 1u) ? 1.0 : 0.0))
        // chunk mean shifted by the running mean, so offset data (N(1000, 1)) keeps its digits
        double x0 = mu;  // before any data: the chunk's first valid value (exact for constant columns)
        if (W <= 0.0) {
            x0 = 0.0;
            bool found = false;
#pragma unroll
            for (int i = 0; i < R; ++i)
                if (!found && ((valid >> i) & 1u)) { x0 = (double)xv[i]; found = true; }
        }
        double cw = 0.0, cs = 0.0;
#pragma unroll
        for (int i = 0; i < R; ++i) { cw += WGT(i); cs += WGT(i) * ((double)xv[i] - x0); }
        if (cw <= 0.0) continue;
        const double cm = x0 + cs / cw;
        double Mc[L - 1];
#pragma unroll
        for (int k = 0; k < L - 1; ++k) Mc[k] = 0.0;
#pragma unroll
        for (int i = 0; i < R; ++i) {
            const double dl = (double)xv[i] - cm;
            double t = WGT(i) * dl * dl;
#pragma unroll
            for (int k = 0; k < L - 1; ++k) { Mc[k] += t; t *= dl; }
            if ((valid >> i) & 1u) { lo = fmin(lo, (double)xv[i]); hi = fmax(hi, (double)xv[i]); }
        }
        merge_into<L>(W, mu, M, cw, cm, Mc);
        if (!overflowed) {
#pragma unroll
            for (int i = 0; i < R; ++i) {
                const double x = (double)xv[i] + 0.0;  // -0.0 -> +0.0
                if (!overflowed && ((valid >> i) & 1u) && x != last) {
                    last = x;
                    overflowed = distinct_insert(x, f, table, tsize, count, over, cap);
                }
            }
            overflowed = overflowed || *((volatile int *)(over + f));
        }
    }
#undef WGT
    if (any_bad) atomicExch(bad, 1);
    __shared__ double sW[BY][32], sMu[BY][32], sLo[BY][32], sHi[BY][32];
    __shared__ double sM[BY][L - 1][32];
    sW[ty][tx] = W; sMu[ty][tx] = mu; sLo[ty][tx] = lo; sHi[ty][tx] = hi;
#pragma unroll
    for (int k = 0; k < L - 1; ++k) sM[ty][k][tx] = M[k];
    __syncthreads();
    if (ty == 0 && active) {
        for (int j = 1; j < BY; ++j) {
            double Mb[L - 1];
#pragma unroll
            for (int k = 0; k < L - 1; ++k) Mb[k] = sM[j][k][tx];
            merge_into<L>(W, mu, M, sW[j][tx], sMu[j][tx], Mb);
            lo = fmin(lo, sLo[j][tx]);
            hi = fmax(hi, sHi[j][tx]);
        }
        double *p = part + ((size_t)blockIdx.x * d + f) * (L + 3);
        p[0] = W; p[1] = mu;
#pragma unroll
        for (int k = 0; k < L - 1; ++k) p[2 + k] = M[k];
        p[L + 1] = lo; p[L + 2] = hi;
    }
}

// One block of RT threads per feature: each thread merges a strided subset of partials, then a shared-memory tree.
template <int L, int RT>
__global__ void reduce_partials(const double *__restrict__ part, int nblk, int d, double *__restrict__ out) {
    const int f = blockIdx.x, t = threadIdx.x;
    double W = 0.0, mu = 0.0, M[L - 1];
#pragma unroll
    for (int k = 0; k < L - 1; ++k) M[k] = 0.0;
    double lo = POS_INF, hi = NEG_INF;
    for (int b = t; b < nblk; b += RT) {
        const double *p = part + ((size_t)b * d + f) * (L + 3);
        double Mb[L - 1];
#pragma unroll
        for (int k = 0; k < L - 1; ++k) Mb[k] = p[2 + k];
        merge_into<L>(W, mu, M, p[0], p[1], Mb);
        lo = fmin(lo, p[L + 1]);
        hi = fmax(hi, p[L + 2]);
    }
    __shared__ double s[RT][L + 3];
    s[t][0] = W; s[t][1] = mu;
#pragma unroll
    for (int k = 0; k < L - 1; ++k) s[t][2 + k] = M[k];
    s[t][L + 1] = lo; s[t][L + 2] = hi;
    __syncthreads();
    for (int stride = RT / 2; stride > 0; stride >>= 1) {
        if (t < stride) {
            double Mb[L - 1];
#pragma unroll
            for (int k = 0; k < L - 1; ++k) Mb[k] = s[t + stride][2 + k];
            merge_into<L>(W, mu, M, s[t + stride][0], s[t + stride][1], Mb);
            lo = fmin(lo, s[t + stride][L + 1]);
            hi = fmax(hi, s[t + stride][L + 2]);
        }
        __syncthreads();
        if (t < stride) {
            s[t][0] = W; s[t][1] = mu;
#pragma unroll
            for (int k = 0; k < L - 1; ++k) s[t][2 + k] = M[k];
            s[t][L + 1] = lo; s[t][L + 2] = hi;
        }
        __syncthreads();
    }
    if (t == 0) {
#pragma unroll
        for (int k = 0; k < L + 3; ++k) out[(size_t)f * (L + 3) + k] = s[0][k];
    }
}
