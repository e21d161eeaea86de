// Row sample of a moment sketch on the GPU (the twin of sample.py): the rows whose key mix(salt ^ mix(i + G)) is at
// most T, gathered straight into pinned host memory. Three small launches on a side stream (gpu.py), overlapping
// the sketch's read kernel.
// sample_salt: one block hashes the batch size and its first and last rows (XOR, so the order does not matter);
// sample_select: one hash per row index (no read of X), the rows under T appended by an atomic counter (unordered; the
// host sorts them by key); sample_gather: the selected rows' values (exact float -> double on the host) and weights.

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

// one thread per (slot, feature); out: [count, keys (cap), w (cap)] as 8-byte words, then values (cap * d) as T
template <typename T, bool HAS_W>
__global__ void sample_gather(const T *__restrict__ X, const double *__restrict__ w, int d,
                              const long long *__restrict__ idx, const unsigned long long *__restrict__ keys,
                              const unsigned long long *__restrict__ count, int cap, unsigned long long *out) {
    const unsigned long long c = *count;
    const long long m = c < (unsigned long long)cap ? (long long)c : cap;
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
