"""Splits between float32 (and float64) subnormals and at +-0.0, read as the libraries read them, on both engines.

XGBoost (exact and hist), LightGBM and scikit-learn models trained on features whose values are subnormal: their
split thresholds fall between subnormals (5e-42, 1.5e-41, ...) or at -0.0. The GPU engine runs under CuPy's
``-ftz=true``, which flushes float32 subnormals in every FP32 instruction and float <-> double conversion; these
tests check SHAP values, interactions and interventional values (raw and probability output) against the library's
own ``pred_contribs`` / ``pred_interactions`` / ``pred_contrib``, against shap's own explainer (scikit-learn) and,
on the GPU, against the CPU engine to float64 rounding, for NumPy and CuPy rows in float32 and float64. The CPU
tests cover the same cases against the libraries where no GPU is seen.
"""
from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest
import shap

import hitml.shap_ext  # noqa: F401 - installs the backend= hook on shap.TreeExplainer

xgb = pytest.importorskip("xgboost")

TINY = float(np.float32(1.4e-45))      # the smallest float32 subnormal
STEP = float(np.float32(3.5e-43))      # a float32 subnormal step: thresholds at about 5e-42, 1.5e-41
D_TINY = 5e-324                        # the smallest float64 subnormal


def _features(n: int, seed: int) -> np.ndarray:
    """float32 rows: 0 on a grid of subnormals, 1 the smallest subnormals and +-0.0, 2 normal, 3 {+-1, +-tiny,
    +-0.0} (splits at -0.0 and tiny)."""
    rng = np.random.default_rng(seed)
    X = np.empty((n, 4), dtype=np.float32)
    X[:, 0] = rng.integers(-60, 61, n) * np.float32(STEP)
    X[:, 1] = rng.integers(-4, 5, n) * np.float32(TINY)
    X[rng.random(n) < 0.2, 1] = -0.0
    X[:, 2] = rng.normal(size=n)
    X[:, 3] = rng.choice(np.array([-1.0, -TINY, -0.0, 0.0, TINY, 1.0], dtype=np.float32), n)
    return X


def _target(X: np.ndarray) -> np.ndarray:
    X = X.astype(np.float64)
    return (2.0 * (X[:, 0] > 5e-42) - 1.5 * (X[:, 0] < -1.5e-41) + (X[:, 1] > TINY) - (X[:, 1] < 0)
            + 0.3 * X[:, 2] + 0.8 * (X[:, 3] > 0) - 0.6 * (X[:, 3] < 0))


def _edge_rows(M: int) -> np.ndarray:
    """float64 rows of values near the splits: between float32 subnormals (rounded to one by XGBoost and
    scikit-learn), float64 subnormals (0 in float32), +-0.0, the grid's thresholds."""
    vals = [2.1e-45, -2.1e-45, 0.7e-45, -0.7e-45, 1e-310, -1e-310, D_TINY, -D_TINY, -0.0, 0.0, TINY, -TINY,
            5e-42, -5e-42, 1.5e-41, -1.5e-41, 5.25e-42, 4.9e-42, 1e-38]
    return np.asarray([[v] * M for v in vals], dtype=np.float64)


def _hgb_features(n: int, seed: int) -> np.ndarray:
    """float64 rows for HistGradientBoosting (which compares float64): feature 0 on a grid of float64
    subnormals."""
    X = _features(n, seed).astype(np.float64)
    X[:, 0] = np.random.default_rng(seed + 1).integers(-30, 31, n) * 1e-310
    return X


def _subnormal_thresholds(model, seed: int) -> None:
    """Move scikit-learn's thresholds on features 0, 1 and 3 between the float32 subnormals of the rows (float64
    midpoints, as sklearn stores them) or to +-0.0: its splitter never splits values closer than 1e-7 (
    ``FEATURE_THRESHOLD``), so trained trees have none there. Predictions, shap's own explainer and hitml all read
    the rewritten ``tree_`` (the leaf values stay those of training)."""
    rng = np.random.default_rng(seed)
    cuts = {0: (rng.integers(-40, 40, 64) + 0.5) * STEP, 1: (rng.integers(-3, 3, 64) + 0.5) * TINY,
            3: np.array([-0.0, 0.0, -0.5 * TINY, 0.5 * TINY, 1.5 * TINY, -1.5 * TINY])}
    for est in np.ravel(model.estimators_):
        state = est.tree_.__getstate__()
        nodes = state["nodes"]
        for i in np.flatnonzero(nodes["left_child"] >= 0):
            f = int(nodes["feature"][i])
            if f in cuts:
                nodes["threshold"][i] = rng.choice(cuts[f])
        est.tree_.__setstate__(state)


