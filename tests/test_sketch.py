"""kernels.sketch on the CPU: central sums vs a two-pass NumPy reference, merge/update/weights, solvers, cuts."""
from __future__ import annotations

import math
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest

from hitml.kernels.sketch import MomentSketch, cpu, update
from hitml.kernels.sketch.cuts import cut_points, exact_cut_points
from hitml.kernels.sketch.solvers import quantiles

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from _naive_sketch import naive_sketch  # the benchmark's baseline (integration/)


def two_pass(X, w=None, l=12):
    """Reference: weighted mean, central sums and abs central sums (error scale) per column, NaN skipped."""
    X = np.asarray(X, np.float64)
    w = np.ones(X.shape[0]) if w is None else np.asarray(w, np.float64)
    out, scale, means, W = [], [], [], []
    for j in range(X.shape[1]):
        ok = ~np.isnan(X[:, j]) & (w > 0)
        x, ww = X[ok, j], w[ok]
        m = math.fsum(ww * x) / math.fsum(ww)  # correctly rounded sums: the reference mean is within an ulp
        dl = x - m
        out.append([math.fsum(ww * dl**k) for k in range(2, l + 1)])
        scale.append([np.sum(ww * np.abs(dl) ** k) for k in range(2, l + 1)])
        means.append(m)
        W.append(ww.sum())
    return np.array(out), np.array(scale), np.array(means), np.array(W)


def assert_moments(sk, X, w=None, tol=1e-12):
    M, scale, mean, W = two_pass(X, w, sk.n_moments)
    np.testing.assert_allclose(sk.weight, W, rtol=1e-13)
    assert np.all(np.abs(sk.mean - mean) <= tol * (np.abs(mean) + np.sqrt(scale[:, 0] / W)))
    err = np.abs(sk.M - M) / scale
    assert err.max() < tol, err.max()


def niae(x, qf):
    """The digest's NIAE: 1000-point trapezoid over phi, empirical quantile at rank floor(n phi), over the range."""
    xs = np.sort(x)
    n = xs.size
    phi = np.linspace(0, 1, 1000)
    emp = xs[np.minimum((n * phi).astype(np.int64), n - 1)]
    return np.trapezoid(np.abs(qf - emp), phi) / (xs[-1] - xs[0])


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    n = 6000
    X = np.column_stack([
        rng.normal(3, 2, n), rng.lognormal(0, 1, n), rng.normal(1000, 1, n), np.round(rng.normal(0, 3, n)),
        rng.pareto(2.0, n) + 1.0,
    ])
    X[rng.random(n) < 0.03, 1] = np.nan
    return X


@pytest.mark.parametrize("l", [4, 12, 20])
def test_blockwise_sketch_matches_two_pass(data, l):
    sk = cpu.sketch(data, n_moments=l, block_rows=257)
    assert_moments(sk, data)
    np.testing.assert_array_equal(sk.vmin, np.nanmin(data, 0))
    np.testing.assert_array_equal(sk.vmax, np.nanmax(data, 0))


def test_merge_of_pieces_matches_two_pass_and_order(data):
    rng = np.random.default_rng(1)
    cuts = np.sort(rng.choice(np.arange(1, data.shape[0]), 6, replace=False))
    pieces = [cpu.sketch(p, n_moments=15) for p in np.split(data, cuts)]
    left = pieces[0]
    for p in pieces[1:]:
        left = left.merge(p)
    right = pieces[-1]
    for p in pieces[-2::-1]:
        right = p.merge(right)
    tree = (pieces[0] + pieces[3]) + ((pieces[5] + pieces[1]) + (pieces[6] + (pieces[2] + pieces[4])))
    for s in (left, right, tree):
        assert_moments(s, data)
        np.testing.assert_array_equal(s.n_distinct, left.n_distinct)
    assert_moments(left, data, tol=1e-12)


