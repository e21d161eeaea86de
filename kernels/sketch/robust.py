"""Cuts that hold for every column shape: point masses get bins of their own, the moment cuts are checked for bin
occupancy on the sketch's row sample, and columns the moments cannot resolve get exact (data at hand) or sampled
quantile cuts, with a SketchFallbackWarning naming them."""
from __future__ import annotations

import numba as nb
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
    if w is None and xp is np:  # equal weights: the sorted values suffice (stable: -0.0, +0.0 keep their order)
        return np.sort(x, kind="stable"), None
    order = xp.argsort(x, kind="stable") if xp is np else xp.argsort(x)
    return x[order], (None if w is None else w[ok][order])


def quantile_cuts(x, w, max_bin: int, lo: float, hi: float, xp=np) -> np.ndarray:
    """float32 cuts of one column from its values: every value holding more than 1/max_bin of the weight gets a bin
    of its own ([a, nextafter(a))), the rest equal-weight quantiles; the last cut is hi (the maximum)."""
    if w is None and xp is np:  # the unweighted host case in one compiled pass (wide frames have many such columns)
        q, atoms, per_atom = _quantile_cuts_unweighted(np.asarray(x), int(max_bin))
        if q is None or not hi > lo:
            return np.zeros(0, np.float32)
        nxt = np.nextafter(atoms, np.float32(np.inf)).astype(np.float32) if per_atom == 2 else atoms[:0]
        return _finish(np.concatenate([q, atoms, nxt]), lo, hi, max_bin)
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


def _quantile_cuts_unweighted(x: np.ndarray, max_bin: int):
    """(quantile candidates, atoms, cuts per atom) of quantile_cuts for equal weights; (None, None, 0) if empty."""
    q, atoms, per_atom, n = _qc_kernel(np.ascontiguousarray(x).reshape(-1), max_bin)
    return (None, None, 0) if n == 0 else (q, atoms, per_atom)


def quantile_cuts_columns(X: np.ndarray, cols: np.ndarray, max_bin: int, lo: np.ndarray,
                          hi: np.ndarray) -> list[np.ndarray]:
    """quantile_cuts of the unweighted host columns X[:, cols] (lo / hi per listed column), on the solver's thread
    pool: the same bytes as one quantile_cuts call per column."""
    from ._newton import run_features

    k = cols.size
    q = np.empty((k, max_bin), np.float32)
    atoms = np.empty((k, max_bin), np.float32)
    counts = np.zeros((k, 4), np.int64)  # quantiles, atoms, cuts per atom, finite values
    cuts = np.empty((k, max_bin), np.float32)
    n_cuts = np.zeros(k, np.int64)
    run_features(_qc_range, k, X, np.ascontiguousarray(cols, np.int64), int(max_bin),
                 np.ascontiguousarray(lo, np.float32), np.ascontiguousarray(hi, np.float32), q, atoms, counts, cuts,
                 n_cuts)
    out = []
    for r in range(k):
        if n_cuts[r] >= 0:
            out.append(cuts[r, : n_cuts[r]])
            continue
        nq, na, per_atom, _ = counts[r]  # both signed zeros among the candidates: np.unique picks which one stays
        at = atoms[r, :na]
        nxt = np.nextafter(at, np.float32(np.inf)).astype(np.float32) if per_atom == 2 else at[:0]
        out.append(_finish(np.concatenate([q[r, :nq], at, nxt]), lo[r], hi[r], max_bin))
    return out


