"""GPU moment sketch vs its CPU twin (Numba): equal within 1e-12 relative to each moment's scale, for both read
kernels (sketch_bulk, the default on sm_90+, and sketch_tiles) at every l up to 24; the row sample bit for bit."""
from __future__ import annotations

import numpy as np
import pytest

from hitml.kernels.sketch import cpu

from _sketch_gpu import _assert_same, central_from_power_sums, sample_rows

pytestmark = pytest.mark.gpu
VARIANTS = ["fast", "fast_tiles"]  # fast_tiles: bulk=False (the cp.async read)


def _gpu_sketch(X, w=None, *, variant="fast", **kw):
    from hitml.kernels.sketch import gpu

    if variant == "fast_tiles":
        kw = {**kw, "bulk": False}
    return gpu.sketch(X, w, **kw)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("l,weighted", [(15, False), (20, True), (24, False), (8, True)])
def test_gpu_equals_cpu_twin(dtype, l, weighted, variant):
    import cupy as cp

    rng = np.random.default_rng(l)
    n = 200_003
    X = np.column_stack([rng.normal(1000, 1, n), rng.lognormal(size=n), np.round(rng.normal(size=n) * 3),
                         rng.pareto(2.5, n) + 1, np.full(n, -3.25)] + [rng.normal(size=n) for _ in range(35)])
    X = X.astype(dtype)
    X[rng.random(n) < 0.02, 1] = np.nan
    w = rng.uniform(0, 2, n) if weighted else None
    g = _gpu_sketch(cp.asarray(X), None if w is None else cp.asarray(w), n_moments=l, max_distinct=64, variant=variant)
    c = cpu.sketch(X, w, n_moments=l, max_distinct=64)
    _assert_same(g, c, X, w, l, tol=_tolerance(variant, l))
    assert c.n_distinct[2] > 0 and c.n_distinct[4] == 1 and c.n_distinct[0] == -1


def _tolerance(variant, l):
    return 1e-12


def _fast_and_twin(X, w, bulk, cap=256):
    """The fast GPU sketch (read kernel chosen by bulk) and the CPU twin of X with weights w, l = 15."""
    import cupy as cp

    from hitml.kernels.sketch import gpu

    g = gpu.sketch(cp.asarray(X), None if w is None else cp.asarray(w), n_moments=15, max_distinct=cap,
                   bulk=bulk)
    return g, cpu.sketch(X, w, n_moments=15, max_distinct=cap)


