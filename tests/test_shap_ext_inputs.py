"""What shap's TreeExplainer accepts, shap_ext accepts (CatBoost defaults and string categories, catboost.Pool,
XGBoost forests, xgboost.DMatrix), checked against the libraries' own SHAP and raw predictions; what shap refuses,
shap_ext refuses with shap's exception types; check_additivity catches a wrong parse."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import shap
import xgboost as xgb
from shap.utils._exceptions import ExplainerError, InvalidModelError

from hitml import shap_ext


@pytest.fixture
def cb():
    """catboost, for the tests that need it (the others also run without it, in the minimal environment)."""
    return pytest.importorskip("catboost")


def close(actual, expected, rtol=1e-6):
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(actual, expected, rtol=0, atol=rtol * scale)


def ours(model, *args, **kw):
    return shap_ext.TreeExplainer(model, *args, backend="cpu", **kw)


@pytest.fixture(scope="module")
def housing():
    df = pd.read_csv("data/cal_housing.csv.gz").sample(1500, random_state=0)
    y = np.log(df.pop("median_house_value").to_numpy())
    return df, y


def test_catboost_defaults_match_raw_formula_val(housing, cb):
    """CatBoostRegressor() uses boost_from_average=True: the bias is the base value, and values add up to
    RawFormulaVal (this was off by the bias, about 12 here, and check_additivity did not notice)."""
    X, y = housing
    model = cb.CatBoostRegressor(iterations=30, depth=5, verbose=0, thread_count=1).fit(X, y)
    ex = ours(model)
    assert ex.route == "catboost-json"
    sv = ex.shap_values(X[:200])
    raw = model.predict(X[:200], prediction_type="RawFormulaVal")
    close(sv.sum(1) + ex.expected_value, raw)
    native = model.get_feature_importance(data=cb.Pool(X[:200]), type="ShapValues")
    close(sv, native[:, :-1])
    close(ex.expected_value, native[0, -1])
    assert abs(ex.expected_value - np.mean(y)) < 0.5  # the average, not ~0
    close(ours(model)(X[:5]).base_values, np.full(5, native[0, -1]))


def test_check_additivity_compares_with_the_library(housing, monkeypatch, cb):
    """A parse that loses the bias (as before) now fails the check instead of passing silently."""
    from hitml.shap_ext import _catboost

    X, y = housing
    model = cb.CatBoostRegressor(iterations=10, depth=4, verbose=0, thread_count=1).fit(X, y)
    real_init = _catboost.CatBoostModel.__init__

    def lose_bias(self, m):
        real_init(self, m)
        self.shap_dict["base_offset"] = np.zeros_like(self.base_offset)

    monkeypatch.setattr(_catboost.CatBoostModel, "__init__", lose_bias)
    ex = ours(model)
    with pytest.raises(ExplainerError, match="Additivity check failed"):
        ex.shap_values(X[:20])
    ex.shap_values(X[:20], check_additivity=False)  # the user can still opt out


def test_catboost_string_categories_pool_and_frames(cb):
    rng = np.random.default_rng(1)
    df = pd.DataFrame({"a": rng.normal(size=300), "colour": rng.choice(["red", "green", "blue"], 300),
                       "b": rng.normal(size=300), "city": rng.choice(["x", "y", "z", "w"], 300)})
    y = df.a + (df.colour == "red") * 2 + (df.city == "w") + 0.1 * rng.normal(size=300)
    model = cb.CatBoostRegressor(iterations=15, depth=4, verbose=0, thread_count=1,
                                 cat_features=["colour", "city"]).fit(df, y)
    ex = ours(model)
    assert ex.route == "catboost-native"
    sv = ex.shap_values(df[:50])
    close(sv, shap.TreeExplainer(model).shap_values(df[:50]))                   # shap's own answer
    close(sv.sum(1) + ex.expected_value, model.predict(df[:50], prediction_type="RawFormulaVal"))
    pool = cb.Pool(df[:50], cat_features=["colour", "city"])
    close(ex.shap_values(pool), sv)
    e = ex(df[:10])
    assert e.feature_names == list(df.columns) and e.values.shape == (10, 4)
    inter = ex.shap_interaction_values(df[:5])
    close(inter.sum(2), sv[:5])
    close(ex.shap_values(df.iloc[3]), sv[3])
    with pytest.raises(NotImplementedError, match="background data"):
        ours(model, df[:20])
    with pytest.raises(NotImplementedError, match="tree_limit"):
        ex.shap_values(df[:5], tree_limit=3)
    clf = cb.CatBoostClassifier(iterations=10, depth=3, verbose=0, thread_count=1, loss_function="MultiClass",
                                cat_features=["colour", "city"]).fit(df, np.digitize(y, [0, 1.5]))
    svm = ours(clf).shap_values(df[:20])
    assert svm.shape == (20, 4, 3)
    close(svm.sum(1) + np.asarray(ours(clf).expected_value), clf.predict(df[:20], prediction_type="RawFormulaVal"))


def test_catboost_numeric_pool_nan_modes_and_scale(cb):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(300, 4))
    X[rng.random(X.shape) < 0.2] = np.nan
    y = np.nan_to_num(X[:, 0]) + np.isnan(X[:, 1]) * 2
    for nan_mode in ("Min", "Max"):
        model = cb.CatBoostRegressor(iterations=12, depth=3, verbose=0, thread_count=1, nan_mode=nan_mode).fit(X, y)
        native = model.get_feature_importance(data=cb.Pool(X[:40]), type="ShapValues")
        bias = model.get_scale_and_bias()[1]
        model.set_scale_and_bias(0.5, 3.0)  # scaled after training: RawFormulaVal = 0.5 * (trees + bias) + 3
        ex = ours(model)
        sv = ex.shap_values(cb.Pool(X[:40]))
        close(sv.sum(1) + ex.expected_value, model.predict(X[:40], prediction_type="RawFormulaVal"))
        close(sv, 0.5 * native[:, :-1])  # CatBoost's ShapValues refuse a scaled model: scale the unscaled ones
        close(ex.expected_value, 0.5 * (native[0, -1] - bias) + 3.0)


@pytest.mark.parametrize("kind", ["rf_reg", "rf_bin", "rf_multi", "npt_multi"])
def test_xgboost_forests(kind):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 5))
    y = X[:, 0] + X[:, 1] * X[:, 2]
    common = dict(max_depth=3, n_jobs=1, random_state=0)
    model = {
        "rf_reg": lambda: xgb.XGBRFRegressor(n_estimators=6, **common).fit(X, y),
        "rf_bin": lambda: xgb.XGBRFClassifier(n_estimators=6, **common).fit(X, y > 0),
        "rf_multi": lambda: xgb.XGBRFClassifier(n_estimators=6, **common).fit(X, np.digitize(y, [-0.5, 0.5])),
        "npt_multi": lambda: xgb.XGBClassifier(n_estimators=4, num_parallel_tree=3, subsample=0.8,
                                               **common).fit(X, np.digitize(y, [-0.5, 0.5])),
    }[kind]()
    booster = model.get_booster()
    ex = ours(model)
    sv = np.asarray(ex.shap_values(X[:30]))
    native = booster.predict(xgb.DMatrix(X[:30]), pred_contribs=True)
    native = native[..., None] if native.ndim == 2 else np.moveaxis(native, 1, -1)
    close(sv if sv.ndim == 3 else sv[..., None], native[:, :-1], rtol=2e-5)
    margin = booster.predict(xgb.DMatrix(X[:30]), output_margin=True).reshape(30, -1)
    close((sv if sv.ndim == 3 else sv[..., None]).sum(1) + np.atleast_1d(ex.expected_value), margin, rtol=2e-6)
    exi = ours(model, X[:15])  # interventional: shap's own predictor refuses XGBoost forests
    svi = np.asarray(exi.shap_values(X[:10]))
    close((svi if svi.ndim == 3 else svi[..., None]).sum(1) + np.atleast_1d(exi.expected_value), margin[:10],
          rtol=2e-6)


def test_dmatrix_input():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(120, 4))
    X[rng.random(X.shape) < 0.1] = -999.0
    y = X[:, 0] + X[:, 1]
    model = xgb.XGBRegressor(n_estimators=8, max_depth=3, n_jobs=1, missing=-999.0).fit(X, y)
    ex = ours(model)
    via_array = ex.shap_values(X[:30])
    via_dmatrix = ex.shap_values(xgb.DMatrix(X[:30], missing=-999.0))
    close(via_dmatrix, via_array, rtol=1e-12)
    close(via_array, model.get_booster().predict(xgb.DMatrix(X[:30], missing=-999.0), pred_contribs=True)[:, :-1],
          rtol=2e-5)


def test_refusals_use_shaps_exception_types():
    from sklearn.dummy import DummyRegressor
    from sklearn.ensemble import GradientBoostingClassifier, GradientBoostingRegressor, HistGradientBoostingRegressor
    from sklearn.linear_model import LinearRegression

    rng = np.random.default_rng(5)
    X = rng.normal(size=(120, 3))
    y = X[:, 0] + X[:, 1]
    with pytest.raises(InvalidModelError, match="gblinear"):
        ours(xgb.XGBRegressor(booster="gblinear", n_estimators=3).fit(X, y))
    with pytest.raises(InvalidModelError, match="vector-leaf"):
        ours(xgb.XGBRegressor(n_estimators=3, tree_method="hist",
                              multi_strategy="multi_output_tree").fit(X, np.c_[y, -y]))
    with pytest.raises(InvalidModelError, match="LinearRegression"):
        ours(LinearRegression().fit(X, y))
    with pytest.raises(InvalidModelError, match="Unsupported init model type"):
        ours(GradientBoostingRegressor(n_estimators=3, init=LinearRegression()).fit(X, y))
    with pytest.raises(InvalidModelError, match="binary classification"):
        ours(GradientBoostingClassifier(n_estimators=3).fit(X, np.digitize(y, [-0.5, 0.5])))
    with pytest.raises(InvalidModelError, match="holds no parsed trees"):
        ours(shap.explainers._tree.TreeEnsemble.__new__(shap.explainers._tree.TreeEnsemble))
    # a supported init, and the refusal's shap type also for the hook
    model = GradientBoostingRegressor(n_estimators=3, init=DummyRegressor(strategy="median")).fit(X, y)
    close(ours(model).shap_values(X).sum(1) + ours(model).expected_value, model.predict(X))
    with pytest.raises(InvalidModelError):
        shap.TreeExplainer(LinearRegression().fit(X, y), backend="cpu")
    df = pd.DataFrame({"a": X[:, 0], "c": pd.Categorical(rng.choice(["u", "v"], 120))})
    hgb = HistGradientBoostingRegressor(max_iter=3, categorical_features="from_dtype").fit(df, y)
    # string category labels are read through the model's own encoder (they were refused before)
    close(ours(hgb).shap_values(df).sum(1) + ours(hgb).expected_value, hgb.predict(df))
