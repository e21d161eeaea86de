"""Shapley estimates vs exact values by full subset enumeration; unbiasedness; efficiency; coalition bookkeeping."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from sklearn.datasets import make_regression
from sklearn.linear_model import LinearRegression
from sklearn.neural_network import MLPRegressor
from sklearn.tree import DecisionTreeRegressor

from hitml.kernels import shapley as kp
from hitml.kernels.shapley._coalitions import estimate_shapley, permutation_coalitions
from hitml.sklearn_ext import ShapleyExplainer, ShapleySampler
from _shapley import exact_shapley

METHODS = list(kp.METHODS)


def brute_force_shapley(f, x, background):
    """Independent reference: sum over all subsets S of N\\{i} of |S|!(d-|S|-1)!/d! (v(S u i) - v(S))."""
    d = x.shape[0]
    cache = {}

    def v(S):
        key = frozenset(S)
        if key not in cache:
            rows = background.copy()
            idx = list(key)
            rows[:, idx] = x[idx]
            cache[key] = float(np.mean(f(rows)))
        return cache[key]

    return exact_shapley(v, d), v(())


def _models(d):
    X, y = make_regression(300, d, n_informative=d, noise=1.0, random_state=d)
    lin = LinearRegression().fit(X, y)
    tree = DecisionTreeRegressor(max_depth=5, random_state=0).fit(X, y)
    mlp = MLPRegressor(hidden_layer_sizes=(16,), max_iter=300, random_state=0).fit(X / 100, y / 100)
    return X, {"linear": lin.predict, "tree": tree.predict, "mlp": lambda Z: mlp.predict(Z / 100)}


def test_all_permutations_give_the_exact_values():
    """Feeding all d! permutations with weights 1/d! reproduces subset enumeration exactly (d = 5)."""
    X, models = _models(5)
    perms = np.array(list(itertools.permutations(range(5))))
    w = np.full(len(perms), 1.0 / len(perms))
    for f in models.values():
        phi, base = estimate_shapley(f, X[:2], X[100:120], perms, w)
        for r in range(2):
            ref, ref_base = brute_force_shapley(f, X[r], X[100:120])
            np.testing.assert_allclose(phi[r, :, 0], ref, rtol=1e-9, atol=1e-9)
            assert base[0] == pytest.approx(ref_base)


@pytest.mark.parametrize("d", [6, 12])
@pytest.mark.parametrize("model", ["linear", "tree", "mlp"])
def test_explainer_converges_to_enumeration(d, model):
    X, models = _models(d)
    f = models[model]
    bg = X[200:216]
    ref = np.array([brute_force_shapley(f, X[r], bg)[0] for r in range(2)])
    expl = ShapleyExplainer(f, ShapleySampler("orthogonal", random_state=0), max_evals=(d + 1) * 200).fit(bg)
    phi = expl.transform(X[:2])
    scale = np.abs(ref).mean()
    if model == "linear":  # additive games are exact from any permutation
        np.testing.assert_allclose(phi, ref, rtol=1e-8, atol=1e-8 * scale)
    else:
        err = np.sqrt(np.mean((phi - ref) ** 2))
        err_small = np.sqrt(np.mean((ShapleyExplainer(f, ShapleySampler("orthogonal", random_state=0),
                                                      max_evals=(d + 1) * 4).fit(bg).transform(X[:2]) - ref) ** 2))
        assert err < 0.1 * scale and err <= err_small + 1e-12, (err, err_small, scale)


def _random_game(d, seed):
    """A fully non-additive game: an arbitrary table over all 2^d coalitions (v evaluated from the mask bits)."""
    table = np.random.default_rng(seed).normal(size=2 ** d)
    pow2 = 2 ** np.arange(d)

    def f(rows):  # rows are 0/1 masks when x = 1 and background = 0
        return table[(rows > 0.5).astype(np.int64) @ pow2]

    return f


@pytest.mark.parametrize("method", METHODS)
def test_unbiased_mean_over_seeds(method):
    d = 5
    f = _random_game(d, 1)
    x, bg = np.ones((1, d)), np.zeros((1, d))
    exact, _ = brute_force_shapley(f, x[0], bg)
    n = 4 if method in ("stratified",) else 3
    est = []
    for seed in range(400):
        s, w = kp.sample(method, n, d, seed)
        kind = "masks" if method in kp.MASK_METHODS else "permutations"
        est.append(estimate_shapley(f, x, bg, s, w, kind=kind)[0][0, :, 0])
    est = np.array(est)
    z = (est.mean(axis=0) - exact) / (est.std(axis=0, ddof=1) / math.sqrt(len(est)) + 1e-12)
    assert np.abs(z).max() < 4.5, (method, z)


def test_biased_input_is_detected_by_the_unbiasedness_check():
    """The z-test above has power: always using the identity order is rejected."""
    d = 5
    f = _random_game(d, 1)
    x, bg = np.ones((1, d)), np.zeros((1, d))
    exact, _ = brute_force_shapley(f, x[0], bg)
    rng = np.random.default_rng(0)
    est = np.array([estimate_shapley(f, x, bg, np.array([np.arange(d)]), np.ones(1))[0][0, :, 0]
                    + rng.normal(0, 0.01, d) for _ in range(50)])
    z = (est.mean(axis=0) - exact) / (est.std(axis=0, ddof=1) / math.sqrt(len(est)))
    assert np.abs(z).max() > 4.5


@pytest.mark.parametrize("method", METHODS)
def test_efficiency(method):
    X, models = _models(7)
    f = models["mlp"]
    expl = ShapleyExplainer(f, ShapleySampler(method, random_state=3), max_evals=8 * 6).fit(X[:30])
    phi = expl.transform(X[40:45])
    gap = phi.sum(axis=1) + expl.expected_value_ - f(X[40:45])
    if method in kp.MASK_METHODS:  # Owen estimates do not telescope; efficiency holds only in expectation
        return
    tol = 1e-6 if method == "sbq" else 1e-9
    np.testing.assert_allclose(gap, 0.0, atol=tol * np.abs(f(X[40:45])).max())


class _RowCounter:
    """A model wrapper that counts the rows it is called on (independent of the library's own accounting)."""

    def __init__(self, f):
        self.f, self.rows, self.calls = f, 0, []

    def __call__(self, Z):
        Z = np.asarray(Z)
        self.rows += Z.shape[0]
        self.calls.append(Z.shape[0])
        return self.f(Z)


def _expected_permutations(max_evals, d, paired):
    """Independent count: the most n with 2 + n (d - 1) <= max_evals (v(empty), v(all) once per row), whole pairs."""
    n = 0
    while 2 + (n + 1) * (d - 1) <= max_evals:
        n += 1
    return n - n % 2 if paired and n >= 2 else n


def test_estimate_shapley_evaluations_counted_by_the_model():
    """Model rows sent = rows x (2 + n (d - 1)) x background for permutations, rows x n (d + 1) x background for
    Owen masks; batches respect batch_rows."""
    d, nb, m = 6, 9, 3
    X, bg = np.random.default_rng(0).normal(size=(m, d)), np.random.default_rng(1).normal(size=(nb, d))
    for n_perm in (1, 2, 5):
        perms, w = kp.sample("mc", n_perm, d, 0)
        f = _RowCounter(lambda Z: Z.sum(axis=1))
        estimate_shapley(f, X, bg, perms, w, batch_rows=4 * nb)
        assert f.rows == m * (2 + n_perm * (d - 1)) * nb
        assert f.rows == m * kp.evaluations_per_row("permutations", n_perm, d) * nb
        assert max(f.calls) <= 4 * nb
        masks, w = kp.sample("owen", n_perm, d, 0)
        f = _RowCounter(lambda Z: Z.sum(axis=1))
        estimate_shapley(f, X, bg, masks, w, kind="masks", batch_rows=4 * nb)
        assert f.rows == m * n_perm * (d + 1) * nb + nb  # + one base-value call over the background
    assert permutation_coalitions(perms).shape == (n_perm, d + 1, d)


@pytest.mark.parametrize("method", ["mc", "orthogonal", "antithetic", "sobol", "sbq"])
@pytest.mark.parametrize("d", [2, 5, 9])
def test_explainer_spends_the_budget_as_counted_by_the_model(method, d):
    """ShapleyExplainer: a row-counting wrapper sees exactly 2 + n (d - 1) evaluations per row (x |background|),
    with n the most (whole pairs for paired samplers) that fit in max_evals; one more would not fit."""
    rng = np.random.default_rng(d)
    bg, X = rng.normal(size=(7, d)), rng.normal(size=(4, d))
    paired = method in kp.PAIRED_METHODS
    for max_evals in (d + 1, 3 * d + 4, 50, 333):
        f = _RowCounter(lambda Z: np.tanh(Z).sum(axis=1) + Z[:, 0] * Z[:, -1])
        e = ShapleyExplainer(f, ShapleySampler(method, random_state=0), max_evals=max_evals).fit(bg)
        f.rows = 0
        phi = e.transform(X)
        n = _expected_permutations(max_evals, d, paired)
        assert f.rows == len(X) * (2 + n * (d - 1)) * len(bg), (max_evals, f.rows)
        assert f.rows <= len(X) * max_evals * len(bg)
        step = 2 if paired else 1
        assert 2 + (n + step) * (d - 1) > max_evals  # the budget could not buy another permutation (pair)
        np.testing.assert_allclose(phi.sum(axis=1) + e.expected_value_, f.f(X), rtol=1e-9,
                                   atol=1e-9)  # efficiency, with the endpoints evaluated once


def test_endpoint_reuse_matches_shap_permutation_explainer_budget():
    """At shap's max_evals, ours buys at least as many permutations: shap spends 2d + 1 per antithetic pair
    (v(empty) twice, v(all) once), we spend 2 + n (d - 1). Checked on shap's own count of model calls."""
    shap = pytest.importorskip("shap")
    d = 6
    rng = np.random.default_rng(3)
    bg, x = rng.normal(size=(1, d)), rng.normal(size=(1, d))  # one background row: every evaluation is one model row
    for max_evals in (2 * d + 1, 100, 500):
        f = _RowCounter(lambda Z: np.tanh(Z).sum(axis=1) + Z[:, 0] * Z[:, 1])
        shap.PermutationExplainer(f, shap.maskers.Independent(bg, max_samples=1), seed=0)(x, max_evals=max_evals,
                                                                                          silent=True)
        shap_perms = 2 * (max_evals // (2 * d + 1))
        assert f.rows <= max_evals  # shap's rows (delta masking may skip some), its budget unit = one coalition
        g = _RowCounter(f.f)
        e = ShapleyExplainer(g, ShapleySampler("antithetic", random_state=0), max_evals=max_evals).fit(bg)
        g.rows = 0
        e.transform(x)
        assert g.rows <= max_evals and (g.rows - 2) % (d - 1) == 0
        ours = (g.rows - 2) // (d - 1)  # permutations, from the model's count
        assert ours >= shap_perms and ours % 2 == 0, (max_evals, ours, shap_perms)


def test_one_varying_feature_and_too_small_budget():
    """d = 1 (one varying feature): v(all) - v(empty) exactly, for 2 evaluations; max_evals = d is refused."""
    rng = np.random.default_rng(0)
    bg = rng.normal(size=(5, 4))
    bg[:, 1:] = 1.0
    x = np.array([[0.3, 1.0, 1.0, 1.0]])

    def f(Z):
        return Z[:, 0] ** 2 + Z[:, 1] * Z[:, 0]

    c = _RowCounter(f)
    e = ShapleyExplainer(c, ShapleySampler("orthogonal", random_state=0), max_evals=5).fit(bg)
    c.rows = 0
    phi = e.transform(x)
    assert c.rows == 2 * len(bg)
    np.testing.assert_allclose(phi[0], [f(x)[0] - f(bg).mean(), 0, 0, 0], atol=1e-12)
    with pytest.raises(ValueError, match="too small for one permutation.*2 \\+ \\(d - 1\\) = 5"):
        ShapleyExplainer(f, max_evals=4).fit(rng.normal(size=(5, 4))).transform(rng.normal(size=(1, 4)))
