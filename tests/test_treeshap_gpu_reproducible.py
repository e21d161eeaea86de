"""GPU TreeSHAP returns the same bytes on every call, for every kernel variant, and still equals the CPU twin."""
from __future__ import annotations

import numpy as np
import pytest

from hitml.kernels.treeshap import cpu
from _treeshap_gpu import _close, _data, _gpu, _multiclass_models, _paths_from, _regression_paths, _spine_tree

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def reg():
    return _regression_paths()


def _same_bytes(a, b) -> bool:
    a = a.get() if hasattr(a, "get") else np.asarray(a)
    b = b.get() if hasattr(b, "get") else np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _variant_calls(g, ps, Xt, R):
    """(name, options, call) for every kernel variant on ps: SHAP values (DP, quadrature, shared-memory sums,
    tables, split), interactions (DP, quadrature, tables, split), interventional (identity, logistic)."""
    y = (np.arange(len(Xt)) % 2).astype(np.float64)
    out = [(f"shap {v}/{r}", {"shap_variant": v, "shap_row_kernel": r}, lambda X: g.shap_values(ps, X))
           for v, r in (("dp", "dp"), ("dp", "quadrature"), ("smem", "dp"), ("table", "dp"), ("split", "dp"))]
    out += [(f"inter {v}/{r}", {"inter_variant": v, "inter_row_kernel": r}, lambda X: g.interaction_values(ps, X[:12]))
            for v, r in (("dp", "dp"), ("dp", "quadrature"), ("table", "quadrature"), ("split", "quadrature"))]
    out += [(f"interventional {t}", {}, lambda X, t=t: g.interventional_shap_values(ps, X[:40], R, transform=t, y=y[:40]))
            for t in ("identity", "logistic", "squared_loss")]
    return out


def _cpu_twin(name, ps, Xt, R):
    y = (np.arange(len(Xt)) % 2).astype(np.float64)
    if name.startswith("shap"):
        return cpu.shap_values(ps, Xt)
    if name.startswith("inter "):
        return cpu.interaction_values(ps, Xt[:12])
    t = name.split()[-1]
    return cpu.interventional_shap_values(ps, Xt[:40], R, transform=t, y=y[:40])


def test_every_variant_is_bitwise_reproducible(monkeypatch):
    """Every kernel variant gives the same bytes on a second call, under another launch schedule (rows per warp,
    row-block groups), in chunks of a few rows and with CuPy output: the fixed-point sums do not depend on the
    order the warps add in. Each still matches the CPU twin."""
    import cupy as cp
    from hitml.kernels.treeshap import _gpu_core as core
    g = _gpu()
    monkeypatch.setattr(g, "SPLIT_MIN_SHARE", 0.0)
    rng = np.random.default_rng(17)
    mixed, Xm = _regression_paths(M=20, depths=(3, 6, 16, 18), seed=3)       # split: tables + per-row kernel
    dense, sparse, Xc = _multiclass_models(5, 8, 5)
    spine = _paths_from([_spine_tree(40, 40, rng), _spine_tree(40, 12, rng), _spine_tree(40, 6, rng)], 40, 1)
    Xs = (rng.normal(size=(150, 40)) * 0.2).astype(np.float32)
    models = [(mixed, _data(150, 20, 30, nan=0.1)[0], Xm[:17]), (dense, _data(150, 7, 31, nan=0.1)[0], Xc[:13]),
              (sparse, _data(150, 7, 32, nan=0.1)[0], Xc[:13]), (spine, Xs, Xs[100:111])]
    schedules = [lambda: None, lambda: (monkeypatch.setattr(core, "rows_per_warp", lambda n, b, cap: 3),
                                        monkeypatch.setattr(core, "bank_group", lambda r, rb: 1)),
                 lambda: monkeypatch.setattr(g.options, "memory_budget", 20_000)]
    for ps, Xt, R in models:
        for name, opts, call in _variant_calls(g, ps, Xt, R):
            with monkeypatch.context() as mp:
                for k, v in opts.items():
                    mp.setattr(g.options, k, v)
                first = call(Xt)
                _close(first, _cpu_twin(name, ps, Xt, R))
                assert _same_bytes(first, call(Xt)), name
                for sched in schedules[1:]:
                    with monkeypatch.context():
                        sched()
                        assert _same_bytes(first, call(Xt)), (name, sched)
                gpu_out = call(cp.asarray(Xt))
                assert isinstance(gpu_out, cp.ndarray) and _same_bytes(first, gpu_out), name
            g.clear_cache()


def test_double_atomics_option_still_matches_the_twin(reg, monkeypatch):
    """options.deterministic = False (double atomics, kept to measure what the fixed point costs) is still exact to
    the CPU twin's tolerance; a non-boolean is refused."""
    ps, X = reg
    g = _gpu()
    Xt, _ = _data(200, ps.n_features, 40, nan=0.05)
    monkeypatch.setattr(g.options, "deterministic", False)
    _close(g.shap_values(ps, Xt), cpu.shap_values(ps, Xt))
    _close(g.interaction_values(ps, Xt[:20]), cpu.interaction_values(ps, Xt[:20]))
    _close(g.interventional_shap_values(ps, Xt[:20], X[:9], transform="logistic"),
           cpu.interventional_shap_values(ps, Xt[:20], X[:9], transform="logistic"))
    with pytest.raises(TypeError, match="deterministic"):
        g.options.deterministic = "yes"


def test_lightgbm_categorical_explainer_call_equals_shap_values():
    """A LightGBM classifier with categorical columns on 300 rows of adult: explainer(X).values and
    explainer.shap_values(X) are the same bytes on the GPU, and match LightGBM's own contributions."""
    pytest.importorskip("lightgbm")
    pytest.importorskip("shap")
    from _adult import adult_lightgbm

    from hitml import shap_ext
    model, df = adult_lightgbm(n_estimators=40, num_leaves=31)
    X = df.iloc[:300]
    ex = shap_ext.TreeExplainer(model, backend="gpu")
    a = np.asarray(ex(X).values)
    b = np.asarray(ex.shap_values(X))
    assert a.shape == b.shape and a.tobytes() == b.tobytes()
    assert np.asarray(ex.shap_values(X)).tobytes() == b.tobytes()
    native = model.predict(X, pred_contrib=True)[:, :-1]
    np.testing.assert_allclose(b.reshape(native.shape), native, rtol=1e-6, atol=1e-6)
