"""shap_ext reads DataFrames, rows and model formats as each library reads them. Every test here reproduces a case
where the explainer was silently wrong or refused what shap explains; references are the libraries' own
contributions, predictions and exceptions, or shap's own TreeExplainer on the same input."""
from __future__ import annotations

import os
import warnings

import numpy as np
import pandas as pd
import pytest
import shap

from _frames import close, ours
from _differential import brute_force_interventional

lgb = pytest.importorskip("lightgbm")
xgb = pytest.importorskip("xgboost")




@pytest.fixture(scope="module")
def cat_data():
    rng = np.random.default_rng(0)
    n = 400
    df = pd.DataFrame({"a": rng.normal(size=n), "c": pd.Categorical(rng.choice(list("abcd"), n)),
                       "b": rng.normal(size=n)})
    y = (df.a + (df.c == "b") * 2 - (df.c == "d") * 1.5).to_numpy() + 0.1 * rng.normal(size=n)
    # the explained rows' categories are inferred by pandas from those rows: codes differ from training
    X = pd.DataFrame({"a": [0.1, 0.2, 0.3, 0.4], "c": pd.Categorical(["d", "b", "d", "c"]), "b": [0.0, 0.1, 0, 0]})
    return df, y, X


def test_xgboost_categories_recoded_by_label(cat_data):
    df, y, X = cat_data
    model = xgb.XGBRegressor(n_estimators=10, enable_categorical=True, max_cat_to_onehot=1).fit(df, y)
    native = model.get_booster().predict(xgb.DMatrix(X, enable_categorical=True), pred_contribs=True)
    ex = ours(model)
    close(ex.shap_values(X), native[:, :-1], 2e-5)
    close(ex(X).values, native[:, :-1], 2e-5)
    close(ex.shap_values(X.iloc[1]), native[1, :-1], 2e-5)  # one row of mixed values (a pd.Series)
    # XGBoost refuses categories it did not see in training, with its own error
    unseen = X.assign(c=pd.Categorical(["d", "z", "d", "c"]))
    with pytest.raises(xgb.core.XGBoostError, match="not in the training set"):
        ours(model).shap_values(unseen)


def test_lightgbm_categories_recoded_by_label(cat_data):
    df, y, X = cat_data
    model = lgb.LGBMRegressor(n_estimators=10, verbose=-1, min_child_samples=5).fit(df, y)
    close(ours(model).shap_values(X), model.predict(X, pred_contrib=True)[:, :-1])
    # unseen and NaN labels: LightGBM maps them to NaN, which categorical splits send right
    odd = X.assign(c=pd.Categorical(["zz", None, "b", "d"]))
    close(ours(model).shap_values(odd), model.predict(odd, pred_contrib=True)[:, :-1])
    close(ours(model.booster_).shap_values(odd.iloc[0]), model.predict(odd.iloc[:1], pred_contrib=True)[0, :-1])


def test_histgradientboosting_string_categories(cat_data):
    from sklearn.ensemble import HistGradientBoostingRegressor

    df, y, X = cat_data
    model = HistGradientBoostingRegressor(max_iter=10, random_state=0).fit(df, y)
    odd = X.assign(c=pd.Categorical(["zz", None, "b", "d"]))  # unknown and NaN: scikit-learn's missing side
    for rows in (X, odd):
        ex = ours(model)
        close(ex.shap_values(rows).sum(1) + ex.expected_value, model.predict(rows))
    bg = df.iloc[:10]
    ref, ev = brute_force_interventional(lambda r: model.predict(pd.DataFrame(
        {"a": r[:, 0], "c": pd.Categorical.from_codes(np.nan_to_num(r[:, 1], nan=-1).astype(int),
                                                      df.c.cat.categories), "b": r[:, 2]})),
        np.column_stack([X.a, X.c.map(dict(zip("abcd", range(4)))).astype(float), X.b]),
        np.column_stack([bg.a, bg.c.cat.codes.astype(float), bg.b]))
    close(ours(model, bg).shap_values(X), ref[..., 0])


@pytest.mark.parametrize("params", [dict(use_missing=False), dict(zero_as_missing=True), dict()],
                         ids=["use_missing_false", "zero_as_missing", "trained_without_nan"])
def test_lightgbm_missing_types(params):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(500, 4))
    X[rng.random(500) < 0.3, 1] = 0.0
    if params:
        X[rng.random(500) < 0.1, 2] = np.nan
    y = X[:, 0] + 2 * (np.nan_to_num(X[:, 1]) > -0.2) + np.nan_to_num(X[:, 2], nan=3.0) + rng.normal(size=500) * 0.1
    model = lgb.LGBMRegressor(n_estimators=20, num_leaves=8, verbose=-1, min_child_samples=5, **params).fit(X, y)
    Xe = rng.normal(size=(60, 4))
    Xe[::3, 1] = 0.0
    Xe[1::4, 1] = 1e-36
    Xe[::2, 2] = np.nan
    Xe[::5, 0] = np.nan
    native = model.predict(Xe, pred_contrib=True)
    close(ours(model).shap_values(Xe), native[:, :-1])
    bg = X[:8]
    ref, _ = brute_force_interventional(lambda r: model.predict(r, raw_score=True), Xe[:3], bg)
    close(ours(model, bg).shap_values(Xe[:3]), ref[..., 0])