@nb.njit(cache=True, nogil=True)
def _qc_range(X, cols, max_bin, lo, hi, q, atoms, counts, cuts, n_cuts, j0, j1):
    """_qc_kernel and _finish for columns j0..j1-1: cuts[r, :n_cuts[r]] are quantile_cuts' bytes; n_cuts[r] = -1
    where the candidates hold both -0.0 and +0.0 (left to _finish, whose np.unique decides which one stays)."""
    cand = np.empty(2 * max_bin, np.float32)
    cbits = cand.view(np.uint32)
    for r in range(j0, j1):
        qq, aa, per_atom, n = _qc_kernel(np.ascontiguousarray(X[:, cols[r]]), max_bin)
        q[r, : qq.size] = qq
        atoms[r, : aa.size] = aa
        counts[r, 0] = qq.size
        counts[r, 1] = aa.size
        counts[r, 2] = per_atom
        counts[r, 3] = n
        n_cuts[r] = 0
        if n == 0 or not hi[r] > lo[r]:
            continue
        m = 0
        for v in qq:
            cand[m] = v
            m += 1
        for v in aa:
            cand[m] = v
            m += 1
        if per_atom == 2:
            for a in range(aa.size):  # np.nextafter(a, +inf) of a finite float32, by its bits
                cand[m] = aa[a]
                b = cbits[m]
                if aa[a] == 0.0:
                    cbits[m] = np.uint32(1)
                elif b >> np.uint32(31):
                    cbits[m] = b - np.uint32(1)
                else:
                    cbits[m] = b + np.uint32(1)
                m += 1
        neg0 = False
        pos0 = False
        for i in range(m):
            if cand[i] == 0.0:
                if cbits[i] >> np.uint32(31):
                    neg0 = True
                else:
                    pos0 = True
        if neg0 and pos0:
            n_cuts[r] = -1
            continue
        srt = np.sort(cand[:m])  # one bit pattern per value: the order of equal values cannot show
        c = 0
        for i in range(m):
            v = srt[i]
            if (i > 0 and v == srt[i - 1]) or not (v > lo[r] and v < hi[r]):
                continue
            if c < max_bin - 2:
                cuts[r, c] = v
                c += 1
        cuts[r, c] = hi[r]
        n_cuts[r] = c + 1


@nb.njit(cache=True, nogil=True)
def _qc_kernel(x, max_bin):
    """quantile_cuts' arithmetic for unit weights, operation for operation (the same float64 shares and quantile
    positions, a stable sort so -0.0 and +0.0 keep their order): finite float32 values sorted; runs holding more than
    1/max_bin of them are atoms; equal-count quantiles of the rest."""
    xs = _stable_sort_f32(x)
    n = xs.shape[0]
    empty = np.zeros(0, np.float32)
    if n == 0:
        return empty, empty, 0, 0
    total = np.float64(n)
    heavy_starts = np.empty(n, np.int64)
    run_start = np.empty(n, np.int64)
    run_len = np.empty(n, np.int64)
    n_runs = 0
    n_atoms = 0
    i = 0
    while i < n:
        j = i + 1
        while j < n and xs[j] == xs[i]:
            j += 1
        run_start[n_runs] = i
        run_len[n_runs] = j - i
        n_runs += 1
        if np.float64(j - i) / total > 1.0 / max_bin:
            heavy_starts[n_atoms] = i
            n_atoms += 1
        i = j
    atoms = np.empty(n_atoms, np.float32)
    for a in range(n_atoms):
        atoms[a] = xs[heavy_starts[a]]
    per_atom = 2 if 2 * n_atoms + 1 < max_bin - 2 else 1
    xr = np.empty(n, np.float32)
    L = 0
    a = 0
    for r in range(n_runs):
        s0 = run_start[r]
        if a < n_atoms and heavy_starts[a] == s0:
            a += 1
            continue
        for t in range(s0, s0 + run_len[r]):
            xr[L] = xs[t]
            L += 1
    m = max_bin - 1 - per_atom * n_atoms
    if L == 0 or m < 2:
        return empty, atoms, per_atom, n
    q = np.empty(m - 1, np.float32)
    last = np.float64(L)
    for i in range(1, m):
        target = np.float64(i) / np.float64(m) * last
        lo = 0
        hi = L
        while lo < hi:  # searchsorted(arange(1, L + 1), target, "left")
            mid = (lo + hi) >> 1
            if np.float64(mid + 1) < target:
                lo = mid + 1
            else:
                hi = mid
        q[i - 1] = xr[min(lo, L - 1)]
    return q, atoms, per_atom, n


