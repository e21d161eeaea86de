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


def sampled_atoms(xs: np.ndarray, ws: np.ndarray, share: float) -> np.ndarray:
    """Values whose weight share in the sample exceeds ``share`` (float32)."""
    if xs.size == 0:
        return np.zeros(0, np.float32)
    u, inv = np.unique(xs.astype(np.float32), return_inverse=True)
    s = np.bincount(inv, weights=ws, minlength=u.size) / ws.sum()
    return u[s > share]


def guard_fails(cuts: np.ndarray, xs: np.ndarray, ws: np.ndarray, max_bin: int) -> bool:
    """True where a bin of ``cuts`` holds, in the sample (xs, ws), more than its ideal 1/(max_bin - 1) share by
    GUARD_Z standard deviations of a sampled share (binomial, effective sample size (sum w)^2 / sum w^2)."""
    if xs.size == 0:
        return False
    sw = ws.sum()
    m_eff = sw * sw / np.dot(ws, ws)
    codes = np.searchsorted(cuts, xs.astype(np.float32), side="right")
    shares = np.bincount(codes, weights=ws, minlength=cuts.size + 1) / sw
    e = 1.0 / (max_bin - 1)
    return bool(shares.max() > e + GUARD_Z * np.sqrt(e / m_eff) + 1.0 / m_eff)
