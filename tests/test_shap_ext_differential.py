"""Randomised differential test: shap_ext.TreeExplainer(backend="cpu") on 240 seeded model configurations of XGBoost,
LightGBM, scikit-learn and CatBoost against each library's own SHAP (pred_contribs / pred_interactions,
pred_contrib, ShapValues / ShapInteractionValues), shap's C++ TreeSHAP, brute-force interventional Shapley values
over the library's predictions, and additivity against the library's own raw prediction. The ``gpu`` variant runs
the same configurations on the GPU against the CPU twin, and checks that two calls return identical bytes."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import shap
from shap.explainers._tree import TreeEnsemble

from hitml import shap_ext

from _differential import BUILDERS, N_EXPLAIN, brute_force_interventional

SEED = 20260117


def _configs() -> list[dict]:
    """240 configurations: every option of every family drawn by a seeded generator (coverage is tested)."""
    rng = np.random.default_rng(SEED)
    out: list[dict] = []

    def pick(values):
        return values[int(rng.integers(len(values)))]

    for i in range(90):
        out.append(dict(family="xgboost", seed=i, m=int(rng.integers(3, 6)), trees=int(rng.integers(2, 9)),
                        depth=int(rng.integers(1, 6)),
                        objective=("reg", "binary", "multi", "poisson", "rank")[i % 5],
                        base_score=pick([None, 0.3]), missing=pick(["none", "nan", "sentinel"]),
                        categorical=bool(rng.random() < 0.3), onehot=pick([1, 8]), npt=pick([1, 1, 3]),
                        booster=pick(["gbtree", "gbtree", "dart"])))
    for i in range(50):
        out.append(dict(family="lightgbm", seed=100 + i, m=int(rng.integers(3, 6)), trees=int(rng.integers(2, 9)),
                        leaves=int(rng.integers(2, 16)), objective=("reg", "binary", "multi")[i % 3],
                        categorical=bool(rng.random() < 0.4), n_cats=pick([6, 40]), onehot=pick([1, 4, 64]),
                        bfa=pick([True, False]), rf=bool(rng.random() < 0.3), nan=bool(rng.random() < 0.5)))
    kinds = [("rf_reg", {}), ("rf_clf", {}), ("et_reg", {}), ("et_clf", {}), ("gb_reg", {"init": False}),
             ("gb_reg", {"init": True}), ("gb_clf", {"init": False}), ("gb_clf", {"init": True}),
             ("hgb_reg", {}), ("hgb_clf", {}), ("iforest", {}), ("deep_tree", {})]
    for i in range(48):
        kind, extra = kinds[i % len(kinds)]
        out.append(dict(family="sklearn", seed=200 + i, kind=kind, m=int(rng.integers(3, 6)),
                        trees=int(rng.integers(2, 7)), depth=pick([None, 2, 4, 6]) if kind != "hgb_reg" else 4,
                        k=pick([2, 3]), n_cats=pick([5, 40]), **extra))
        if out[-1]["kind"].startswith("hgb") and out[-1]["depth"] is None:
            out[-1]["depth"] = 5
    for i in range(52):
        out.append(dict(family="catboost", seed=300 + i, m=int(rng.integers(3, 6)), trees=int(rng.integers(2, 7)),
                        depth=int(rng.integers(1, 5)), loss=("RMSE", "Logloss", "MultiClass")[i % 3],
                        cat=bool(rng.random() < 0.4), bfa=pick([True, False]), nan=bool(rng.random() < 0.5),
                        nan_mode=pick(["Min", "Max"])))
    return out


CONFIGS = _configs()
IDS = [f"{c['family']}-{i}" for i, c in enumerate(CONFIGS)]


def _case(cfg):
    pytest.importorskip(cfg["family"] if cfg["family"] != "sklearn" else "sklearn")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return BUILDERS[cfg["family"]](cfg)


def _outputs(values: np.ndarray, K_axis: bool) -> np.ndarray:
    """shap's (n, M) / (n, M, K) as (n, M, K)."""
    return values if K_axis else values[..., None]


def _ev(explainer) -> np.ndarray:
    return np.atleast_1d(np.asarray(explainer.expected_value, dtype=np.float64))


def _close(actual, expected, rtol, what):
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    scale = max(1.0, float(np.nanmax(np.abs(expected))) if expected.size else 1.0)
    err = float(np.max(np.abs(actual - expected))) if actual.size else 0.0
    assert err <= rtol * scale, f"{what}: max |diff| {err:.3g} > {rtol:g} x scale {scale:.3g}"


