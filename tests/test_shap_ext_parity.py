"""shap_ext.TreeExplainer against independent references: shap's C++ TreeExplainer, XGBoost/LightGBM native TreeSHAP,
and brute-force interventional Shapley values over every subset."""
from __future__ import annotations


import numpy as np
import pandas as pd
import pytest
import shap
import xgboost as xgb
from shap.explainers._tree import TreeEnsemble
from sklearn.ensemble import (
    ExtraTreesRegressor,
    GradientBoostingClassifier,
    RandomForestClassifier,
    RandomForestRegressor,
)

from hitml import shap_ext
from _differential import brute_force_interventional as _brute_force

RTOL = 1e-6


def close(actual, expected, rtol=RTOL):
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    if expected.size == 1 and actual.size == 1:  # shap gives a scalar or a 1-element array for one output
        actual, expected = actual.reshape(()), expected.reshape(())
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale)


def cpp_path_dependent(model, **kw):
    """shap's own C++ TreeSHAP (not the XGBoost/LightGBM native short-circuit): explain the parsed TreeEnsemble."""
    ens = TreeEnsemble(model, model_output="raw")
    ens.model_type = "internal"
    return shap.TreeExplainer(ens, **kw)


def native_bias(model, X):
    """The expected value XGBoost's own TreeSHAP reports (bias column of pred_contribs), per output."""
    contribs = model.get_booster().predict(xgb.DMatrix(X[:1]), pred_contribs=True)
    return contribs[0, ..., -1]


def ours(model, *args, **kw):
    return shap_ext.TreeExplainer(model, *args, backend="cpu", **kw)


def data(n=200, m=5, seed=0, nan=False):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, m))
    if nan:
        X[rng.random(size=X.shape) < 0.15] = np.nan
    y = np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 1]) * np.nan_to_num(X[:, 2]) + 0.3 * rng.normal(size=n)
    return X, y


@pytest.fixture(scope="module")
def xgb_models():
    X, y = data()
    Xn, yn = data(nan=True, seed=1)
    common = dict(n_estimators=20, max_depth=4, learning_rate=0.3, n_jobs=1)
    return {
        "reg": (xgb.XGBRegressor(**common).fit(X, y), X),
        "bin": (xgb.XGBClassifier(**common).fit(X, y > 0), X),
        "multi": (xgb.XGBClassifier(**common).fit(X, np.digitize(y, [-0.5, 0.5])), X),
        "nan": (xgb.XGBRegressor(**common).fit(Xn, yn), Xn),
    }


@pytest.mark.parametrize("kind", ["reg", "bin", "multi", "nan"])
def test_xgboost_path_dependent_and_interactions(xgb_models, kind):
    model, X = xgb_models[kind]
    ref = cpp_path_dependent(model)
    ex = ours(model)
    # shap's C++ on an XGBoost TreeEnsemble gets the expected value (hence its own additivity check) wrong for
    # multiclass: its float32 node values never receive internal expectations. Values themselves are right.
    close(ex.shap_values(X), ref.shap_values(X, check_additivity=False))
    close(ex.expected_value, native_bias(model, X), rtol=1e-5)
    close(ex.shap_interaction_values(X[:25]), ref.shap_interaction_values(X[:25]))


@pytest.mark.parametrize("kind", ["reg", "bin", "multi", "nan"])
def test_xgboost_interventional(xgb_models, kind):
    model, X = xgb_models[kind]
    bg = X[:50]
    ref = shap.TreeExplainer(model, bg, feature_perturbation="interventional")
    ex = ours(model, bg, feature_perturbation="interventional")
    close(ex.shap_values(X[:60]), ref.shap_values(X[:60]))
    close(ex.expected_value, ref.expected_value)


def test_xgboost_probability_log_loss_predict_proba(xgb_models):
    model, X = xgb_models["bin"]
    bg, Xe = X[:40], X[100:150]
    y = (X[100:150, 0] > 0).astype(float)
    for output in ("probability", "log_loss", "predict_proba"):
        ref = shap.TreeExplainer(model, bg, model_output=output)
        ex = ours(model, bg, model_output=output)
        args = (Xe, y) if output == "log_loss" else (Xe,)
        close(ex.shap_values(*args), ref.shap_values(*args))
        if output == "log_loss":
            close(ex.expected_value(1.0), ref.expected_value(1.0))
        else:
            close(ex.expected_value, ref.expected_value)


