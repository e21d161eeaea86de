"""Cut points for max_bin bins from a sketch (exact for columns with few distinct values) or from exact quantiles."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .solvers import METHODS, quantiles
from .state import MomentSketch


@dataclass
class Cuts:
    """Per-feature float32 cut points in XGBoost's convention.

    values[j]: strictly increasing float32 cuts; a value x falls in bin searchsorted(values[j], x, "right"),
    so bin 0 is [min, values[j][0]) and the last cut equals the column's maximum (its own bin). A constant or
    empty column has no cuts. vmin / vmax: float32 min and max (NaN for an all-missing column).
    exact: True where the cuts are every distinct value but the first (as XGBoost itself does for such columns).
    """

    values: list[np.ndarray]
    vmin: np.ndarray
    vmax: np.ndarray
    exact: np.ndarray

    @property
    def n_features(self) -> int:
        return len(self.values)

    @property
    def n_bins(self) -> np.ndarray:
        return np.array([v.size + 1 for v in self.values], np.int64)


def _check_max_bin(max_bin: int) -> int:
    if not isinstance(max_bin, (int, np.integer)) or int(max_bin) < 2:
        raise ValueError(f"max_bin must be an integer >= 2, got {max_bin!r}")
    return int(max_bin)


def _finish(q: np.ndarray, lo: float, hi: float, max_bin: int) -> np.ndarray:
    """Interior float32 quantiles strictly inside (lo, hi), then hi itself; at most max_bin - 1 cuts."""
    q = np.unique(np.asarray(q, np.float32))
    q = q[(q > lo) & (q < hi)][: max_bin - 2]
    return np.append(q, np.float32(hi)).astype(np.float32)


def cut_points(sk: MomentSketch, max_bin: int = 256, method: str = "maxent") -> Cuts:
    """Cuts for max_bin bins from a sketch; columns with <= max_bin distinct values get exact cuts."""
    max_bin = _check_max_bin(max_bin)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    lo32 = sk.vmin.astype(np.float32)
    hi32 = sk.vmax.astype(np.float32)
    d = sk.n_features
    exact = (sk.n_distinct >= 0) & (sk.n_distinct <= max_bin)
    values: list[np.ndarray | None] = [None] * d
    for j in np.flatnonzero(exact):
        u = np.unique(sk.distinct[j, : sk.n_distinct[j]].astype(np.float32))
        values[j] = u[1:]
    approx = np.flatnonzero(~exact)
    if approx.size:
        phis = np.arange(1, max_bin - 1) / (max_bin - 1)
        sub = MomentSketch(sk.weight[approx], sk.mean[approx], sk.M[approx], sk.vmin[approx], sk.vmax[approx],
                           sk.distinct[approx, :0], sk.n_distinct[approx])
        Q = quantiles(sub, phis, method)
        for r, j in enumerate(approx):
            values[j] = _finish(Q[r], lo32[j], hi32[j], max_bin) if hi32[j] > lo32[j] else np.zeros(0, np.float32)
    return Cuts(values, lo32, hi32, exact)


def exact_cut_points(X, sample_weight=None, max_bin: int = 256) -> Cuts:
    """Reference cuts from exact (weighted) empirical quantiles, by sorting each column (not streaming)."""
    max_bin = _check_max_bin(max_bin)
    X = np.asarray(X, np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D, got shape {X.shape}")
    if np.isinf(X).any():
        raise ValueError("X contains +/-inf; encode missing values as NaN")
    w_all = np.ones(X.shape[0]) if sample_weight is None else np.asarray(sample_weight, np.float64).reshape(-1)
    d = X.shape[1]
    values, lo32, hi32, exact = [], np.full(d, np.nan, np.float32), np.full(d, np.nan, np.float32), np.zeros(d, bool)
    phis = np.arange(1, max_bin - 1) / (max_bin - 1)
    for j in range(d):
        ok = ~np.isnan(X[:, j]) & (w_all > 0)
        x = X[ok, j].astype(np.float32)
        if x.size == 0:
            values.append(np.zeros(0, np.float32))
            continue
        lo32[j], hi32[j] = x.min(), x.max()
        u = np.unique(x)
        if u.size <= max_bin:
            values.append(u[1:])
            exact[j] = True
            continue
        order = np.argsort(x, kind="stable")
        xs, ws = x[order], w_all[ok][order]
        cw = np.cumsum(ws)
        k = np.searchsorted(cw, phis * cw[-1], side="left")
        values.append(_finish(xs[np.minimum(k, xs.size - 1)], lo32[j], hi32[j], max_bin))
    return Cuts(values, lo32, hi32, exact)