@nb.njit(cache=True, nogil=True)
def _stable_sort_f32(x):
    """The non-NaN values of x as float32, in the order of a stable sort (np.sort(kind="stable")): by a radix sort of
    order-preserving keys (-0.0 and +0.0 one key), the zeros then put back in their order of appearance."""
    n_all = x.shape[0]
    vals = np.empty(n_all, np.float32)
    n = 0
    for i in range(n_all):
        if not np.isnan(x[i]):
            vals[n] = np.float32(x[i])
            n += 1
    vbits = vals.view(np.uint32)
    keys = np.empty(n, np.uint32)
    zeros = np.empty(n, np.float32)
    nz = 0
    for i in range(n):
        if vals[i] == 0.0:
            zeros[nz] = vals[i]
            nz += 1
            keys[i] = np.uint32(0x80000000)
        else:
            keys[i] = _order_key(vbits[i])
    _radix_sort_keys(keys, np.empty(n, np.uint32), np.empty((3, _RADIX_BUCKETS + 1), np.int64))
    out = np.empty(n, np.float32)
    bits = out.view(np.uint32)
    z = 0
    for i in range(n):
        k = keys[i]
        if k == np.uint32(0x80000000):
            out[i] = zeros[z]
            z += 1
        else:
            bits[i] = k & np.uint32(0x7FFFFFFF) if k >> np.uint32(31) else ~k
    return out


def _host(a):
    return a.get() if hasattr(a, "get") else a


def _finish(q: np.ndarray, lo: float, hi: float, max_bin: int) -> np.ndarray:
    """Interior float32 cuts strictly inside (lo, hi), then hi itself; at most max_bin - 1 cuts."""
    q = np.unique(np.asarray(q, np.float32))
    q = q[(q > np.float32(lo)) & (q < np.float32(hi))][: max_bin - 2]
    return np.append(q, np.float32(hi)).astype(np.float32)