def test_incremental_update_matches_two_pass(data):
    X = data[:400]
    sk = MomentSketch.empty(X.shape[1], 12, max_distinct=64)
    for row in X:
        sk = update(sk, row)
    centred = [0, 1, 3, 4]
    sub = MomentSketch(sk.weight[centred], sk.mean[centred], sk.M[centred], sk.vmin[centred], sk.vmax[centred],
                       sk.distinct[centred], sk.n_distinct[centred])
    assert_moments(sub, X[:, centred])
    # N(1000, 1): each of the n sequential mean updates rounds at ulp(1000) = 1.1e-13 sigma, a random walk of
    # ~sqrt(n) ulps that no state of this size avoids; the bound is that floor, still far below 1e-11
    off = MomentSketch(sk.weight[[2]], sk.mean[[2]], sk.M[[2]], sk.vmin[[2]], sk.vmax[[2]], sk.distinct[[2]],
                       sk.n_distinct[[2]])
    assert_moments(off, X[:, [2]], tol=4 * np.sqrt(len(X)) * np.spacing(1000.0))
    np.testing.assert_array_equal(sk.n_distinct[3], np.unique(X[:, 3]).size)


def test_weighted_equals_repeated_rows(data):
    rng = np.random.default_rng(3)
    X = data[:2000]
    reps = rng.integers(0, 4, X.shape[0])
    a = cpu.sketch(X, reps.astype(float), n_moments=15)
    b = cpu.sketch(np.repeat(X, reps, axis=0), n_moments=15)
    Mb, scale, _, _ = two_pass(np.repeat(X, reps, axis=0), None, 15)
    assert (np.abs(a.M - b.M) / scale).max() < 1e-12
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-12)
    np.testing.assert_array_equal(a.weight, b.weight)
    np.testing.assert_array_equal(a.vmin, b.vmin)
    np.testing.assert_array_equal(a.vmax, b.vmax)
    np.testing.assert_array_equal(a.n_distinct, b.n_distinct)
    assert_moments(a, X, reps)


def test_nan_is_missing(data):
    ok = ~np.isnan(data[:, 1])
    a = cpu.sketch(data[:, 1:2], n_moments=10)
    b = cpu.sketch(data[ok, 1:2], n_moments=10)
    np.testing.assert_allclose(a.M, b.M, rtol=1e-12)
    assert a.weight[0] == ok.sum()


def test_serialise_roundtrip(data):
    sk = cpu.sketch(data, n_moments=8)
    for back in (MomentSketch.from_bytes(sk.to_bytes()), pickle.loads(pickle.dumps(sk))):
        for f in ("weight", "mean", "M", "vmin", "vmax", "n_distinct"):
            np.testing.assert_array_equal(getattr(back, f), getattr(sk, f))
        np.testing.assert_array_equal(back.distinct[3], sk.distinct[3])
        np.testing.assert_array_equal(back.sample.x, sk.sample.x)
        np.testing.assert_array_equal(back.sample.key, sk.sample.key)
        assert back.sample.tau == sk.sample.tau
    # overflowed distinct sets are not stored; the row sample: 8-byte keys and float32 values, no unit weights
    extra = sk.sample.n_rows * (8 + 4 * data.shape[1])
    assert len(sk.to_bytes()) < 20_000 + extra
    assert len(cpu.sketch(data, n_moments=8, n_sample=0).to_bytes()) < 20_000


def test_no_naive_breakdown_on_shifted_normal():
    """Seed Table 5 pattern on N(1000, 1): central sums give NIAE ~ 0.002, naive power sums fall apart."""
    x = np.random.default_rng(5).normal(1000, 1, 1_000_000)
    phi = np.linspace(0, 1, 1000)
    for l in (10, 15):
        sk = cpu.sketch(x[:, None], n_moments=l)
        assert niae(x, quantiles(sk, phi, "maxent")[0]) < 0.003
        assert niae(x, quantiles(sk, phi, "legendre")[0]) < 0.01
        bad = naive_sketch(x, l)
        assert niae(x, quantiles(bad, phi, "legendre")[0]) > 0.05


@pytest.mark.parametrize("method,limit", [("maxent", 0.003), ("legendre", 0.01)])
def test_quantile_accuracy_vs_exact(method, limit):
    rng = np.random.default_rng(11)
    n = 50_000
    X = np.column_stack([rng.normal(size=n), rng.lognormal(size=n), rng.exponential(size=n),
                         np.where(rng.random(n) < 0.3, rng.normal(-3, 0.5, n), rng.normal(2, 1, n))])
    sk = cpu.sketch(X, n_moments=15)
    phi = np.linspace(0, 1, 1000)
    Q = quantiles(sk, phi, method)
    errs = [niae(X[:, j], Q[j]) for j in range(X.shape[1])]
    assert max(errs) < limit, errs