def test_regression_log_loss_and_tree_limit(xgb_models):
    model, X = xgb_models["reg"]
    bg, Xe = X[:30], X[150:]
    y = X[150:, 0]
    ref = shap.TreeExplainer(model, bg, model_output="log_loss")
    close(ours(model, bg, model_output="log_loss").shap_values(Xe, y), ref.shap_values(Xe, y))
    close(ours(model).shap_values(Xe, tree_limit=7),
          cpp_path_dependent(model).shap_values(Xe, tree_limit=7, check_additivity=False))


@pytest.fixture(scope="module")
def sklearn_models():
    X, y = data(n=150)
    return X, {
        "rf": RandomForestRegressor(n_estimators=15, max_depth=6, random_state=0).fit(X, y),
        "rf_clf": RandomForestClassifier(n_estimators=15, max_depth=6, random_state=0).fit(X, y > 0),
        "gb": GradientBoostingClassifier(n_estimators=20, max_depth=3, random_state=0).fit(X, y > 0),
        "et": ExtraTreesRegressor(n_estimators=15, max_depth=8, random_state=0).fit(X, y),
    }


@pytest.mark.parametrize("name", ["rf", "rf_clf", "gb", "et"])
def test_sklearn(sklearn_models, name):
    X, models = sklearn_models
    model = models[name]
    ref = shap.TreeExplainer(model)  # sklearn has no native short-circuit: this is shap's C++
    ex = ours(model)
    close(ex.shap_values(X), ref.shap_values(X))
    close(ex.expected_value, ref.expected_value)
    close(ex.shap_interaction_values(X[:15]), ref.shap_interaction_values(X[:15]))
    bg = X[:30]
    output = "probability" if name == "rf_clf" else "raw"
    close(ours(model, bg, model_output=output).shap_values(X[:40]),
          shap.TreeExplainer(model, bg, model_output=output).shap_values(X[:40]))


def test_depth_20():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(400, 8))
    y = X @ rng.normal(size=8) + np.sin(3 * X[:, 0]) + rng.normal(size=400)
    for model in (
        xgb.XGBRegressor(n_estimators=4, max_depth=20, min_child_weight=0, reg_lambda=0, n_jobs=1).fit(X, y),
        ExtraTreesRegressor(n_estimators=3, max_depth=20, random_state=0).fit(X, y),
    ):
        ens = TreeEnsemble(model, model_output="raw")
        assert ens.max_depth >= 15
        ref = cpp_path_dependent(model)
        ex = ours(model)
        close(ex.shap_values(X[:50]), ref.shap_values(X[:50], check_additivity=False))
        close(ex.shap_interaction_values(X[:5]), ref.shap_interaction_values(X[:5]))


# ---- categorical splits -----------------------------------------------------------------------------------------
def cat_frame(n=300, seed=0, n_cats=40, first=0):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        "a": rng.normal(size=n),
        "c": pd.Categorical(rng.integers(first, first + n_cats, size=n), categories=range(first, first + n_cats)),
        "b": rng.normal(size=n),
        "d": pd.Categorical(rng.integers(0, 5, size=n)),
    })
    codes = df.c.cat.codes.to_numpy()
    y = df.a + (codes % 3) - 1.0 * (df.d.cat.codes.to_numpy() == 2) + 0.1 * rng.normal(size=n)
    return df, y.to_numpy()


@pytest.fixture(scope="module")
def xgb_cat():
    df, y = cat_frame()
    df.loc[df.index[:20], "a"] = np.nan
    df.loc[df.index[20:40], "c"] = np.nan  # missing category
    model = xgb.XGBRegressor(n_estimators=15, max_depth=4, enable_categorical=True, tree_method="hist",
                             max_cat_to_onehot=1, n_jobs=1).fit(df, y)
    clf = xgb.XGBClassifier(n_estimators=15, max_depth=4, enable_categorical=True, tree_method="hist",
                            max_cat_to_onehot=1, n_jobs=1).fit(df, y > np.median(y))
    return df, model, clf