@functools.lru_cache(maxsize=None)
def _model(name: str):
    """(model, float32 training rows, rows to explain (float64), background rows)."""
    X = _features(600, 3)
    y = _target(X)
    if name == "xgb_exact":
        model = xgb.XGBRegressor(tree_method="exact", n_estimators=8, max_depth=4, learning_rate=0.5).fit(X, y)
    elif name == "xgb_hist":
        model = xgb.XGBRegressor(tree_method="hist", max_bin=256, n_estimators=8, max_depth=4,
                                 learning_rate=0.5).fit(X, y)
    elif name == "xgb_exact_logistic":
        model = xgb.XGBClassifier(tree_method="exact", n_estimators=8, max_depth=4, learning_rate=0.5).fit(
            X, (y > 0).astype(int))
    elif name == "lightgbm":
        lgb = pytest.importorskip("lightgbm")
        model = lgb.LGBMRegressor(n_estimators=8, num_leaves=8, min_child_samples=3, verbose=-1).fit(
            X.astype(np.float64), y)
    elif name == "sk_forest":
        from sklearn.ensemble import RandomForestRegressor

        model = RandomForestRegressor(n_estimators=4, max_depth=6, random_state=0).fit(X, y)
        _subnormal_thresholds(model, 1)
    elif name == "sk_boosting_classifier":
        from sklearn.ensemble import GradientBoostingClassifier

        model = GradientBoostingClassifier(n_estimators=8, max_depth=3, random_state=0).fit(X, (y > 0).astype(int))
        _subnormal_thresholds(model, 2)
    elif name == "sk_hist":
        from sklearn.ensemble import HistGradientBoostingRegressor

        X = _hgb_features(600, 3)
        y = 2.0 * (X[:, 0] > 3.05e-309) - 1.5 * (X[:, 0] < -1.05e-309) + 0.3 * X[:, 2] + 0.8 * (X[:, 3] > 0)
        model = HistGradientBoostingRegressor(max_iter=8, max_depth=4, min_samples_leaf=5).fit(X, y)
    else:
        raise KeyError(name)
    rows = np.vstack([X[:120].astype(np.float64), _edge_rows(X.shape[1])])
    return model, X, rows, X[200:240].astype(np.float64)


MODELS = ["xgb_exact", "xgb_hist", "xgb_exact_logistic", "lightgbm", "sk_forest", "sk_boosting_classifier",
          "sk_hist"]
CLASSIFIERS = {"xgb_exact_logistic", "sk_boosting_classifier"}


def _library_values(name: str, model, rows: np.ndarray, interactions: bool = False) -> np.ndarray:
    """The library's own SHAP values (interactions) of ``rows``, bias left out: XGBoost's pred_contribs /
    pred_interactions on float32 rows, LightGBM's pred_contrib, shap's own explainer for scikit-learn."""
    if name.startswith("xgb"):
        dm = xgb.DMatrix(rows.astype(np.float32))
        out = model.get_booster().predict(dm, pred_interactions=interactions, pred_contribs=not interactions)
        return out[:, :-1, :-1] if interactions else out[:, :-1]
    if name == "lightgbm":
        assert not interactions
        return model.predict(rows, pred_contrib=True)[:, :-1]
    own = shap.TreeExplainer(model)                    # no backend: shap's own explainer
    assert not type(own).__module__.startswith("hitml")
    out = own.shap_interaction_values(rows) if interactions else own.shap_values(rows, check_additivity=False)
    return np.asarray(out)


def _library_margin(name: str, model, rows: np.ndarray) -> np.ndarray:
    if name.startswith("xgb"):
        return model.get_booster().predict(xgb.DMatrix(rows.astype(np.float32)), output_margin=True)
    if name == "lightgbm":
        return model.predict(rows, raw_score=True)
    if name in CLASSIFIERS:
        return model.decision_function(rows)
    return model.predict(rows)


def _close(a, b, atol: float) -> None:
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), rtol=0, atol=atol)


def _lib_atol(name: str) -> float:
    return 2e-5 if name.startswith("xgb") or name == "lightgbm" else 1e-9   # float32 sums in the libraries