def _cpp_explainer(case):
    """shap's own C++ TreeSHAP on shap's parse (not a library short-circuit)."""
    ens = TreeEnsemble(case.model, model_output="raw")
    ens.model_type = "internal"
    return shap.TreeExplainer(ens)


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_cpu_against_references(cfg):
    case = _case(cfg)
    ex = shap_ext.TreeExplainer(case.model, backend="cpu")
    sv = np.asarray(ex.shap_values(case.X))          # check_additivity=True: against the library's raw prediction
    K_axis = sv.ndim == 3
    phi = _outputs(sv, K_axis)
    n, M, K = phi.shape
    ev = _ev(ex)
    raw = np.asarray(case.raw(case.Xnum), dtype=np.float64).reshape(n, -1)
    _close(phi.sum(1) + ev, raw, case.raw_rtol * 10, "additivity vs the library's raw prediction")
    if case.native is not None:
        nat = case.native(case.Xnum)
        _close(phi, nat[:, :-1, :], case.native_rtol, "native SHAP")
        _close(ev, nat[0, -1, :], case.native_rtol, "native bias")
    Xref = case.Xnum.astype(np.float32).astype(np.float64) if case.x32 else case.Xnum
    if case.cpp:
        ref = np.asarray(_cpp_explainer(case).shap_values(Xref, check_additivity=False))
        _close(sv, ref, 1e-6, "shap C++ TreeSHAP")
    if cfg["seed"] % 3 == 0:
        inter = np.asarray(ex.shap_interaction_values(case.X[:6] if not hasattr(case.X, "iloc") else case.X.iloc[:6]))
        inter = inter if K_axis else inter[..., None]
        _close(inter.sum(2), phi[:6], 1e-9, "interaction rows sum to the SHAP values")
        if case.native_inter is not None:
            _close(inter, case.native_inter(case.Xnum[:6])[:, :-1, :-1, :], case.native_rtol, "native interactions")
        elif case.cpp:
            ref = np.asarray(_cpp_explainer(case).shap_interaction_values(Xref[:6]))
            _close(inter, ref if K_axis else ref[..., None], 1e-6, "shap C++ interactions")
    if cfg["seed"] % 4 == 1 and case.interventional:
        _check_interventional(case, K_axis)


def _check_interventional(case, K_axis):
    rng = np.random.default_rng(case.config["seed"])
    bg_rows = case.Xnum[rng.choice(N_EXPLAIN, size=6, replace=False)]
    Xe = case.Xnum[:4]
    if case.frame is not None:
        bg_in, X_in = case.frame(bg_rows), case.frame(Xe)
    else:
        bg_in, X_in = bg_rows, Xe
    ex = shap_ext.TreeExplainer(case.model, bg_in, backend="cpu")
    phi = _outputs(np.asarray(ex.shap_values(X_in)), K_axis)
    if case.x32:
        bg_rows = bg_rows.astype(np.float32).astype(np.float64)
        Xe = Xe.astype(np.float32).astype(np.float64)
    ref, ev = brute_force_interventional(case.raw, Xe, bg_rows)
    _close(phi, ref, 1e-6, "brute-force interventional SHAP")
    _close(_ev(ex), ev, 1e-6, "interventional expected value")


def _seen_options(configs: list[dict], skip: tuple[str, ...]) -> dict[str, set]:
    """``{"family.option": values drawn}`` over ``configs``."""
    seen: dict[str, set] = {}
    for c in configs:
        for key, value in c.items():
            if key not in skip:
                seen.setdefault(f"{c['family']}.{key}", set()).add(value)
    return seen


