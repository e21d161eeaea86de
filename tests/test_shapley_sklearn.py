"""sklearn conventions for ShapleySampler, ShapleyExplainer and SelectFromShapley; shap Explanation; bad input."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.datasets import make_classification, make_regression
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from hitml.sklearn_ext import SelectFromShapley, ShapleyExplainer, ShapleySampler

# No check is skipped: all three pass sklearn's full estimator check suite.
ESTIMATORS = [
    ShapleySampler(random_state=0),
    ShapleyExplainer(LinearRegression(), sampler=ShapleySampler(random_state=0)),
    SelectFromShapley(LinearRegression(), sampler=ShapleySampler(random_state=0)),
]


@parametrize_with_checks(ESTIMATORS)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


@pytest.fixture(scope="module")
def reg():
    X, y = make_regression(120, 5, random_state=0)
    return X, y, Ridge().fit(X, y)


def test_sampler_params_and_clone():
    s = ShapleySampler("sbq", n_permutations=12, kernel="mallows", kernel_param=2.0, random_state=3)
    assert s.get_params()["method"] == "sbq"
    c = clone(s).set_params(method="herding")
    assert c.method == "herding" and s.method == "sbq" and c.random_state == 3
    s.fit(np.zeros((2, 7)))
    assert s.permutations_.shape == (12, 7) and s.weights_.sum() == pytest.approx(1.0)
    assert 0 < s.discrepancy_ < 1


def test_linear_model_values_and_base(reg):
    X, _, m = reg
    e = ShapleyExplainer(m, ShapleySampler("sobol", random_state=0), max_evals=60).fit(X[:40])
    phi = e.transform(X[:6])
    np.testing.assert_allclose(phi, m.coef_ * (X[:6] - X[:40].mean(axis=0)), rtol=1e-9, atol=1e-9)
    ex = e.explain(X[:6])
    np.testing.assert_allclose(ex.values.sum(axis=1) + ex.base_values, m.predict(X[:6]), rtol=1e-10)
    assert ex.base_values[0] == pytest.approx(m.predict(X[:40]).mean())


def test_classifier_multi_output_and_pandas_names():
    X, y = make_classification(150, 4, n_informative=3, n_redundant=0, random_state=0)
    df = pd.DataFrame(X, columns=["a", "b", "c", "d"])
    clf = LogisticRegression().fit(df, y)
    e = ShapleyExplainer(clf, ShapleySampler(random_state=0), max_evals=50).fit(df.iloc[:30])
    vals = e.transform(df.iloc[:5])
    assert vals.shape == (5, 4, 2)
    ex = e.explain(df.iloc[:5])
    assert list(ex.feature_names) == ["a", "b", "c", "d"] and ex.base_values.shape == (5, 2)
    np.testing.assert_allclose(vals.sum(axis=1) + ex.base_values, clf.predict_proba(df.iloc[:5]), atol=1e-10)
    np.testing.assert_array_equal(e.get_feature_names_out(), ["a", "b", "c", "d"])


def test_pipeline_and_clone(reg):
    X, y, _ = reg
    pipe = make_pipeline(StandardScaler(), ShapleyExplainer(Ridge(), ShapleySampler(random_state=1), max_evals=30))
    out = pipe.fit(X, y).transform(X[:4])
    assert out.shape == (4, 5)
    again = clone(pipe).fit(X, y).transform(X[:4])
    np.testing.assert_allclose(out, again)


def test_frozen_prefit_estimator_survives_clone(reg):
    X, _, m = reg
    e = clone(ShapleyExplainer(FrozenEstimator(m), ShapleySampler(random_state=0))).fit(X[:20])
    assert e.transform(X[:2]).shape == (2, 5)
    with pytest.raises(ValueError, match="not fitted"):
        clone(ShapleyExplainer(m)).fit(X[:20])


def test_select_from_shapley_keeps_informative_features():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 6))
    y = 5 * X[:, 0] - 4 * X[:, 3] + 0.01 * rng.normal(size=200)
    sel = SelectFromShapley(LinearRegression(), ShapleySampler(random_state=0), max_rows=50).fit(X, y)
    np.testing.assert_array_equal(sel.get_support(indices=True), [0, 3])
    assert sel.transform(X).shape == (200, 2)
    # a fixed sampler: the default one (random_state=None) may rank features 0 and 3 either way on a rare draw
    top1 = SelectFromShapley(LinearRegression(), ShapleySampler(random_state=0), max_features=1,
                             threshold=-np.inf).fit(X, y)
    np.testing.assert_array_equal(top1.get_support(indices=True), [0])


def test_callable_model(reg):
    X, _, m = reg
    e = ShapleyExplainer(m.predict, ShapleySampler("herding", random_state=0), max_evals=42).fit(X[:10])
    assert e.transform(X[:3]).shape == (3, 5)


def test_bad_input(reg):
    X, y, m = reg
    with pytest.raises(ValueError, match="too small for one permutation"):
        ShapleyExplainer(m, max_evals=5).fit(X[:10]).transform(X[:2])
    with pytest.raises(ValueError, match="background has 3 columns"):
        ShapleyExplainer(m).fit(X[:10, :3])
    with pytest.raises(ValueError, match="cannot predict"):
        ShapleyExplainer(lambda Z: 1 / 0).fit(X[:10])
    with pytest.raises(TypeError, match="prediction callable"):
        ShapleyExplainer(object()).fit(X[:10])
    e = ShapleyExplainer(m).fit(X[:10])
    with pytest.raises(ValueError, match="features"):
        e.transform(X[:2, :4])
    with pytest.raises(ValueError, match="method must be one of"):
        ShapleyExplainer(m, ShapleySampler("latin")).fit(X[:10]).transform(X[:2])
    with pytest.raises(ValueError, match="NaN|infinity"):
        ShapleyExplainer(m).fit(X[:10]).transform(np.full((1, 5), np.nan))
