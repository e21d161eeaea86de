"""GPU pattern engine of interventional TreeSHAP against its CPU twin (to 1e-12; the kernels keep the CPU's order
of every sum, so the bytes usually match too) and against shap's C++."""
import numpy as np
import pytest

from hitml.kernels.treeshap import (_patterns, interventional_banzhaf_values, interventional_interaction_values,
                                    interventional_shap_values)

pytestmark = pytest.mark.gpu


def _models():
    import lightgbm as lgb
    import xgboost as xgb
    from sklearn.ensemble import RandomForestRegressor

    rng = np.random.default_rng(11)
    n, M = 2000, 8
    X = rng.normal(size=(n, M))
    X[:, 5] = rng.integers(0, 7, n)
    y = X[:, 0] * X[:, 1] + np.isin(X[:, 5], [1, 3, 6]) + np.sin(X[:, 2]) + 0.1 * rng.normal(size=n)
    Xn = X.copy()
    Xn[rng.random(X.shape) < 0.05] = np.nan
    cls = np.digitize(y, np.quantile(y, [0.3, 0.7]))
    return {
        "xgboost": (xgb.XGBRegressor(n_estimators=30, max_depth=6).fit(Xn, y), Xn),
        "xgboost-multiclass": (xgb.XGBClassifier(n_estimators=10, max_depth=4).fit(Xn, cls), Xn),
        "lightgbm-categorical": (lgb.LGBMRegressor(n_estimators=20, num_leaves=20, verbose=-1)
                                 .fit(Xn, y, categorical_feature=[5]), Xn),
        "forest-deep": (RandomForestRegressor(n_estimators=4, random_state=0).fit(X, y), X),
    }


@pytest.fixture(scope="module")
def models():
    return _models()


def _paths(model, X):
    from hitml.shap_ext import TreeExplainer

    ex = TreeExplainer(model, data=X[:50], feature_perturbation="interventional", backend="cpu")
    return ex.paths, ex


def _close(gpu, cpu):
    gpu = gpu.get() if hasattr(gpu, "get") else gpu
    np.testing.assert_allclose(gpu, cpu, rtol=1e-12, atol=1e-12)
    return bool(np.array_equal(gpu, cpu))


@pytest.mark.parametrize("name", ["xgboost", "xgboost-multiclass", "lightgbm-categorical", "forest-deep"])
def test_gpu_matches_cpu_twin(models, name, monkeypatch):
    """Values, interactions and Banzhaf, weighted background, tables and (forest, small table cap) sparse paths."""
    if name == "forest-deep":
        monkeypatch.setattr(_patterns, "TABLE_ENTRIES", 1 << 8)
    model, X = models[name]
    ps, _ = _paths(model, X)
    rng = np.random.default_rng(0)
    bg, Xe = X[:700], X[1000:1300]
    w = rng.random(700) * 3
    same = []
    for fn, kw in ((interventional_shap_values, {}), (interventional_banzhaf_values, {}),
                   (interventional_shap_values, {"weights": w})):
        cpu = fn(ps, Xe, bg, progress=False, **kw)
        gpu = fn(ps, Xe, bg, backend="gpu", progress=False, **kw)
        same.append(_close(gpu, cpu))
    lens = np.diff(ps.path_ptr)
    if name != "forest-deep" or lens.max() <= 32:
        cpu = interventional_interaction_values(ps, Xe[:60], bg, weights=w, progress=False)
        gpu = interventional_interaction_values(ps, Xe[:60], bg, weights=w, backend="gpu", progress=False)
        same.append(_close(gpu, cpu))
    print(name, "bytes equal:", same)


def test_gpu_cupy_in_cupy_out_and_shap_cpp(models):
    """CuPy rows give CuPy values on the device; the explainer on the GPU matches shap's C++ interventional."""
    import cupy as cp
    import shap

    from hitml.shap_ext import TreeExplainer

    model, X = models["xgboost"]
    bg, Xe = X[:300], X[1000:1100]
    masker = shap.maskers.Independent(bg, max_samples=len(bg))
    ref = shap.TreeExplainer(model, data=masker, feature_perturbation="interventional").shap_values(Xe)
    ex = TreeExplainer(model, data=masker, feature_perturbation="interventional", backend="gpu")
    got = ex.shap_values(cp.asarray(Xe))
    assert isinstance(got, cp.ndarray)
    np.testing.assert_allclose(got.get(), ref, rtol=1e-6, atol=1e-6)
    inter = ex.shap_interaction_values(Xe[:20])
    np.testing.assert_allclose(inter.sum(axis=2), ex.shap_values(Xe[:20]), rtol=1e-10, atol=1e-10)
