"""GPU paths of the Dask functions on a distributed cluster: CuPy partitions, GPU engines, results equal the CPU ones.

Two worker processes share the one GPU (so CuPy blocks also travel between workers); the references are in-memory
CPU results and, for SHAP, shap's own C++ explainer.
"""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

from hitml import shap_ext  # noqa: E402 - after the pytest.importorskip above
from hitml.kernels.shuffle import permutation  # noqa: E402 - after the pytest.importorskip above
from hitml.kernels.sketch import sketch  # noqa: E402 - after the pytest.importorskip above
from hitml.shap_ext._dask import dask_shap_values, ship_explainer  # noqa: E402 - after the pytest.importorskip above
from hitml.shap_ext._explainer import _ShapTreeExplainer  # noqa: E402 - after the pytest.importorskip above
from hitml.sklearn_ext import train_test_split  # noqa: E402 - after the pytest.importorskip above
from test_dask_distributed import _model, _sketch_columns  # noqa: E402 - the CPU cluster tests' models, data
from hitml.sklearn_ext._dask import dask_shuffle, dask_train_test_split  # noqa: E402 - after the pytest.importorskip above
from hitml.xgboost_ext import QuantileBinner  # noqa: E402 - after the pytest.importorskip above
from hitml.xgboost_ext.dask import fit_binner, sketch_partitions, snap_partitions  # noqa: E402 - after the pytest.importorskip above
from hitml.xgboost_ext.hook import snap  # noqa: E402 - after the pytest.importorskip above


@pytest.fixture(scope="module")
def gpu_client():
    """Two single-thread worker processes on the visible GPU; no host memory limit (CuPy bytes are not host bytes)."""
    pytest.importorskip("cupy")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  memory_limit=0, silence_logs=40) as cluster, distributed.Client(cluster) as c:
        yield c


def _on_gpu(X, rows):
    import cupy as cp

    return da.from_array(X, chunks=(rows, X.shape[1])).map_blocks(cp.asarray, meta=cp.empty((0, 0), X.dtype))


@pytest.mark.parametrize("n_class", [None, 3])
def test_shap_cupy_partitions_on_gpu_workers_equal_cpu(gpu_client, n_class):
    import cupy as cp

    model, X = _model(n_class)
    ex = shap_ext.TreeExplainer(model, backend="cpu")  # built on the client; the workers run the GPU engine
    ref, ref_i = ex.shap_values(X), ex.shap_interaction_values(X)
    dX = _on_gpu(X, 170)  # uneven partitions, CuPy blocks
    shipped = ship_explainer(ex)
    vals = dask_shap_values(ex, dX, backend="gpu", shipped=shipped)
    inter = dask_shap_values(ex, dX, backend="gpu", interactions=True, shipped=shipped)
    assert isinstance(vals._meta, cp.ndarray) and vals.shape == ref.shape and inter.shape == ref_i.shape
    got, got_i = gpu_client.compute([vals, inter], sync=True)
    assert isinstance(got, cp.ndarray) and isinstance(got_i, cp.ndarray)
    np.testing.assert_allclose(got.get(), ref, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got_i.get(), ref_i, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got.get(), _ShapTreeExplainer(model).shap_values(X), rtol=1e-5, atol=1e-5)
    # NumPy partitions with backend="gpu": the GPU engine on the workers, NumPy blocks back
    got_np = gpu_client.compute(dask_shap_values(ex, da.from_array(X, chunks=(170, X.shape[1])), backend="gpu",
                                                 shipped=shipped), sync=True)
    assert isinstance(got_np, np.ndarray)
    np.testing.assert_allclose(got_np, ref, rtol=1e-9, atol=1e-9)


def test_sketch_of_cupy_partitions_equals_cpu_single_machine(gpu_client):
    X, _ = _sketch_columns()
    merged = sketch_partitions(_on_gpu(X, 1100), n_moments=12, max_distinct=16, backend="gpu")
    local = sketch(X, n_moments=12, max_distinct=16, backend="cpu")
    np.testing.assert_allclose(merged.weight, local.weight, rtol=1e-12, atol=0)
    np.testing.assert_allclose(merged.mean, local.mean, rtol=1e-12, atol=0)
    np.testing.assert_array_equal(merged.vmin, local.vmin)
    np.testing.assert_array_equal(merged.vmax, local.vmax)
    np.testing.assert_array_equal(merged.n_distinct, local.n_distinct)
    for j in range(4):  # each central moment within 1e-12 of its scale sum |x - mu|^k (independent NumPy reference)
        x = X[~np.isnan(X[:, j]), j]
        mu = x.mean()
        scale = np.array([np.sum(np.abs(x - mu) ** k) for k in range(2, 13)])
        assert np.all(np.abs(merged.M[j] - local.M[j]) <= 1e-12 * scale), (j, merged.M[j] - local.M[j])
    # the binner fitted through the GPU workers snaps CuPy partitions on their GPU, as snap does in memory
    binner = fit_binner(_on_gpu(X, 1100), binner=QuantileBinner(max_bin=16, backend="gpu"))
    snapped = snap_partitions(_on_gpu(X, 1100), binner)
    got = gpu_client.compute(snapped, sync=True)
    assert type(got).__module__.startswith("cupy")
    np.testing.assert_array_equal(got.get(), snap(X, binner))


def test_shuffle_and_split_of_cupy_partitions(gpu_client):
    import cupy as cp

    n = 5003
    X = np.column_stack([np.arange(n), np.arange(n) * 0.5]).astype(np.float32)
    dX = _on_gpu(X, 700)
    out = dask_shuffle(dX, random_state=123)
    assert isinstance(out._meta, cp.ndarray)
    got = gpu_client.compute(out, sync=True)
    assert isinstance(got, cp.ndarray)
    np.testing.assert_array_equal(got.get(), X[permutation(n, 123)])
    tr, te = gpu_client.compute(dask_train_test_split(dX, test_size=0.2, random_state=1), sync=True)
    ref_tr, ref_te = train_test_split(X, test_size=0.2, random_state=1)
    np.testing.assert_array_equal(tr.get(), ref_tr)
    np.testing.assert_array_equal(te.get(), ref_te)
    # a dask array made straight from a CuPy array (dask.array.from_array keeps CuPy chunks)
    got2 = gpu_client.compute(dask_shuffle(da.from_array(cp.asarray(X), chunks=(900, 2)), random_state=123),
                              sync=True)
    np.testing.assert_array_equal(got2.get(), X[permutation(n, 123)])
