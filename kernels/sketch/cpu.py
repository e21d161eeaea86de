"""CPU twin (Numba): one-pass blockwise central sums merged by Pébay's formula, and a bounded distinct-value scan."""
from __future__ import annotations

import numba as nb
import numpy as np

from .. import _registry
from ._newton import n_threads, run_features
from .sample import N_SAMPLE, RowSample, check_n_sample
from .state import MomentSketch, _check_n_moments, _prepare_input

BLOCK_ROWS = 2048
COL_CHUNK = 256


@nb.njit(forceinline=True)
def _merge_into(W, mu, M, wb, mb, Mb, l):
    """Merge (wb, mb, Mb[0..l-2]) into (W[0], mu[0], M) in place (Pébay eq. 12, weighted)."""
    wa = W[0]
    if wb <= 0.0:
        return
    if wa <= 0.0:
        W[0] = wb
        mu[0] = mb
        for k in range(l - 1):
            M[k] = Mb[k]
        return
    w = wa + wb
    delta = mb - mu[0]
    a = -wb * delta / w
    b = wa * delta / w
    pa = np.empty(l + 1)
    pb = np.empty(l + 1)
    pa[0] = 1.0
    pb[0] = 1.0
    for i in range(1, l + 1):
        pa[i] = pa[i - 1] * a
        pb[i] = pb[i - 1] * b
    for k in range(l, 1, -1):  # descending: M[k-i] for i >= 1 are still the old values
        acc = wa * pa[k] + wb * pb[k]
        c = 1.0
        for i in range(0, k - 1):
            acc += c * (M[k - i - 2] * pa[i] + Mb[k - i - 2] * pb[i])
            c = c * (k - i) / (i + 1)
        M[k - 2] = acc
    W[0] = w
    mu[0] = mu[0] + wb / w * delta


def _block_partials(X, w, has_w, l, block_rows):
    """Per block of rows: weight, mean, central sums M2..Ml, min and max of every column; and per block whether it
    holds an inf.

    Tasks are (row block, column chunk) pairs on the solver's thread pool (a wide frame's few row blocks still fill
    every thread). Rows outer, columns inner: the inner loops run over a row's contiguous values for all columns at
    once (they vectorise), while each column still sums its rows in row order, so the sums are the same bits as a
    column-by-column loop whichever thread takes a task. A missing value adds +0.0 to the central sums, which leaves
    them unchanged.
    """
    n, d = X.shape
    nblk = (n + block_rows - 1) // block_rows
    ncc = (d + COL_CHUNK - 1) // COL_CHUNK
    part = np.zeros((nblk, d, l + 3))
    bad = np.zeros(nblk * ncc, np.int64)
    run_features(_block_range, nblk * ncc, X, w, has_w, l, block_rows, ncc, part, bad)
    return part, bad.reshape(nblk, ncc).sum(axis=1)


@nb.njit(cache=True, nogil=True)
def _block_range(X, w, has_w, l, block_rows, ncc, part, bad, t0, t1):
    n, d = X.shape
    for task in range(t0, t1):
        bi = task // ncc
        c0 = (task % ncc) * COL_CHUNK
        c1 = min(d, c0 + COL_CHUNK)
        _block_chunk(X, w, has_w, l, bi * block_rows, min(n, (bi + 1) * block_rows), c0, c1, part[bi], bad, task)


