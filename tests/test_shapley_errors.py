"""Standard errors, noise detection and the tol= stopping rule of the regression Shapley estimator, against
brute-force Shapley values; the explainer's Explanation fields, NotFittedError and progress bars."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LinearRegression

from hitml.kernels.shapley import RegressionPlan, interval_width, shapley_until
from hitml.sklearn_ext import SelectFromShapley, ShapleyExplainer, ShapleySampler

from _shapley import exact_shapley


def _poly_game(d: int, rng, order: int = 3, scale: float = 1.0):
    """A random polynomial game (unanimity terms up to ``order``) as a 2^d table, and its brute-force values."""
    masks = ((np.arange(2 ** d)[:, None] >> np.arange(d)) & 1).astype(bool)
    table = np.zeros(2 ** d)
    for o in range(1, order + 1):
        for t in itertools.combinations(range(d), o):
            table += rng.normal() * scale ** (o - 1) * masks[:, list(t)].all(axis=1)
    truth = exact_shapley(lambda S: table[sum(1 << i for i in S)], d)
    return table, truth, 1 << np.arange(d)


def test_standard_errors_cover_brute_force_values():
    """95% intervals over 12 games x 10 seeds hold the exact values about 95% of the time (not 100%: errors that
    are too wide fail too), with |error| / se of median near the normal's 0.674."""
    d = 9
    rng = np.random.default_rng(3)
    games = [_poly_game(d, rng, order=3, scale=0.5) for _ in range(12)]
    z = []
    for seed in range(10):
        plan = RegressionPlan(d, 120, seed=seed)
        vals = np.stack([t[plan.coalitions.astype(np.int64) @ pw] for t, _, pw in games])[:, :, None]
        phi, se = plan.apply_se(vals)
        truth = np.stack([g[1] for g in games])
        z.append(np.abs(phi[:, :, 0] - truth) / se[:, :, 0])
    z = np.concatenate(z).ravel()
    cover = float(np.mean(z <= 1.96))
    assert 0.88 <= cover <= 0.99, cover
    assert 0.4 <= float(np.median(z)) <= 1.0, np.median(z)


def test_standard_errors_are_zero_where_exact():
    rng = np.random.default_rng(4)
    table, truth, pw = _poly_game(6, rng)
    plan = RegressionPlan(6, 64, seed=0)
    phi, se = plan.apply_se(table[plan.coalitions.astype(np.int64) @ pw][None, :, None])
    np.testing.assert_allclose(phi[0, :, 0], truth, atol=1e-9)
    assert (se == 0).all()
    plan = RegressionPlan(12, 130, seed=0)  # an additive game: exact, and its errors ~0
    c = plan.coalitions.astype(float)
    phi, se = plan.apply_se((c @ np.arange(1.0, 13.0))[None, :, None])
    np.testing.assert_allclose(phi[0, :, 0], np.arange(1.0, 13.0), atol=1e-10)
    assert se.max() < 1e-6


def test_noise_detected_from_repeated_coalitions():
    """noise="auto" evaluates four coalitions twice: exact values repeat (no nugget), noisy ones do not; on a noisy
    additive game the nugget it then allows beats interpolating the noise (noise="none")."""
    d = 12
    w = np.linspace(-1, 1, d)
    errs = {"auto": [], "none": []}
    for seed in range(8):
        for noise in errs:
            plan = RegressionPlan(d, 200, seed=seed, noise=noise)
            assert plan.evaluations == 200 and (plan.replicates.size == 4) == (noise == "auto")
            c = plan.coalitions.astype(float)
            rng = np.random.default_rng(seed)
            noisy_vals = (c @ w + 0.3 * rng.normal(size=len(c)))[None, :, None]
            exact_vals = (c @ w + c[:, 0] * c[:, 1] * c[:, 2])[None, :, None]
            if noise == "auto":
                assert plan.noisy_rows(noisy_vals).tolist() == [True]
                assert plan.noisy_rows(exact_vals).tolist() == [False]
            errs[noise].append(np.mean((plan.apply(noisy_vals)[0, :, 0] - w) ** 2))
    assert np.mean(errs["auto"]) < 0.7 * np.mean(errs["none"]), errs