@pytest.mark.parametrize("bulk", [None, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fast_distinct_paths(dtype, bulk):
    """Many discrete columns (shared sets run out: global-table fallback), a column whose strided sample looks
    discrete but has more than max_distinct values overall, -0.0 vs 0.0, weights of zero hiding values."""
    rng = np.random.default_rng(5)
    n = 120_001
    cols = [rng.integers(0, 3 + 9 * j, n).astype(np.float64) - 4 for j in range(26)]
    tail = rng.integers(0, 150, n).astype(np.float64)
    tail[-3000:] = 1000 + np.arange(3000) % 300  # 300 extra values, nearly absent from a 2048-row sample
    zero = rng.choice([0.0, -0.0, 1.5], n)
    X = np.column_stack(cols + [tail, zero, rng.normal(size=n), np.sort(rng.normal(50, 2, n))]).astype(dtype)
    X[rng.random(n) < 0.05, 3] = np.nan
    w = rng.uniform(0, 1, n)
    w[rng.random(n) < 0.3] = 0.0
    for ww in (None, w):
        g, c = _fast_and_twin(X, ww, bulk)
        _assert_same(g, c, X, ww, 15, tol=_tolerance("fast", 15))
        assert c.n_distinct[26] == -1 and c.n_distinct[27] == 2 and (c.n_distinct[:26] > 0).all()


@pytest.mark.parametrize("variant", VARIANTS)
def test_gpu_rejects_inf_and_handles_empty(variant):
    import cupy as cp

    X = cp.asarray(np.array([[1.0, np.nan], [np.inf, np.nan], [2.0, np.nan]]))
    with pytest.raises(ValueError, match="inf"):
        _gpu_sketch(X, variant=variant)
    s = _gpu_sketch(X[[0, 2]], variant=variant)
    assert s.weight[1] == 0 and np.isnan(s.vmin[1]) and s.n_distinct[1] == 0 and s.n_distinct[0] == 2


@pytest.mark.parametrize("variant", VARIANTS)
def test_gpu_small_and_odd_shapes(variant):
    import cupy as cp

    rng = np.random.default_rng(0)
    for n, d in [(1, 1), (7, 33), (1000, 64), (129, 3), (5000, 300), (3000, 1)]:
        X = rng.normal(size=(n, d))
        g = _gpu_sketch(cp.asarray(X), n_moments=6, variant=variant)
        c = cpu.sketch(X, n_moments=6)
        np.testing.assert_allclose(g.mean, c.mean, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(g.M, c.M, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("opts", [{"vals": 4, "stages": 2, "minb": 3, "fastpath": False}, {"vals": 16, "stages": 4},
                                  {"vals": 8}, {"vals": 4, "fastpath": False, "bulk": False},
                                  {"bulk": False}])
def test_fast_options_subnormals_and_signed_zero(opts):
    """float32 subnormals, -0.0 and zeros give the twin's sketch (min/max and distinct sets compared exactly) under
    CuPy's -ftz=true: the kernels convert and compare floats by cvt.f64.f32 and min / max without .ftz (the first
    column's chunks are all subnormals and zeros, so its min and max come from the straight-line path)."""
    import cupy as cp

    from hitml.kernels.sketch import gpu

    rng = np.random.default_rng(9)
    n = 50_001
    tiny = np.float32(1e-40)  # subnormal in float32
    sub = rng.choice(np.array([tiny, -tiny, 0.0, -0.0, 3 * tiny], np.float32), n)
    mix = rng.normal(size=n).astype(np.float32)
    mix[rng.random(n) < 0.3] = tiny
    mix[rng.random(n) < 0.3] = -0.0
    neg = -np.abs(rng.normal(size=n)).astype(np.float32) * np.float32(1e-38)  # normal and subnormal, all negative
    X = np.column_stack([sub, mix, rng.lognormal(size=n), np.round(rng.normal(size=n) * 2), neg]).astype(np.float32)
    for w in (None, rng.uniform(0, 1, n)):
        g = gpu.sketch(cp.asarray(X), None if w is None else cp.asarray(w), n_moments=15, max_distinct=64,
                       **opts)
        c = cpu.sketch(X, w, n_moments=15, max_distinct=64)
        _assert_same(g, c, X, w, 15)
        assert c.n_distinct[0] == 4  # -tiny, 0 (-0.0 counts as 0.0), tiny, 3 tiny
        assert g.vmin[0] == -float(tiny) and g.vmax[0] == 3 * float(tiny)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fast_wide_unaligned_weighted(dtype):
    """300 columns (two column tiles), discrete columns in both tiles, NaN, an empty column, weights with zeros,
    and X starting 1 row into a buffer (not 16-byte aligned for odd d: the element-wise copy path)."""
    import cupy as cp

    from hitml.kernels.sketch import gpu

    rng = np.random.default_rng(11)
    for n, d in [(40_001, 301), (30_001, 49)]:
        A = rng.normal(size=(n + 1, d))
        for j in (0, 7, 45, 255, 256, 260, 300):
            if j < d:
                A[:, j] = rng.integers(-5, 5 + j % 7, n + 1)
        A[:, 10] = np.round(A[:, 10] * 20)  # about 180 values: a candidate that stays under 256
        A[rng.random(n + 1) < 0.1, 3] = np.nan
        A[:, d - 2] = np.nan
        A = A.astype(dtype)
        Xd = cp.asarray(A)[1:]
        X = A[1:]
        w = rng.uniform(0, 1, n)
        w[rng.random(n) < 0.2] = 0.0
        for ww in (None, w):
            g = gpu.sketch(Xd, None if ww is None else cp.asarray(ww), n_moments=12, max_distinct=256)
            c = cpu.sketch(X, ww, n_moments=12, max_distinct=256)
            _assert_same(g, c, X, ww, 12)
            assert c.n_distinct[d - 2] == 0 and c.n_distinct[10] > 100 and c.n_distinct[1] == -1


def test_fast_no_tracking_and_large_cap():
    """max_distinct=0: n_distinct is -1 for a column with data and 0 for an empty one (as the twin); a cap above
    the device sort's limit (sets sorted on the host) with a column of 4500 distinct values."""
    import cupy as cp

    from hitml.kernels.sketch import gpu, _gpu_moments

    rng = np.random.default_rng(12)
    n = 30_000
    X = np.column_stack([rng.normal(size=n), np.full(n, np.nan), rng.integers(0, 4500, n).astype(np.float64),
                         rng.normal(size=n)])
    g = gpu.sketch(cp.asarray(X), n_moments=10, max_distinct=0)
    c = cpu.sketch(X, n_moments=10, max_distinct=0)
    _assert_same(g, c, X, None, 10)
    assert list(g.n_distinct) == [-1, 0, -1, -1]
    cap = _gpu_moments.EXTRACT_MAX + 904
    g = gpu.sketch(cp.asarray(X), n_moments=10, max_distinct=cap)
    c = cpu.sketch(X, n_moments=10, max_distinct=cap)
    _assert_same(g, c, X, None, 10)
    assert c.n_distinct[2] == np.unique(X[:, 2]).size and c.n_distinct[0] == -1
    with pytest.raises(ValueError, match="max_distinct"):
        gpu.sketch(cp.asarray(X), max_distinct=-1)


def test_fast_shared_memory_limit_across_plans():
    """Plans of one shape share the compiled kernel: a call needing less dynamic shared memory (no distinct sets)
    must not lower the limit a later call with sets needs (seen on the H100: CUDA_ERROR_INVALID_VALUE)."""
    import cupy as cp

    from hitml.kernels.sketch import gpu

    rng = np.random.default_rng(13)
    X = rng.normal(size=(20_000, 50)).astype(np.float32)
    X[:, 3] = np.round(X[:, 3] * 4)
    Xd = cp.asarray(X)
    for md in (256, 0, 256):
        for vals, stages in ((16, 3), (8, 2)):
            g = gpu.sketch(Xd, n_moments=15, max_distinct=md, vals=vals, stages=stages)
            c = cpu.sketch(X, n_moments=15, max_distinct=md)
            _assert_same(g, c, X, None, 15)


def test_device_shift_matches_two_pass():
    """The finish kernel's shift: power sums about a centre near the mean -> mean and central sums, vs a two-pass
    reference. The power sums come from math.fsum (correctly rounded), so only the shift itself is under test; the
    centre is 0.05 standard deviations off the mean (inside the re-sketch threshold of 0.1, so no redo flag) and
    for one column 0.5 (flagged)."""
    import math


    rng = np.random.default_rng(3)
    n = 6000
    data = np.column_stack([rng.normal(3, 2, n), rng.lognormal(0, 1, n), rng.normal(1000, 1, n),
                            np.round(rng.normal(0, 3, n)), rng.pareto(2.0, n) + 1.0])
    data[rng.random(n) < 0.03, 1] = np.nan
    w = rng.uniform(0, 2, n)
    l = 20
    d = data.shape[1]
    mean, M, W, scale = np.empty(d), np.empty((d, l - 1)), np.empty(d), np.empty((d, l - 1))
    for j in range(d):
        ok = ~np.isnan(data[:, j])
        x, ww = data[ok, j], w[ok]
        W[j] = math.fsum(ww)
        mean[j] = math.fsum(ww * x) / W[j]
        dl = x - mean[j]
        M[j] = [math.fsum(ww * dl**k) for k in range(2, l + 1)]
        scale[j] = [np.sum(ww * np.abs(dl) ** k) for k in range(2, l + 1)]
    off = np.full(d, 0.05)
    off[4] = 0.5
    centre = mean + off * np.sqrt(M[:, 0] / W)
    S = np.empty((d, l))
    for j in range(d):
        ok = ~np.isnan(data[:, j])
        dl = data[ok, j] - centre[j]
        S[j] = [math.fsum(w[ok] * dl**k) for k in range(1, l + 1)]
    m2, M2, redo = central_from_power_sums(W, S, centre)
    assert (np.abs(M2 - M) / scale)[:4].max() < 1e-12
    assert np.all(np.abs(m2 - mean) <= 1e-12 * (np.abs(mean) + np.sqrt(scale[:, 0] / W)))
    assert list(redo) == [False, False, False, False, True]
    m0, M0, r0 = central_from_power_sums(np.zeros(2), np.zeros((2, 5)), np.array([1.5, -2.0]))
    assert (m0 == 0).all() and (M0 == 0).all() and not r0.any()  # empty columns


def test_fast_recentres_unrepresentative_sample_and_all_missing_sample():
    """A column whose sampled rows (sample_rows, the kernel's sample) hold only a spike (centre ~6 sd off:
    re-sketched about its mean) and a column missing at every sampled row but valid elsewhere (centre from the whole
    column)."""
    import cupy as cp

    from hitml.kernels.sketch import gpu, _gpu_moments

    rng = np.random.default_rng(1)
    m = 37
    n = _gpu_moments.SAMPLE_ROWS * m
    rows = sample_rows(n)
    assert rows.size == _gpu_moments.SAMPLE_ROWS and np.unique(rows).size == rows.size and rows.max() < n
    spike = rng.normal(0, 1, n)
    spike[rows] = 50 + rng.normal(0, 0.01, rows.size)
    hole = rng.normal(1000, 1, n)
    hole[rows] = np.nan
    X = np.column_stack([spike, hole, rng.normal(size=n)])
    for dtype in (np.float32, np.float64):
        Xd = X.astype(dtype)
        g = gpu.sketch(cp.asarray(Xd), n_moments=15, max_distinct=0)
        c = cpu.sketch(Xd, n_moments=15, max_distinct=0)
        _assert_same(g, c, Xd, None, 15)


@pytest.mark.parametrize("weighted", [False, True])
def test_bulk_read_many_tracked_columns(weighted):
    """The bulk read (sm_90+): 100 columns, 70 of them tracked (more than 32 list entries, more than the 64 shared
    sets: the rest in the global table), columns whose extra values appear only late in the data (dropped from the
    stage lists mid-stream, in some blocks and not others), a partial last tile per block; equal to the CPU twin and
    to the cp.async read."""
    import cupy as cp

    from hitml.kernels.sketch import gpu, _gpu_moments

    if int(cp.cuda.Device().compute_capability) < 90:
        pytest.skip("the bulk copy engine needs sm_90+")
    rng = np.random.default_rng(21)
    n = 300_007
    cols = [rng.integers(0, 2 + j, n).astype(np.float64) * 0.5 for j in range(60)]
    late = []
    for j in range(10):
        v = rng.integers(0, 20, n).astype(np.float64)
        v[n - 1000 * (j + 1):] = 100 + np.arange(1000 * (j + 1)) % (30 + 10 * j)  # over cap 64 only late, or never
        late.append(v)
    X = np.column_stack(cols + late + [rng.normal(size=n) for _ in range(30)]).astype(np.float32)
    X[rng.random(n) < 0.01, 5] = np.nan
    w = rng.uniform(0, 1, n) if weighted else None
    wd = None if w is None else cp.asarray(w)
    g = gpu.sketch(cp.asarray(X), wd, n_moments=15, max_distinct=64, bulk=True)
    c = cpu.sketch(X, w, n_moments=15, max_distinct=64)
    _assert_same(g, c, X, w, 15)
    t = gpu.sketch(cp.asarray(X), wd, n_moments=15, max_distinct=64, bulk=False)
    _assert_same(t, c, X, w, 15)
    assert (c.n_distinct[:60] > 0).all() and (c.n_distinct[60:70] == -1).sum() >= 5 and (c.n_distinct[70:] == -1).all()
    with pytest.raises(ValueError, match="bulk"):  # d odd and X one row into its buffer: tiles not 16-byte aligned
        _gpu_moments.sketch_moments(cp.asarray(np.ones((1001, 5)))[1:], bulk=True)


def _nan_patterns(dtype):
    """NaN bit patterns: NumPy's quiet NaN, its negative, CUDA's canonical NaN, a signalling NaN and the distinct
    sets' empty-slot key (itself a NaN pattern)."""
    if dtype == np.float32:
        bits = np.array([0x7FC00000, 0xFFC00000, 0x7FFFFFFF, 0x7F800001, 0xFFFFFFFF], np.uint32)
    else:
        bits = np.array([0x7FF8000000000000, 0xFFF8000000000000, 0x7FFFFFFFFFFFFFFF, 0x7FF0000000000001,
                         0x7FF8DEAD0000BEEF], np.uint64)
    return bits.view(dtype)


@pytest.mark.parametrize("bulk", [None, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fast_nan_patterns_signed_zero_and_cap_edges(dtype, bulk):
    """The bulk read looks values up by their raw bits (its sets hold -0.0 and common NaN patterns as aliases,
    which never count): NaN of any payload is missing, a column of -0.0 only has the distinct value 0.0, and a
    column of exactly max_distinct values keeps its set while one more value drops it (the sampled candidates are
    decided by a hashed bitmap, a lower bound of the distinct count). Equal to the CPU twin."""
    rng = np.random.default_rng(33)
    n = 200_003
    nans = _nan_patterns(dtype)
    with_nan = rng.integers(0, 40, n).astype(dtype) - 20
    hit = rng.random(n) < 0.2
    with_nan[hit] = nans[rng.integers(0, nans.size, hit.sum())]
    neg_zero = rng.choice(np.array([-0.0, 1.0, 2.0], dtype), n)
    zeros = rng.choice(np.array([0.0, -0.0], dtype), n)
    exact_cap = (np.arange(n) % 256).astype(dtype) * dtype(0.25)
    over_cap = (np.arange(n) % 257).astype(dtype) * dtype(0.25)
    X = np.column_stack([with_nan, neg_zero, zeros, exact_cap, over_cap, rng.normal(size=n).astype(dtype)])
    assert np.signbit(X[:, 1][X[:, 1] == 0]).all()  # the stack kept -0.0
    w = rng.uniform(0, 1, n)
    w[rng.random(n) < 0.25] = 0.0
    for ww in (None, w):
        g, c = _fast_and_twin(X, ww, bulk)
        with np.errstate(invalid="ignore"):  # the scale casts a float32 signalling NaN to float64
            _assert_same(g, c, X, ww, 15)
        assert c.n_distinct[0] == 40 and c.n_distinct[1] == 3 and c.n_distinct[2] == 1
        assert c.n_distinct[3] == 256 and c.n_distinct[4] == -1
        assert g.distinct[1, 0] == 0.0 and not np.signbit(g.distinct[1, 0]) and g.distinct[2, 0] == 0.0
