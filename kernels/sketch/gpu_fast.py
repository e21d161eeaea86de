"""GPU moment sketch, variant "fast" (sketch_fast.cu): power sums about a per-column centre from a strided sample,
distinct sets in shared memory. The host turns the sums into mean and central sums (power_to_central)."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from kernels._cuda import get_kernel
from kernels.device import cupy_module, to_numpy

from .gpu import EMPTY_KEY, REDUCE_THREADS, begin, finish
from .state import MomentSketch

SAMPLE_ROWS = 4096  # strided sample: the centre of each column, and which columns can have <= cap distinct values
TABLE_BUDGET = 40960  # bytes of shared memory for the per-block distinct sets
MAX_SLOTS = 64  # sketch_fast.cu's shared slot arrays
MAX_ROWS_PER_THREAD = 8192  # more blocks beyond this, so no thread sums too many terms in one accumulator
RECENTRE_TOL = 0.1  # re-sketch a column whose mean is farther than this many standard deviations from its centre
_DIR = str(Path(__file__).resolve().parent)


def _pow2_at_least(x: int) -> int:
    p = 1
    while p < x:
        p *= 2
    return p


def _binom(l: int) -> np.ndarray:
    b = np.zeros((l + 1, l + 1))
    for k in range(l + 1):
        b[k, 0] = 1.0
        for i in range(1, k + 1):
            b[k, i] = b[k - 1, i - 1] + b[k - 1, i]
    return b


def power_to_central(W: np.ndarray, S: np.ndarray, center: np.ndarray):
    """Mean and central sums from power sums about a centre: S (d, l) = sum w (x - c)^k, k = 1..l.

    With delta = S_1 / W (the mean minus c): M_k = sum_{i=0}^{k} C(k, i) S_i (-delta)^(k-i), S_0 = W.
    Returns (mean (d,), M (d, l-1) for k = 2..l, delta (d,)); empty columns get mean 0 and M 0.
    """
    W = np.asarray(W, np.float64)
    d, l = S.shape
    full = np.concatenate([W[:, None], S], axis=1)  # S_0..S_l
    ok = W > 0
    delta = np.where(ok, S[:, 0] / np.where(ok, W, 1.0), 0.0)
    B, lag = _shift_tables(l)
    P = (-delta)[:, None] ** np.arange(l + 1)  # (-delta)^p
    terms = B[None] * full[:, None, :] * P[:, lag]  # (d, k, i): C(k, i) S_i (-delta)^(k-i), zero for i > k
    M = terms[:, 2:, :].sum(axis=2)
    M[~ok] = 0.0
    mean = np.where(ok, center + delta, 0.0)
    return mean, M, delta


@lru_cache(maxsize=None)
def _shift_tables(l: int):
    """Binomials C(k, i) (zero for i > k) and the lag k - i (clipped at 0) for the binomial shift."""
    k = np.arange(l + 1)
    return _binom(l), np.maximum(k[:, None] - k[None, :], 0)


def _pilot(X, w, has_w: bool, cap: int):
    """Per column, from a strided row sample: the centre (device float64 (d,)) and whether the column can have at
    most cap distinct values (host bool (d,); the others have more anyway).

    Centre: the (weighted) sample mean; the value itself where the sample is constant (constant columns stay
    exact); where the sample has no valid value, the (weighted) mean of the whole column (a read of those columns
    only); 0 for an empty column.
    """
    cp = cupy_module()
    n, d = X.shape
    k = min(n, SAMPLE_ROWS)
    idx = (cp.arange(k, dtype=cp.int64) * n) // k
    s = X[idx].astype(cp.float64) + 0.0  # (k, d); -0.0 -> +0.0
    valid = cp.isfinite(s)
    if has_w:
        ws = w[idx]
        valid &= (ws > 0)[:, None]
        wt = cp.where(valid, ws[:, None], 0.0)
    else:
        wt = valid.astype(cp.float64)
    sv = cp.where(valid, s, 0.0)
    den = wt.sum(axis=0)
    with np.errstate(all="ignore"):
        c = (wt * sv).sum(axis=0) / den
    srt = cp.sort(cp.where(valid, s, cp.nan), axis=0)  # NaN last
    nv = valid.sum(axis=0)
    smin = srt[0]
    smax = srt[cp.maximum(nv - 1, 0), cp.arange(d)]
    med = srt[cp.maximum(nv - 1, 0) // 2, cp.arange(d)]  # lower median
    c = cp.where(smin == smax, smin, c)
    c = cp.where(cp.isfinite(c), c, med)  # overflowing sums: the sample median instead
    new = cp.isfinite(srt)
    new[1:] &= srt[1:] != srt[:-1]
    cand = new.sum(axis=0) <= cap
    none = ~(nv > 0)
    cand_h, none_h = to_numpy(cp.stack([cand, none]))
    if none_h.any():
        j = np.flatnonzero(none_h)
        cols = X[:, cp.asarray(j)].astype(cp.float64)
        ok = cp.isfinite(cols)
        if has_w:
            ok &= (w > 0)[:, None]
            ww = cp.where(ok, w[:, None], 0.0)
        else:
            ww = ok.astype(cp.float64)
        tot = ww.sum(axis=0)
        with np.errstate(all="ignore"):
            cj = (ww * cp.where(ok, cols, 0.0)).sum(axis=0) / tot
        c[cp.asarray(j)] = cp.where(tot > 0, cj, 0.0)
    return cp.ascontiguousarray(c), cand_h.astype(bool)


def _slots(cand: np.ndarray, ct: int, max_slots: int) -> tuple[np.ndarray, int]:
    """Per column: -2 untracked, -1 global table, >= 0 shared set within its tile; and the slots a block needs."""
    d = cand.size
    slot = np.full(d, -2, np.int32)
    used = 0
    for t0 in range(0, d, ct):
        j = t0 + np.flatnonzero(cand[t0 : t0 + ct])
        k = min(j.size, max_slots)
        slot[j[:k]] = np.arange(k, dtype=np.int32)
        slot[j[k:]] = -1
        used = max(used, k)
    return slot, used


def _launch(X, w, has_w, l, center, cand, cap, minb, unroll, bitcvt, blocks_per_sm):
    """Run sketch_fast + reduce_sums; returns (red (d, l+3) host [W, S1..Sl, min, max], table, count, over, bad)."""
    cp = cupy_module()
    n, d = X.shape
    nt = 256 if l <= 16 else 128
    ct = min(d, nt)
    gy = -(-d // ct)
    kr = nt // ct
    T = "float" if X.dtype == cp.float32 else "double"
    ks = 4 if T == "float" else 8
    ts = _pow2_at_least(cap + 1)
    if 2 * ts < 3 * (cap + 1):
        ts *= 2
    if cap > 0 and cand.any():
        slot, nslots = _slots(cand, ct, min(MAX_SLOTS, TABLE_BUDGET // (ts * ks)))
    else:
        slot, nslots = np.full(d, -2, np.int32), 0
    tsize = _pow2_at_least(4 * max(cap, 1)) if cand.any() else 1
    table = cp.full((d, tsize) if cand.any() else (1, 1), EMPTY_KEY, dtype=cp.uint64)
    count = cp.zeros(d, cp.int32)
    over = cp.asarray((~cand).astype(np.int32))
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    bps = int(blocks_per_sm or minb)
    gx = max(bps * sms // gy, -(-n // (kr * MAX_ROWS_PER_THREAD)))
    gx = int(max(1, min(n, gx)))
    rows_per_block = -(-n // gx)
    gx = -(-n // rows_per_block)
    kname = f"sketch_fast<{T},{l},{nt},{int(unroll)},{'true' if has_w else 'false'}>"
    rname = f"reduce_sums<{l},{REDUCE_THREADS}>"
    opts = (f"-I{_DIR}", f"-DFAST_MINB={int(minb)}", f"-DFAST_BITCVT={int(bool(bitcvt))}")
    kern = get_kernel("sketch/sketch_fast.cu", kname, options=opts, name_expressions=(kname, rname))
    red = get_kernel("sketch/sketch_fast.cu", rname, options=opts, name_expressions=(kname, rname))
    smem = max(nslots * ts * ks, nt * l * 8)
    part = cp.empty((gx, d, l + 3), cp.float64)
    bad = cp.zeros(1, cp.int32)
    kern((gx, gy), (nt,), (X, w, np.int64(n), np.int32(d), np.int32(ct), np.int64(rows_per_block), center, part, bad,
                           cp.asarray(slot), np.int32(nslots), np.int32(ts), np.int32(32 - ts.bit_length() + 1),
                           table, np.int32(tsize), count, over, np.int32(cap)), shared_mem=smem)
    out = cp.empty((d, l + 3), cp.float64)
    red((d,), (REDUCE_THREADS,), (part, np.int32(gx), np.int32(d), out))
    return out, table, count, over, bad


def sketch_fast(X, sample_weight=None, *, n_moments: int = 15, max_distinct: int = 256, minb: int = 2,
                unroll: int = 8, bitcvt: bool = False, blocks_per_sm: int | None = None) -> MomentSketch:
    """Same result as gpu.sketch(variant="v1") within 1e-12 of each moment's scale.

    minb: blocks per SM the compiler must fit (registers vs occupancy); unroll: rows loaded per thread at once;
    bitcvt: float -> double by integer bit operations instead of F2F (the same doubles; on the H100 with distinct
    tracking F2F measured faster, 11.5 vs 15.0 ms for 10M x 50, so it is off by default).
    """
    cp = cupy_module()
    l, X, w, has_w, empty = begin(X, sample_weight, n_moments, max_distinct)
    if empty is not None:
        return empty
    n, d = X.shape
    cap = int(max_distinct)
    center, cand = _pilot(X, w, has_w, cap)
    if cap <= 0:
        cand = np.zeros(d, bool)
    out, table, count, over, bad = _launch(X, w, has_w, l, center, cand, cap, minb, unroll, bitcvt, blocks_per_sm)
    h = to_numpy(cp.concatenate([out.ravel(), bad.astype(cp.float64), count.astype(cp.float64),
                             over.astype(cp.float64), center]))  # one transfer
    if h[d * (l + 3)]:
        raise ValueError("X contains +/-inf; encode missing values as NaN (inf is not a valid feature value)")
    red = h[: d * (l + 3)].reshape(d, l + 3)
    count_h = h[d * (l + 3) + 1 : d * (l + 4) + 1].astype(np.int64)
    over_h = h[d * (l + 4) + 1 : d * (l + 5) + 1].astype(np.int64)
    c_host = h[d * (l + 5) + 1 :]
    mean, M, delta = power_to_central(red[:, 0], red[:, 1 : l + 1], c_host)
    # a centre far from the mean (e.g. a sample that is not representative) would amplify rounding in the shift:
    # sketch those columns again about their now known mean
    with np.errstate(all="ignore"):
        sd = np.sqrt(np.maximum(M[:, 0], 0.0) / red[:, 0])
    redo = np.flatnonzero((red[:, 0] > 0) & ~(np.abs(delta) <= RECENTRE_TOL * sd))
    if redo.size:
        jj = cp.asarray(redo)
        c2 = cp.asarray(mean[redo])
        o2 = _launch(cp.ascontiguousarray(X[:, jj]), w, has_w, l, c2, np.zeros(redo.size, bool), 0, minb, unroll,
                     bitcvt, blocks_per_sm)[0]
        o2 = to_numpy(o2)
        m2, M2, _ = power_to_central(o2[:, 0], o2[:, 1 : l + 1], mean[redo])
        mean[redo], M[redo] = m2, M2
    full = np.empty((d, l + 3))
    full[:, 0] = red[:, 0]
    full[:, 1] = mean
    full[:, 2 : l + 1] = M
    full[:, l + 1 :] = red[:, l + 1 :]
    return finish(full, l, table, count_h, over_h, cap)
