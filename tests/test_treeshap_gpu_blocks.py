"""Block sums (options.shap_sums="block": a block's SHAP terms summed per output in shared memory) against direct
sums and the CPU twin: the same bytes as the direct kernels in fixed point, within 1e-6 of the twin in both modes."""
from __future__ import annotations

import numpy as np
import pytest

from hitml.kernels.treeshap import cpu

from _treeshap_gpu import _close, _data, _gpu, _multiclass_models, _paths_from, _regression_paths, _sk_tree

pytestmark = pytest.mark.gpu


def _wide_boosted(M=60, K=5, rounds=6, depth=7, input_dtype=np.float32, seed=0):
    """XGBoost-style multiclass paths (each tree feeds one output group) on M features: wide outputs."""
    from sklearn.tree import DecisionTreeRegressor
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(900, M)).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    Xf = np.nan_to_num(X)
    trees = []
    for r in range(rounds):
        for k in range(K):
            y = Xf[:, (3 * k) % M] * Xf[:, (5 * r + k) % M] + np.sin(Xf[:, (k + r) % M]) + rng.normal(size=900)
            t = _sk_tree(DecisionTreeRegressor(max_depth=depth, random_state=r * K + k).fit(Xf, y), 1, rng, True)
            v = np.zeros((len(t[0]), K))
            v[:, k] = t[6][:, 0]
            trees.append(t[:6] + (v,))
    return _paths_from(trees, M, K, input_dtype=input_dtype, base=np.linspace(-1, 1, K))


def _both(g, ps, X, monkeypatch, **opts):
    for k, v in opts.items():
        monkeypatch.setattr(g.options, k, v)
    out = {}
    for sums in ("block", "direct"):
        monkeypatch.setattr(g.options, "shap_sums", sums)
        out[sums] = g.shap_values(ps, X)
    return out["block"], out["direct"]


@pytest.mark.parametrize("variant,dmax", [("table", 12), ("dp", 12), ("split", 4)])
@pytest.mark.parametrize("model", ["wide", "wide64", "regression", "sparse_multiclass"])
def test_block_sums_equal_direct_and_twin(model, variant, dmax, monkeypatch):
    g = _gpu()
    if model.startswith("wide"):
        ps = _wide_boosted(input_dtype=np.float64 if model == "wide64" else np.float32)
    elif model == "regression":
        ps = _regression_paths()[0]
    else:
        ps = _multiclass_models(3, 8, 5)[1]
    monkeypatch.setattr(g, "TABLE_DMAX", dmax)
    X, _ = _data(517, ps.n_features, 11, nan=0.05)
    block, direct = _both(g, ps, X, monkeypatch, shap_variant=variant)
    assert block.tobytes() == direct.tobytes()
    _close(block, cpu.shap_values(ps, X))
    if model == "wide":
        monkeypatch.setattr(g.options, "shap_sums", "auto")
        packed = g.packed_paths(ps)
        assert packed.one_value and g._block_sums(packed, "shap")


def test_block_sums_row_counts_cupy_and_atomics(monkeypatch):
    import cupy as cp
    g = _gpu()
    ps = _wide_boosted(M=40, K=3, rounds=4)
    for n in (1, 31, 32, 33, 1025):
        X, _ = _data(n, 40, n, nan=0.1)
        block, direct = _both(g, ps, X, monkeypatch)
        assert block.tobytes() == direct.tobytes()
        twin = cpu.shap_values(ps, X)
        _close(block, twin)
        onc = _both(g, ps, cp.asarray(X), monkeypatch)[0]
        assert isinstance(onc, cp.ndarray) and onc.get().tobytes() == block.tobytes()
        monkeypatch.setattr(g.options, "deterministic", False)
        monkeypatch.setattr(g.options, "shap_sums", "block")
        _close(g.shap_values(ps, X), twin)
        monkeypatch.setattr(g.options, "deterministic", True)


def test_block_sums_fall_back_for_dense_leaves(monkeypatch):
    """Random-forest leaves hold a value for every class: the direct kernels run, results unchanged."""
    g = _gpu()
    ps = _multiclass_models(4, 2, 5)[0]
    X, _ = _data(200, 7, 2)
    assert not g.packed_paths(ps).one_value
    block, direct = _both(g, ps, X, monkeypatch)
    assert block.tobytes() == direct.tobytes()
    _close(block, cpu.shap_values(ps, X))
