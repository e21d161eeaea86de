"""Reductions and casts of engine outputs where they lie (NumPy on the host, CuPy on the device), for the output
controls of the adapters (float32 output, one-pass |value| summaries).

Each function has one meaning for both kinds of array; the host path is NumPy's own (the reference), the device path
a CuPy kernel with the same rounding (``exact_to_float32``) or the same sums up to the order of the additions
(``abs_sums``, whose device order is fixed by the row count alone, so a call gives the same bytes every time).
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .device import cupy_module, is_cupy_array

__all__ = ["abs_sums", "exact_to_float32"]

_ABS_SUMS_SRC = r"""
extern "C" __global__ void hitml_abs_col_sums(const double* v, long long n, long long cols, long long s1,
                                              long long s2, long long s3, long long st0, long long st1,
                                              long long st2, long long st3, long long n_slices, double* part) {
  long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  long long slice = blockIdx.y;
  if (c >= cols || slice >= n_slices) return;
  long long k = c % s3, ab = c / s3, b = ab % s2, a = ab / s2;
  const double* p = v + a * st1 + b * st2 + k * st3;
  long long r0 = slice * n / n_slices, r1 = (slice + 1) * n / n_slices;
  double acc = 0.0;
  for (long long r = r0; r < r1; ++r) acc += fabs(p[r * st0]);
  part[slice * cols + c] = acc;
}
"""
# rows per slice of the device |values| sums (at least; a chunk has at most _ABS_SLICES slices)
_ABS_SLICE_ROWS = 64
_ABS_SLICES = 1024


@functools.lru_cache(maxsize=None)
def _kernels():
    """(exact float64 -> float32 cast, float64 sum of |x| over axis 0, fixed-order |x| column sums) as CuPy kernels.

    CuPy compiles its kernels with ``-ftz=true``, under which a C++ double -> float conversion flushes subnormal
    results to zero; the inline ``cvt.rn.f32.f64`` (no .ftz) rounds as NumPy's ``astype(np.float32)`` does
    (kernels/treeshap/convert.cu does the same for rows)."""
    cp = cupy_module()
    cast = cp.ElementwiseKernel("float64 x", "float32 y", 'asm("cvt.rn.f32.f64 %0, %1;" : "=f"(y) : "d"(x));',
                                "hitml_exact_f64_to_f32")
    abs_sum = cp.ReductionKernel("float64 x", "float64 y", "fabs(x)", "a + b", "y = a", "0", "hitml_abs_sum")
    return cast, abs_sum, cp.RawKernel(_ABS_SUMS_SRC, "hitml_abs_col_sums")


def exact_to_float32(v: Any, out: Any = None) -> Any:
    """``v`` (float64) rounded to float32 as NumPy's ``astype(np.float32)`` rounds, subnormals included.

    Parameters
    ----------
    v : numpy.ndarray or cupy.ndarray
        float64 values.
    out : array of float32, optional
        Where to write (same shape and kind of array as ``v``).

    Returns
    -------
    numpy.ndarray or cupy.ndarray
        float32 values (``out`` where given).
    """
    if not is_cupy_array(v):
        if out is None:
            return np.ascontiguousarray(v, dtype=np.float32)
        np.copyto(out, v, casting="unsafe")
        return out
    cast = _kernels()[0]
    return cast(v, out) if out is not None else cast(v)


def _device_col_abs_sums(v: Any) -> Any:
    """Sum of |v| over axis 0 of a CuPy float64 array of 2 to 4 dimensions (a strided view as the explainer returns
    it: the bias row and column left out), in a fixed order: the rows cut into slices by their count alone, each slice
    summed in row order by one thread per column (neighbouring threads read neighbouring values), then the slices'
    sums added by one reduction; no pass gathers the strided view into a copy first."""
    cp = cupy_module()
    n = int(v.shape[0])
    inner = tuple(int(x) for x in v.shape[1:]) + (1,) * (4 - v.ndim)
    strides = tuple(int(x) // v.itemsize for x in v.strides) + (0,) * (4 - v.ndim)
    cols = inner[0] * inner[1] * inner[2]
    slices = int(max(1, min(_ABS_SLICES, n // _ABS_SLICE_ROWS)))
    part = cp.empty((slices, cols), dtype=cp.float64)
    if cols and n:
        threads = 256
        _kernels()[2](((cols + threads - 1) // threads, slices), (threads,),
                      (v, np.int64(n), np.int64(cols), *(np.int64(x) for x in inner),
                       *(np.int64(x) for x in strides), np.int64(slices), part))
    else:
        part[...] = 0.0
    return part.sum(axis=0).reshape(v.shape[1:])


def abs_sums(v: Any) -> Any:
    """Sum of ``|v|`` over axis 0 in float64, where ``v`` lies.

    Parameters
    ----------
    v : numpy.ndarray or cupy.ndarray
        Values, rows first.

    Returns
    -------
    numpy.ndarray or cupy.ndarray
        ``v.shape[1:]`` float64 sums: NumPy's ``np.add.reduce(np.abs(v), axis=0, dtype=np.float64)`` on the host; on
        the device the same sums in a fixed order (float64 arrays of 2 to 4 dimensions; others by one CuPy reduction).
    """
    if not is_cupy_array(v):
        return np.add.reduce(np.abs(v), axis=0, dtype=np.float64)
    if v.dtype == np.float64 and 2 <= v.ndim <= 4 and v.size:
        return _device_col_abs_sums(v)
    return _kernels()[1](v, axis=0)
