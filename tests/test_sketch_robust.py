"""Cuts for hostile column shapes (heavy tails, sentinels, point masses) and the mergeable row sample behind them:
bin occupancy against the data itself, exact point masses, a warning naming unresolved columns, and downstream
XGBoost on our cuts no worse than on its own, for maxent and legendre."""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hitml.kernels.sketch import MomentSketch, cpu
from hitml.kernels.sketch.cuts import cut_points
from hitml.kernels.sketch.robust import GUARD_Z, SketchFallbackWarning, sample_screen
from hitml.kernels.sketch.sample import RowSample, mix64
from hitml.xgboost_ext import QuantileBinner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from bench_sketch_battery import battery as bench_battery

N = 20_000


_NAMES = {  # the benchmark battery's families under short names, continuous ones first
    "normal": "normal", "lognormal1": "lognormal(1)", "lognormal3": "lognormal(3)", "t1": "t(1)", "t2": "t(2)",
    "t5": "t(5)", "pareto1.1": "pareto(1.1)", "pareto1.5": "pareto(1.5)", "bimodal1e4": "bimodal 1e4 apart",
    "sentinel0.1%": "sentinel 0.1% at 1e6", "sentinel1%": "sentinel 1% at -1e9", "zero_inflated": "zero-inflated 70%",
    "counts": "integer counts", "spiky": "near-constant, rare spikes",
}