def finish_rows(Q: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> list[np.ndarray]:
    """_finish for every row of Q (k, m) at once, m <= max_bin - 2: row r's float32 values, sorted and deduplicated
    (the first of equal values kept, as np.unique keeps it), strictly inside (lo[r], hi[r]), then hi[r]."""
    Q32 = np.sort(np.asarray(Q, np.float32), axis=1)  # NaN last, then dropped by the range test
    lo32 = np.asarray(lo, np.float32)[:, None]
    hi32 = np.asarray(hi, np.float32)[:, None]
    keep = (Q32 > lo32) & (Q32 < hi32)
    keep[:, 1:] &= Q32[:, 1:] != Q32[:, :-1]
    Q2 = np.concatenate([Q32, hi32], axis=1)
    keep = np.concatenate([keep, np.ones((Q32.shape[0], 1), bool)], axis=1)
    flat = Q2[keep]
    ends = np.cumsum(keep.sum(axis=1)).tolist()
    return [flat[a:b] for a, b in zip([0] + ends[:-1], ends)]


def sort_sample(x: np.ndarray, w: np.ndarray, cols: np.ndarray | None = None):
    """For equal row weights: the sampled values of columns ``cols`` of x (m, d) (all columns if None) as sorted
    order-preserving uint32 keys, (keys (k, m), counts (k,)), to pass to sample_screen as ``presorted`` (one sort
    serves both checks); None for unequal weights. The kernel reads the columns out of x in place (no transposed copy
    of the sample)."""
    from ._newton import run_features

    w = np.ascontiguousarray(w, np.float64)
    pos = w[w > 0]
    if pos.size and not (pos == pos[0]).all():
        return None
    x = np.ascontiguousarray(x, np.float32)
    cols = np.arange(x.shape[1], dtype=np.int64) if cols is None else np.ascontiguousarray(cols, np.int64)
    m, k = x.shape[0], cols.size
    keys = np.empty((k, m), np.uint32)
    n = np.zeros(k, np.int64)
    run_features(_sort_keys_range, k, x, x.view(np.uint32), cols, w, keys, n)
    return keys, n


@nb.njit(cache=True, nogil=True, inline="always")
def _order_key(bits):
    """uint32 key of a float32's bits that sorts as the floats do (-0.0 must come as +0.0)."""
    return ~bits if bits >> np.uint32(31) else bits | np.uint32(0x80000000)


@nb.njit(cache=True, nogil=True)
def _sort_keys_range(x, xbits, cols, w, keys, n, j0, j1):
    """LSD radix sort (4 passes of 8 bits) of each listed column's non-missing positive-weight values as keys."""
    m = x.shape[0]
    tmp = np.empty(m, np.uint32)
    cnt = np.empty((3, _RADIX_BUCKETS + 1), np.int64)
    for r in range(j0, j1):
        c = 0
        j = cols[r]
        for i in range(m):
            xv = x[i, j]
            if not np.isnan(xv) and w[i] > 0.0:
                keys[r, c] = _order_key(xbits[i, j] if xv != 0.0 else np.uint32(0))
                c += 1
        n[r] = c
        _radix_sort_keys(keys[r, :c], tmp, cnt)


_RADIX_BUCKETS = 2048  # 11-bit digits: three passes over 32-bit keys (11 + 11 + 10 bits)


@nb.njit(cache=True, nogil=True)
def _radix_sort_keys(keys, tmp, cnt):
    """Stable LSD radix sort of uint32 keys in place: the three digit histograms in one counting pass, then one
    scatter pass per digit (skipped where every key has the same digit); tmp (>= keys.size) and cnt (3, 2049) are
    scratch."""
    c = keys.shape[0]
    cnt[:, :] = 0
    mask = np.uint32(_RADIX_BUCKETS - 1)
    for i in range(c):
        k = keys[i]
        cnt[0, (k & mask) + 1] += 1
        cnt[1, ((k >> np.uint32(11)) & mask) + 1] += 1
        cnt[2, (k >> np.uint32(22)) + 1] += 1
    in_keys = True
    for p in range(3):
        sh = np.uint32(11 * p)
        if c == 0 or cnt[p, ((keys[0] >> sh) & mask) + 1] == c:
            continue  # one digit value throughout: this pass would not move anything
        for t in range(_RADIX_BUCKETS):
            cnt[p, t + 1] += cnt[p, t]
        src = keys if in_keys else tmp[:c]
        dst = tmp[:c] if in_keys else keys
        for i in range(c):
            d = (src[i] >> sh) & mask
            dst[cnt[p, d]] = src[i]
            cnt[p, d] += 1
        in_keys = not in_keys
    if not in_keys:
        keys[:] = tmp[:c]


@nb.njit(cache=True, nogil=True)
def _sorted_screen_range(keys, n, rows, flat_keys, off, share, e, guard, atoms, bins, atom, crowded, j0, j1):
    """sample_screen on sorted keys (equal weights: shares are counts over n): runs of equal keys for the point
    masses, the count below each cut key (values < cut) by a binary search per cut for the occupancy. Column r's
    keys are keys[rows[r]]."""
    for r in range(j0, j1):
        kr = keys[rows[r]]
        c = n[rows[r]]
        if c == 0:
            continue
        tot = np.float64(c)
        if atoms:
            i = 0
            while i < c:
                j = i + 1
                while j < c and kr[j] == kr[i]:
                    j += 1
                if np.float64(j - i) / tot > share:
                    atom[r] = True
                    break
                i = j
        if not bins:
            continue
        prev = 0
        widest = 0
        for q in range(off[r], off[r + 1]):
            ck = flat_keys[q]
            lo = 0
            hi = c
            while lo < hi:
                mid = (lo + hi) >> 1
                if kr[mid] < ck:
                    lo = mid + 1
                else:
                    hi = mid
            widest = max(widest, lo - prev)
            prev = lo
        widest = max(widest, c - prev)
        crowded[r] = np.float64(widest) / tot > e + guard * np.sqrt(e / tot) + 1.0 / tot


def sample_screen(x: np.ndarray, w: np.ndarray, cuts: list[np.ndarray] | None, share: float, max_bin: int,
                  *, atoms: bool = True, bins: bool = True, presorted=None,
                  rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Both checks of the moment cuts on a row sample, for all columns at once: x (m, k) the sampled values of k
    columns (NaN missing; None with ``presorted``), w (m,) row weights, cuts[r] column r's cuts.

    Returns (atom, crowded), bool (k,): atom where some value holds more than ``share`` of the column's sampled
    weight; crowded where a bin of cuts[r] holds more than its ideal 1/(max_bin - 1) share by GUARD_Z standard
    deviations of a sampled share (binomial, effective sample size (sum w)^2 / sum w^2). One nogil kernel per column
    on the solver's thread pool, one pass over the column without sorting (on wide frames a vectorised sort of all
    columns' keys cost more than the sketch itself). Sums run in row order, so a weighted share can differ from a
    sorted-order sum in its last bit: only a share equal to the threshold to 1e-16 can decide otherwise.
    atoms / bins: run only one check (the other comes back all False); ``cuts`` may be None without bins.
    presorted: sort_sample(x, w) for these columns (equal weights): the checks then read sorted keys (a radix sort
    per column is cheaper than a binary search per value); computed here when weights are equal and it is None.
    rows: with ``presorted``, the rows of its keys that hold these k columns (default: all, in order), so that one
    sort of a wider set of columns serves a check of some of them without copying keys.
    """
    from ._newton import run_features

    w = np.ascontiguousarray(w, np.float64)
    if presorted is None:
        presorted = sort_sample(x, w)
    if presorted is not None:
        rows = np.arange(presorted[1].size, dtype=np.int64) if rows is None else np.asarray(rows, np.int64)
        k = rows.size
    else:
        k = x.shape[1]
    if not bins or cuts is None:
        cuts, bins = [np.zeros(0, np.float32)] * k, False
    nc = np.array([c.size for c in cuts], np.int64)
    off = np.zeros(k + 1, np.int64)
    np.cumsum(nc, out=off[1:])
    flat = np.concatenate(cuts).astype(np.float32) if k and off[-1] else np.zeros(0, np.float32)
    atom = np.zeros(k, np.bool_)
    crowded = np.zeros(k, np.bool_)
    if presorted is not None:
        b = (flat + np.float32(0.0)).view(np.uint32)  # the cuts as the same order-preserving keys
        flat_keys = np.where(b >> np.uint32(31), ~b, b | np.uint32(0x80000000)).astype(np.uint32)
        run_features(_sorted_screen_range, k, presorted[0], presorted[1], rows, flat_keys, off, float(share),
                     1.0 / (max_bin - 1), GUARD_Z, atoms, bins, atom, crowded)
        return atom, crowded
    xT = np.ascontiguousarray(np.asarray(x, np.float32).T)
    run_features(_screen_range, k, xT, xT.view(np.uint32), w, flat, off, float(share), 1.0 / (max_bin - 1), GUARD_Z,
                 atoms, bins, atom, crowded)
    return atom, crowded


@nb.njit(cache=True, nogil=True)
def _screen_range(xT, xbits, w, flat, off, share, e, guard, atoms, bins, atom, crowded, j0, j1):
    """sample_screen for columns [j0, j1) in one pass over each column's sampled values, without sorting: the weight
    of every distinct value (-0.0 as +0.0) in an open-addressing table for the point masses, and the weight of every
    bin (bin of x = number of cuts <= x, XGBoost's rule) by a binary search per value for the occupancy."""
    m = xT.shape[1]
    size = 1 << 4
    while size < 2 * m:
        size <<= 1
    shift = np.uint64(64 - int(np.log2(size)))
    table = np.empty(size, np.int64)
    acc = np.empty(size)
    for r in range(j0, j1):
        sw = 0.0
        sq = 0.0
        for i in range(m):
            if not np.isnan(xT[r, i]) and w[i] > 0.0:
                sw += w[i]
                sq += w[i] * w[i]
        if not sw > 0.0:
            continue
        c0 = off[r]
        nc = off[r + 1] - c0
        occ = np.zeros(nc + 1)
        table[:] = -1
        found = not atoms
        for i in range(m):
            xv = xT[r, i]
            wi = w[i]
            if np.isnan(xv) or not wi > 0.0:
                continue
            xv = xv + np.float32(0.0)
            b = 0  # branchless upper bound: the number of cuts <= xv (random values mispredict a branchy search)
            n = nc
            while n > 1:
                half = n >> 1
                b = b + half if flat[c0 + b + half - 1] <= xv else b
                n -= half
            if nc and flat[c0 + b] <= xv:
                b += 1
            occ[b] += wi
            if found:
                if not bins:
                    break
                continue
            bits = np.int64(xbits[r, i]) if xv != 0.0 else np.int64(0)  # -0.0 and +0.0: one value
            h = (np.uint64(bits) * np.uint64(0x9E3779B97F4A7C15)) >> shift
            while table[h] != -1 and table[h] != bits:
                h = (h + np.uint64(1)) & np.uint64(size - 1)
            if table[h] == -1:
                table[h] = bits
                acc[h] = 0.0
            acc[h] += wi
            if acc[h] / sw > share:
                found = True
        atom[r] = found and atoms
        if not bins:
            continue
        m_eff = sw * sw / max(sq, 1e-300)
        crowded[r] = occ.max() / sw > e + guard * np.sqrt(e / m_eff) + 1.0 / m_eff