@nb.njit(cache=True, nogil=True)
def _block_chunk(X, w, has_w, l, r0, r1, c0, c1, out, bad, task):
    """_block_partials for rows [r0, r1) and columns [c0, c1): every column sums its rows in row order."""
    d = c1 - c0
    W = np.zeros(d)
    S = np.zeros(d)  # sum of w (x - x0), shifted by the block's first value so offset data keeps its digits
    x0 = np.full(d, np.nan)  # each column's first finite value of positive weight in the block
    lo = np.full(d, np.inf)
    hi = np.full(d, -np.inf)
    need = d
    for r in range(r0, r1):
        if need == 0:
            break
        if not (w[r] if has_w else 1.0) > 0.0:
            continue
        for j in range(d):
            x = np.float64(X[r, c0 + j])
            if np.isnan(x0[j]) and np.isfinite(x):
                x0[j] = x
                need -= 1
    # branch-free, so the column loop vectorises: a skipped value adds +0.0 to W and S, which cannot be -0.0 (W sums
    # positive weights from +0.0; S, from +0.0, gives +0.0 for x - y = 0), so the sums keep their bits
    inf = False
    for r in range(r0, r1):
        wr = w[r] if has_w else 1.0
        pos = wr > 0.0
        for j in range(d):
            x = np.float64(X[r, c0 + j])
            inf |= np.isinf(x)
            ok = np.isfinite(x) & pos
            W[j] += wr if ok else 0.0
            S[j] += wr * (x - x0[j]) if ok else 0.0
            lo[j] = x if ok & (x < lo[j]) else lo[j]
            hi[j] = x if ok & (x > hi[j]) else hi[j]
    if inf:
        bad[task] = 1
    m = np.zeros(d)
    for j in range(d):
        if W[j] > 0.0:
            m[j] = x0[j] + S[j] / W[j]
    acc = np.zeros((l - 1, d))
    t = np.empty(d)
    dl = np.empty(d)
    for r in range(r0, r1):
        wr = w[r] if has_w else 1.0
        for j in range(d):
            x = np.float64(X[r, c0 + j])
            ok = np.isfinite(x) & (W[j] > 0.0)
            dl[j] = x - m[j] if ok else 0.0
            t[j] = wr * dl[j] * dl[j] if ok else 0.0
        for k in range(l - 1):
            for j in range(d):
                acc[k, j] += t[j]
                t[j] *= dl[j]
    for j in range(d):
        p = out[c0 + j]
        if W[j] <= 0.0:
            p[l + 1] = np.nan
            p[l + 2] = np.nan
            continue
        for k in range(l - 1):
            p[2 + k] = acc[k, j]
        p[0] = W[j]
        p[1] = m[j]
        p[l + 1] = lo[j]
        p[l + 2] = hi[j]


def _reduce_partials(part, l):
    """Merge the blocks' partials per column (in block order) into (d, l+3) rows on the solver's thread pool."""
    out = np.zeros((part.shape[1], l + 3))
    run_features(_reduce_range, part.shape[1], part, l, out)
    return out


@nb.njit(cache=True, nogil=True)
def _reduce_range(part, l, out, j0, j1):
    nblk = part.shape[0]
    for j in range(j0, j1):
        W = np.zeros(1)
        mu = np.zeros(1)
        M = np.zeros(l - 1)
        lo = np.nan
        hi = np.nan
        for bi in range(nblk):
            p = part[bi, j]
            if p[0] <= 0.0:
                continue
            _merge_into(W, mu, M, p[0], p[1], p[2 : l + 1], l)
            if np.isnan(lo) or p[l + 1] < lo:
                lo = p[l + 1]
            if np.isnan(hi) or p[l + 2] > hi:
                hi = p[l + 2]
        out[j, 0] = W[0]
        out[j, 1] = mu[0]
        out[j, 2 : l + 1] = M
        out[j, l + 1] = lo
        out[j, l + 2] = hi


_EMPTY_BITS = np.uint64(0x7FF8000000000000)  # a NaN: never a value of the distinct scan, so it marks a free slot