def families(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """The column families of integration/bench_sketch_battery.py (the last four have point masses or few values)."""
    drawn = bench_battery(n, seed)
    return {short: drawn[name] for short, name in _NAMES.items()}


CONTINUOUS = ["normal", "lognormal1", "lognormal3", "t1", "t2", "t5", "pareto1.1", "pareto1.5", "bimodal1e4"]


def _shares(codes: np.ndarray) -> np.ndarray:
    return np.bincount(codes) / codes.size


@pytest.fixture(scope="module")
def battery():
    F = families(N)
    return pd.DataFrame(F)


@pytest.mark.parametrize("method", ["maxent", "legendre"])
@pytest.mark.parametrize("streaming", [False, True])
def test_bin_occupancy_every_family(battery, method, streaming):
    max_bin = 64
    b = QuantileBinner(max_bin=max_bin, method=method)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SketchFallbackWarning)
        if streaming:  # the data are gone at solve time: fallbacks come from the merged row sample
            b.partial_fit(battery.iloc[: N // 2]).partial_fit(battery.iloc[N // 2 :])
        else:
            b.fit(battery)
    codes = b.transform(battery)
    for j, name in enumerate(battery.columns):
        s = _shares(codes[:, j])
        if name in CONTINUOUS:  # no bin above 3/max_bin, and nearly every bin used
            assert s.max() <= 3 / max_bin, (name, s.max() * max_bin, b.cuts_.source[j])
            assert (s > 0).sum() >= 0.9 * max_bin, (name, (s > 0).sum())
    x = battery.to_numpy()
    # a point mass above 1/max_bin of the weight (the zeros) has a bin of its own; sentinels below it do not
    # spoil the bulk: no bin above 3/max_bin among the other values
    _assert_atom_alone(x[:, list(battery.columns).index("zero_inflated")], codes[:, 11], 0.0)
    for name in ("sentinel0.1%", "sentinel1%"):
        j = list(battery.columns).index(name)
        assert _shares(codes[:, j]).max() <= 3 / max_bin, name


def _assert_atom_alone(x, codes, value):
    inbin = x[codes == codes[x == value][0]]
    assert np.all(inbin == value), np.unique(inbin)[:5]


@pytest.mark.parametrize("method", ["maxent", "legendre"])
def test_point_masses_exact_at_max_bin_256(battery, method):
    """At max_bin 256 the 1% sentinel (> 1/256) and the zeros are point masses: each alone in its bin."""
    cols = ["sentinel1%", "zero_inflated", "t2"]
    for streaming in (False, True):
        b = QuantileBinner(max_bin=256, method=method)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SketchFallbackWarning)
            if streaming:
                b.partial_fit(battery[cols].iloc[: N // 2]).partial_fit(battery[cols].iloc[N // 2 :])
            else:
                b.fit(battery[cols])
        codes = b.transform(battery[cols])
        x = battery[cols].to_numpy()
        _assert_atom_alone(x[:, 0], codes[:, 0], -1e9)
        _assert_atom_alone(x[:, 1], codes[:, 1], 0.0)
        assert b.cuts_.source[2] == ("sample" if streaming else "data")


def test_warning_names_the_columns(battery):
    with pytest.warns(SketchFallbackWarning, match=r"'t1'.*'t2'|'t2'"):
        QuantileBinner(max_bin=64).fit(battery[["normal", "t1", "t2"]])
    with warnings.catch_warnings():
        warnings.simplefilter("error", SketchFallbackWarning)  # well-behaved columns stay silent
        b = QuantileBinner(max_bin=64).fit(battery[["normal", "t5"]])
    assert list(b.cuts_.source) == ["moments", "moments"]


@pytest.mark.parametrize("method", ["maxent", "legendre"])
def test_downstream_no_worse_than_xgboost(method):
    """Held-out RMSE of a small XGBoost model on our cuts vs on its own, on the hostile families."""
    xgb = pytest.importorskip("xgboost")
    from hitml.xgboost_ext import quantile_dmatrix

    n = 12_000
    F = families(2 * n, seed=3)
    names = ["t1", "t2", "lognormal3", "pareto1.1", "sentinel0.1%", "zero_inflated", "spiky"]
    X = np.column_stack([F[k] for k in names])
    r = np.random.default_rng(4)
    z = np.column_stack([np.argsort(np.argsort(X[:, j])) / X.shape[0] for j in range(X.shape[1])])  # ranks
    y = np.sin(6 * z[:, 0]) + z[:, 1] ** 2 + (z[:, 2] > 0.7) + np.cos(5 * z[:, 3]) + (X[:, 4] > 1e5) + \
        (X[:, 5] == 0) + (X[:, 6] > 1.0005) + 0.3 * r.normal(size=X.shape[0])
    Xtr, Xte, ytr, yte = X[:n], X[n:], y[:n], y[n:]
    p = {"max_depth": 4, "eta": 0.3, "tree_method": "hist", "max_bin": 64, "nthread": 2}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SketchFallbackWarning)
        fit = QuantileBinner(max_bin=64, method=method).fit(Xtr)
        # streaming: the data are gone at solve time, so the fallbacks come from the merged row sample
        stream = QuantileBinner(max_bin=64, method=method).partial_fit(Xtr[: n // 2]).partial_fit(Xtr[n // 2 :])
    dte = xgb.DMatrix(Xte)
    theirs = xgb.train(p, xgb.QuantileDMatrix(Xtr, ytr, max_bin=64), 40)
    ref = float(np.sqrt(np.mean((theirs.predict(dte) - yte) ** 2)))
    for b in (fit, stream):
        ours = xgb.train(p, quantile_dmatrix(Xtr, ytr, binner=b), 40)
        rmse = float(np.sqrt(np.mean((ours.predict(dte) - yte) ** 2)))
        assert rmse <= 1.01 * ref, (rmse, ref, list(b.cuts_.source))


def _sample(n, seed, d=3, cap=500):
    X = np.random.default_rng(seed).normal(size=(n, d))
    X[::11, 1] = np.nan
    return RowSample.of_rows(X, None, cap)


def test_row_sample_merge_is_exact():
    a, b, c = _sample(3000, 0), _sample(700, 1), _sample(5000, 2)

    def same(p, q):
        return p.tau == q.tau and np.array_equal(p.key, q.key) and np.array_equal(p.x, q.x, equal_nan=True)

    assert same(a.merge(b), b.merge(a))
    assert same(a.merge(b).merge(c), a.merge(b.merge(c)))
    m = a.merge(b).merge(c)
    # the merged sample is exactly the union's rows with key <= tau, at most cap of them
    keys = np.concatenate([s.key for s in (a, b, c)])
    assert m.n_rows == min(500, int((keys <= np.uint64(min(a.tau, b.tau, c.tau))).sum()))
    assert np.all(np.diff(m.key.astype(np.float64)) >= 0) and m.key[-1] <= np.uint64(m.tau)
    small = _sample(120, 5)
    assert small.n_rows == 120  # a batch smaller than cap is kept whole


def test_row_sample_is_uniform():
    n = 200_000
    s = RowSample.of_rows(np.arange(n, dtype=np.float64)[:, None], None, 4096)
    assert abs(s.n_rows - 4096) < 1
    u = np.sort(s.x[:, 0].astype(np.float64)) / n
    ks = np.max(np.abs(u - (np.arange(1, u.size + 1) - 0.5) / u.size))
    assert ks < 1.63 / np.sqrt(u.size)  # 1% level of the Kolmogorov-Smirnov statistic
    # mix64 is a bijection: distinct row indices give distinct keys
    z = mix64(np.arange(100_000, dtype=np.uint64))
    assert np.unique(z).size == z.size


def test_sketch_sample_merges_with_the_moments(battery):
    X = battery.to_numpy()
    parts = [cpu.sketch(X[i : i + 5000], n_moments=10) for i in range(0, N, 5000)]
    m = parts[0].merge(parts[1]).merge(parts[2].merge(parts[3]))
    back = MomentSketch.from_bytes(m.to_bytes())
    assert back.sample.n_rows == m.sample.n_rows > 0
    np.testing.assert_array_equal(back.sample.x, m.sample.x)
    # every sampled row is a row of X
    rows = {r.tobytes() for r in X.astype(np.float32)}
    assert all(r.tobytes() in rows for r in m.sample.x)


def test_without_sample_the_cuts_are_flagged_unchecked(battery):
    sk = cpu.sketch(battery[["t2"]].to_numpy(), n_moments=10, n_sample=0)
    assert sk.sample is None
    with pytest.warns(SketchFallbackWarning, match="unchecked"):
        c = cut_points(sk, 64)
    assert c.source[0] == "moments"


def _screen_one(xs, ws, cuts, share, max_bin):
    """Reference: one column at a time, by np.unique and np.bincount."""
    if xs.size == 0:
        return False, False
    u, inv = np.unique(xs, return_inverse=True)
    atom = bool((np.bincount(inv, weights=ws) / ws.sum() > share).any())
    sw, m_eff = ws.sum(), ws.sum() ** 2 / np.dot(ws, ws)
    b = np.bincount(np.searchsorted(cuts, xs, side="right"), weights=ws, minlength=cuts.size + 1) / sw
    e = 1.0 / (max_bin - 1)
    return atom, bool(b.max() > e + GUARD_Z * np.sqrt(e / m_eff) + 1.0 / m_eff)


@pytest.mark.parametrize("weighted", [False, True])
def test_sample_screen_matches_per_column_reference(weighted):
    rng = np.random.default_rng(7)
    seen = set()
    for trial in range(6):
        m, k, max_bin = int(rng.integers(1, 600)), int(rng.integers(1, 9)), int(rng.choice([4, 16, 64]))
        x = rng.standard_normal((m, k)).astype(np.float32)
        x[rng.random((m, k)) < 0.2] = np.nan
        x[rng.random((m, k)) < 0.1 * (trial % 3)] = -999.0  # sentinels make point masses
        x[rng.random((m, k)) < 0.05] = -0.0
        x[:, 0] = np.nan if trial == 5 else x[:, 0]  # an all-missing column
        w = rng.exponential(size=m) * (rng.random(m) > 0.1) if weighted else np.ones(m)
        cuts = [np.unique(np.append(rng.choice([-1.0, 0.0, 0.5, 2.0], int(rng.integers(1, 4))),
                                    np.sort(rng.standard_normal(int(rng.integers(0, max_bin - 2)))))).astype(np.float32)
                for _ in range(k)]
        share = float(rng.choice([0.02, 0.1]))
        atom, crowded = sample_screen(x, w, cuts, share, max_bin)
        for r in range(k):
            ok = ~np.isnan(x[:, r]) & (w > 0)
            ref = _screen_one(x[ok, r], w[ok], cuts[r], share, max_bin)
            assert (atom[r], crowded[r]) == ref, (trial, r)
            seen |= {("atom", ref[0]), ("crowded", ref[1])}
    assert len(seen) == 4  # both outcomes of both checks occurred


def test_unweighted_quantile_cuts_equal_the_weighted_path_with_unit_weights():
    """The compiled unweighted quantile_cuts gives the bytes of the NumPy path with unit weights (atoms, -0.0,
    discrete and mostly-missing columns, every max_bin)."""
    from hitml.kernels.sketch.robust import quantile_cuts

    rng = np.random.default_rng(11)
    seen_atoms = 0
    for t in range(200):
        n, mb = int(rng.integers(1, 3000)), int(rng.choice([4, 16, 64, 256]))
        x = rng.standard_normal(n).astype(np.float32)
        if t % 3 == 0:
            x[rng.random(n) < rng.random()] = 0.0
        if t % 4 == 0:
            x[rng.random(n) < 0.2] = -0.0
        if t % 5 == 0:
            x = np.round(x * rng.integers(1, 30)).astype(np.float32)
        if t % 7 == 0:
            x[rng.random(n) < 0.5] = np.nan
        f = x[~np.isnan(x)]
        if f.size == 0:
            continue
        lo, hi = np.float32(f.min()), np.float32(f.max())
        a = quantile_cuts(x, None, mb, lo, hi)
        assert a.tobytes() == quantile_cuts(x, np.ones(n), mb, lo, hi).tobytes(), t
        seen_atoms += bool((np.unique(f, return_counts=True)[1] > f.size / mb).any())
    assert seen_atoms > 20


@pytest.mark.parametrize("threads", ["1", "2"])
def test_quantile_cuts_columns_equal_the_numpy_path(threads, monkeypatch):
    """The all-columns kernel (radix sort, cuts finished in the kernel) gives, column by column, the bytes of the
    NumPy weighted path with unit weights: atoms, -0.0 beside +0.0, discrete, all-missing and constant columns."""
    from hitml.kernels.sketch.robust import _stable_sort_f32, quantile_cuts, quantile_cuts_columns

    monkeypatch.setenv("HITML_SOLVER_THREADS", threads)
    rng = np.random.default_rng(17)
    for t in range(12):
        n, d = int(rng.integers(1, 4000)), int(rng.integers(1, 20))
        X = (rng.standard_normal((n, d)) * rng.choice([1e-30, 1.0, 1e30])).astype(np.float32)
        m = rng.random((n, d))
        X[m < 0.1] = np.nan
        X[(m > 0.1) & (m < 0.1 + 0.3 * (t % 3 == 0))] = -0.0
        X[(m > 0.5) & (m < 0.5 + 0.3 * (t % 2 == 0))] = 0.0
        X[:, d // 2] = np.round(X[:, d // 2] * 5)
        # more point masses than max_bin 4 has cuts for
        X[:, d - 1 - d // 2] = rng.choice(np.float32([0, 1, 2, 3, 5]), n, p=[0.05, 0.3, 0.3, 0.3, 0.05])
        X[:, 0] = np.nan if t % 4 == 0 else X[:, 0]
        X[:, -1] = 3.0 if t % 5 == 0 else X[:, -1]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
            lo, hi = np.nanmin(X, axis=0), np.nanmax(X, axis=0)
        for mb in (4, 16, 64, 256):
            cols = np.arange(d)
            got = quantile_cuts_columns(X, cols, mb, lo, hi)
            for j in cols:
                ref = quantile_cuts(X[:, j], np.ones(n), mb, lo[j], hi[j])
                assert got[j].tobytes() == ref.tobytes(), (t, mb, j)
        x = X.ravel()
        assert _stable_sort_f32(x).tobytes() == np.sort(x[~np.isnan(x)], kind="stable").tobytes()
