"""sklearn_ext.permutation_importance: agrees with sklearn's statistically and with the closed form for linear models."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.inspection import permutation_importance as sk_pi
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.utils._param_validation import InvalidParameterError

from hitml.sklearn_ext import permutation_importance

N_REP = 30


@pytest.fixture(scope="module")
def reg():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 5)) * np.array([1.0, 2.0, 1.0, 0.5, 1.0])
    coef = np.array([3.0, 1.0, 0.5, 0.0, 2.0])
    y = X @ coef + rng.normal(size=3000) * 0.5
    return X, y, LinearRegression().fit(X, y)


def _agree(a, b, k=5.0, rel=0.0):
    """Means agree within k standard errors of the difference of two means over N_REP repeats (plus 1e-3).

    With max_samples each column is scored on one random subsample shared by its repeats, which adds a between-run
    error the repeat spread does not show: ``rel`` allows for it.
    """
    se = np.sqrt((a.importances_std ** 2 + b.importances_std ** 2) / N_REP)
    tol = np.maximum(k * se, rel * np.abs(b.importances_mean)) + 1e-3
    assert np.all(np.abs(a.importances_mean - b.importances_mean) <= tol), (a.importances_mean, b.importances_mean)


@pytest.mark.parametrize("kw", [dict(), dict(scoring="neg_mean_squared_error"), dict(scoring="neg_mean_absolute_error"),
                                dict(max_samples=0.5), dict(scoring="explained_variance"), dict(max_samples=1000)])
def test_agrees_with_sklearn_regression(reg, kw):
    X, y, m = reg
    ours = permutation_importance(m, X, y, n_repeats=N_REP, random_state=0, **kw)
    ref = sk_pi(m, X, y, n_repeats=N_REP, random_state=0, **kw)
    assert ours.importances.shape == (5, N_REP)
    assert set(ours) == set(ref)
    _agree(ours, ref, rel=0.25 if "max_samples" in kw else 0.0)


def test_mse_importance_matches_closed_form(reg):
    X, y, m = reg
    # E[(x_j - x_j_perm)^2] = 2 Var_n(x_j) * n/(n-1), so E[drop in MSE] = 2 * coef_j^2 * var_j * n / (n - 1)
    n = X.shape[0]
    expected = 2 * m.coef_ ** 2 * X.var(axis=0) * n / (n - 1)
    ours = permutation_importance(m, X, y, scoring="neg_mean_squared_error", n_repeats=200, random_state=1)
    se = ours.importances_std / np.sqrt(200)
    assert np.all(np.abs(ours.importances_mean - expected) <= 5 * se + 1e-3)


def test_columns_get_independent_permutations(reg):
    X, y, _ = reg
    X2 = np.column_stack([X[:, 0], X[:, 0], X[:, 1]])
    m = LinearRegression().fit(X2, y)
    ours = permutation_importance(m, X2, y, n_repeats=5, random_state=0, scoring="neg_mean_squared_error")
    ref = sk_pi(m, X2, y, n_repeats=5, random_state=0, scoring="neg_mean_squared_error")
    # sklearn reuses the same shuffles for every column: equal columns give equal importances repeat by repeat
    assert np.allclose(ref.importances[0] / m.coef_[0] ** 2, ref.importances[1] / m.coef_[1] ** 2)
    assert not np.allclose(ours.importances[0] / m.coef_[0] ** 2, ours.importances[1] / m.coef_[1] ** 2)


def test_classifier_metrics_weights_and_pandas(reg):
    X, _, _ = reg
    rng = np.random.default_rng(2)
    yc = (X[:, 0] + 0.5 * X[:, 1] + rng.normal(size=X.shape[0]) * 0.3 > 0).astype(int)
    c = LogisticRegression().fit(X, yc)
    w = rng.uniform(0.5, 2.0, size=X.shape[0])
    for kw in (dict(), dict(scoring="neg_log_loss"), dict(sample_weight=w), dict(scoring="roc_auc")):
        _agree(permutation_importance(c, X, yc, n_repeats=N_REP, random_state=0, **kw),
               sk_pi(c, X, yc, n_repeats=N_REP, random_state=0, **kw))
    multi = permutation_importance(c, X, yc, scoring=["accuracy", "neg_log_loss"], n_repeats=3, random_state=0)
    assert set(multi) == {"accuracy", "neg_log_loss"} and multi["accuracy"].importances.shape == (5, 3)
    df = pd.DataFrame(X, columns=list("abcde"))
    cdf = LogisticRegression().fit(df, yc)
    _agree(permutation_importance(cdf, df, yc, n_repeats=N_REP, random_state=0),
           sk_pi(cdf, df, yc, n_repeats=N_REP, random_state=0))


def test_reproducible_and_batching_invariant(reg):
    X, y, m = reg
    a = permutation_importance(m, X, y, n_repeats=4, random_state=7)
    b = permutation_importance(m, X, y, n_repeats=4, random_state=7, max_batch_elements=1)
    assert np.allclose(a.importances, b.importances)
    c = permutation_importance(m, X, y, n_repeats=4, random_state=8)
    assert not np.allclose(a.importances, c.importances)


def test_bad_input(reg):
    X, y, m = reg
    with pytest.raises(InvalidParameterError, match="n_repeats"):
        permutation_importance(m, X, y, n_repeats=0)
    with pytest.raises(ValueError, match="max_samples must be <= n_samples"):
        permutation_importance(m, X, y, max_samples=10**6)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        permutation_importance(m, X, y[:-1])
    with pytest.raises(ValueError, match="max_samples"):
        permutation_importance(m, X, y, max_samples=1.5)
