"""Cuts that hold for every column shape: point masses get bins of their own, the moment cuts are checked for bin
occupancy on the sketch's row sample, and columns the moments cannot resolve get exact (data at hand) or sampled
quantile cuts, with a SketchFallbackWarning naming them."""
from __future__ import annotations

import numpy as np

GUARD_Z = 5.0  # a bin fails when its sampled share exceeds the ideal by 5 sd: ~1e-5 false alarms per column
ATOM_SCREEN = 0.5  # with the data at hand, a sampled share above 0.5/max_bin sends a column to the exact path


class SketchFallbackWarning(UserWarning):
    """The moment sketch cannot resolve some columns; their cuts come from quantiles of the data or the sample."""


def _as_f32_sorted(x, w, xp):
    """Finite values of x as float32 with positive weight, sorted, with their weights (None: unweighted)."""
    x = xp.asarray(x)
    ok = ~xp.isnan(x)
    if w is not None:
        w = xp.asarray(w, dtype=xp.float64)
        ok &= w > 0
    x = x[ok].astype(xp.float32)
    order = xp.argsort(x, kind="stable") if xp is np else xp.argsort(x)
    return x[order], (None if w is None else w[ok][order])


def quantile_cuts(x, w, max_bin: int, lo: float, hi: float, xp=np) -> np.ndarray:
    """float32 cuts of one column from its values: every value holding more than 1/max_bin of the weight gets a bin
    of its own ([a, nextafter(a))), the rest equal-weight quantiles; the last cut is hi (the maximum)."""
    xs, ws = _as_f32_sorted(x, w, xp)
    if xs.size == 0 or not hi > lo:
        return np.zeros(0, np.float32)
    cw = xp.cumsum(ws) if ws is not None else xp.arange(1, xs.size + 1, dtype=xp.float64)
    total = float(cw[-1])
    starts = xp.flatnonzero(xp.concatenate([xp.ones(1, bool), xs[1:] != xs[:-1]]))
    ends = xp.concatenate([starts[1:], xp.asarray([xs.size])]) - 1
    below = xp.where(starts > 0, cw[xp.maximum(starts - 1, 0)], 0.0)
    share = (cw[ends] - below) / total
    heavy = share > 1.0 / max_bin
    atoms = np.asarray(_host(xs[starts[heavy]]), np.float32)
    # two cuts per atom ([a, nextafter(a))) while the budget allows; with many atoms (discrete columns) one cut each,
    # the atom opening its bin, which the next cut (the next value's atom or a quantile) closes
    per_atom = 2 if 2 * atoms.size + 1 < max_bin - 2 else 1
    keep = xp.ones(xs.size, bool)
    if atoms.size:
        keep = ~xp.isin(xs, xp.asarray(atoms))
    xr = xs[keep]
    q = np.zeros(0, np.float32)
    m = max_bin - 1 - per_atom * atoms.size
    if xr.size and m >= 2:
        cr = xp.cumsum(ws[keep]) if ws is not None else xp.arange(1, xr.size + 1, dtype=xp.float64)
        k = xp.searchsorted(cr, xp.arange(1, m) / m * cr[-1], side="left")
        q = np.asarray(_host(xr[xp.minimum(k, xr.size - 1)]), np.float32)
    nxt = np.nextafter(atoms, np.float32(np.inf)).astype(np.float32) if per_atom == 2 else atoms[:0]
    return _finish(np.concatenate([q, atoms, nxt]), lo, hi, max_bin)


def _host(a):
    return a.get() if hasattr(a, "get") else a


def _finish(q: np.ndarray, lo: float, hi: float, max_bin: int) -> np.ndarray:
    """Interior float32 cuts strictly inside (lo, hi), then hi itself; at most max_bin - 1 cuts."""
    q = np.unique(np.asarray(q, np.float32))
    q = q[(q > np.float32(lo)) & (q < np.float32(hi))][: max_bin - 2]
    return np.append(q, np.float32(hi)).astype(np.float32)


