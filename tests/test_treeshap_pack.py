"""Best-fit-decreasing warp packing: the GPUTreeShap fixtures, a brute-force BFD reference and packing properties."""
from __future__ import annotations

import time

import numpy as np
import pytest

from hitml.kernels.treeshap.pack import bfd_bins, plan_packing, utilisation


def next_fit_bins(sizes: np.ndarray, capacity: int = 32) -> np.ndarray:
    """Next-fit in input order (the paper's NF baseline), for comparison."""
    sizes = np.asarray(sizes, dtype=np.int64)
    out = np.empty(sizes.size, dtype=np.int64)
    b, room = -1, 0
    for i, s in enumerate(sizes.tolist()):
        if s > room:
            b += 1
            room = capacity
        out[i] = b
        room -= s
    return out


def _bfd_reference(sizes, cap):
    """The textbook loop: largest first, the open bin with the smallest residual that fits, ties to the lowest."""
    order = sorted(range(len(sizes)), key=lambda i: -sizes[i])
    res, out = [], [0] * len(sizes)
    for i in order:
        best = None
        for b, r in enumerate(res):
            if r >= sizes[i] and (best is None or r < res[best]):
                best = b
        if best is None:
            res.append(cap)
            best = len(res) - 1
        res[best] -= sizes[i]
        out[i] = best
    return np.array(out)


def test_library_fixtures():
    assert bfd_bins([2, 2, 1], 3).tolist() == [0, 1, 0]
    assert bfd_bins([3] * 6 + [2] * 6, 10).tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 3]
    assert next_fit_bins([3, 3, 1, 2], 5).tolist() == [0, 1, 1, 2]


def test_matches_reference_loop():
    rng = np.random.default_rng(0)
    for _ in range(300):
        cap = int(rng.integers(3, 33))
        s = rng.integers(1, cap + 1, int(rng.integers(1, 120)))
        assert (bfd_bins(s, cap) == _bfd_reference(list(s), cap)).all()


