"""GPU moment sketch, variant "fast" (sketch_fast.cu): shifted power sums per thread, distinct sets in shared memory."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from kernels._cuda import get_kernel
from kernels.device import cupy_module

from .gpu import EMPTY_KEY, REDUCE_THREADS, finish, prepare
from .state import MomentSketch, _check_n_moments

SAMPLE_ROWS = 2048  # strided sample that rules out continuous columns from distinct-value tracking
TABLE_BUDGET = 40960  # bytes of shared memory for the per-block distinct sets
MAX_SLOTS = 64  # sketch_fast.cu's shared slot arrays
_DIR = str(Path(__file__).resolve().parent)


def _pow2_at_least(x: int) -> int:
    p = 1
    while p < x:
        p *= 2
    return p


def _candidates(X, w, has_w: bool, cap: int) -> np.ndarray:
    """Columns whose strided sample has at most cap distinct finite values (the others have more anyway)."""
    cp = cupy_module()
    n = X.shape[0]
    k = min(n, SAMPLE_ROWS)
    idx = (cp.arange(k, dtype=cp.int64) * n) // k
    s = X[idx].T.astype(cp.float64) + 0.0  # -0.0 -> +0.0
    if has_w:
        s[:, w[idx] <= 0] = cp.nan
    s = cp.sort(s, axis=1)  # NaN last
    new = cp.isfinite(s)
    new[:, 1:] &= s[:, 1:] != s[:, :-1]
    return new.sum(axis=1).get() <= cap


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


def sketch_fast(X, sample_weight=None, *, n_moments: int = 15, max_distinct: int = 256, minb: int = 2,
                unroll: int = 8, recentre: int = 8, blocks_per_sm: int | None = None) -> MomentSketch:
    """Same result as gpu.sketch(variant="v1"); minb: blocks per SM the compiler must fit (registers vs occupancy),
    unroll: rows loaded per thread at once, recentre: batches between shifts to the running mean."""
    cp = cupy_module()
    l = _check_n_moments(n_moments)
    X, w, has_w = prepare(X, sample_weight)
    n, d = X.shape
    if n == 0:
        return MomentSketch.empty(d, l, max_distinct)
    cap = int(max_distinct)
    nt = 256 if l <= 16 else 128
    ct = min(d, nt)
    gy = -(-d // ct)
    T = "float" if X.dtype == cp.float32 else "double"
    ks = 4 if T == "float" else 8
    ts = _pow2_at_least(cap + 1)
    if 2 * ts < 3 * (cap + 1):
        ts *= 2
    if cap > 0:
        cand = _candidates(X, w, has_w, cap)
        slot, nslots = _slots(cand, ct, min(MAX_SLOTS, TABLE_BUDGET // (ts * ks)))
    else:
        cand = np.zeros(d, bool)
        slot, nslots = np.full(d, -2, np.int32), 0
    tsize = _pow2_at_least(4 * max(cap, 1))
    table = cp.full((d, tsize), EMPTY_KEY, dtype=cp.uint64) if cand.any() else cp.full((1, 1), EMPTY_KEY, cp.uint64)
    if not cand.any():
        tsize = 1
    count = cp.zeros(d, cp.int32)
    over = cp.asarray((~cand).astype(np.int32))
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    bps = int(blocks_per_sm or minb)
    gx = int(max(1, min(n, bps * sms // gy)))
    rows_per_block = -(-n // gx)
    gx = -(-n // rows_per_block)
    kname = f"sketch_fast<{T},{l},{nt},{int(unroll)},{int(recentre)},{'true' if has_w else 'false'}>"
    rname = f"reduce_partials<{l},{REDUCE_THREADS}>"
    opts = (f"-I{_DIR}", f"-DFAST_MINB={int(minb)}")
    kern = get_kernel("sketch/sketch_fast.cu", kname, options=opts, name_expressions=(kname, rname))
    red = get_kernel("sketch/sketch_fast.cu", rname, options=opts, name_expressions=(kname, rname))
    smem = max(nslots * ts * ks, nt * (l - 1) * 8)
    part = cp.empty((gx, d, l + 3), cp.float64)
    bad = cp.zeros(1, cp.int32)
    kern((gx, gy), (nt,), (X, w, np.int64(n), np.int32(d), np.int32(ct), np.int64(rows_per_block), part, bad,
                           cp.asarray(slot), np.int32(nslots), np.int32(ts), np.int32(32 - ts.bit_length() + 1),
                           table, np.int32(tsize), count, over, np.int32(cap)), shared_mem=smem)
    out = cp.empty((d, l + 3), cp.float64)
    red((d,), (REDUCE_THREADS,), (part, np.int32(gx), np.int32(d), out))
    if int(bad.get()[0]):
        raise ValueError("X contains +/-inf; encode missing values as NaN (inf is not a valid feature value)")
    return finish(out.get(), l, table, count, over, cap)
