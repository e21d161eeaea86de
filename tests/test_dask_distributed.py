"""SHAP, moment sketches and the shuffle on a 2-process LocalCluster: equal to the in-memory results."""
from __future__ import annotations

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
dd = pytest.importorskip("dask.dataframe")
pytest.importorskip("distributed")
import pandas as pd  # noqa: E402 - after the pytest.importorskip above
import shap  # noqa: E402 - after the pytest.importorskip above
import xgboost as xgb  # noqa: E402 - after the pytest.importorskip above

from hitml import shap_ext  # noqa: E402 - after the pytest.importorskip above
from hitml.kernels.shuffle import permutation  # noqa: E402 - after the pytest.importorskip above
from hitml.kernels.sketch import sketch  # noqa: E402 - after the pytest.importorskip above
from hitml.shap_ext._dask import dask_shap_values  # noqa: E402 - after the pytest.importorskip above
from hitml.shap_ext._explainer import _ShapTreeExplainer  # noqa: E402 - after the pytest.importorskip above
from hitml.sklearn_ext._dask import dask_shuffle, dask_train_test_split  # noqa: E402 - after the pytest.importorskip above
from hitml.sklearn_ext import train_test_split  # noqa: E402 - after the pytest.importorskip above
from hitml.xgboost_ext.dask import sketch_partitions  # noqa: E402 - after the pytest.importorskip above


def _model(n_class=None, n=600, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 6))
    X[rng.random(X.shape) < 0.05] = np.nan
    if n_class:
        y, params = rng.integers(0, n_class, n), {"objective": "multi:softprob", "num_class": n_class}
    else:
        y, params = np.nan_to_num(X[:, 0]) * 2 + np.sin(np.nan_to_num(X[:, 1])), {}
    return xgb.train({**params, "max_depth": 4, "eta": 0.3}, xgb.DMatrix(X, y), 12), X


@pytest.mark.parametrize("n_class", [None, 3])
def test_shap_on_dask_equals_in_memory(client, n_class):
    model, X = _model(n_class)
    ex = shap_ext.TreeExplainer(model, backend="auto")  # CPU-only workers run the CPU engine
    dX = da.from_array(X, chunks=(137, 3))  # uneven row chunks, split columns (rechunked for the engine)
    vals, inter = dask_shap_values(ex, dX), dask_shap_values(ex, dX, interactions=True)
    assert isinstance(vals, da.Array) and isinstance(inter, da.Array)
    ref, ref_i = ex.shap_values(X), ex.shap_interaction_values(X)
    assert vals.shape == ref.shape and inter.shape == ref_i.shape
    assert vals.shape == ((len(X), 6) if n_class is None else (len(X), 6, 3))
    got, got_i = client.compute([vals, inter], sync=True)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_i, ref_i, rtol=1e-12, atol=1e-12)
    # and shap's own C++ explainer (independent reference)
    shap_ref = _ShapTreeExplainer(model).shap_values(X)
    np.testing.assert_allclose(got, shap_ref, rtol=1e-5, atol=1e-5)


def test_shap_dataframe_unknown_lengths_and_sent_once(client):
    model, X = _model()
    ex = shap.TreeExplainer(model, backend="cpu")  # the hook installed by `import shap_ext`
    ddf = dd.from_pandas(pd.DataFrame(X, columns=[f"f{i}" for i in range(6)]), npartitions=8)
    client.run(lambda: __import__("hitml.shap_ext._dask").__dict__)  # import the module on every worker
    client.run(lambda: __import__("hitml.shap_ext._dask", fromlist=["_LOADS"])._LOADS.update(count=0))
    out = dask_shap_values(ex, ddf, lengths=False)
    assert np.isnan(out.shape[0]) and out.shape[1:] == (6,)
    np.testing.assert_allclose(out.compute(), ex.shap_values(X), rtol=1e-12, atol=1e-12)
    loads = client.run(lambda: __import__("hitml.shap_ext._dask", fromlist=["_LOADS"])._LOADS["count"])
    # 8 partitions, yet the explainer (and its PathSet) is unpickled about once per worker, not once per partition. On
    # a loaded machine distributed can fetch a broadcast replica again from a peer (a second unpickle there), so a
    # worker may count 2: the test allows that and still fails if the explainer travels with every task.
    assert all(v <= 2 for v in loads.values()) and 1 <= sum(loads.values()) < ddf.npartitions, loads


