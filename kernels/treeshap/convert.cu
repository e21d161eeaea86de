// Exact float32 <-> float64 conversions of rows on the device (_gpu_core.exact_astype).
//
// CuPy compiles every kernel, its own astype and arithmetic included, with -ftz=true (cupy/cuda/compiler.py,
// _compile_with_cache_cuda). Under it a C++ float -> double conversion is cvt.ftz.f64.f32, which flushes float32
// subnormal inputs to zero, and a double -> float conversion is cvt.rn.ftz.f32.f64, which flushes subnormal
// results to zero. The inline PTX below has no .ftz: every value converts as NumPy converts it on the host
// (subnormals kept, round to nearest even, overflow to +-inf, signed zeros and infinities kept, NaN stays NaN).

extern "C" __global__ void f32_to_f64(const float* x, double* y, long long n) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    double r;
    asm("cvt.f64.f32 %0, %1;" : "=d"(r) : "f"(x[i]));
    y[i] = r;
  }
}

extern "C" __global__ void f64_to_f32(const double* x, float* y, long long n) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    float r;
    asm("cvt.rn.f32.f64 %0, %1;" : "=f"(r) : "d"(x[i]));
    y[i] = r;
  }
}