@pytest.mark.parametrize("form", ["booster", "model_str", "model_file"])
def test_lightgbm_raw_multiclass_booster(form, tmp_path):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(300, 4))
    y = np.digitize(X[:, 0] + X[:, 1] * X[:, 2], [-0.5, 0.5])
    clf = lgb.LGBMClassifier(n_estimators=5, num_leaves=6, verbose=-1).fit(X, y)
    if form == "booster":
        model = clf.booster_
    elif form == "model_str":
        model = lgb.Booster(model_str=clf.booster_.model_to_string())
    else:
        path = os.path.join(tmp_path, "m.txt")
        clf.booster_.save_model(path)
        model = lgb.Booster(model_file=path)
    native = clf.predict(X[:20], pred_contrib=True).reshape(20, 3, 5).transpose(0, 2, 1)
    ex = ours(model)
    sv = ex.shap_values(X[:20])
    assert sv.shape == (20, 4, 3)
    close(sv, native[:, :-1, :])
    close(ex.expected_value, native[0, -1, :])
    close(ex.shap_values(X[:20], tree_limit=6), clf.predict(X[:20], pred_contrib=True, num_iteration=2)
          .reshape(20, 3, 5).transpose(0, 2, 1)[:, :-1, :])


def test_lightgbm_linear_tree_refused_as_shap_refuses():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 3))
    model = lgb.LGBMRegressor(n_estimators=5, linear_tree=True, verbose=-1).fit(X, 2 * X[:, 0] + X[:, 1])
    with pytest.raises(lgb.basic.LightGBMError):  # shap's own path-dependent call raises this
        shap.TreeExplainer(model).shap_values(X[:3])
    for args in ((), (X[:20],)):
        with pytest.raises(lgb.basic.LightGBMError, match="linear trees"):
            ours(model, *args)
    with pytest.raises(lgb.basic.LightGBMError, match="linear trees"):
        ours(lgb.Booster(model_str=model.booster_.model_to_string()))


def test_reordered_columns_raise_the_library_error(cat_data):
    from sklearn.ensemble import RandomForestRegressor

    df, y, X = cat_data
    num = df[["a", "b"]]
    model = xgb.XGBRegressor(n_estimators=5, enable_categorical=True).fit(df, y)
    with pytest.raises(ValueError, match="feature_names mismatch"):
        model.predict(X[["b", "a", "c"]])
    with pytest.raises(ValueError, match="feature_names mismatch"):
        ours(model).shap_values(X[["b", "a", "c"]])
    # names the model does not know are read by position, as shap reads them (shap's own suite relies on it)
    close(ours(model).shap_values(X.set_axis(["p", "q", "r"], axis=1)), ours(model).shap_values(X), 0)
    rf = RandomForestRegressor(n_estimators=3, random_state=0).fit(num, y)
    with pytest.raises(ValueError, match="same order"):
        rf.predict(num[["b", "a"]])
    with pytest.raises(ValueError, match="same order"):
        ours(rf).shap_values(num[["b", "a"]])
    # LightGBM reads columns by position (its predict does): same values as LightGBM, and a warning
    lg = lgb.LGBMRegressor(n_estimators=5, verbose=-1).fit(num, y)
    with pytest.warns(UserWarning, match="at other positions"):
        sv = ours(lg).shap_values(num[["b", "a"]].iloc[:5])
    close(sv, lg.predict(num[["b", "a"]].iloc[:5], pred_contrib=True)[:, :-1])


