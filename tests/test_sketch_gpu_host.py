"""The GPU sketch's host side and row sample: driver launches, the repeated-call plan, the sample bit for bit
against its CPU twin, and cuts checked on the sample as on the CPU."""
from __future__ import annotations

import numpy as np
import pytest

from hitml.kernels.sketch import cpu
from _sketch_gpu import _assert_same

pytestmark = pytest.mark.gpu


def test_fast_driver_launch_equals_kernel_calls(monkeypatch):
    """The prepacked driver launches (the default for cached buffers) and plain RawKernel calls give the same
    sketch, equal to the CPU twin; a new geometry rebuilds the prepacked parameters."""
    import cupy as cp

    from hitml.kernels.sketch import _gpu_moments

    rng = np.random.default_rng(8)
    X = np.column_stack([rng.normal(size=100_000), np.round(rng.normal(size=100_000) * 4)]).astype(np.float32)
    c = cpu.sketch(X, None, n_moments=15, max_distinct=128)
    a = _gpu_moments.sketch_moments(cp.asarray(X), n_moments=15, max_distinct=128)
    a2 = _gpu_moments.sketch_moments(cp.asarray(X[:60_001]), n_moments=15, max_distinct=128)  # other n: other parameters
    monkeypatch.setattr(_gpu_moments, "_HAS_DRIVER_LAUNCH", [False])
    b = _gpu_moments.sketch_moments(cp.asarray(X), n_moments=15, max_distinct=128)
    for s in (a, b):
        _assert_same(s, c, X, None, 15)
    for f in ("weight", "mean", "M", "vmin", "vmax", "distinct", "n_distinct"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    _assert_same(a2, cpu.sketch(X[:60_001], None, n_moments=15, max_distinct=128), X[:60_001], None, 15)


def test_fast_repeated_call_reuses_plan_not_results():
    """A repeated call on the same array skips the checks and planning, never the work: new data in the same memory
    gives the new sketch (equal to the CPU twin), inf written in is still rejected, and another dtype or shape is
    planned afresh."""
    import cupy as cp

    from hitml.kernels.sketch import _gpu_moments

    rng = np.random.default_rng(12)
    X = np.column_stack([rng.normal(size=80_000), np.round(rng.normal(size=80_000) * 3)]).astype(np.float32)
    Xd = cp.asarray(X)
    for _ in range(3):  # the first call plans, the second captures a graph, the third launches it
        _assert_same(_gpu_moments.sketch_moments(Xd), cpu.sketch(X, None), X, None, 15)
    assert _gpu_moments._local.last.graph is not _gpu_moments._UNTRIED
    Xd[7, 1] = cp.inf
    with pytest.raises(ValueError, match="inf"):
        _gpu_moments.sketch_moments(Xd)
    X[:, 1] = np.round(rng.normal(size=80_000) * 5)
    Xd[...] = cp.asarray(X)
    _assert_same(_gpu_moments.sketch_moments(Xd), cpu.sketch(X, None), X, None, 15)
    X64 = X[:50_000].astype(np.float64)
    _assert_same(_gpu_moments.sketch_moments(cp.asarray(X64)), cpu.sketch(X64, None), X64, None, 15)
    with pytest.raises(ValueError, match="n_moments"):
        _gpu_moments.sketch_moments(Xd, n_moments=1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("n", [1, 700, 50_000])
def test_gpu_row_sample_equals_cpu_twin(dtype, weighted, n):
    """sample.cu selects and gathers the same rows as sample.py: keys, values, weights and tau bit for bit."""
    import cupy as cp

    from hitml.kernels.sketch import gpu

    rng = np.random.default_rng(n)
    X = rng.standard_t(2, (n, 7)).astype(dtype)
    X[rng.random((n, 7)) < 0.05] = np.nan
    X[:, 3] = np.float32(1e-40) if dtype == np.float32 else 1e-310  # subnormals: exact in the salt
    w = rng.uniform(0, 2, n) if weighted else None
    g = gpu.sketch(cp.asarray(X), None if w is None else cp.asarray(w), n_moments=8, max_distinct=16,
                   n_sample=512).sample
    c = cpu.sketch(X, w, n_moments=8, max_distinct=16, n_sample=512).sample
    # n <= 512 keeps every row; else the rows under the threshold (binomial, mean 512), at most 512 of them
    assert g.tau == c.tau and g.n_rows == c.n_rows and (c.n_rows == n if n <= 512 else 400 < c.n_rows <= 512)
    np.testing.assert_array_equal(g.key, c.key)
    np.testing.assert_array_equal(g.x, c.x)
    np.testing.assert_array_equal(g.w, c.w)


@pytest.mark.parametrize("device_sort", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_gpu_row_sample_sorted_on_device_equals_cpu_twin(device_sort, seed, monkeypatch):
    """The selected rows sorted by key on the device (sample_sort) or on the host: the CPU twin's sample bit for bit,
    where more rows than n_sample fall under the threshold (seeds 1, 3, 4: the k smallest kept, tau lowered to the
    k-th key) and where fewer do (2, 5: tau stays the threshold); and (seed 0) a sample too large for the device sort
    (n_sample 10,000: 10,864 rows of room, over SORT_MAX) sorted on the host."""
    import cupy as cp

    from hitml.kernels.sketch import gpu
    from hitml.kernels.sketch import sample as rs

    monkeypatch.setattr(gpu, "DEVICE_SORT", device_sort)
    rng = np.random.default_rng(seed)
    n = 20_000
    X = rng.standard_t(2, (n, 5)).astype(np.float32)
    k = 256 if seed else 10_000
    g = gpu.sketch(cp.asarray(X), n_moments=8, max_distinct=16, n_sample=k).sample
    c = cpu.sketch(X, None, n_moments=8, max_distinct=16, n_sample=k).sample
    if seed:
        assert (c.tau == rs.threshold(n, k)) == (seed in (2, 5))
    assert g.tau == c.tau and g.n_rows == c.n_rows
    np.testing.assert_array_equal(g.key, c.key)
    np.testing.assert_array_equal(g.x, c.x)
    np.testing.assert_array_equal(g.w, c.w)
    assert g.x.flags.owndata  # a copy, not a view of the buffer the next call reuses


def test_gpu_cuts_checked_like_cpu():
    """The GPU sketch's sample drives the same checks: hostile columns get the same fallback cuts as on the CPU."""
    import cupy as cp

    from hitml.kernels.sketch import gpu
    from hitml.kernels.sketch.cuts import cut_points

    rng = np.random.default_rng(3)
    n = 200_000
    X = np.column_stack([rng.normal(size=n), rng.standard_t(1, n), np.where(rng.random(n) < 0.7, 0.0,
                                                                               rng.lognormal(size=n))])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = cut_points(gpu.sketch(cp.asarray(X), n_moments=12), 64)
        c = cut_points(cpu.sketch(X, n_moments=12), 64)
    assert list(g.source) == list(c.source) == ["moments", "sample", "sample"]
    for j in (1, 2):
        np.testing.assert_array_equal(g.values[j], c.values[j])
