"""Pattern tables of the CPU engine: a short path's SHAP values for every pattern of satisfied conditions.

A path's contribution depends on the row only through which of its m conditions the row satisfies, so for a path of
few conditions the m values of each of the 2^m patterns can be computed once per model (by the same quadrature as the
per-row kernel) and a row then costs m comparisons and m loads. Tables cover the shortest paths first, up to
``TABLE_BYTES`` in all, so that they stay in the CPU's cache; longer paths keep the per-row quadrature.
"""
from __future__ import annotations

import numba
import numpy as np

from .. import _background, _registry
from .._items import borrow, items

# the warm-up groups that compile these kernels (their Numba cache entries ship with hitml)
_background.prepare_numba_module()      # the compile notice; the shipped cache entries before any kernel runs
_registry.register_shipped(__name__, ("treeshap",))

TABLE_BYTES = 1 << 20      # about one core's L2: tables that spill to memory are slower than the quadrature
TABLE_MAX_LEN = 6          # 2^6 patterns x 6 values = 3 KiB per path


def plan_tables(path_ptr: np.ndarray, budget: int = TABLE_BYTES, max_len: int = TABLE_MAX_LEN) -> np.ndarray:
    """tab_off (P,) int64: each covered path's offset into the table array (-1: no table); shortest paths first."""
    lens = np.diff(path_ptr)
    size = np.where((lens > 0) & (lens <= max_len), (1 << np.minimum(lens, max_len)) * lens, 0)
    order = np.argsort(lens, kind="stable")
    order = order[size[order] > 0]
    ends = np.cumsum(size[order])
    order = order[ends * 8 <= budget]
    off = np.full(len(lens), -1, np.int64)
    sizes = size[order]
    off[order] = np.cumsum(sizes) - sizes
    return off


@items("len(path_ptr) - 1")
@numba.njit(nogil=True, cache=True, error_model="numpy")
def build_tables(path_ptr, zero_fraction, tab_off, tq, wq, tab, lo, hi):
    """tab[off + pattern * m + t] = SHAP value of condition t for a unit leaf value, condition e satisfied iff
    bit e of pattern is set (Gauss-Legendre with ceil(m / 2) nodes, exact)."""
    path_ptr, zero_fraction, tab_off, tq = borrow(path_ptr), borrow(zero_fraction), borrow(tab_off), borrow(tq)
    wq, tab = borrow(wq), borrow(tab)
    for p in range(lo, hi):
        off = tab_off[p]
        if off < 0:
            continue
        s0 = path_ptr[p]
        m = path_ptr[p + 1] - s0
        Q = (m + 1) // 2
        g = np.empty(m)
        c = np.empty(m)
        for pat in range(1 << m):
            for t in range(m):
                tab[off + pat * m + t] = 0.0
            for q in range(Q):
                tt = tq[Q, q]
                prod = wq[Q, q]
                for e in range(m):
                    z = zero_fraction[s0 + e]
                    if (pat >> e) & 1:
                        g[e] = z + tt * (1.0 - z)
                        c[e] = (1.0 - z) / g[e]
                    else:
                        g[e] = z * (1.0 - tt)
                        c[e] = -1.0 / (1.0 - tt)
                    prod *= g[e]
                for t in range(m):
                    tab[off + pat * m + t] += prod * c[t]
