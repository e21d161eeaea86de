"""The public drop-ins route Dask collections to the Dask paths: explainer.shap_values, sklearn_ext.shuffle/train_test_split."""
from __future__ import annotations

import numpy as np
import pytest

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")
import shap  # noqa: E402 - after the pytest.importorskip above
import xgboost as xgb  # noqa: E402 - after the pytest.importorskip above

from hitml import shap_ext  # noqa: E402,F401 - after importorskip; imported for its backend= hook on shap
from hitml.kernels.shuffle import permutation  # noqa: E402 - after the pytest.importorskip above
from hitml.sklearn_ext import shuffle, train_test_split  # noqa: E402 - after the pytest.importorskip above


@pytest.fixture(autouse=True)
def _sync():
    with dask.config.set(scheduler="sync"):
        yield


def test_explainer_shap_values_on_dask_array_is_lazy_and_equals_shaps_cpp():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 5)).astype(np.float32)
    y = X[:, 0] - 2 * X[:, 1] * X[:, 2] + rng.normal(scale=0.1, size=300)
    model = xgb.XGBRegressor(n_estimators=15, max_depth=4).fit(X, y)
    ours = shap.TreeExplainer(model, backend="cpu")
    lazy = ours.shap_values(da.from_array(X, chunks=(70, 5)))
    assert isinstance(lazy, da.Array)
    # reference: shap's own C++ interventional-free explainer (XGBoost's exact pred_contribs short-circuit)
    ref = shap.TreeExplainer(model).shap_values(X)
    np.testing.assert_allclose(lazy.compute(), ref, rtol=1e-5, atol=1e-5)
    inter = ours.shap_interaction_values(da.from_array(X, chunks=(70, 5)))
    assert isinstance(inter, da.Array) and inter.shape == (300, 5, 5)
    with pytest.raises(TypeError, match="Dask collection"):
        ours(da.from_array(X, chunks=(70, 5)))


def test_sklearn_ext_shuffle_and_split_accept_dask():
    n = 503
    X = np.arange(2 * n, dtype=np.float64).reshape(n, 2)
    xs = shuffle(da.from_array(X, chunks=(100, 2)), random_state=7)
    assert isinstance(xs, da.Array)
    np.testing.assert_array_equal(xs.compute(), X[permutation(n, 7)])
    tr, te = train_test_split(da.from_array(X, chunks=(100, 2)), test_size=0.2, random_state=3)
    tr, te = tr.compute(), te.compute()
    assert len(te) == 101 and len(tr) == 402
    assert np.array_equal(np.sort(np.concatenate([tr[:, 0], te[:, 0]])), X[:, 0])