def test_tol_stops_when_intervals_are_narrow_and_reuses_coalitions():
    d = 10
    rng = np.random.default_rng(5)
    tables = [_poly_game(d, rng, order=3, scale=0.3) for _ in range(3)]
    asked: list[set] = [set() for _ in tables]
    calls = [0] * len(tables)

    def values(coalitions, rows):
        out = []
        for r in rows:
            table, _, pw = tables[r]
            for c in coalitions:
                asked[r].add(c.tobytes())
            calls[r] += len(coalitions)
            out.append(table[coalitions.astype(np.int64) @ pw])
        return np.stack(out)[:, :, None]

    truth = np.stack([t[1] for t in tables])
    phi, se, spent = shapley_until(values, d, 3, tol=1e3, max_evals=900, seed=1)  # loose: the first stage only
    assert (spent == 110).all() and calls == [110] * 3
    tol = 0.02
    calls[:] = [0] * 3
    phi, se, spent = shapley_until(values, d, 3, tol=tol, max_evals=900, seed=1)
    assert (spent <= 900).all() and (spent > 110).any()
    # every coalition a row paid for was new to it (values reused across stages), up to the 4 repeated ones
    assert all(calls[r] - len(asked[r]) <= 4 for r in range(3)), (calls, [len(a) for a in asked])
    done = spent < 900
    assert (interval_width(se[done]) <= tol).all()
    assert np.abs(phi[:, :, 0] - truth).max() < 2 * tol
    with pytest.raises(ValueError, match="tol"):
        shapley_until(values, d, 3, tol=0.0, max_evals=900)


@pytest.fixture(scope="module")
def linear_data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 6))
    y = X @ np.arange(1.0, 7.0) + X[:, 0] * X[:, 1]
    return X, y


def test_explanation_carries_standard_errors_and_tol(linear_data):
    from sklearn.ensemble import RandomForestRegressor

    X, y = linear_data
    model = RandomForestRegressor(n_estimators=10, random_state=0).fit(X, y)
    e = ShapleyExplainer(model, ShapleySampler(random_state=0), max_evals=40, background_size=20).fit(X)
    ex = e(X[:5])
    assert ex.error_std.shape == ex.values.shape and np.isfinite(ex.error_std).all() and (ex.error_std > 0).any()
    np.testing.assert_allclose(ex.upper_bounds - ex.lower_bounds, 2 * 1.959963984540054 * ex.error_std)
    phi, base, err, spent = e.shapley_values(X[:5], return_error_std=True)
    assert (spent == 40).all() and np.array_equal(phi, ex.values)
    counted = []

    def f(Z):
        counted.append(len(Z))
        return model.predict(Z)

    et = ShapleyExplainer(f, ShapleySampler(random_state=0), tol=0.05, max_evals=64, background_size=20).fit(X)
    counted.clear()
    phi, base, err, spent = et.shapley_values(X[:3], return_error_std=True)
    assert sum(counted) == spent.sum() * 20  # evaluations as the model counts them
    assert ((2 * 1.959963984540054 * err.max(axis=1) <= 0.05) | (spent == 64)).all()
    np.testing.assert_allclose(phi.sum(axis=1) + base, model.predict(X[:3]), atol=1e-9)
    with pytest.raises(ValueError, match="tol"):
        ShapleyExplainer(model, ShapleySampler("orthogonal"), tol=0.1).fit(X).transform(X[:2])
    with pytest.raises(ValueError, match="tol"):
        ShapleyExplainer(model, tol=-1.0).fit(X)
    perm = ShapleyExplainer(model, ShapleySampler("orthogonal", random_state=0), max_evals=40).fit(X)(X[:2])
    assert np.isnan(perm.error_std).all()


def test_unfitted_model_raises_not_fitted_error(linear_data):
    X, _ = linear_data
    with pytest.raises(NotFittedError, match="not fitted"):
        ShapleyExplainer(LinearRegression()).fit(X)


def test_progress_values_validated_and_bars_only_on_long_calls(linear_data, capsys, monkeypatch):
    import hitml.kernels.shapley._rows as rows_mod

    X, y = linear_data
    model = LinearRegression().fit(X, y)
    for bad in ("yes", 1, 0.5):
        with pytest.raises(ValueError, match="progress"):
            ShapleyExplainer(model, progress=bad).fit(X)
        with pytest.raises(ValueError, match="progress"):
            SelectFromShapley(model, progress=bad).fit(X, y)
    ShapleyExplainer(model, max_evals=20, background_size=10, progress=True).fit(X).transform(X[:4])
    assert "Shapley values" not in capsys.readouterr().err  # a short call: no bar
    monkeypatch.setattr(rows_mod, "ROW_BAR_DELAY", 0.0)  # as if the call took longer than the delay
    ShapleyExplainer(model, max_evals=20, background_size=10, progress=True).fit(X).transform(X[:4])
    assert "Shapley values" in capsys.readouterr().err
    ShapleyExplainer(model, max_evals=20, background_size=10, progress=False).fit(X).transform(X[:4])
    assert "Shapley values" not in capsys.readouterr().err


