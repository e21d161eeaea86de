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
