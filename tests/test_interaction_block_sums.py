"""Interaction block sums (inter_table_block: a block's interaction terms summed per (i, j) output in shared memory)
against the direct table kernel (the same bytes in fixed point), the CPU twin, XGBoost's own ``pred_interactions``
and shap's C++ TreeSHAP; and the streamed mean |interaction| matrix on the GPU against ``np.abs(values).mean(0)``."""
from __future__ import annotations

import numpy as np
import pytest

from hitml.kernels.treeshap import cpu, extract_paths

from _treeshap_gpu import _close, _data, _gpu, _multiclass_models, _paths_from, _regression_paths, _sk_tree

pytestmark = pytest.mark.gpu


def _boosted(M=40, K=3, rounds=5, depth=6, input_dtype=np.float32, seed=0):
    """XGBoost-style paths (each tree feeds one output group, one leaf value per path) on M features."""
    from sklearn.tree import DecisionTreeRegressor
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(700, M)).astype(np.float32)
    trees = []
    for r in range(rounds):
        for k in range(K):
            y = X[:, (3 * k) % M] * X[:, (5 * r + k) % M] + np.sin(X[:, (k + r) % M]) + rng.normal(size=len(X))
            t = _sk_tree(DecisionTreeRegressor(max_depth=depth, random_state=r * K + k).fit(X, y), 1, rng, True)
            v = np.zeros((len(t[0]), K))
            v[:, k] = t[6][:, 0]
            trees.append(t[:6] + (v,))
    return _paths_from(trees, M, K, input_dtype=input_dtype, base=np.linspace(-1, 1, K))


def _spy(monkeypatch):
    """Counts the block-sum launches (so a test knows the block kernel, not the direct one, gave its values)."""
    from hitml.kernels.treeshap import _gpu_core as core
    calls = []
    real = core.launch_inter_block

    def launch(*args, **kw):
        calls.append(args[0].n_bins)
        return real(*args, **kw)

    monkeypatch.setattr(core, "launch_inter_block", launch)
    return calls


def _both(g, ps, X, monkeypatch):
    out = {}
    for sums in ("direct", "block"):
        monkeypatch.setattr(g.options, "shap_sums", sums)
        out[sums] = g.interaction_values(ps, X)
    monkeypatch.setattr(g.options, "shap_sums", "auto")
    return out["block"], out["direct"]


