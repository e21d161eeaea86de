// Interventional TreeSHAP in time linear in rows plus background: the GPU twin of _cpu_patterns.py.
// Compiled with --fmad=false: each product and sum is rounded as the CPU twin rounds it, and every sum runs in the
// CPU twin's order (fail sets ascending per table entry, paths ascending per output entry), so the results match
// the CPU's bytes. Rows are read transposed (feature-major, row fastest): the threads of a warp work on consecutive
// rows of one path and load one feature's values together. Histograms are integer sums (exact in any order).
// Two modules are compiled from this file: HITML_PATTERNS_BUILD (the background's histograms, one row type) and
// HITML_PATTERNS_CALL (tables and rows), so that an explainer's build compiles only the kernels it runs.
typedef long long i64;
typedef unsigned long long u64;

#define MAXD 16      // longest table path (values); the host keeps 2^d * d <= TABLE_ENTRIES
#define MAXDI 10     // longest table path (interactions)
#define MAXL 64      // longest sparse path (values)
#define MAXLI 32     // longest sparse path (interactions)

struct Paths {
    const i64* path_ptr;
    const int* feature;
    const double* lower;
    const double* upper;
    const unsigned char* missing_ok;
    const i64* cat_ptr;
    const int* cat_nwords;
    const unsigned int* cat_words;
    const unsigned char* cat_outside;
};

// kernels take the PathSet arrays one by one (CuPy passes arrays and scalars) and gather them here
#define PATH_ARGS const i64 *path_ptr, const int *feature, const double *lower, const double *upper, \
    const unsigned char *missing_ok, const i64 *cat_ptr, const int *cat_nwords, const unsigned int *cat_words, \
    const unsigned char *cat_outside
#define PATHS Paths P{path_ptr, feature, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words, cat_outside}

