"""Value-hostile differential (tests/_values.py): models of XGBoost, LightGBM, scikit-learn and CatBoost trained on
near-zero, subnormal, signed-zero, NaN, huge and beyond-float32 values, explained at every split threshold of the
library's own dump (and one ulp either side, float32 and float64) and at the hostile values, as float64, float32 and
frames; each answer against the library's own contributions, raw prediction or brute force over its predictions.
The ``gpu`` slice runs the same configurations on the GPU, against the library and against the CPU engine."""
from __future__ import annotations

import numpy as np
import pytest

import _values

CONFIGS = _values.configs(120)
IDS = [f"{c['index']}-{c['family']}-{c['objective']}-{c.get('method') or c.get('kind') or c.get('grow') or 'lgb'}"
       for c in CONFIGS]
MODULES = {"xgboost": "xgboost", "lightgbm": "lightgbm", "sklearn": "sklearn", "catboost": "catboost"}


def _need(cfg: dict) -> None:
    pytest.importorskip(MODULES[cfg["family"]])


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_value_hostile_cpu(cfg):
    _need(cfg)
    res = _values.run(cfg, backend="cpu")
    assert not res.disagreements, "\n".join(res.disagreements)
    assert res.checks >= 6, f"only {res.checks} checks ran"


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_value_hostile_gpu(cfg):
    """backend="gpu": the library's answers, and the CPU engine's values on the same inputs (1e-9 of scale)."""
    _need(cfg)
    res = _values.run(cfg, backend="gpu", compare_cpu=True)
    assert not res.disagreements, "\n".join(res.disagreements)


def test_configurations_cover_every_option():
    seen: dict[str, set] = {}
    for c in CONFIGS:
        for key in ("objective", "method", "kind", "grow", "nan_mode", "use_missing", "zero_as_missing", "inter_form",
                    "int_form"):
            if key in c:
                seen.setdefault(f"{c['family']}.{key}", set()).add(c[key])
    must = {"xgboost.method": {"hist", "exact", "approx"}, "sklearn.kind": {"dt", "rf", "et", "gb", "hgb"},
            "catboost.grow": {"SymmetricTree", "Depthwise"}, "catboost.nan_mode": {"Min", "Max"},
            "lightgbm.use_missing": {True, False}, "lightgbm.zero_as_missing": {True, False}}
    for fam in _values.FAMILIES:
        must[f"{fam}.objective"] = {"reg", "binary", "multi"}
        must[f"{fam}.inter_form"] = set(_values.FORMS)
        must[f"{fam}.int_form"] = set(_values.FORMS)
    for key, values in must.items():
        assert values <= seen.get(key, set()), (key, values - seen.get(key, set()))


def test_rows_hold_every_threshold_and_its_neighbours():
    pytest.importorskip("xgboost")
    cfg = CONFIGS[0]
    lib, train = _values.build(cfg)
    A, tags = _values.rows(lib, train, np.random.default_rng(0))
    for j, ts in lib.thresholds.items():
        for t in ts:
            for _, v in _values.threshold_values(t):
                assert (A[:, j] == v).any(), (j, t, v)
    assert np.isnan(A).any() and np.isinf(A).any() and (np.signbit(A) & (A == 0)).any()
    assert ((np.abs(A) > 0) & (np.abs(A) < np.finfo(np.float32).tiny)).any()   # float32 subnormals
    assert ((np.abs(A) > 0) & (np.abs(A) < np.finfo(np.float64).tiny)).any()   # float64 subnormals


@pytest.mark.parametrize("index", [1, 5, 9])
def test_brute_force_game_is_lightgbms_own_treeshap(index):
    """The brute-force path-dependent reference (LightGBM's routing, its dump's counts) equals LightGBM's own
    pred_contrib: the reference that scikit-learn's values are checked against is right."""
    pytest.importorskip("lightgbm")
    cfg = CONFIGS[index]
    lib, train = _values.build(cfg)
    assert lib.game is not None, lib.unavailable
    A, _ = _values.rows(lib, train, np.random.default_rng(0))
    X = A[np.random.default_rng(1).choice(len(A), 16, replace=False)]
    v = _values.path_game(lib, X)
    phi = _values.shapley(v, X.shape[1])
    nat = lib.native(X)
    assert np.allclose(phi, nat[:, :-1], rtol=0, atol=1e-9), np.abs(phi - nat[:, :-1]).max()


def test_a_planted_misreading_is_found(monkeypatch):
    """The harness finds an explainer that reads near-zero values as 0.0 (a test that cannot fail is a defect)."""
    pytest.importorskip("xgboost")
    from hitml import shap_ext

    original = shap_ext.TreeExplainer.shap_values

    def flushed(self, X, *args, **kwargs):
        if isinstance(X, np.ndarray):
            X = np.where(np.abs(X) < 1e-30, 0.0, X).astype(X.dtype)
        kwargs["check_additivity"] = False
        return original(self, X, *args, **kwargs)

    monkeypatch.setattr(shap_ext.TreeExplainer, "shap_values", flushed)
    found = []
    for cfg in CONFIGS[:16]:
        if cfg["family"] in ("xgboost", "lightgbm"):
            found += _values.run(cfg, backend="cpu").disagreements
    assert any("tiny=" in d or "kzero" in d or "sub32=" in d for d in found), found[:5]



