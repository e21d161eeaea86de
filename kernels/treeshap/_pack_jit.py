"""The Numba kernels of ``pack.bfd_bins_by_run`` (the GPU engine's packing of paths into warp-sized bins), kept apart
so that importing the GPU engine does not import Numba."""
from __future__ import annotations

import numba
import numpy as np

from .. import _background

_background.prepare_numba_module()      # the compile notice; the shipped cache entries before any kernel runs

__all__ = ["bfd_sorted", "runs"]


@numba.njit(cache=True)
def runs(sizes, group, min_lanes):
    """Run of every item: consecutive groups joined until a run holds at least min_lanes lanes."""
    run = np.empty(sizes.size, np.int64)
    r, acc = 0, 0
    for i in range(sizes.size):
        if i > 0 and group[i] != group[i - 1] and acc >= min_lanes:
            r += 1
            acc = 0
        acc += sizes[i]
        run[i] = r
    return run


@numba.njit(cache=True)
def bfd_sorted(sizes, run, capacity):
    """Best fit over items sorted by run, then size (largest first); bins never span runs."""
    out = np.empty(sizes.size, np.int64)
    res = np.empty(sizes.size, np.int64)
    nb, first = 0, 0
    for i in range(sizes.size):
        if i > 0 and run[i] != run[i - 1]:
            first = nb
        s, best, br = sizes[i], -1, capacity + 1
        for b in range(first, nb):
            if s <= res[b] < br:
                best, br = b, res[b]
                if br == s:
                    break
        if best < 0:
            best = nb
            res[nb] = capacity
            nb += 1
        res[best] -= s
        out[i] = best
    return out