// A row value as a double, exactly: CuPy compiles with -ftz=true, under which (double)x of a float is
// cvt.ftz.f64.f32 and flushes float32 subnormals to zero (a split between subnormals would see zeros); cvt.f64.f32
// without .ftz keeps them, as the CPU twin's widening does.
__device__ __forceinline__ double exact_double(float x) {
    double r;
    asm("cvt.f64.f32 %0, %1;" : "=d"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ double exact_double(double x) { return x; }

template <typename XT>
__device__ __forceinline__ bool satisfies(XT xv, i64 e, const Paths& P) {
    double x = exact_double(xv);
    if (x != x) return P.missing_ok[e] != 0;
    double lo = P.lower[e];
    if (!((lo < -1.7976931348623157e308 || lo < x) && x <= P.upper[e])) return false;   // lo = -inf: no lower bound
    i64 cp = P.cat_ptr[e];
    if (cp < 0) return true;
    int nw = P.cat_nwords[e];
    if (x < 0.0 || x >= 32.0 * nw) return P.cat_outside[e] != 0;
    i64 c = (i64)x;
    return ((P.cat_words[cp + c / 32] >> (unsigned)(c % 32)) & 1u) != 0;
}

template <typename XT>
__device__ __forceinline__ i64 pattern(const XT* X, i64 ld, i64 i, i64 s, int m, const Paths& P) {
    i64 a = 0;
    for (int t = 0; t < m; ++t) {
        i64 e = s + t;
        if (satisfies(X[(i64)P.feature[e] * ld + i], e, P)) a |= (1LL << t);
    }
    return a;
}

__device__ __forceinline__ i64 find_segment(const i64* start, i64 n, i64 gi) {
    i64 lo = 0, hi = n - 1;   // the last q with start[q] <= gi
    while (lo < hi) {
        i64 mid = (lo + hi + 1) >> 1;
        if (start[mid] <= gi) lo = mid; else hi = mid - 1;
    }
    return lo;
}

#ifndef HITML_PATTERNS_CALL   // the build's kernels (the summary of the background)
// Background fail-set histograms of one chunk of paths. Block (g, y): paths grp_ptr[g]..grp_ptr[g+1] of ``pidx``
// (their bins consecutive from hist_off[pidx[grp_ptr[g]]]), background rows y, y + gridDim.y, ... in blocks of
// blockDim.x. A group whose bins fit ``smem_bins`` sums in shared memory first, in counters of type CT: 32-bit for
// unit weights (a block counts fewer than 2^32 rows; 32-bit shared atomics are the fast ones), else 64-bit.
// Each thread takes BG_RPT rows at once (j, j + stride, ...: each load of a warp stays coalesced): a path element's
// bounds are read once for all of them, and their row loads are independent, in flight together. The counts are
// integers, so neither the grouping nor the order of the adds changes a bin.
#ifndef BG_RPT
#define BG_RPT 1
#endif
template <typename XT, typename CT>
__global__ void bg_hist(const XT* R, i64 nR, const i64* wint, const i64* pidx, const i64* grp_ptr, PATH_ARGS,
                        const i64* hist_off, u64* hist, i64 smem_bins) {
    PATHS;
    extern __shared__ __align__(8) unsigned char sh_raw[];
    CT* sh = reinterpret_cast<CT*>(sh_raw);
    i64 q0 = grp_ptr[blockIdx.x], q1 = grp_ptr[blockIdx.x + 1];
    i64 base0 = hist_off[pidx[q0]];
    i64 p_last = pidx[q1 - 1];
    i64 nb = hist_off[p_last] + (1LL << (P.path_ptr[p_last + 1] - P.path_ptr[p_last])) - base0;
    bool use_sh = nb <= smem_bins;
    if (use_sh) {
        for (i64 k = threadIdx.x; k < nb; k += blockDim.x) sh[k] = 0;
        __syncthreads();
    }
    const i64 stride = (i64)gridDim.y * blockDim.x;
    for (i64 j0 = (i64)blockIdx.y * blockDim.x + threadIdx.x; j0 < nR; j0 += stride * BG_RPT) {
        i64 jr[BG_RPT];
        u64 w[BG_RPT];
#pragma unroll
        for (int r = 0; r < BG_RPT; ++r) {
            jr[r] = j0 + r * stride;
            w[r] = jr[r] < nR ? (wint ? (u64)wint[jr[r]] : 1ull) : 0ull;   // no weights: one per row
            if (jr[r] >= nR) jr[r] = j0;         // a row past the end reads a live one and adds nothing
        }
        for (i64 q = q0; q < q1; ++q) {
            i64 p = pidx[q];
            i64 s = P.path_ptr[p];
            int m = (int)(P.path_ptr[p + 1] - s);
            i64 a[BG_RPT];
#pragma unroll
            for (int r = 0; r < BG_RPT; ++r) a[r] = 0;
            for (int t = 0; t < m; ++t) {
                i64 e = s + t;
                const XT* col = R + (i64)P.feature[e] * nR;
#pragma unroll
                for (int r = 0; r < BG_RPT; ++r)
                    if (satisfies(col[jr[r]], e, P)) a[r] |= (1LL << t);
            }
            i64 top = hist_off[p] + (1LL << m) - 1;
#pragma unroll
            for (int r = 0; r < BG_RPT; ++r) {
                if (!w[r]) continue;
                i64 idx = top - a[r];
                if (use_sh) atomicAdd(&sh[idx - base0], (CT)w[r]);
                else atomicAdd(&hist[idx], w[r]);
            }
        }
    }
    if (use_sh) {
        __syncthreads();
        for (i64 k = threadIdx.x; k < nb; k += blockDim.x)
            if (sh[k]) atomicAdd(&hist[base0 + k], (u64)sh[k]);
    }
}

#endif

#ifndef HITML_PATTERNS_BUILD  // the call's kernels (tables, rows)
// One thread per (path, pattern a) of the chunk: the table row of a (see value_tables in _cpu_patterns.py).
// ``start[q]`` = hist_off[pidx[q]] (ascending): the thread's global index gi falls in path q's 2^d patterns.
__global__ void value_tables(const i64* pidx, i64 Q, const i64* start, i64 n_threads, const i64* path_ptr,
                             const u64* hist, const i64* hist_off, double total, const double* WP, const double* WQ,
                             int wld, const i64* tab_off, double* tab) {
    i64 gi = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (gi >= n_threads) return;
    i64 q = find_segment(start, Q, gi);
    i64 p = pidx[q];
    int d = (int)(path_ptr[p + 1] - path_ptr[p]);
    i64 a = gi - start[q];
    i64 ho = hist_off[p];
    int qn = d - __popcll(a);
    double nacc = 0.0;
    double pacc[MAXD];
    for (int t = 0; t < d; ++t) pacc[t] = 0.0;
    i64 s = 0;
    while (true) {   // the subsets s of a, ascending
        u64 cnt = hist[ho + s];
        if (cnt) {
            double g = (double)cnt / total;
            int ps = __popcll(s);
            nacc += g * WQ[ps * wld + qn];
            if (ps > 0) {
                double wp = g * WP[ps * wld + qn];
                for (int t = 0; t < d; ++t)
                    if ((s >> t) & 1) pacc[t] += wp;
            }
        }
        if (s == a) break;
        s = (s - a) & a;
    }
    double* row = tab + tab_off[p] + a * d;
    for (int t = 0; t < d; ++t) row[t] = ((a >> t) & 1) ? pacc[t] : nacc;
}

__global__ void interaction_tables(const i64* pidx, i64 Q, const i64* start, i64 n_threads, const i64* path_ptr,
                                   const u64* hist, const i64* hist_off, double total, const double* WP,
                                   const double* WQ, const double* WPP, const double* WPQ, const double* WQQ,
                                   int wld, const i64* tab_off, double* tab) {
    i64 gi = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (gi >= n_threads) return;
    i64 q = find_segment(start, Q, gi);
    i64 p = pidx[q];
    int d = (int)(path_ptr[p + 1] - path_ptr[p]);
    i64 a = gi - start[q];
    i64 ho = hist_off[p];
    int qn = d - __popcll(a);
    double main_q = 0.0, qq = 0.0;
    double main_p[MAXDI], pq[MAXDI], pp[MAXDI][MAXDI];
    for (int t = 0; t < d; ++t) {
        main_p[t] = 0.0;
        pq[t] = 0.0;
        for (int u = 0; u < d; ++u) pp[t][u] = 0.0;
    }
    i64 s = 0;
    while (true) {
        u64 cnt = hist[ho + s];
        if (cnt) {
            double g = (double)cnt / total;
            int ps = __popcll(s);
            main_q += g * WQ[ps * wld + qn];
            qq += g * WQQ[ps * wld + qn];
            if (ps > 0) {
                double wp = g * WP[ps * wld + qn];
                double wpq = g * WPQ[ps * wld + qn];
                double wpp = g * WPP[ps * wld + qn];
                for (int t = 0; t < d; ++t) {
                    if (!((s >> t) & 1)) continue;
                    main_p[t] += wp;
                    pq[t] += wpq;
                    for (int t2 = t + 1; t2 < d; ++t2)
                        if ((s >> t2) & 1) pp[t][t2] += wpp;
                }
            }
        }
        if (s == a) break;
        s = (s - a) & a;
    }
    double* blk = tab + tab_off[p] + a * d * d;
    for (int t1 = 0; t1 < d; ++t1) {
        bool in1 = (a >> t1) & 1;
        double diag = in1 ? main_p[t1] : main_q;
        for (int t2 = 0; t2 < d; ++t2) {
            if (t2 == t1) continue;
            bool in2 = (a >> t2) & 1;
            double v;
            if (in1 && in2) v = pp[min(t1, t2)][max(t1, t2)];
            else if (in1) v = pq[t1];
            else if (in2) v = pq[t2];
            else v = qq;
            blk[t1 * d + t2] = v;
            diag -= v;
        }
        blk[t1 * d + t1] = diag;
    }
}

// One thread per explained row: over the chunk's paths in order, the row's pattern picks a table row, whose
// entries times the leaf values add to out (W, K, n) (W = M+1 values, (M+1)^2 interactions), row fastest.
template <typename XT>
__global__ void rows_kernel(const XT* X, i64 n, const i64* pidx, i64 Q, PATH_ARGS, const double* leaf_value, int K,
                            const i64* tab_off, const double* tab, int interactions, int M1, double* out) {
    PATHS;
    i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    for (i64 q = 0; q < Q; ++q) {
        i64 p = pidx[q];
        i64 s = P.path_ptr[p];
        int m = (int)(P.path_ptr[p + 1] - s);
        i64 a = pattern(X, n, i, s, m, P);
        const double* lv = leaf_value + p * K;
        if (!interactions) {
            const double* row = tab + tab_off[p] + a * m;
            for (int t = 0; t < m; ++t) {
                double c = row[t];
                i64 f = P.feature[s + t];
                for (int k = 0; k < K; ++k) {
                    double v = lv[k];
                    if (v != 0.0) out[(f * K + k) * n + i] += c * v;
                }
            }
            continue;
        }
        const double* blk = tab + tab_off[p] + a * m * m;
        for (int t1 = 0; t1 < m; ++t1) {
            i64 f1 = (i64)P.feature[s + t1] * M1;
            for (int t2 = 0; t2 < m; ++t2) {
                double c = blk[t1 * m + t2];
                i64 f2 = f1 + P.feature[s + t2];
                for (int k = 0; k < K; ++k) {
                    double v = lv[k];
                    if (v != 0.0) out[(f2 * K + k) * n + i] += c * v;
                }
            }
        }
    }
}

#endif

#ifndef HITML_PATTERNS_CALL
// out[q * nR + j]: background row j's fail set on path pidx[q].
template <typename XT>
__global__ void bg_fails(const XT* R, i64 nR, const i64* pidx, i64 Q, PATH_ARGS, i64* out) {
    PATHS;
    i64 gi = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (gi >= nR * Q) return;
    i64 q = gi / nR, j = gi % nR;
    i64 p = pidx[q];
    i64 s = P.path_ptr[p];
    int m = (int)(P.path_ptr[p + 1] - s);
    out[gi] = ((1LL << m) - 1) ^ pattern(R, nR, j, s, m, P);
}

// RT (M x nR) = R (nR x M) transposed, moved bit for bit through a 32 x 33 shared tile (no arithmetic on a value,
// so subnormals stay as they are). Block (bx, by) of 32 x 8 threads: rows 32 bx, columns 32 by.
template <typename XT>
__global__ void rows_to_columns(const XT* R, i64 nR, i64 M, XT* RT) {
    __shared__ XT tile[32][33];
    const i64 r0 = (i64)blockIdx.x * 32, c0 = (i64)blockIdx.y * 32;
    for (int k = threadIdx.y; k < 32; k += 8) {
        const i64 r = r0 + k, c = c0 + threadIdx.x;
        if (r < nR && c < M) tile[k][threadIdx.x] = R[r * M + c];
    }
    __syncthreads();
    for (int k = threadIdx.y; k < 32; k += 8) {
        const i64 c = c0 + k, r = r0 + threadIdx.x;
        if (c < M && r < nR) RT[c * nR + r] = tile[threadIdx.x][k];
    }
}

#endif

#ifndef HITML_PATTERNS_BUILD
// Long paths: one thread per explained row against the distinct background fail sets of each path (the CPU twin's
// sparse_rows, same order of every sum).
template <typename XT, int INTER>
__global__ void sparse_rows(const XT* X, i64 n, const i64* pidx, i64 Q, PATH_ARGS, const double* leaf_value, int K,
                            const i64* fs_ptr, const i64* fs_set, const double* fs_w, double total, const double* WP,
                            const double* WQ, const double* WPP, const double* WPQ, const double* WQQ, int wld,
                            int M1, double* out) {
    PATHS;
    i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int L = INTER ? MAXLI : MAXL;
    double acc[INTER ? MAXLI * MAXLI : MAXL];
    for (i64 q = 0; q < Q; ++q) {
        i64 p = pidx[q];
        i64 s0 = P.path_ptr[p];
        int m = (int)(P.path_ptr[p + 1] - s0);
        i64 full = (1LL << m) - 1;
        i64 a = pattern(X, n, i, s0, m, P);
        i64 na = full ^ a;
        int qn = m - __popcll(a);
        for (int t = 0; t < (INTER ? m * L : m); ++t) acc[t] = 0.0;
        double mq = 0.0, qq = 0.0;
        for (i64 r = fs_ptr[q]; r < fs_ptr[q + 1]; ++r) {
            i64 s = fs_set[r];
            if (s & na) continue;
            double g = fs_w[r] / total;
            int ps = __popcll(s);
            mq += g * WQ[ps * wld + qn];
            if (INTER) qq += g * WQQ[ps * wld + qn];
            if (ps == 0) continue;
            double wp = g * WP[ps * wld + qn];
            double wpq = INTER ? g * WPQ[ps * wld + qn] : 0.0;
            double wpp = INTER ? g * WPP[ps * wld + qn] : 0.0;
            for (int t = 0; t < m; ++t) {
                if (!((s >> t) & 1)) continue;
                if (!INTER) { acc[t] += wp; continue; }
                acc[t * L + t] += wp;
                for (int t2 = 0; t2 < m; ++t2) {
                    if (t2 == t) continue;
                    if ((s >> t2) & 1) acc[t * L + t2] += wpp;
                    else if ((na >> t2) & 1) acc[t * L + t2] += wpq;
                }
            }
        }
        for (int t = 0; t < m; ++t) {
            if (!((na >> t) & 1)) continue;
            if (!INTER) { acc[t] = mq; continue; }
            acc[t * L + t] = mq;
            for (int t2 = 0; t2 < m; ++t2) {
                if (t2 == t) continue;
                if ((na >> t2) & 1) acc[t * L + t2] = qq;
                else if ((a >> t2) & 1) acc[t * L + t2] = acc[t2 * L + t];
            }
        }
        const double* lv = leaf_value + p * K;
        for (int t = 0; t < m; ++t) {
            i64 f = P.feature[s0 + t];
            if (!INTER) {
                double c = acc[t];
                for (int k = 0; k < K; ++k) {
                    double v = lv[k];
                    if (v != 0.0) out[(f * K + k) * n + i] += c * v;
                }
                continue;
            }
            double diag = acc[t * L + t];
            for (int t2 = 0; t2 < m; ++t2)
                if (t2 != t) diag -= acc[t * L + t2];
            for (int t2 = 0; t2 < m; ++t2) {
                double c = (t2 == t) ? diag : acc[t * L + t2];
                i64 idx = f * M1 + P.feature[s0 + t2];
                for (int k = 0; k < K; ++k) {
                    double v = lv[k];
                    if (v != 0.0) out[(idx * K + k) * n + i] += c * v;
                }
            }
        }
    }
}
#endif