def _order_keys(cols: np.ndarray, v: np.ndarray) -> np.ndarray:
    """uint64 keys that sort by (column, float32 value): the column in the high word, the value's order-preserving
    bits in the low word (-0.0 as +0.0, so keys compare as the floats do)."""
    b = (np.asarray(v, np.float32) + np.float32(0)).view(np.uint32).astype(np.uint64)
    b = np.where(b >> np.uint64(31), ~b & np.uint64(0xFFFFFFFF), b | np.uint64(0x80000000))
    return (np.asarray(cols, np.uint64) << np.uint64(32)) | b


def sample_screen(x: np.ndarray, w: np.ndarray, cuts: list[np.ndarray], share: float,
                  max_bin: int) -> tuple[np.ndarray, np.ndarray]:
    """Both checks of the moment cuts on a row sample, for all columns at once: x (m, k) the sampled values of k
    columns (NaN missing), w (m,) row weights, cuts[r] column r's cuts.

    Returns (atom, crowded), bool (k,): atom where some value holds more than ``share`` of the column's sampled
    weight; crowded where a bin of cuts[r] holds more than its ideal 1/(max_bin - 1) share by GUARD_Z standard
    deviations of a sampled share (binomial, effective sample size (sum w)^2 / sum w^2). One sort of the sample and
    one search of every cut, not a pass per column.
    """
    m, k = x.shape
    ok = ~np.isnan(x) & (w > 0)[:, None]
    v = np.where(ok, x, np.float32(np.nan)).T.astype(np.float32) + np.float32(0)  # (k, m), -0.0 as +0.0
    wt = np.where(ok, w[:, None], 0.0).T  # a missing value weighs nothing
    n_ok = ok.sum(axis=0)
    pos = w[w > 0]
    if pos.size == 0 or (pos == pos[0]).all():  # equal weights (unweighted): sorting the values is enough
        v.sort(axis=1)  # NaN last
        ws = np.where(np.arange(m) < n_ok[:, None], pos[0] if pos.size else 0.0, 0.0)
    else:
        order = np.argsort(v, axis=1, kind="stable")
        v, ws = np.take_along_axis(v, order, 1), np.take_along_axis(wt, order, 1)
    ws = ws.reshape(-1)
    cw = np.concatenate([[0.0], np.cumsum(ws)])  # columns one after another
    sw = wt.sum(axis=1)
    m_eff = np.where(sw > 0, sw * sw / np.maximum(np.einsum("ij,ij->i", wt, wt), 1e-300), 1.0)
    col = np.repeat(np.arange(k, dtype=np.uint64), m)
    keys = _order_keys(col, np.nan_to_num(v.reshape(-1), nan=0.0))
    keys[np.isnan(v.reshape(-1))] |= np.uint64(0xFFFFFFFF)  # missing values last in their column, above every cut
    # point masses: runs of equal keys, weight share per run
    start = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
    run_w = cw[np.append(start[1:], keys.size)] - cw[start]
    run_col = (keys[start] >> np.uint64(32)).astype(np.int64)
    share_run = run_w / np.where(sw > 0, sw, 1.0)[run_col]
    atom = np.bincount(run_col[share_run > share], minlength=k) > 0
    # bin occupancy: weight below each cut by one search of all columns' cuts
    nc = np.array([c.size for c in cuts], np.int64)
    ccol = np.repeat(np.arange(k, dtype=np.uint64), nc)
    below = cw[np.searchsorted(keys, _order_keys(ccol, np.concatenate(cuts) if k else np.zeros(0)), side="left")]
    # columns lie one after another in cw, so column r's upper edge is column r+1's lower edge: the differences of
    # [lo_0, below_0.., lo_1, below_1.., .., hi_last] are every column's bins, nc[r] + 1 of them
    off = np.concatenate([[0], np.cumsum(nc)[:-1]]).astype(np.int64)
    bins = np.diff(np.append(np.insert(below, off, cw[np.arange(k) * m]), cw[-1]))
    widest = np.maximum.reduceat(bins, off + np.arange(k)) if k else bins
    e = 1.0 / (max_bin - 1)
    crowded = (sw > 0) & (widest / np.where(sw > 0, sw, 1.0) > e + GUARD_Z * np.sqrt(e / m_eff) + 1.0 / m_eff)
    return atom, crowded