def test_xgboost_categorical_vs_native(xgb_cat):
    df, model, clf = xgb_cat
    booster = model.get_booster()
    assert any("c" == t for t in booster.feature_types)
    dm = xgb.DMatrix(df, enable_categorical=True)
    contribs = booster.predict(dm, pred_contribs=True)
    inter = booster.predict(xgb.DMatrix(df.iloc[:20], enable_categorical=True), pred_interactions=True)
    ex = ours(model)
    close(ex.shap_values(df), contribs[:, :-1], rtol=1e-5)  # XGBoost computes in float32
    close(ex.expected_value, contribs[0, -1], rtol=1e-5)
    close(ex.shap_interaction_values(df.iloc[:20]), inter[:, :-1, :-1], rtol=1e-5)
    # numeric codes give the same answer as the categorical frame
    codes = df.apply(lambda s: s.cat.codes.replace(-1, np.nan) if isinstance(s.dtype, pd.CategoricalDtype) else s)
    close(ex.shap_values(codes.to_numpy()), ex.shap_values(df))
    # explanation additivity against the margin holds (check_additivity is on by default)
    ex(df.iloc[:30])
    cb = clf.get_booster()
    close(ours(clf).shap_values(df), cb.predict(dm, pred_contribs=True)[:, :-1], rtol=1e-5)
    # a bare Booster keeps its feature types (and so its category sets) through save/load
    loaded = xgb.Booster(model_file=bytearray(booster.save_raw("ubj")))
    close(ours(loaded).shap_values(codes.to_numpy()), contribs[:, :-1], rtol=1e-5)
    # shap itself refuses XGBoost categorical splits in interventional mode; a categorical background frame
    # and its codes give the same values
    with pytest.raises(NotImplementedError):
        shap.TreeExplainer(model, codes.to_numpy()[:10]).shap_values(codes.to_numpy()[20:25])
    close(ours(model, df.iloc[:10]).shap_values(df.iloc[20:25]),
          ours(model, codes.to_numpy()[:10]).shap_values(codes.to_numpy()[20:25]))


def brute_force_interventional(f, X, bg, transform=None):
    """Exact interventional SHAP of one output by enumerating every subset (see _differential): (phi, E)."""
    phi, ev = _brute_force(f, X, bg, transform)
    return phi[..., 0], ev[0]


def test_brute_force_reference_matches_shap_cpp(xgb_models):
    """The brute-force reference itself agrees with shap's C++ on a numeric model (raw and probability)."""
    model, X = xgb_models["bin"]
    booster = model.get_booster()
    bg, Xe = X[:6], X[20:24]
    margin = lambda r: booster.predict(xgb.DMatrix(r), output_margin=True)  # noqa: E731 - a one-line helper local to this test
    ref, _ = brute_force_interventional(margin, Xe, bg)
    close(ref, shap.TreeExplainer(model, bg).shap_values(Xe), rtol=1e-5)
    ref_p, _ = brute_force_interventional(margin, Xe, bg, transform=lambda m: 1 / (1 + np.exp(-m)))
    close(ref_p, shap.TreeExplainer(model, bg, model_output="probability").shap_values(Xe), rtol=1e-5)


def test_xgboost_categorical_interventional_brute_force(xgb_cat):
    df, model, clf = xgb_cat
    booster = model.get_booster()
    types = booster.feature_types
    codes = df.apply(lambda s: s.cat.codes.replace(-1, np.nan) if isinstance(s.dtype, pd.CategoricalDtype) else s)
    X = codes.to_numpy(dtype=np.float64)

    def f(rows):
        return booster.predict(xgb.DMatrix(rows, feature_types=types, enable_categorical=True), output_margin=True,
                               validate_features=False)

    bg, Xe = X[:12], X[15:25]
    ref, ev = brute_force_interventional(f, Xe, bg)
    ex = ours(model, bg)
    assert ex.feature_perturbation == "interventional"
    close(ex.shap_values(Xe), ref, rtol=1e-5)
    close(ex.expected_value, ev, rtol=1e-5)
    # probability output of the classifier: f = logistic(margin)
    cb = clf.get_booster()

    def fp(rows):
        return cb.predict(xgb.DMatrix(rows, feature_types=types, enable_categorical=True), output_margin=True,
                          validate_features=False)

    ref_p, ev_p = brute_force_interventional(fp, Xe, bg, transform=lambda m: 1 / (1 + np.exp(-m)))
    exp = ours(clf, bg, model_output="probability")
    close(exp.shap_values(Xe), ref_p, rtol=1e-5)
    close(exp.expected_value, ev_p, rtol=1e-5)


