// Row sample of a moment sketch on the GPU (the twin of sample.py): the rows whose key mix(salt ^ mix(i + G)) is at
// most T, gathered straight into pinned host memory. Three or four small launches on a side stream (gpu.py),
// overlapping the sketch's read kernel.
// sample_salt: one block hashes the batch size and its first and last rows (XOR, so the order does not matter);
// sample_select: one hash per row index (no read of X), the rows under T appended by an atomic counter (unordered);
// sample_sort: those rows sorted by key in one block (where they fit its shared memory; else the host sorts them);
// sample_gather: the selected rows' values (exact float -> double on the host) and weights, in key order.

#define GOLD 0x9E3779B97F4A7C15ULL
#define C_N 0x5851F42D4C957F2DULL
#define C_LAST 0xD1B54A32D192ED03ULL
#define QNAN_BITS 0x7FF8000000000000ULL

__device__ __forceinline__ unsigned long long smix64(unsigned long long z) {
    z ^= z >> 33; z *= 0xff51afd7ed558ccdULL; z ^= z >> 33; z *= 0xc4ceb9fe1a85ec53ULL; z ^= z >> 33;
    return z;
}

// float64 bits of a value, float32 converted exactly whatever -ftz says, every NaN one pattern
template <typename T> __device__ __forceinline__ unsigned long long value_bits(T x);
template <> __device__ __forceinline__ unsigned long long value_bits<double>(double x) {
    return x != x ? QNAN_BITS : (unsigned long long)__double_as_longlong(x);
}
template <> __device__ __forceinline__ unsigned long long value_bits<float>(float x) {
    double r;
    asm("cvt.f64.f32 %0, %1;" : "=d"(r) : "f"(x));
    return x != x ? QNAN_BITS : (unsigned long long)__double_as_longlong(r);
}

// one block of 256 threads: writes salt[0] and zeroes count[0] for sample_select.
// salt = mix(n ^ C_N) ^ XOR_j mix(b0_j + (j+1) G) ^ mix((b1_j ^ C_LAST) + (j+1) G)
template <typename T>
__global__ void sample_salt(const T *__restrict__ X, long long n, int d, unsigned long long *salt,
                            unsigned long long *count) {
    __shared__ unsigned long long part[256];
    unsigned long long acc = threadIdx.x == 0 ? smix64((unsigned long long)n ^ C_N) : 0ULL;
    const T *first = X;
    const T *last = X + (size_t)(n - 1) * d;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        const unsigned long long g = (unsigned long long)(j + 1) * GOLD;
        acc ^= smix64(value_bits<T>(first[j]) + g) ^ smix64((value_bits<T>(last[j]) ^ C_LAST) + g);
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] ^= part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) { salt[0] = part[0]; count[0] = 0ULL; }
}

// grid-stride over row indices (after sample_salt); rows past cap are counted but not stored (host redoes them)
__global__ void sample_select(long long n, const unsigned long long *__restrict__ salt, unsigned long long T,
                              long long *idx, unsigned long long *keys, unsigned long long *count, int cap) {
    const unsigned long long s = *salt;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const unsigned long long key = smix64(s ^ smix64((unsigned long long)i + GOLD));
        if (key <= T) {
            const unsigned long long slot = atomicAdd(count, 1ULL);
            if (slot < (unsigned long long)cap) { idx[slot] = i; keys[slot] = key; }
        }
    }
}

// one block (after sample_select, where count <= cap): the m = count selected (key, index) pairs sorted by key, in
// shared memory of 2 L words (L a power of two >= cap; bitonic). Keys of a batch are distinct, so the order is the
// host's stable argsort; the padding (key 2^64 - 1, index past every row) sorts after every row.
__global__ void sample_sort(unsigned long long *keys, long long *idx, const unsigned long long *__restrict__ count,
                            int cap, int L) {
    extern __shared__ unsigned long long sk[];
    long long *si = reinterpret_cast<long long *>(sk + L);
    const unsigned long long c = *count;
    if (c > (unsigned long long)cap) return;  // the host selects these rows again
    const int m = (int)c;
    for (int i = threadIdx.x; i < L; i += blockDim.x) {
        sk[i] = i < m ? keys[i] : ~0ULL;
        si[i] = i < m ? idx[i] : 0x7fffffffffffffffLL;
    }
    __syncthreads();
    for (int size = 2; size <= L; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < (L >> 1); i += blockDim.x) {
                const int lo = 2 * i - (i & (stride - 1));
                const int hi = lo + stride;
                const unsigned long long ka = sk[lo], kb = sk[hi];
                const long long ia = si[lo], ib = si[hi];
                const bool greater = ka > kb || (ka == kb && ia > ib);
                if (greater == ((lo & size) == 0)) { sk[lo] = kb; sk[hi] = ka; si[lo] = ib; si[hi] = ia; }
            }
            __syncthreads();
        }
    }
    for (int i = threadIdx.x; i < m; i += blockDim.x) { keys[i] = sk[i]; idx[i] = si[i]; }
}

// one thread per (slot, feature) of the first min(count, keep) slots; out: [count, keys (cap), w (cap)] as 8-byte
// words, then values (cap * d) as T
template <typename T, bool HAS_W>
__global__ void sample_gather(const T *__restrict__ X, const double *__restrict__ w, int d,
                              const long long *__restrict__ idx, const unsigned long long *__restrict__ keys,
                              const unsigned long long *__restrict__ count, int cap, int keep,
                              unsigned long long *out) {
    const unsigned long long c = *count;
    const long long m = c < (unsigned long long)keep ? (long long)c : keep;
    const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (t == 0) out[0] = c;
    if (t >= m * d) return;
    const long long s = t / d;
    const int j = (int)(t - s * d);
    const long long r = idx[s];
    T *vals = reinterpret_cast<T *>(out + 1 + 2 * (size_t)cap);
    vals[t] = X[(size_t)r * d + j];
    if (j == 0) {
        out[1 + s] = keys[s];
        reinterpret_cast<double *>(out)[1 + cap + s] = HAS_W ? w[r] : 1.0;
    }
}
