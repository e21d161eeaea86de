"""Comparisons shared by the GPU sketch tests: a GPU sketch against its CPU twin."""
from __future__ import annotations

import numpy as np


def _scale(X, w, l):
    """sum w (|x - mean| + delta)^k per feature: the natural scale of the k-th central sum (odd sums can be ~0).

    delta = 4 ulps of max|x| is the rounding floor of any computed mean: a constant column's central sums are
    only determined up to it (0/0 otherwise).
    """
    X = np.asarray(X, np.float64)
    w = np.ones(X.shape[0]) if w is None else w
    out = []
    for j in range(X.shape[1]):
        ok = np.isfinite(X[:, j]) & (w > 0)
        x, ww = X[ok, j], w[ok]
        if x.size == 0:  # an empty column: both sketches hold zeros
            out.append([0.0] * (l - 1))
            continue
        m = np.sum(ww * x) / ww.sum()
        delta = 4 * np.spacing(np.abs(x).max())
        out.append([np.sum(ww * (np.abs(x - m) + delta) ** k) for k in range(2, l + 1)])
    # delta**k underflows to 0 for a constant column at high k (0/0 otherwise), and sums in the subnormal double range
    # (float32 subnormal data at l >= 8) are only determined to a few subnormal ulps (2^-1074) per term and order:
    # floor the scale where any two correct summations may differ by 1e-12 of it
    return np.maximum(np.array(out), max(np.finfo(np.float64).tiny, 1e12 * X.shape[0] * l * 2.0**-1074))


def _assert_same(g, c, X, w, l, tol=1e-12):
    np.testing.assert_allclose(g.weight, c.weight, rtol=1e-12)
    np.testing.assert_allclose(g.mean, c.mean, rtol=1e-12, atol=1e-12)
    err = np.abs(g.M - c.M) / _scale(X, w, l)
    assert err.max() < tol, err.max()
    np.testing.assert_array_equal(g.vmin, c.vmin)
    np.testing.assert_array_equal(g.vmax, c.vmax)
    np.testing.assert_array_equal(g.n_distinct, c.n_distinct)
    for j in np.flatnonzero(c.n_distinct >= 0):
        np.testing.assert_array_equal(g.distinct[j, : c.n_distinct[j]], c.distinct[j, : c.n_distinct[j]])


def sample_rows(n: int) -> np.ndarray:
    """The rows moments.cu's sketch_prep samples from X of n rows (its sample_row), computed on the host: all of them
    up to SAMPLE_ROWS, else SAMPLE_ROWS / SAMPLE_RUN runs of SAMPLE_RUN consecutive rows spread evenly."""
    from hitml.kernels.sketch._gpu_moments import SAMPLE_ROWS, SAMPLE_RUN

    k = min(n, SAMPLE_ROWS)
    i = np.arange(k, dtype=np.int64)
    if n == k:
        return i
    return (i // SAMPLE_RUN) * n // (k // SAMPLE_RUN) + i % SAMPLE_RUN


def central_from_power_sums(W, S, center):
    """moments.cu's finish kernel alone, on given power sums S (d, l) about ``center`` (d,) with weights W (d,):
    returns (mean, M (d, l-1) for k = 2..l, redo flags)."""
    import cupy as cp

    from hitml.kernels._cuda import get_kernel
    from hitml.kernels.sketch import _gpu_moments as gm

    W = np.asarray(W, np.float64)
    S = np.asarray(S, np.float64)
    d, l = S.shape
    part = np.concatenate([W[:, None], S, np.zeros((d, 2))], axis=1)
    res = cp.empty(d * (l + 5) + 1, cp.float64)
    name = f"sketch_finish<{l},{gm.FINISH_THREADS}>"
    fin = get_kernel("sketch/moments.cu", name, options=(f"-I{gm._DIR}",), name_expressions=(name,))
    dummy = cp.zeros(1, cp.int32)
    fin((d,), (gm.FINISH_THREADS,), (cp.asarray(part), np.int32(1), np.int32(d), cp.asarray(center, np.float64),
                                     dummy, dummy, cp.zeros(1, cp.uint64), np.int32(1), np.int32(0), np.int32(0),
                                     np.float64(gm.RECENTRE_TOL), dummy, res))
    R = res.get()[:-1].reshape(d, l + 5)
    return R[:, 1], R[:, 2 : l + 1], R[:, l + 3] != 0