def _values(backend: str, model, rows, **kw) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        return np.asarray(shap.TreeExplainer(model, backend=backend, **kw).shap_values(rows))


# -- CPU: the CPU twin against the libraries --------------------------------------------------------------------------
@pytest.mark.parametrize("name", MODELS)
def test_cpu_values_match_library(name):
    model, X, rows, _ = _model(name)
    phi = _values("cpu", model, rows)
    _close(phi, _library_values(name, model, rows), _lib_atol(name))
    ex = shap.TreeExplainer(model, backend="cpu")
    _close(phi.sum(axis=1) + ex.expected_value, _library_margin(name, model, rows), 1e-5)


@pytest.mark.parametrize("name", ["xgb_exact", "xgb_hist", "xgb_exact_logistic", "sk_forest"])
def test_cpu_interactions_match_library(name):
    model, X, rows, _ = _model(name)
    out = shap.TreeExplainer(model, backend="cpu").shap_interaction_values(rows[:60])
    _close(out, _library_values(name, model, rows[:60], interactions=True), _lib_atol(name))


def _brute_interventional(name: str, model, rows: np.ndarray, bg: np.ndarray, output: str) -> np.ndarray:
    """Interventional SHAP values by brute force over feature subsets, from the library's own margins of the hybrid
    rows (x on S, background row r elsewhere): per pair phi_i(r) = sum_S w(S) (f(S + i) - f(S)); for probability
    output each pair's values are scaled by (sigmoid(f(x)) - sigmoid(f(r))) / (f(x) - f(r)), as shap's
    interventional explainer defines them; then averaged over the background."""
    import math

    M = rows.shape[1]
    full = (1 << M) - 1
    subsets = [np.array([(m >> j) & 1 for j in range(M)], dtype=bool) for m in range(1 << M)]
    hybrid = np.stack([np.where(S, x, bg) for x in rows for S in subsets])          # (n * 2^M, nbg, M)
    f = _library_margin(name, model, hybrid.reshape(-1, M)).reshape(len(rows), 1 << M, len(bg))
    phi = np.zeros((len(rows), len(bg), M))
    for i in range(M):
        for m in range(1 << M):
            if not (m >> i) & 1:
                k = bin(m).count("1")
                phi[:, :, i] += math.factorial(k) * math.factorial(M - k - 1) / math.factorial(M) * (
                    f[:, m | (1 << i)] - f[:, m])
    if output == "probability":
        fx, fr = f[:, full], f[:, 0]
        same = fx == fr
        sig = lambda a: 1.0 / (1.0 + np.exp(-a))  # noqa: E731 - the logistic link, local to this reference
        phi *= np.where(same, 1.0, (sig(fx) - sig(fr)) / np.where(same, 1.0, fx - fr))[:, :, None]
    return phi.mean(axis=1)


INTERVENTIONAL = ["xgb_exact", "xgb_exact_logistic", "sk_forest", "sk_boosting_classifier", "lightgbm", "sk_hist"]


@pytest.mark.parametrize("name", INTERVENTIONAL)
def test_cpu_interventional_matches_brute_force(name):
    """Interventional values (raw, and probability for classifiers) against brute force over the library's own
    predictions (shap's own interventional explainer is no reference here: on these scikit-learn trees it is off
    by up to 0.3)."""
    model, X, rows, bg = _model(name)
    sub = rows[-12:]
    for output in (["raw", "probability"] if name in CLASSIFIERS else ["raw"]):
        kw = dict(data=bg, feature_perturbation="interventional", model_output=output)
        ours = _values("cpu", model, sub, **kw)
        _close(ours, _brute_interventional(name, model, sub, bg, output), 1e-5 if output == "raw" else 1e-6)


# -- GPU: the GPU engine against the libraries and the CPU twin -------------------------------------------------------
def _gpu_inputs(rows: np.ndarray):
    """NumPy float64 and float32 rows, CuPy float64 and float32 rows (float32 rows only where the float32 rounding
    is how the library reads them anyway)."""
    import cupy as cp

    return {"numpy64": rows, "numpy32": rows.astype(np.float32), "cupy64": cp.asarray(rows),
            "cupy32": cp.asarray(rows.astype(np.float32))}


def _host(a) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.asarray(a)


