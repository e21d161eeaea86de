"""Background data is read as the library reads rows, whatever form it comes in (array, shap masker, frame): the
expected value and the interventional values against brute force over the library's own predict (hitml issue #39:
a NumPy background skipped the reader, so XGBoost's `missing=` value and HistGradientBoosting's category encoding
were not applied to it, and values still summed to the prediction while being wrong)."""
from __future__ import annotations

import numpy as np
import pytest
import shap

from _differential import brute_force_interventional
from hitml import shap_ext


def _forms(bg):
    return {"array": bg, "masker": shap.maskers.Independent(bg, max_samples=len(bg)), "float32": bg.astype(np.float32)}


def _check(model, f, X, bg, form):
    ex = shap_ext.TreeExplainer(model, _forms(bg)[form], feature_perturbation="interventional", backend="cpu")
    phi_ref, ev_ref = brute_force_interventional(f, X, bg)
    np.testing.assert_allclose(np.ravel(ex.expected_value)[0], ev_ref[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ex.shap_values(X), phi_ref[..., 0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("form", ["array", "masker", "float32"])
@pytest.mark.parametrize("missing", [-999.0, 0.0, np.inf, 1e-45])
def test_xgboost_missing_value_in_the_background(form, missing):
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(1)
    X = rng.normal(size=(400, 3)).astype(np.float32).astype(np.float64)
    X[rng.random(X.shape) < 0.2] = missing
    y = np.clip(np.nan_to_num(X[:, 0] * 2 + X[:, 1], posinf=3, neginf=-3), -5, 5)
    model = xgb.XGBRegressor(n_estimators=5, max_depth=3, missing=missing).fit(X, y)
    b = model.get_booster()

    def f(A):
        return b.predict(xgb.DMatrix(A, missing=missing), output_margin=True)
    with np.errstate(over="ignore"):
        _check(model, f, X[:6], X[10:18], form)


@pytest.mark.parametrize("form", ["array", "masker"])
def test_hist_gradient_boosting_categories_in_the_background(form):
    from sklearn.ensemble import HistGradientBoostingRegressor

    rng = np.random.default_rng(0)
    X = np.c_[rng.choice([10.0, 20.0, 30.0, 40.0], 400), rng.normal(size=400)]
    model = HistGradientBoostingRegressor(max_iter=5, categorical_features=[0]).fit(X, (X[:, 0] == 30) * 2 + X[:, 1])
    _check(model, lambda A: model._raw_predict(A).ravel(), X[:6], X[20:30], form)


@pytest.mark.gpu
def test_xgboost_missing_value_on_the_gpu():
    """The missing value (0.0) is compared without CuPy's flush of subnormals: 1e-45 is a value, not missing."""
    import cupy as cp
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(2)
    x1 = rng.choice([0.0, 1e-45, 1.0], 600)
    X = np.c_[rng.normal(size=600), x1]
    y = np.where(x1 == 0.0, 0.0, np.where(x1 == 1.0, 1.0, 5.0)) + 0.1 * X[:, 0]
    model = xgb.XGBRegressor(n_estimators=5, max_depth=3, missing=0.0).fit(X, y)
    rows = np.array([[0.1, 0.0], [0.1, 1e-45], [0.1, 1.0]])
    margin = model.predict(rows, output_margin=True)
    assert abs(margin[0] - margin[1]) > 1.0  # XGBoost reads 1e-45 as a value, 0.0 as missing
    ref = model.get_booster().predict(xgb.DMatrix(rows, missing=0.0), pred_contribs=True)[:, :-1]
    for kw in ({}, {"data": X[:10], "feature_perturbation": "interventional"}):
        cpu = shap_ext.TreeExplainer(model, backend="cpu", **kw).shap_values(rows)
        gpu = shap_ext.TreeExplainer(model, backend="gpu", **kw)
        np.testing.assert_allclose(gpu.shap_values(rows), cpu, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(cp.asnumpy(gpu.shap_values(cp.asarray(rows))), cpu, rtol=1e-12, atol=1e-12)
        if not kw:
            np.testing.assert_allclose(cpu, ref, rtol=0, atol=1e-5)


def test_masker_of_a_frame_keeps_its_names():
    """A LightGBM masker is re-read (LightGBM's dtypes); the rebuilt masker keeps the frame's column names."""
    lgb = pytest.importorskip("lightgbm")
    import pandas as pd

    rng = np.random.default_rng(4)
    df = pd.DataFrame(rng.normal(size=(200, 3)), columns=["a", "b", "c"])
    model = lgb.LGBMRegressor(n_estimators=3, verbose=-1).fit(df, df.a - df.c)
    masker = shap.maskers.Independent(df, max_samples=200)
    ex = shap_ext.TreeExplainer(model, masker, feature_perturbation="interventional", backend="cpu")
    assert list(ex.masker.feature_names) == ["a", "b", "c"]
    X = df.to_numpy()[:5]
    phi_ref, _ = brute_force_interventional(lambda A: model.predict(A, raw_score=True), X, df.to_numpy())
    np.testing.assert_allclose(ex.shap_values(X), phi_ref[..., 0], rtol=1e-6, atol=1e-9)
