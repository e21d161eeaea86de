"""Best-fit-decreasing packing of path lengths into warp-sized bins: over all items (vectorised over the 32 size
classes), or within runs of consecutive trees so that a tree's paths share neighbouring bins."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _registry

__all__ = ["bfd_bins", "bfd_bins_by_run", "PackPlan", "plan_packing"]


def bfd_bins(sizes: np.ndarray, capacity: int = 32) -> np.ndarray:
    """Best-fit decreasing: the bin index of every item (items of equal size keep their input order).

    Same result as the classic loop (sort by size, largest first; put each item in the open bin with the smallest
    residual capacity that fits it, ties to the lowest bin index; else open a new bin), but it works on size
    classes: a bin chosen for an item of size s keeps taking items of size s until its residual drops below s,
    so each (size, residual) pair is one vectorised step. O(n log n) for the sort, O(capacity^2) NumPy steps.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    if sizes.ndim != 1:
        raise ValueError(f"sizes must be 1-D, got shape {sizes.shape}")
    if sizes.size and (sizes.min() < 1 or sizes.max() > capacity):
        raise ValueError(f"item sizes must lie in [1, {capacity}], got [{sizes.min()}, {sizes.max()}]")
    out = np.empty(sizes.size, dtype=np.int64)
    if sizes.size == 0:
        return out
    order = np.argsort(-sizes, kind="stable")
    sorted_sizes = sizes[order]
    # open bins with residual r, as sorted arrays of bin ids
    by_res: list[np.ndarray] = [np.empty(0, np.int64) for _ in range(capacity + 1)]
    n_bins = 0
    pos = 0
    for s in range(capacity, 0, -1):
        cnt = int(np.searchsorted(-sorted_sizes, -s, side="right")) - pos
        if cnt <= 0:
            continue
        items = order[pos: pos + cnt]
        pos += cnt
        done = 0
        for r in range(s, capacity + 1):
            if done == cnt:
                break
            bins = by_res[r]
            if bins.size == 0:
                continue
            q = r // s                                   # items of size s one such bin takes
            need = -(-(cnt - done) // q)
            use = bins[:need]
            by_res[r] = bins[need:]
            take = np.full(use.size, q, dtype=np.int64)
            take[-1] = min(q, cnt - done - q * (use.size - 1))
            out[items[done: done + int(take.sum())]] = np.repeat(use, take)
            done += int(take.sum())
            _move(by_res, use, take, r, s)
        if done < cnt:
            q = capacity // s
            left = cnt - done
            nb = -(-left // q)
            new = np.arange(n_bins, n_bins + nb, dtype=np.int64)
            n_bins += nb
            take = np.full(nb, q, dtype=np.int64)
            take[-1] = left - q * (nb - 1)
            out[items[done:]] = np.repeat(new, take)
            _move(by_res, new, take, capacity, s)
    return out


def bfd_bins_by_run(sizes: np.ndarray, group: np.ndarray, capacity: int = 32, min_lanes: int = 256) -> np.ndarray:
    """Best-fit decreasing within runs: consecutive items of one ``group`` (a tree; ``group`` non-decreasing) stay
    together, groups are joined into runs of at least ``min_lanes`` lanes (so shallow trees still fill their bins),
    and bins are numbered run after run. The bin index of every item."""
    sizes = np.asarray(sizes, dtype=np.int64)
    group = np.asarray(group, dtype=np.int64)
    if sizes.shape != group.shape or sizes.ndim != 1:
        raise ValueError(f"sizes and group must be 1-D of one length, got {sizes.shape} and {group.shape}")
    if sizes.size and (sizes.min() < 1 or sizes.max() > capacity):
        raise ValueError(f"item sizes must lie in [1, {capacity}], got [{sizes.min()}, {sizes.max()}]")
    if sizes.size and np.any(np.diff(group) < 0):
        raise ValueError("group must be non-decreasing (items ordered by tree)")
    out = np.empty(sizes.size, dtype=np.int64)
    if sizes.size == 0:
        return out
    from . import _pack_jit

    run = _pack_jit.runs(sizes, group, min_lanes)
    order = np.lexsort((-sizes, run))
    out[order] = _pack_jit.bfd_sorted(sizes[order], run[order], capacity)
    return out


def _move(by_res: list[np.ndarray], bins: np.ndarray, take: np.ndarray, r: int, s: int) -> None:
    """File ``bins`` (sorted; all took ``take[0]`` items of size s except maybe the last) under their new residuals."""
    groups = [(bins[:-1], int(take[0])), (bins[-1:], int(take[-1]))] if bins.size > 1 else [(bins, int(take[0]))]
    for b, t in groups:
        if b.size == 0:
            continue
        res = r - t * s
        cur = by_res[res]
        if cur.size == 0:
            by_res[res] = b
        elif cur[-1] < b[0]:
            by_res[res] = np.concatenate([cur, b])
        else:  # two sorted runs: a stable sort merges them in linear time
            by_res[res] = np.sort(np.concatenate([cur, b]), kind="stable")


def utilisation(sizes: np.ndarray, bins: np.ndarray, capacity: int = 32) -> float:
    """Fraction of lanes in use: sum(sizes) / (capacity * number of bins)."""
    n_bins = int(bins.max()) + 1 if bins.size else 0
    return float(np.sum(sizes)) / (capacity * n_bins) if n_bins else 1.0


@dataclass(frozen=True)
class PackPlan:
    """Where each packed item sits: items in packed order, their bins and first lanes, bin element offsets."""

    order: np.ndarray        # int64 (I,): item ids in packed order (by bin, then input order)
    bin_of: np.ndarray       # int64 (I,): bin of order[i]
    lane_of: np.ndarray      # int64 (I,): first lane of order[i] within its bin
    elem_start: np.ndarray   # int64 (I,): first packed element of order[i]
    bin_ptr: np.ndarray      # int64 (n_bins+1,): element offsets of the bins
    utilisation: float

    @property
    def n_bins(self) -> int:
        return len(self.bin_ptr) - 1


def plan_packing(sizes: np.ndarray, capacity: int = 32, group: np.ndarray | None = None) -> PackPlan:
    """BFD-pack items of the given sizes (within runs of ``group``, see bfd_bins_by_run, where given) and lay them
    out contiguously, bin after bin."""
    sizes = np.asarray(sizes, dtype=np.int64)
    bins = bfd_bins(sizes, capacity) if group is None else bfd_bins_by_run(sizes, group, capacity)
    order = np.argsort(bins, kind="stable")
    bin_of = bins[order]
    sz = sizes[order]
    elem_start = np.concatenate([[0], np.cumsum(sz)[:-1]]).astype(np.int64) if sz.size else np.zeros(0, np.int64)
    n_bins = int(bins.max()) + 1 if bins.size else 0
    bin_total = np.bincount(bin_of, weights=sz, minlength=n_bins).astype(np.int64)
    bin_ptr = np.concatenate([[0], np.cumsum(bin_total)]).astype(np.int64)
    lane_of = elem_start - bin_ptr[bin_of]
    return PackPlan(order=order, bin_of=bin_of, lane_of=lane_of, elem_start=elem_start, bin_ptr=bin_ptr,
                    utilisation=utilisation(sizes, bins, capacity))


def _warm_packing() -> None:
    """The warm-up of the GPU engine's packing kernel (a CPU Numba kernel)."""
    plan_packing(np.array([3, 5, 2, 7, 1, 4], np.int64), group=np.array([0, 0, 1, 1, 2, 2], np.int64))


_registry.register_warmup("gpu-packing", _warm_packing)