@pytest.mark.gpu
def test_gpu_conversions_keep_subnormals():
    """exact_astype converts float32 <-> float64 on the device as NumPy does on the host (subnormals, signed zeros,
    infinities, NaN, rounding to nearest even, overflow to inf), for strided arrays too."""
    import cupy as cp

    from hitml.kernels.treeshap._gpu_core import exact_astype

    f32 = np.array([TINY, -TINY, 5e-42, -1.5e-41, 1.1754942e-38, -0.0, 0.0, np.inf, -np.inf, np.nan, 1.0],
                   dtype=np.float32)
    f64 = np.array([2.1e-45, -2.1e-45, 0.7e-45, 2.1019476964872256e-45, 1e-310, 5e-42, -0.0, 1e300, -1e300,
                    3.4028235677973366e38, 3.4028235e38, np.inf, np.nan, 1.0 + 2 ** -24], dtype=np.float64)
    wide = _host(exact_astype(cp.asarray(f32), np.float64))
    assert wide.tobytes() == f32.astype(np.float64).tobytes()
    with np.errstate(over="ignore"):
        narrow_ref = f64.astype(np.float32)
    narrow = _host(exact_astype(cp.asarray(f64), np.float32))
    np.testing.assert_array_equal(narrow.view(np.uint32)[~np.isnan(narrow_ref)],
                                  narrow_ref.view(np.uint32)[~np.isnan(narrow_ref)])
    assert np.isnan(narrow[np.isnan(narrow_ref)]).all()
    grid = np.tile(f32[:7], (5, 3))
    strided = cp.asarray(grid)[::2, ::3]
    assert _host(exact_astype(strided, np.float64)).tobytes() == grid[::2, ::3].astype(np.float64).tobytes()


@pytest.mark.gpu
@pytest.mark.parametrize("name", MODELS)
def test_gpu_values_match_library_and_cpu(name):
    model, X, rows, _ = _model(name)
    cpu = _values("cpu", model, rows)
    ref = _library_values(name, model, rows)
    ex = shap.TreeExplainer(model, backend="gpu")
    for kind, Xg in _gpu_inputs(rows).items():
        if kind.endswith("32") and name == "sk_hist":
            continue                                        # HistGradientBoosting reads float64 rows
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            phi = _host(ex.shap_values(Xg))
        base = cpu if kind.endswith("64") else _values("cpu", model, rows.astype(np.float32))
        _close(phi, base, 1e-12)
        if kind.endswith("64"):
            _close(phi, ref, _lib_atol(name))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["xgb_exact", "xgb_hist", "xgb_exact_logistic", "sk_forest", "lightgbm"])
def test_gpu_interactions_match_library_and_cpu(name):
    model, X, rows, _ = _model(name)
    sub = rows[-40:]                                         # the edge rows and training rows before them
    gpu = shap.TreeExplainer(model, backend="gpu").shap_interaction_values(sub)
    _close(gpu, shap.TreeExplainer(model, backend="cpu").shap_interaction_values(sub), 1e-12)
    if name != "lightgbm":
        _close(gpu, _library_values(name, model, sub, interactions=True), _lib_atol(name))


@pytest.mark.gpu
@pytest.mark.parametrize("name", INTERVENTIONAL)
def test_gpu_interventional_matches_brute_force_and_cpu(name):
    """Interventional values (raw; probability for classifiers) and interventional interactions: GPU = CPU twin to
    float64 rounding, for NumPy and CuPy rows; values equal brute force over the library's own predictions."""
    import cupy as cp

    model, X, rows, bg = _model(name)
    sub = rows[-40:]
    for output in (["raw", "probability"] if name in CLASSIFIERS else ["raw"]):
        kw = dict(data=bg, feature_perturbation="interventional", model_output=output)
        cpu = _values("cpu", model, sub, **kw)
        gpu_ex = shap.TreeExplainer(model, backend="gpu", **kw)
        gpu = _host(gpu_ex.shap_values(sub))
        _close(gpu, cpu, 1e-12)
        _close(_host(gpu_ex.shap_values(cp.asarray(sub))), cpu, 1e-12)
        _close(gpu[-12:], _brute_interventional(name, model, sub[-12:], bg, output),
               1e-5 if output == "raw" else 1e-6)
        if output == "raw":
            inter_cpu = shap.TreeExplainer(model, backend="cpu", **kw).shap_interaction_values(sub[:20])
            _close(_host(gpu_ex.shap_interaction_values(sub[:20])), inter_cpu, 1e-12)
