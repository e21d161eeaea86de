"""dask_shap_values without a cluster (threaded scheduler): interventional and log_loss with labels, pickling, errors."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")
import xgboost as xgb  # noqa: E402 - after the pytest.importorskip above

from hitml import shap_ext  # noqa: E402 - after the pytest.importorskip above
from hitml.shap_ext._dask import ShippedExplainer, dask_shap_values  # noqa: E402 - after the pytest.importorskip above
from hitml.shap_ext._explainer import _ShapTreeExplainer  # noqa: E402 - after the pytest.importorskip above


@pytest.fixture(scope="module")
def model_x():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(400, 5))
    X[rng.random(X.shape) < 0.05] = np.nan
    y = (np.nan_to_num(X[:, 0]) + X[:, 1] > 0).astype(float)
    return xgb.train({"objective": "binary:logistic", "max_depth": 3}, xgb.DMatrix(X, y), 8), X, y


def test_interventional_and_log_loss_with_labels(model_x):
    model, X, y = model_x
    bg = X[:40]
    ex = shap_ext.TreeExplainer(model, bg, feature_perturbation="interventional", backend="cpu")
    got = dask_shap_values(ex, da.from_array(X, chunks=150)).compute()
    np.testing.assert_allclose(got, ex.shap_values(X), rtol=1e-12, atol=1e-12)
    exl = shap_ext.TreeExplainer(model, bg, model_output="log_loss", feature_perturbation="interventional",
                                 backend="cpu")
    got = dask_shap_values(exl, da.from_array(X, chunks=150), da.from_array(y, chunks=97)).compute()
    np.testing.assert_allclose(got, exl.shap_values(X, y), rtol=1e-12, atol=1e-12)
    # shap's log_loss explainer keeps a bound name-mangled method as expected_value: it survives the trip to workers
    shipped = pickle.loads(pickle.dumps(ShippedExplainer(exl)))
    np.testing.assert_array_equal(shipped.explainer.expected_value(y[:40]), exl.expected_value(y[:40]))


def test_bad_inputs(model_x):
    model, X, _ = model_x
    ex = shap_ext.TreeExplainer(model, X[:40], feature_perturbation="interventional", backend="cpu")
    dX = da.from_array(X, chunks=150)
    ip = shap_ext.TreeExplainer(model, X[:40], feature_perturbation="interventional", model_output="probability",
                                backend="cpu") if hasattr(model, "predict_proba") else None
    if ip is not None:   # interactions and Banzhaf values are of the raw output, as in memory
        with pytest.raises(ValueError, match="raw"):
            dask_shap_values(ip, dX, interactions=True)
    # interventional interactions of a Dask array equal the in-memory ones
    inter = dask_shap_values(ex, dX[:60], interactions=True).compute()
    assert np.array_equal(inter, ex.shap_interaction_values(X[:60]))
    with pytest.raises(TypeError, match="shap_ext.TreeExplainer"):
        dask_shap_values(_ShapTreeExplainer(model), dX)
    with pytest.raises(TypeError, match="dask.array or dask.dataframe"):
        dask_shap_values(ex, X)
    with pytest.raises(ValueError, match="2-D"):
        dask_shap_values(ex, dX[:, 0])
    with pytest.raises(ValueError, match="backend"):
        dask_shap_values(ex, dX, backend="tpu")
    with pytest.raises(ValueError, match="features"):  # the engine's own check, raised when the block runs
        dask_shap_values(ex, da.from_array(X[:, :4], chunks=150)).compute()


@pytest.mark.gpu
def test_gpu_workers_match_cpu(model_x):
    import cupy as cp

    model, X, _ = model_x
    ex = shap_ext.TreeExplainer(model, backend="cpu")
    dX = da.from_array(X, chunks=150)
    ref = ex.shap_values(X)
    got = dask_shap_values(ex, dX, backend="gpu").compute()  # NumPy partitions, GPU engine, NumPy blocks
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-9)
    got_cp = dask_shap_values(ex, dX.map_blocks(cp.asarray), backend="gpu").compute()
    assert isinstance(got_cp, cp.ndarray)
    np.testing.assert_allclose(got_cp.get(), ref, rtol=1e-9, atol=1e-9)
    inter = dask_shap_values(ex, dX, interactions=True, backend="gpu").compute()
    np.testing.assert_allclose(inter, ex.shap_interaction_values(X), rtol=1e-9, atol=1e-9)
