"""GPU moment sketch (CuPy + sketch.cu): one read of X, blockwise central sums merged on the device."""
from __future__ import annotations

import numpy as np

from hitml.kernels._cuda import get_kernel
from hitml.kernels.device import cupy_module, to_numpy

from .state import MomentSketch, _check_n_moments, _prepare_input

EMPTY_KEY = 0x7FF8DEAD0000BEEF
R_CHUNK = 16
REDUCE_THREADS = 64
DEFAULT_VARIANT = "fast"


def _names(T: str, l: int, by: int, has_w: bool, chunk: int) -> tuple[str, str]:
    return (f"sketch_partial<{T},{l},{by},{chunk},{'true' if has_w else 'false'}>",
            f"reduce_partials<{l},{REDUCE_THREADS}>")


def sketch(X, sample_weight=None, *, n_moments: int = 15, max_distinct: int = 256,
           blocks_per_sm: int = 4, chunk: int = R_CHUNK, variant: str = DEFAULT_VARIANT, **fast_opts) -> MomentSketch:
    """Sketch the columns of X (NumPy or CuPy, (n, d)) on the GPU; NaN is missing, inf raises ValueError.

    variant "fast" (default): power sums about a per-column centre from a strided sample, one tiled read with the
    distinct tracking folded in, the shift to central sums on the device (sketch_fast.cu; options in ``fast_opts``:
    vals, stages, minb, blocks_per_sm); "v1": per-chunk Pebay merge kernel (sketch.cu; float32 subnormals read as
    0 there, see docs/xgboost_ext.md). Both equal the CPU twin within 1e-12 of each moment's scale.
    """
    if variant == "fast":
        from .gpu_fast import sketch_fast

        return sketch_fast(X, sample_weight, n_moments=n_moments, max_distinct=max_distinct, **fast_opts)
    if variant != "v1":
        raise ValueError(f"variant must be 'v1' or 'fast', got {variant!r}")
    if fast_opts:
        raise TypeError(f"options {sorted(fast_opts)} apply to variant='fast' only")
    cp = cupy_module()
    l, X, w, has_w, empty = begin(X, sample_weight, n_moments, max_distinct)
    if empty is not None:
        return empty
    n, d = X.shape
    T = "float" if X.dtype == cp.float32 else "double"
    by = 8 if l <= 20 else 4
    kname, rname = _names(T, l, by, has_w, int(chunk))
    kern = get_kernel("sketch/sketch.cu", kname, name_expressions=(kname, rname))
    red = get_kernel("sketch/sketch.cu", rname, name_expressions=(kname, rname))
    gy = (d + 31) // 32
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    step = by * int(chunk)
    gx = int(max(1, min(-(-n // step), blocks_per_sm * sms // gy + 1)))
    rows_per_block = -(-n // gx)
    rows_per_block = -(-rows_per_block // step) * step
    gx = -(-n // rows_per_block)
    cap = int(max_distinct)
    tsize = 1
    while tsize < 4 * max(cap, 1):
        tsize *= 2
    part = cp.empty((gx, d, l + 3), cp.float64)
    bad = cp.zeros(1, cp.int32)
    table = cp.full((d, tsize), EMPTY_KEY, dtype=cp.uint64)
    count = cp.zeros(d, cp.int32)
    over = cp.zeros(d, cp.int32) if cap > 0 else cp.ones(d, cp.int32)
    kern((gx, gy), (32, by), (X, w, np.int64(n), np.int32(d), np.int64(rows_per_block), part, bad, table,
                              np.int32(tsize), count, over, np.int32(cap)))
    out = cp.empty((d, l + 3), cp.float64)
    red((d,), (REDUCE_THREADS,), (part, np.int32(gx), np.int32(d), out))
    if int(bad.get()[0]):
        raise ValueError("X contains +/-inf; encode missing values as NaN (inf is not a valid feature value)")
    return finish(out.get(), l, table, count, over, cap)


def begin(X, sample_weight, n_moments: int, max_distinct: int):
    """Checked n_moments, prepared X / weights, and the empty sketch when X has no rows (else None)."""
    l = _check_n_moments(n_moments)
    if not isinstance(max_distinct, (int, np.integer)) or max_distinct < 0:
        raise ValueError(f"max_distinct must be a non-negative integer, got {max_distinct!r}")
    X, w, has_w = _prepare_input(X, sample_weight, cupy_module())
    empty = MomentSketch.empty(X.shape[1], l, max_distinct) if X.shape[0] == 0 else None
    return l, X, w, has_w, empty


def finish(red: np.ndarray, l: int, table, count, over, cap: int) -> MomentSketch:
    """MomentSketch from reduced [W, mean, M2..Ml, min, max] rows and the distinct tables (count / over: device or
    host arrays)."""
    cnt = to_numpy(count).astype(np.int64)
    ov = to_numpy(over).astype(bool) | (cnt > cap)
    d = red.shape[0]
    vals = np.full((d, cap), np.nan)
    nd = np.where(ov, -1, cnt)
    keep = np.flatnonzero(~ov)
    if keep.size:
        keys = to_numpy(table[keep])
        for r, j in enumerate(keep):
            k = keys[r][keys[r] != np.uint64(EMPTY_KEY)]
            vals[j, : k.size] = np.sort(k.view(np.float64))
    W = red[:, 0].copy()
    empty = W <= 0
    lo = np.where(empty, np.nan, red[:, l + 1])
    hi = np.where(empty, np.nan, red[:, l + 2])
    return MomentSketch(W, red[:, 1].copy(), red[:, 2 : l + 1].copy(), lo, hi, vals, nd)