@pytest.mark.gpu
def test_gpu_standard_errors_and_tol_equal_cpu():
    """Standard errors and the tol= rule run on the host in float64 from the values the device computes: the GPU
    paths give the CPU's values and errors up to the rounding of the background mean, amplified by the kriging
    solves (1e-6 of the largest value, as in test_shapley_regression's KRIGING_ROUNDING), and spend the same
    evaluations."""
    pytest.importorskip("cupy")
    from hitml.kernels.device import gpu_available

    if not gpu_available():
        pytest.skip("no CUDA GPU")
    rng = np.random.default_rng(8)
    X = rng.normal(size=(60, 11))

    def f(Z):
        return Z[:, 0] * Z[:, 2] - Z[:, 5] + (Z[:, :4].sum(axis=1)) ** 2

    for kwargs in ({"max_evals": 150}, {"tol": 0.5, "max_evals": 600}):
        out = {}
        for backend, model_input in (("cpu", "numpy"), ("gpu", "numpy"), ("gpu", "device")):
            e = ShapleyExplainer(f, ShapleySampler(random_state=0, backend=backend), model_input=model_input,
                                 **kwargs).fit(X[:25])
            out[backend, model_input] = e.shapley_values(X[30:40], return_error_std=True)
        phi, _, err, spent = out["cpu", "numpy"]
        top = max(1.0, np.abs(phi).max())
        for key in (("gpu", "numpy"), ("gpu", "device")):
            np.testing.assert_allclose(out[key][0], phi, rtol=0, atol=1e-6 * top)
            np.testing.assert_allclose(out[key][2], err, rtol=0, atol=1e-6 * top)
            assert np.array_equal(out[key][3], spent)


def test_tol_later_stages_keep_the_mean_of_repeated_evaluations():
    """A noisy row's repeated first-stage coalitions enter the grown designs as the mean of their evaluations: here
    v(empty) is evaluated +delta, then -delta (everything else exact and additive), so the mean is exact and so are
    v(full) - v(empty) that the values sum to after the design has grown; keeping only the first evaluation put
    delta into that sum (a three-way interaction keeps the intervals wide, so the design grows)."""
    d, delta = 10, 0.5
    w = np.linspace(-1.0, 1.0, d)
    seen = [0]

    def values(coalitions, rows):
        c = coalitions.astype(float)
        v = c @ w + c[:, 0] * c[:, 1] * c[:, 2]
        for j in np.flatnonzero(~coalitions.any(axis=1)):
            v[j] += delta if seen[0] % 2 == 0 else -delta
            seen[0] += 1
        return np.repeat(v[None, :, None], len(rows), axis=0)

    phi, se, spent = shapley_until(values, d, 1, tol=1e-12, max_evals=220, seed=3)
    assert spent[0] > 110 and seen[0] == 2  # grown past the first stage; v(empty) asked for twice, both at first
    assert phi[0, :, 0].sum() == pytest.approx(w.sum() + 1.0, abs=1e-8)


def test_standard_errors_cover_a_piecewise_constant_game():
    """A depth-6 regression tree (a piecewise-constant game with interactions up to order 6) on 12 features, values
    by brute force over the 2^12 coalitions: 95% intervals of the heredity fit hold them 88-99% of the time."""
    from sklearn.tree import DecisionTreeRegressor

    d, n_bg = 12, 8
    rng = np.random.default_rng(11)
    X = rng.uniform(size=(2000, d))
    y = 10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]
    tree = DecisionTreeRegressor(max_depth=6, random_state=0).fit(X, y)
    masks = ((np.arange(2 ** d)[:, None] >> np.arange(d)) & 1).astype(bool)
    pw = 1 << np.arange(d)
    games = []
    for x in X[:3]:
        bg = X[100:100 + n_bg]
        table = tree.predict(np.where(masks[:, None, :], x, bg).reshape(-1, d)).reshape(2 ** d, n_bg).mean(axis=1)
        games.append((table, exact_shapley(lambda S, t=table: t[sum(1 << i for i in S)], d)))
    z = []
    for budget in (130, 260, 650):
        for seed in range(8):
            plan = RegressionPlan(d, budget, seed=seed)
            assert plan.heredity
            phi, se = plan.apply_se(np.stack([t[plan.coalitions.astype(np.int64) @ pw] for t, _ in games])[:, :, None])
            truth = np.stack([g[1] for g in games])
            z.append(np.abs(phi[:, :, 0] - truth) / np.maximum(se[:, :, 0], 1e-300))
    cover = float(np.mean(np.concatenate(z).ravel() <= 1.96))
    assert 0.88 <= cover <= 0.99, cover