def test_configurations_cover_every_option():
    seen = _seen_options(CONFIGS, ("seed", "m", "trees", "depth", "leaves"))
    assert len(CONFIGS) >= 200
    must = {
        "xgboost.objective": {"reg", "binary", "multi", "poisson", "rank"}, "xgboost.base_score": {None, 0.3},
        "xgboost.missing": {"none", "nan", "sentinel"}, "xgboost.categorical": {True, False},
        "xgboost.npt": {1, 3}, "xgboost.booster": {"gbtree", "dart"},
        "lightgbm.objective": {"reg", "binary", "multi"}, "lightgbm.categorical": {True, False},
        "lightgbm.bfa": {True, False}, "lightgbm.rf": {True, False},
        "sklearn.kind": {"rf_reg", "rf_clf", "et_reg", "et_clf", "gb_reg", "gb_clf", "hgb_reg", "hgb_clf",
                         "iforest", "deep_tree"}, "sklearn.init": {True, False},
        "catboost.loss": {"RMSE", "Logloss", "MultiClass"}, "catboost.cat": {True, False},
        "catboost.bfa": {True, False}, "catboost.nan_mode": {"Min", "Max"},
    }
    for key, values in must.items():
        assert values <= seen[key], (key, values - seen[key])


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_gpu_against_cpu_twin_and_deterministic(cfg):
    case = _case(cfg)
    cpu = shap_ext.TreeExplainer(case.model, backend="cpu")
    gpu = shap_ext.TreeExplainer(case.model, backend="gpu")
    ref = np.asarray(cpu.shap_values(case.X))
    a, b = gpu.shap_values(case.X), gpu.shap_values(case.X)
    a, b = (x.get() if hasattr(x, "get") else np.asarray(x) for x in (a, b))
    assert a.tobytes() == b.tobytes(), "two GPU calls on the same input differ"
    _close(a, ref, 1e-9, "GPU vs CPU twin")
    assert np.asarray(gpu(case.X).values).tobytes() == a.tobytes(), "explainer(X) differs from shap_values(X)"
    if cfg["seed"] % 3 == 0:
        X6 = case.X[:6] if not hasattr(case.X, "iloc") else case.X.iloc[:6]
        i1, i2 = gpu.shap_interaction_values(X6), gpu.shap_interaction_values(X6)
        i1, i2 = (x.get() if hasattr(x, "get") else np.asarray(x) for x in (i1, i2))
        assert i1.tobytes() == i2.tobytes(), "two GPU interaction calls differ"
        _close(i1, np.asarray(cpu.shap_interaction_values(X6)), 1e-9, "GPU vs CPU interactions")


# ---- realistic frames: every input variant on every library, against the library's own answer --------------------
from _frames import configs as _frame_configs, run as _frame_run  # noqa: E402 - the frames section of this file starts here

FRAME_CONFIGS = _frame_configs(1300)
FAST = FRAME_CONFIGS[:78]  # six of each of the 13 input variants over the four libraries (configs cycle them)


def _frame_id(cfg: dict) -> str:
    return f"{cfg['index']}-{cfg['family']}-{cfg['variant']}"


@pytest.mark.parametrize("cfg", FAST, ids=[_frame_id(c) for c in FAST])
def test_frames_against_the_library(cfg):
    pytest.importorskip(cfg["family"])
    outcome = _frame_run(cfg, backend="cpu")
    assert not outcome.startswith("skip"), outcome


@pytest.mark.slow
@pytest.mark.parametrize("cfg", FRAME_CONFIGS[len(FAST):], ids=[_frame_id(c) for c in FRAME_CONFIGS[len(FAST):]])
def test_frames_against_the_library_full(cfg):
    pytest.importorskip(cfg["family"])
    _frame_run(cfg, backend="cpu")


def test_frame_configurations_cover_every_option():
    seen = _seen_options(FRAME_CONFIGS, ("seed", "index", "m", "trees", "depth"))
    assert len(FRAME_CONFIGS) >= 1000
    from _frames import VARIANTS

    must = {
        "xgboost.objective": {"reg", "binary", "multi", "poisson", "gamma", "logistic", "rank"},
        "xgboost.booster": {"gbtree", "dart"}, "xgboost.npt": {1, 3}, "xgboost.missing": {"nan", "sentinel"},
        "xgboost.iteration_range": {None, 1, 2}, "xgboost.cat": {"none", "string", "int"},
        "lightgbm.objective": {"reg", "binary", "multi", "poisson", "huber", "xentropy", "multiova"},
        "lightgbm.form": {"sklearn", "booster", "model_str", "model_file"}, "lightgbm.use_missing": {True, False},
        "lightgbm.zero_as_missing": {True, False}, "lightgbm.linear_tree": {True, False},
        "lightgbm.rf": {True, False}, "lightgbm.num_iteration": {None, 1, 2},
        "sklearn.kind": {"rf_reg", "rf_clf", "et_reg", "gb_reg", "gb_clf", "hgb_reg", "hgb_clf"},
        "catboost.loss": {"RMSE", "Logloss", "MultiClass"}, "catboost.grow": {"SymmetricTree", "Depthwise",
                                                                              "Lossguide"},
        "catboost.nan_mode": {"Min", "Max"}, "catboost.cat": {"none", "string", "int"},
    }
    for fam in ("xgboost", "lightgbm", "sklearn", "catboost"):
        must[f"{fam}.variant"] = set(VARIANTS)
    for key, values in must.items():
        assert values <= seen[key], (key, values - seen[key])
    fast_variants = {(c["family"], c["variant"]) for c in FAST}
    assert {v for _, v in fast_variants} == set(VARIANTS)


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", FAST, ids=[_frame_id(c) for c in FAST])
def test_frames_gpu_equals_cpu(cfg):
    """backend="gpu" on the same frames: the library's answer too, and the CPU twin's values."""
    from _frames import run_pair

    pytest.importorskip(cfg["family"])
    run_pair(cfg)