@pytest.mark.parametrize("seed", [0, 1])
def test_plan_properties(seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 18, 20000)
    plan = plan_packing(sizes)
    # every item in exactly one bin, in a contiguous lane range that respects the capacity
    assert sorted(plan.order.tolist()) == list(range(sizes.size))
    ends = plan.lane_of + sizes[plan.order]
    assert (plan.lane_of >= 0).all() and (ends <= 32).all()
    np.testing.assert_array_equal(np.diff(plan.bin_ptr), np.bincount(plan.bin_of, weights=sizes[plan.order]))
    assert (np.diff(plan.bin_ptr) <= 32).all()
    # lanes of one bin do not overlap: consecutive items of a bin are adjacent
    same = plan.bin_of[1:] == plan.bin_of[:-1]
    assert (plan.lane_of[1:][same] == ends[:-1][same]).all()
    # utilisation: BFD is within a few bins of the lower bound ceil(sum / 32) and beats next-fit
    lower = -(-sizes.sum() // 32)
    assert plan.n_bins <= lower * 1.01 + 1
    assert plan.utilisation >= 0.98
    assert plan.utilisation >= utilisation(sizes, next_fit_bins(sizes))


def test_shallow_paths_fill_warps():
    sizes = np.full(560, 4)          # depth-3 trees: 3 features + root
    plan = plan_packing(sizes)
    assert plan.n_bins == 70 and plan.utilisation == 1.0


def test_millions_of_paths_fast():
    sizes = np.random.default_rng(3).integers(2, 18, 2_000_000)
    t = time.perf_counter()
    plan = plan_packing(sizes)
    elapsed = time.perf_counter() - t
    assert plan.utilisation > 0.99
    assert elapsed < 5.0, elapsed    # ~0.6 s here; generous for a loaded CI machine


def test_bad_sizes():
    with pytest.raises(ValueError, match="sizes"):
        bfd_bins([0, 3])
    with pytest.raises(ValueError, match="sizes"):
        bfd_bins([33])


@pytest.mark.parametrize("kind", ["inter", "shap"])
def test_table_plan(kind, monkeypatch):
    """_inter_plan / _shap_variant: the longest path length whose tables fit the cap, and table / split / dp as
    documented (gpu.py's "How auto plans")."""
    from types import SimpleNamespace

    from hitml.kernels.treeshap import gpu as g
    rng = np.random.default_rng(0)
    m = rng.integers(1, 16, size=500)
    per = [(1 << d) * d * 8 * (d // 2 + 1 if kind == "inter" else 1) for d in range(13)]
    knob = "inter_variant" if kind == "inter" else "shap_variant"

    def plan(path_m):
        pk = SimpleNamespace(path_m=path_m)
        return g._inter_plan(pk) if kind == "inter" else g._shap_variant(pk, 5, 1)

    for cap in (10, 10_000, 300_000, 3_000_000, 1 << 33):
        monkeypatch.setattr(g, "_table_cap", lambda c=cap: c)
        want = max([d for d in range(1, 13) if sum(per[k] for k in m if k <= d) <= cap], default=0)
        for variant in ("auto", "table", "split", "dp"):
            monkeypatch.setattr(g.options, knob, variant)
            got = plan(m)
            # and the first paths of want + 1 elements whose tables fit what is left of the cap
            room = cap - sum(per[k] for k in m if k <= want)
            extra = min(int((m == want + 1).sum()), room // per[want + 1]) if want < 12 else 0
            share = (m[m <= want].sum() + extra * (want + 1)) / m.sum()
            if variant == "dp" or share == 0 or (variant == "auto" and share < g.SPLIT_MIN_SHARE):
                assert got == ("dp", 0, 0), (cap, variant, got)
            else:
                assert got == ("split", want, extra), (cap, variant, got)    # some paths are longer than 12
    monkeypatch.setattr(g, "_table_cap", lambda: 1 << 40)
    monkeypatch.setattr(g.options, knob, "auto")
    assert plan(np.array([3, 5, 8])) == ("table", 12, 0)
    with pytest.raises(ValueError, match=knob):
        setattr(g.options, knob, "bogus")             # a bad option is refused when it is set


def _runs_reference(sizes, group, cap, min_lanes):
    """Plain loops: join consecutive groups into runs of >= min_lanes lanes, then the textbook BFD in each run."""
    runs, cur, acc = [], [], 0
    for i in range(len(sizes)):
        if i and group[i] != group[i - 1] and acc >= min_lanes:
            runs.append(cur)
            cur, acc = [], 0
        cur.append(i)
        acc += sizes[i]
    runs.append(cur)
    out, first = np.empty(len(sizes), np.int64), 0
    for items in runs:
        local = _bfd_reference([sizes[i] for i in items], cap)
        out[items] = local + first
        first += int(local.max()) + 1
    return out


def test_bins_by_run_match_reference_loops():
    from hitml.kernels.treeshap.pack import bfd_bins_by_run
    rng = np.random.default_rng(4)
    for _ in range(200):
        cap = int(rng.integers(4, 33))
        n = int(rng.integers(1, 150))
        s = rng.integers(1, cap + 1, n)
        g = np.sort(rng.integers(0, max(1, n // int(rng.integers(1, 12))), n))
        min_lanes = int(rng.choice([1, 16, 64, 256]))
        got = bfd_bins_by_run(s, g, cap, min_lanes)
        np.testing.assert_array_equal(got, _runs_reference(list(s), g, cap, min_lanes))


def test_tree_packing_keeps_trees_together():
    rng = np.random.default_rng(5)
    tree = np.repeat(np.arange(300), rng.integers(70, 200, 300))
    sizes = rng.integers(4, 10, tree.size)                  # every tree holds >= 280 lanes: a run of its own
    plan = plan_packing(sizes, group=tree)
    bins_of_tree = plan.bin_of[np.argsort(plan.order)]
    # bins never mix trees of two runs, every tree (>= 256 lanes here) occupies a contiguous range of bins
    lo = np.minimum.reduceat(bins_of_tree, np.flatnonzero(np.r_[True, np.diff(tree) != 0]))
    hi = np.maximum.reduceat(bins_of_tree, np.flatnonzero(np.r_[True, np.diff(tree) != 0]))
    assert (lo[1:] > hi[:-1]).all()
    assert plan.utilisation > 0.95
    with pytest.raises(ValueError, match="non-decreasing"):
        plan_packing(sizes, group=tree[::-1])


def test_quadrature_rule_size_is_the_smallest_exact_one():
    """The per-row quadrature kernel's rule for a path of d elements (``gpu._quad_size``, which splits the launches
    by rule): Gauss-Legendre with Q nodes integrates degree 2Q - 1 exactly and a path of d elements needs degree
    d - 1, so the rule is the smallest of the kernel sizes with 2Q >= d; paths past the largest (the long-path
    kernel's) get the largest. Against a loop over the sizes, scalar and per path."""
    from hitml.kernels.treeshap import gpu

    d = np.arange(1, 80)
    want = np.array([next((q for q in gpu._QUAD_SIZES if 2 * q >= k), gpu._QUAD_SIZES[-1]) for k in d])
    np.testing.assert_array_equal(gpu._quad_size(d), want)
    assert [gpu._quad_size(int(k)) for k in d] == want.tolist()
    assert gpu._QUAD_SIZES == tuple(sorted(gpu._QUAD_SIZES)) and 2 * gpu._QUAD_SIZES[-1] >= 31