def _distinct_scan(X, cap, chunk):
    """Per feature, the sorted distinct finite values if there are at most cap of them, else count -1 (-0.0 counted
    as +0.0).

    Columns go in chunks of ``chunk`` (tasks of the solver's thread pool), rows outer, so that a wide row-major X is
    read a row segment at a time instead of one strided value per row and column; each column keeps its values in an
    open-addressing table of their bits and stops taking rows as soon as it has seen cap+1 distinct values, the chunk
    once all its columns have.
    """
    d = X.shape[1]
    vals = np.full((d, cap), np.nan)
    cnt = np.zeros(d, np.int64)
    run_features(_distinct_range, (d + chunk - 1) // chunk, X, cap, chunk, vals, cnt)
    return vals, cnt


@nb.njit(cache=True, nogil=True)
def _distinct_range(X, cap, chunk, vals, cnt, k0, k1):
    n, d = X.shape
    size = 16
    while size < 2 * (cap + 1):
        size <<= 1
    shift = np.uint64(64 - int(np.log2(size)))
    for ch in range(k0, k1):
        c0 = ch * chunk
        w = min(d, c0 + chunk) - c0
        table = np.full((w, size), _EMPTY_BITS, np.uint64)
        c = np.zeros(w, np.int64)
        one = np.empty(1)  # a float64 and its bits, without an allocation per value
        one_bits = one.view(np.uint64)
        active = w
        for r in range(n):
            for j in range(w):
                if c[j] > cap:
                    continue
                x = np.float64(X[r, c0 + j]) + 0.0  # -0.0 -> +0.0
                if not np.isfinite(x):
                    continue
                one[0] = x
                bits = one_bits[0]
                h = (bits * np.uint64(0x9E3779B97F4A7C15)) >> shift
                while table[j, h] != _EMPTY_BITS and table[j, h] != bits:
                    h = (h + np.uint64(1)) & np.uint64(size - 1)
                if table[j, h] == _EMPTY_BITS:
                    table[j, h] = bits
                    c[j] += 1
                    if c[j] > cap:
                        active -= 1
            if active == 0:
                break
        for j in range(w):
            if c[j] > cap:
                cnt[c0 + j] = -1
                continue
            got = np.empty(c[j], np.uint64)
            k = 0
            for h in range(size):
                if table[j, h] != _EMPTY_BITS:
                    got[k] = table[j, h]
                    k += 1
            vals[c0 + j, : c[j]] = np.sort(got.view(np.float64))
            cnt[c0 + j] = c[j]


def distinct_chunk(d: int) -> int:
    """Columns per task of the distinct scan: up to 64 (a few cache lines of each row), at least 4 tasks a thread."""
    return max(1, min(64, d // (4 * n_threads())))


def sketch(X, sample_weight=None, *, n_moments: int = 15, max_distinct: int = 256, n_sample: int = N_SAMPLE,
           block_rows: int = BLOCK_ROWS) -> MomentSketch:
    """Sketch every column of X (n, d); NaN is missing, +/-inf is rejected with ValueError. n_sample: rows of the
    mergeable row sample (0: none)."""
    l = _check_n_moments(n_moments)
    n_sample = check_n_sample(n_sample)
    X, w, has_w = _prepare_input(X, sample_weight)
    d = X.shape[1]
    if X.shape[0] == 0:
        return MomentSketch.empty(d, l, max_distinct, n_sample)
    part, bad = _block_partials(X, w, has_w, l, int(block_rows))
    if bad.any():
        raise ValueError("X contains +/-inf; encode missing values as NaN (inf is not a valid feature value)")
    red = _reduce_partials(part, l)
    sk = finish(red, l, X, max_distinct, w if has_w else None)
    if n_sample:
        sk.sample = RowSample.of_rows(X, w if has_w else None, n_sample)
    return sk


def finish(red: np.ndarray, l: int, X, max_distinct: int, w) -> MomentSketch:
    """Build the MomentSketch from reduced (d, l+3) moments plus the distinct-value scan (on host X)."""
    if w is not None:
        X = np.where((w > 0)[:, None], X, np.nan) if (w == 0).any() else X
    X = np.ascontiguousarray(X)
    vals, cnt = _distinct_scan(X, int(max_distinct), distinct_chunk(X.shape[1]))
    return MomentSketch(red[:, 0].copy(), red[:, 1].copy(), red[:, 2 : l + 1].copy(), red[:, l + 1].copy(),
                        red[:, l + 2].copy(), vals, cnt)


def _warm_sketch() -> None:
    """The warm-up of the sketch's kernels: a sketch and its cut points (``python -m hitml.kernels warmup``)."""
    from .cuts import cut_points

    X = np.random.default_rng(0).normal(size=(2000, 3))
    cut_points(sketch(X), max_bin=16)


_registry.register_warmup("sketch", _warm_sketch)