def test_tree_limit_expected_value():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(300, 4))
    y = np.exp(X[:, 0] + 0.5 * X[:, 1])
    cases = [(xgb.XGBRegressor(objective="reg:gamma", n_estimators=8, n_jobs=1), y, 1),
             (xgb.XGBRegressor(booster="dart", rate_drop=0.3, skip_drop=0.0, n_estimators=8, n_jobs=1), y, 1),
             (xgb.XGBClassifier(n_estimators=8, n_jobs=1), np.digitize(X[:, 0], [-0.5, 0.5]), 3)]
    for model, target, K in cases:
        model.fit(X, target)
        booster = model.get_booster()
        nat = booster.predict(xgb.DMatrix(X[:10]), pred_contribs=True, iteration_range=(0, 3))
        nat = nat[..., None] if nat.ndim == 2 else np.moveaxis(nat, 1, -1)
        ex = ours(model)
        sv = ex.shap_values(X[:10], tree_limit=3 * K)  # additivity checked against iteration_range=(0, 3)
        close(sv, nat[:, :-1, 0] if K == 1 else nat[:, :-1, :], 2e-5)
        close(ex.expected_value, nat[0, -1, 0] if K == 1 else nat[0, -1, :], 2e-5)
        ex.shap_values(X[:10])  # all trees again: the full expected value
        full = booster.predict(xgb.DMatrix(X[:1]), pred_contribs=True)
        close(ex.expected_value, full[0, -1] if K == 1 else full[0, :, -1], 2e-5)
    lg = lgb.LGBMRegressor(n_estimators=8, verbose=-1).fit(X, y)
    ex = ours(lg)
    close(ex.shap_values(X[:10], tree_limit=3), lg.predict(X[:10], pred_contrib=True, num_iteration=3)[:, :-1])
    close(ex.expected_value, lg.predict(X[:1], pred_contrib=True, num_iteration=3)[0, -1])


@pytest.mark.parametrize("grow", ["Depthwise", "Lossguide"])
def test_catboost_non_symmetric_trees(grow):
    cb = pytest.importorskip("catboost")
    rng = np.random.default_rng(5)
    X = rng.normal(size=(300, 4))
    X[::7, 2] = np.nan
    y = X[:, 0] + X[:, 1] * np.nan_to_num(X[:, 2]) > 0
    model = cb.CatBoostClassifier(iterations=15, depth=4, grow_policy=grow, verbose=0, thread_count=1,
                                  loss_function="Logloss").fit(X, y)
    raw = model.predict(X[:40], prediction_type="RawFormulaVal")
    ex = ours(model)
    sv = ex.shap_values(X[:40])  # additivity against RawFormulaVal (CatBoost's own ShapValues miss it here)
    close(sv.sum(1) + ex.expected_value, raw, 1e-5)
    close(ex.shap_values(X[0]), sv[0])  # a 1-D row
    close(ex.shap_values(pd.DataFrame(X[:3], columns=model.feature_names_).iloc[0]), sv[0])  # a Series
    bg = X[:6]
    ref, _ = brute_force_interventional(lambda r: model.predict(r, prediction_type="RawFormulaVal"), X[:3], bg)
    close(ours(model, bg).shap_values(X[:3]), ref[..., 0], 1e-5)
    # with category features: CatBoost's own values, a Series and a 1-D row work, non-additivity warns
    df = pd.DataFrame(X, columns=list("abcd")).assign(colour=rng.choice(["r", "g", "b"], 300))
    mc = cb.CatBoostRegressor(iterations=10, depth=3, grow_policy=grow, verbose=0, thread_count=1,
                              cat_features=["colour"]).fit(df, X[:, 0] + (df.colour == "r"))
    exc = ours(mc)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full = exc.shap_values(df.iloc[:5])
        close(exc.shap_values(df.iloc[2]), full[2])
        close(exc.shap_values(df.iloc[2].to_numpy()), full[2])


def test_duplicate_columns_inf_and_zero_rows_as_shap():
    from sklearn.ensemble import RandomForestRegressor

    rng = np.random.default_rng(6)
    df = pd.DataFrame(rng.normal(size=(200, 3)), columns=["a", "b", "c"])
    y = df.a + df.b * df.c
    rf = RandomForestRegressor(n_estimators=4, max_depth=5, random_state=0).fit(df, y)
    lg = lgb.LGBMRegressor(n_estimators=5, verbose=-1).fit(df, y)
    xg = xgb.XGBRegressor(n_estimators=5, n_jobs=1).fit(df, y)
    dup = df.iloc[:5].set_axis(["a", "a", "c"], axis=1)
    inf = df.iloc[:5].copy()
    inf.iloc[0, 0], inf.iloc[1, 1] = np.inf, -np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for model in (rf, lg):
            close(ours(model).shap_values(dup), shap.TreeExplainer(model).shap_values(dup))
        with pytest.raises(ValueError, match="Duplicate column names"):
            shap.TreeExplainer(xg).shap_values(dup)
        with pytest.raises(ValueError, match="Duplicate column names"):
            ours(xg).shap_values(dup)
        close(ours(rf).shap_values(inf), shap.TreeExplainer(rf).shap_values(inf))
        bg = df.iloc[:20]
        close(ours(xg, bg).shap_values(inf), shap.TreeExplainer(xg, bg).shap_values(inf), 2e-5)
        assert shap.TreeExplainer(rf).shap_values(df.iloc[:0]).shape == (0, 3)
        for model in (rf, lg, xg):
            assert ours(model).shap_values(df.iloc[:0]).shape == (0, 3)
        assert ours(lg).shap_interaction_values(df.iloc[:0]).shape == (0, 3, 3)