def test_xgboost_minus_inf_split_condition_interventional():
    """XGBoost's exact updater puts a split at (a + b) * 0.5f in float32, -inf for a, b near -FLT_MAX; x = -inf then
    goes right (``x < split_condition`` is false), as ``inplace_predict`` (which reads inf) shows."""
    xgb = pytest.importorskip("xgboost")
    from hitml import shap_ext

    big = float(np.finfo(np.float32).max)
    X = np.c_[np.r_[np.full(10, -big), np.full(10, -3e38), np.zeros(10)], np.arange(30.0) % 3]
    y = np.r_[5 * np.ones(10), np.ones(10), 2 * np.ones(10)]
    model = xgb.XGBRegressor(n_estimators=1, max_depth=1, tree_method="exact", learning_rate=1.0,
                             base_score=0.0).fit(X, y)
    rows = np.array([[-np.inf, 0.0], [-big, 0.0]])
    ex = shap_ext.TreeExplainer(model, np.zeros((1, 2)), feature_perturbation="interventional", backend="cpu")
    phi = ex.shap_values(rows, check_additivity=False)
    margin = model.get_booster().inplace_predict(rows, predict_type="margin")
    assert np.allclose(phi.sum(1) + ex.expected_value, margin, atol=1e-5), (phi.sum(1) + ex.expected_value, margin)
    path = shap_ext.TreeExplainer(model, backend="cpu")
    contribs = model.get_booster().predict(xgb.DMatrix(np.array([[-big, 0.0]])), pred_contribs=True)
    assert np.allclose(path.shap_values(rows), np.repeat(contribs[:, :-1], 2, axis=0), atol=1e-6)


def test_catboost_model_with_an_infinite_border():
    """CatBoost's JSON writer refuses a border at inf: the model takes CatBoost's own ShapValues (route
    "catboost-native"), and background data raises NotImplementedError naming the reason."""
    cb = pytest.importorskip("catboost")
    from hitml import shap_ext

    X = np.c_[np.r_[np.full(20, -np.inf), np.zeros(20), np.full(20, np.inf)], np.arange(60) % 2.0]
    y = np.r_[np.zeros(20), np.ones(20), 3 * np.ones(20)]
    model = cb.CatBoostRegressor(iterations=2, depth=1, verbose=0, allow_writing_files=False,
                                 thread_count=1).fit(X, y)
    assert any(np.isinf(b).any() for b in model.get_borders().values())
    rows = X[[0, 30, 50]]
    ex = shap_ext.TreeExplainer(model, backend="cpu")
    phi = ex.shap_values(rows)
    native = model.get_feature_importance(data=cb.Pool(rows), type="ShapValues", thread_count=1)
    assert ex.route == "catboost-native" and np.allclose(phi, native[:, :-1], atol=1e-6)
    with pytest.raises(NotImplementedError, match="borders at"):
        shap_ext.TreeExplainer(model, X[:5], feature_perturbation="interventional", backend="cpu")


def test_hist_gradient_boosting_minus_inf_threshold():
    """HistGradientBoosting bins -inf apart from the next value with num_threshold -inf: ``x <= -inf`` goes left
    (sklearn/ensemble/_hist_gradient_boosting/_predictor.pyx), so x = -inf reaches the left leaf only."""
    pytest.importorskip("sklearn")
    from sklearn.ensemble import HistGradientBoostingRegressor

    from hitml import shap_ext

    X = np.c_[np.r_[np.full(20, -np.inf), np.zeros(20)], np.arange(40) % 2.0]
    y = np.r_[np.zeros(20), np.ones(20)]
    model = HistGradientBoostingRegressor(max_iter=1, max_depth=1, min_samples_leaf=5).fit(X, y)
    big = np.finfo(np.float64).max
    rows = np.array([[-np.inf, 0.0], [-big, 0.0], [np.nextafter(-big, 0), 1.0], [0.0, 0.0]])
    assert (model._predictors[0][0].nodes["num_threshold"] == -np.inf).any()
    ex = shap_ext.TreeExplainer(model, backend="cpu")
    phi = ex.shap_values(rows, check_additivity=False)
    assert np.allclose(phi.sum(1) + ex.expected_value, model._raw_predict(rows).ravel(), atol=1e-9)
    bg = shap_ext.TreeExplainer(model, rows, feature_perturbation="interventional", backend="cpu")
    phi = bg.shap_values(rows[::-1])
    assert np.allclose(phi.sum(1) + bg.expected_value, model._raw_predict(rows[::-1]).ravel(), atol=1e-9)