def test_cuts_sorted_unique_covering(data):
    sk = cpu.sketch(data, n_moments=15, max_distinct=64)
    cuts = cut_points(sk, max_bin=64)
    for j, c in enumerate(cuts.values):
        col = data[~np.isnan(data[:, j]), j].astype(np.float32)
        assert c.dtype == np.float32 and c.size <= 63
        assert np.all(np.diff(c) > 0)
        assert c[0] > col.min() and c[-1] == col.max()
        counts = np.bincount(np.searchsorted(c, col, side="right"), minlength=c.size + 1)
        assert counts.sum() == col.size
        if not cuts.exact[j]:  # roughly equal-mass bins (all but the max's own bin)
            assert counts[:-1].max() < 6 * col.size / 62
    assert cuts.exact[3] and not cuts.exact[0]
    np.testing.assert_array_equal(cuts.values[3], np.unique(data[:, 3]).astype(np.float32)[1:])


def test_constant_empty_and_few_values():
    X = np.column_stack([np.full(100, 4.5), np.full(100, np.nan), np.tile([1.0, 2.0], 50)])
    for sk in (cpu.sketch(X), MomentSketch.empty(3)):
        cuts = cut_points(sk, max_bin=16)
        assert cuts.values[0].size == 0 if sk.weight[0] else True
    cuts = cut_points(cpu.sketch(X), max_bin=16)
    assert cuts.values[0].size == 0 and cuts.values[1].size == 0
    np.testing.assert_array_equal(cuts.values[2], [2.0])
    assert np.isnan(cuts.vmin[1])


def test_exact_cut_points_match_sorting():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(5000, 1))
    cuts = exact_cut_points(x, max_bin=11)
    xs = np.sort(x[:, 0]).astype(np.float32)
    # 9 interior quantiles at i/10 (rank ceil), then the max
    expect = xs[np.ceil(np.arange(1, 10) / 10 * 5000).astype(int) - 1]
    np.testing.assert_array_equal(cuts.values[0], np.append(expect, xs[-1]))


def test_bad_input():
    with pytest.raises(ValueError, match="inf"):
        cpu.sketch(np.array([[1.0], [np.inf]]))
    with pytest.raises(ValueError, match="2-D"):
        cpu.sketch(np.ones(5))
    with pytest.raises(ValueError, match="n_moments"):
        cpu.sketch(np.ones((5, 1)), n_moments=40)
    with pytest.raises(ValueError, match="sample_weight"):
        cpu.sketch(np.ones((5, 1)), np.ones(4))
    with pytest.raises(ValueError, match="non-negative"):
        cpu.sketch(np.ones((5, 1)), -np.ones(5))
    a, b = MomentSketch.empty(2, 5), MomentSketch.empty(3, 5)
    with pytest.raises(ValueError, match="merge"):
        a.merge(b)
    with pytest.raises(ValueError, match="max_bin"):
        cut_points(a, max_bin=1)
    with pytest.raises(ValueError, match="method"):
        quantiles(a, [0.5], "cosine")


# ------------------------------------------------------------------------------------------- solver thread pool
def test_solver_threads_do_not_change_results(data, monkeypatch):
    """The nogil per-feature solver gives the same quantiles on 1 thread and on several (no shared state)."""
    from hitml.kernels.sketch import _newton

    sk = cpu.sketch(data, n_moments=15)
    phi = np.linspace(0, 1, 257)
    monkeypatch.setenv("HITML_SOLVER_THREADS", "1")
    assert _newton.n_threads() == 1
    one = [quantiles(sk, phi, m) for m in ("maxent", "legendre")]
    monkeypatch.setenv("HITML_SOLVER_THREADS", "4")
    many = [quantiles(sk, phi, m) for m in ("maxent", "legendre")]
    for a, b in zip(one, many):
        np.testing.assert_array_equal(a, b)


def test_maxent_newton_matches_batched_numpy(data):
    """The Numba Newton (thread pool) and the batched-NumPy reference iteration reach the same theta."""
    from hitml.kernels.sketch import solvers

    sk = cpu.sketch(data, n_moments=10)
    mu, ok = solvers.scaled_moments(sk)
    cm = mu[ok] @ solvers._basis_from_power(10, "cheb").T
    t1, c1 = solvers.maxent_theta(cm)
    t2, c2 = solvers.maxent_theta_numpy(cm)
    both = c1 & c2
    assert both.sum() >= 3
    np.testing.assert_allclose(t1[both], t2[both], atol=1e-6)