def test_lightgbm_with_categorical():
    lgb = pytest.importorskip("lightgbm")
    # categories 1..12 so shap's C++ (whose bitmask cannot hold category 0) is a valid reference
    df, y = cat_frame(n=400, n_cats=12, first=1)
    X = np.column_stack([df.a, df.c.astype(int), df.b, df.d.astype(int)]).astype(np.float64)
    X[:15, 0] = np.nan
    model = lgb.LGBMRegressor(n_estimators=20, num_leaves=12, min_child_samples=5, verbose=-1, n_jobs=1,
                              cat_smooth=1, min_data_per_group=5, max_cat_to_onehot=1)
    model.fit(X, y, categorical_feature=[1])
    ens = TreeEnsemble(model, model_output="raw")
    assert np.any(ens.threshold_types == 1), "the test model must have categorical splits"
    ex = ours(model)
    close(ex.shap_values(X), cpp_path_dependent(model).shap_values(X))
    close(ex.shap_interaction_values(X[:15]), cpp_path_dependent(model).shap_interaction_values(X[:15]))
    close(ex.shap_values(X), model.predict(X, pred_contrib=True)[:, :-1])
    # interventional: shap's C++ ignores categorical splits there (its sums miss the model output by ~1), so the
    # reference is brute force over LightGBM's own predictions
    bg, Xe = X[:10], X[50:56]
    ref, ev = brute_force_interventional(lambda r: model.predict(r, raw_score=True), Xe, bg)
    ex_i = ours(model, bg)
    close(ex_i.shap_values(Xe), ref)
    close(ex_i.expected_value, ev)


def test_lightgbm_category_zero_and_multiclass():
    lgb = pytest.importorskip("lightgbm")
    df, y = cat_frame(n=400, n_cats=40)  # categories 0..39: beyond shap's bitmask; LightGBM's own SHAP is exact
    X = np.column_stack([df.a, df.c.astype(int), df.b, df.d.astype(int)]).astype(np.float64)
    model = lgb.LGBMRegressor(n_estimators=15, num_leaves=8, min_child_samples=5, verbose=-1, n_jobs=1,
                              min_data_per_group=5, max_cat_to_onehot=1).fit(X, y, categorical_feature=[1, 3])
    close(ours(model).shap_values(X), model.predict(X, pred_contrib=True)[:, :-1])
    Xm, ym = data(n=200)
    clf = lgb.LGBMClassifier(n_estimators=10, num_leaves=8, verbose=-1, n_jobs=1).fit(Xm, np.digitize(ym, [-0.5, 0.5]))
    close(ours(clf).shap_values(Xm), cpp_path_dependent(clf).shap_values(Xm))


def test_more_model_families():
    """HistGradientBoosting (with NaN), IsolationForest (shap's C++), CatBoost (its native ShapValues)."""
    from sklearn.ensemble import HistGradientBoostingClassifier, IsolationForest

    X, y = data(n=150, nan=True, seed=4)
    for model in (HistGradientBoostingClassifier(max_iter=8, random_state=0).fit(X, y > 0),
                  IsolationForest(n_estimators=8, random_state=0).fit(X)):
        # scikit-learn compares float32 rows (shap's IsolationForest parse keeps float64: give it float32 rows)
        close(ours(model).shap_values(X), shap.TreeExplainer(model).shap_values(X.astype(np.float32)))
    cb = pytest.importorskip("catboost")
    Xc = np.nan_to_num(X)
    model = cb.CatBoostRegressor(iterations=10, depth=4, verbose=0, thread_count=1).fit(Xc, y)
    close(ours(model).shap_values(Xc), shap.TreeExplainer(model).shap_values(Xc))  # native, path-dependent
    close(ours(model, Xc[:20]).shap_values(Xc[:30]), shap.TreeExplainer(model, Xc[:20]).shap_values(Xc[:30]))