def _sketch_columns(n: int = 9000):
    """(X, rng): lognormal with 2% NaN, N(1000, 1), 7 integer codes, Student t(4); rng continues for more draws."""
    rng = np.random.default_rng(3)
    X = np.column_stack([rng.lognormal(size=n), rng.normal(1000, 1, n), rng.integers(0, 7, n).astype(float),
                         rng.standard_t(4, n)])
    X[rng.random(n) < 0.02, 0] = np.nan
    return X, rng


def test_merged_partition_sketches_equal_single_machine(client):
    X, rng = _sketch_columns()
    n = X.shape[0]
    w = rng.uniform(0.5, 2, n)
    dX = da.from_array(X, chunks=(1100, 4))  # 9 partitions: a 4-level merge tree with an odd carry
    for weights in (None, w):
        dw = None if weights is None else da.from_array(weights, chunks=1000)
        merged = sketch_partitions(dX, dw, n_moments=12, max_distinct=16)
        local = sketch(X, weights, n_moments=12, max_distinct=16)
        for f in ("weight", "mean"):
            np.testing.assert_allclose(getattr(merged, f), getattr(local, f), rtol=1e-12, atol=0)
        np.testing.assert_array_equal(merged.vmin, local.vmin)
        np.testing.assert_array_equal(merged.vmax, local.vmax)
        np.testing.assert_array_equal(merged.n_distinct, local.n_distinct)
        np.testing.assert_array_equal(merged.distinct, local.distinct)
        # independent reference: two-pass weighted central moments in NumPy
        ww = np.ones(n) if weights is None else weights
        for j in range(4):
            ok = ~np.isnan(X[:, j])
            x, wj = X[ok, j], ww[ok]
            mu = np.sum(wj * x) / np.sum(wj)
            np.testing.assert_allclose(merged.mean[j], mu, rtol=1e-12)
            # M_k = sum w (x-mu)^k: merged vs single pass within 1e-12 of its scale sum w |x-mu|^k (odd sums of a
            # N(1000, 1) column cancel to ~1e-2 of that scale, so a plain rtol would measure the cancellation)
            scale = np.array([np.sum(wj * np.abs(x - mu) ** k) for k in range(2, 13)])
            assert np.all(np.abs(merged.M[j] - local.M[j]) <= 1e-12 * scale), (j, merged.M[j] - local.M[j])
            for k in (2, 3, 4):
                np.testing.assert_allclose(merged.M[j, k - 2], np.sum(wj * (x - mu) ** k), rtol=1e-9)


def test_shuffle_and_split_on_the_cluster(client):
    n = 5003
    X = np.column_stack([np.arange(n), np.arange(n) * 0.5])
    dX = da.from_array(X, chunks=(700, 2))
    out = dask_shuffle(dX, random_state=123)
    np.testing.assert_array_equal(out.compute(), X[permutation(n, 123)])
    tr, te = dask_train_test_split(dX, test_size=0.2, random_state=1)
    ref_tr, ref_te = train_test_split(X, test_size=0.2, random_state=1)
    np.testing.assert_array_equal(tr.compute(), ref_tr)
    np.testing.assert_array_equal(te.compute(), ref_te)


def test_explainer_shipped_once_across_calls_and_again_when_changed(client):
    from hitml.shap_ext._dask import ship_explainer

    model, X = _model()
    bg = da.from_array(X[:300], chunks=100)
    ex = shap.TreeExplainer(model, data=bg, backend="cpu")   # a Dask background: the build ships the explainer
    first = ship_explainer(ex)
    assert ship_explainer(ex) is first                        # the same attribute objects: the copy on the workers
    client.run(lambda: __import__("hitml.shap_ext._dask", fromlist=["_LOADS"])._LOADS.update(count=0))
    dX = da.from_array(X, chunks=150)
    ref = ex.shap_values(X)
    for _ in range(2):
        np.testing.assert_allclose(ex.shap_values(dX).compute(), ref, rtol=1e-12, atol=1e-12)
    loads = client.run(lambda: __import__("hitml.shap_ext._dask", fromlist=["_LOADS"])._LOADS["count"])
    assert sum(loads.values()) == 0, loads                   # neither call sent the explainer again
    # an attribute set to another object (here the background's summary of other rows) ships it again, and the
    # values follow it: they equal an in-memory explainer over those rows
    other = shap.TreeExplainer(model, data=X[300:], backend="cpu")
    for name in ("background_summary", "expected_value", "_full_expected_value"):
        setattr(ex, name, getattr(other, name))
    assert ship_explainer(ex) is not first
    np.testing.assert_allclose(ex.shap_values(dX).compute(), other.shap_values(X), rtol=1e-12, atol=1e-12)