def test_invert_cdf_matches_bruteforce():
    """First crossing of phi by a (clipped, running-max) CDF row, linear between grid points, vs a Python loop."""
    from hitml.kernels.sketch.solvers import _invert_cdf

    rng = np.random.default_rng(4)
    grid = np.linspace(-1, 1, 101)
    F = np.cumsum(rng.uniform(0, 1, (6, 101)), axis=1)
    F = F / F[:, -1:] * 1.02 - 0.01  # spills below 0 and above 1: clipped
    F[2, 40:60] = F[2, 39]  # a flat stretch
    F[3, 50] = F[3, 49] - 0.2  # non-monotone: the running max applies
    phis = np.concatenate([[0.0, 1.0], rng.uniform(0, 1, 50), F[2, 39:40].clip(0, 1)])
    got = _invert_cdf(F, grid, phis)
    for r in range(F.shape[0]):
        mono = np.maximum.accumulate(np.clip(F[r], 0, 1))
        for p, phi in enumerate(phis):
            k = next((i for i in range(mono.size) if mono[i] >= phi), mono.size)
            k = min(max(k, 1), mono.size - 1)
            f0, f1 = mono[k - 1], mono[k]
            frac = (phi - f0) / (f1 - f0) if f1 > f0 else 0.0
            expect = grid[k - 1] + min(max(frac, 0.0), 1.0) * (grid[k] - grid[k - 1])
            assert got[r, p] == pytest.approx(expect, abs=1e-15)


@pytest.mark.parametrize("d", [1, 2, 7, 63, 1000, 2001])
def test_solver_pool_visits_every_feature_once(monkeypatch, d):
    """run_features hands feature ranges to the pool threads: together they cover [0, d) exactly once, whatever the
    thread count and range size (a feature solved twice or never would be a silent wrong cut)."""
    import threading

    from hitml.kernels.sketch import _newton

    for threads in ("1", "2", "3"):
        monkeypatch.setenv("HITML_SOLVER_THREADS", threads)
        seen = np.zeros(d, np.int64)
        lock = threading.Lock()

        def visit(out, j0, j1, lock=lock):
            assert 0 <= j0 < j1 <= d
            with lock:
                out[j0:j1] += 1

        _newton.run_features(visit, d, seen)
        np.testing.assert_array_equal(seen, np.ones(d, np.int64))


def test_solver_pool_raises_a_kernel_error(monkeypatch):
    """An exception in one range reaches the caller (the other threads stop taking ranges)."""
    from hitml.kernels.sketch import _newton

    monkeypatch.setenv("HITML_SOLVER_THREADS", "2")

    def boom(j0, j1):
        if j0 <= 500 < j1:
            raise FloatingPointError("feature 500")

    with pytest.raises(FloatingPointError, match="feature 500"):
        _newton.run_features(boom, 2000)


@pytest.mark.parametrize("threads", ["1", "3"])
def test_distinct_scan_matches_np_unique(threads, monkeypatch):
    """The chunked hash-table distinct scan gives np.unique of each column's finite values (-0.0 as +0.0), or -1
    past max_distinct, whatever the column chunks and threads (widths that are not a multiple of a chunk)."""
    monkeypatch.setenv("HITML_SOLVER_THREADS", threads)
    rng = np.random.default_rng(21)
    for n, d, cap in ((700, 37, 16), (3000, 130, 64), (50, 5, 256)):
        X = rng.standard_normal((n, d)).astype(np.float32)
        k = rng.integers(1, 3 * cap, d)  # some columns below cap, some above
        for j in range(d):
            if j % 3:
                X[:, j] = rng.integers(0, k[j], n) - k[j] // 2
        X[rng.random((n, d)) < 0.1] = -0.0
        X[rng.random((n, d)) < 0.1] = np.nan
        X[:, 0] = np.nan
        X[: n // 2, 1] = cap + 1.5  # an early repeated value, then the column's others
        sk = cpu.sketch(X, max_distinct=cap)
        for j in range(d):
            f = X[:, j][np.isfinite(X[:, j])].astype(np.float64) + 0.0
            u = np.unique(f)
            if u.size > cap:
                assert sk.n_distinct[j] == -1, (n, d, j)
            else:
                assert sk.n_distinct[j] == u.size, (n, d, j)
                got = sk.distinct[j, : u.size]
                assert got.tobytes() == u.tobytes() and np.isnan(sk.distinct[j, u.size:]).all(), (n, d, j)