def _host(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


@pytest.mark.parametrize("variant,dmax", [("table", 12), ("split", 4)])
@pytest.mark.parametrize("model", ["boosted", "boosted64", "regression", "sparse_multiclass"])
def test_block_sums_equal_direct_and_twin(model, variant, dmax, monkeypatch):
    g = _gpu()
    if model.startswith("boosted"):
        ps = _boosted(input_dtype=np.float64 if model == "boosted64" else np.float32)
    elif model == "regression":
        ps = _regression_paths()[0]
    else:
        ps = _multiclass_models(3, 8, 5)[1]
    monkeypatch.setattr(g.options, "inter_variant", variant)
    monkeypatch.setattr(g, "TABLE_DMAX", dmax)
    monkeypatch.setattr(g, "SPLIT_MIN_SHARE", 0.0)
    X, _ = _data(389, ps.n_features, 11, nan=0.05)
    if np.dtype(ps.input_dtype) == np.float64:
        X = X.astype(np.float64) + 1e-9
    calls = _spy(monkeypatch)
    block, direct = _both(g, ps, X, monkeypatch)
    assert calls, "the block kernel did not run"
    block, direct = _host(block), _host(direct)
    assert block.tobytes() == direct.tobytes()
    np.testing.assert_array_equal(block, block.transpose(0, 2, 1, 3))
    _close(block, cpu.interaction_values(ps, X))


def test_row_counts_cupy_rows_and_double_atomics(monkeypatch):
    import cupy as cp
    g = _gpu()
    ps = _boosted(M=30, K=2, rounds=3)
    calls = _spy(monkeypatch)
    for n in (1, 31, 32, 33, 1025):
        X, _ = _data(n, 30, n, nan=0.1)
        block, direct = _both(g, ps, X, monkeypatch)
        assert _host(block).tobytes() == _host(direct).tobytes()
        twin = cpu.interaction_values(ps, X)
        _close(block, twin)
        onc = _both(g, ps, cp.asarray(X), monkeypatch)[0]
        assert isinstance(onc, cp.ndarray) and onc.get().tobytes() == _host(block).tobytes()
        monkeypatch.setattr(g.options, "deterministic", False)          # shared and global double atomics
        monkeypatch.setattr(g.options, "shap_sums", "block")
        _close(g.interaction_values(ps, X), twin)
        monkeypatch.setattr(g.options, "deterministic", True)
        monkeypatch.setattr(g.options, "shap_sums", "auto")
    assert len(calls) >= 5 * 3          # a NumPy call may run in pieces: one launch each


def test_falls_back_to_direct_sums(monkeypatch):
    """Dense random-forest leaves (a value per class) and a group whose slots do not fit one row of the shared
    accumulator keep the direct kernel; the values are unchanged."""
    from hitml.kernels.treeshap import _gpu_core as core
    g = _gpu()
    calls = _spy(monkeypatch)
    dense = _multiclass_models(4, 2, 5)[0]
    X, _ = _data(150, 7, 2)
    assert not core.inter_block_fits(g.packed_paths(dense), 7, dense.n_outputs)
    got = g.interaction_values(dense, X)
    assert not calls
    _close(got, cpu.interaction_values(dense, X))
    ps = _boosted(M=30, K=2, rounds=3)
    X, _ = _data(200, 30, 5, nan=0.05)
    want = _host(g.interaction_values(ps, X))
    assert calls
    calls.clear()
    monkeypatch.setattr(core, "_BLOCK_SMEM", 8)                    # room for one slot: every group is too wide
    assert not core.inter_block_fits(g.packed_paths(ps), 30, 2)
    assert _host(g.interaction_values(ps, X)).tobytes() == want.tobytes()
    assert not calls


def test_xgboost_pred_interactions_and_shap_cext(monkeypatch):
    """Through the explainer: XGBoost's own ``pred_interactions`` and shap's C++ ``dense_tree_shap`` (interactions),
    independent of our parsing and kernels."""
    xgb = pytest.importorskip("xgboost")
    shap = pytest.importorskip("shap")
    from shap import _cext

    from hitml import shap_ext
    calls = _spy(monkeypatch)
    rng = np.random.default_rng(7)
    M = 12
    X = rng.normal(size=(3000, M)).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    Xf = np.nan_to_num(X)
    y = Xf[:, 0] * Xf[:, 1] + np.sin(Xf[:, 2]) * Xf[:, 3] + Xf[:, 4:8].sum(1) + rng.normal(scale=0.1, size=len(X))
    labels = np.digitize(y, np.quantile(y, [0.33, 0.66]))
    models = [xgb.XGBRegressor(n_estimators=40, max_depth=6, learning_rate=0.2, n_jobs=2).fit(X, y),
              xgb.XGBClassifier(n_estimators=10, max_depth=5, learning_rate=0.3, n_jobs=2).fit(X, labels)]
    Xt = X[:300]
    for model in models:
        got = shap_ext.TreeExplainer(model, backend="gpu").shap_interaction_values(Xt)
        native = model.get_booster().predict(xgb.DMatrix(Xt), pred_interactions=True)
        native = native[..., :-1, :-1] if native.ndim == 3 else np.moveaxis(native[..., :-1, :-1], 1, -1)
        np.testing.assert_allclose(got, native, rtol=0, atol=2e-5 * max(1.0, np.abs(native).max()))
        ens = shap.TreeExplainer(model).model
        ps = extract_paths(ens.children_left, ens.children_right, ens.children_default, ens.features,
                           ens.thresholds, ens.values, ens.node_sample_weight, ens.base_offset, n_features=M,
                           input_dtype=ens.input_dtype)
        vals = ens.values.copy()
        for t in range(vals.shape[0]):
            _cext.compute_expectations(ens.children_left[t], ens.children_right[t], ens.node_sample_weight[t],
                                       vals[t])
        Xi = np.ascontiguousarray(Xt[:60], dtype=np.float64)
        K = vals.shape[2]
        phi = np.zeros((len(Xi), M + 1, M + 1, K))
        _cext.dense_tree_shap(ens.children_left, ens.children_right, ens.children_default, ens.features,
                              ens.thresholds, ens.threshold_types, vals, ens.node_sample_weight, ens.max_depth,
                              Xi, np.isnan(Xi), None, None, None, vals.shape[0], ens.base_offset, phi, 1, 0, True)
        _close(_gpu().interaction_values(ps, Xi), phi)
    assert len(calls) >= 4


def test_streamed_mean_abs_interactions(monkeypatch):
    """global_interaction_values over an iterator of CuPy blocks, in chunks far smaller than a block: within 1e-12 of
    np.abs(full values).mean(0), the same bytes on a second call, and through the block kernel."""
    import cupy as cp
    xgb = pytest.importorskip("xgboost")

    from hitml import shap_ext
    calls = _spy(monkeypatch)
    rng = np.random.default_rng(3)
    M = 9
    X = rng.normal(size=(2000, M)).astype(np.float32)
    y = X[:, 0] * X[:, 1] + X[:, 2] - X[:, 3] * X[:, 4] + rng.normal(scale=0.1, size=len(X))
    for model in (xgb.XGBRegressor(n_estimators=25, max_depth=5, n_jobs=2).fit(X, y),
                  xgb.XGBClassifier(n_estimators=6, max_depth=4, n_jobs=2).fit(X, np.digitize(y, [-0.5, 0.5]))):
        ex = shap_ext.TreeExplainer(model, backend="gpu")
        Xd = cp.asarray(X)

        def blocks():
            return iter([Xd[:700], Xd[700:1500], Xd[1500:]])

        K = 3 if isinstance(model, xgb.XGBClassifier) else 1
        chunk = 97 * (M + 1) ** 2 * K * 8                   # 97 rows a chunk: blocks end mid-chunk
        got = ex.global_interaction_values(blocks(), chunk_bytes=chunk, top_k=None)
        full = _host(ex.shap_interaction_values(Xd))
        np.testing.assert_allclose(got.values, np.abs(full).mean(0), rtol=1e-12, atol=0)
        again = ex.global_interaction_values(blocks(), chunk_bytes=chunk, top_k=None)
        assert again.values.tobytes() == got.values.tobytes() and got.n_rows == len(X)
    assert calls


def test_device_abs_sums_of_strided_views():
    """kernels.outputs.abs_sums (the summaries' |values| sum over rows on the device) against NumPy on the strided
    views the explainer returns, for row counts below, at and above one slice; the same bytes on a second call."""
    import cupy as cp

    from hitml.kernels.outputs import abs_sums
    rng = np.random.default_rng(0)
    for n in (1, 63, 64, 1000, 70_001):
        a = rng.normal(size=(n, 6, 6, 2))
        d = cp.asarray(a)
        for sl in (np.s_[:, :-1, :-1, 0], np.s_[:, :-1, :-1, :], np.s_[:, :-1, 0, 1], np.s_[:, 2:, :, 1]):
            got = abs_sums(d[sl]).get()
            np.testing.assert_allclose(got, np.abs(a[sl]).sum(0), rtol=1e-13, atol=0)
            assert got.tobytes() == abs_sums(d[sl]).get().tobytes()
