"""Rows with NaN, +-inf, values beyond float32's range, FLT_MAX and its neighbours, subnormals and -0.0, read as the
libraries read them: CatBoost models (nan_mode Min / Max, NaN in training: a border at FLT_MAX sends NaN and +inf
right), XGBoost, LightGBM and scikit-learn models with +-inf and 1e300 rows (the additivity check's reference must
take the library's branch at every split); and CatBoost models saved as JSON (tests/data/catboost, made by its
make.py), explained without catboost on both engines against CatBoost's own stored references."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import shap

import hitml.shap_ext  # noqa: F401 - installs the backend= hook on shap.TreeExplainer
from hitml.shap_ext import load_catboost_json
from hitml.shap_ext._catboost import json_margin

DATA = Path(__file__).resolve().parent / "data" / "catboost"
STORED = sorted(p.stem for p in DATA.glob("*.json"))
F32MAX = float(np.finfo(np.float32).max)
BELOW = float(np.nextafter(np.float32(F32MAX), np.float32(0)))
HALF_ULP = (F32MAX - BELOW) / 2
# float64 values as CatBoost / XGBoost / scikit-learn read them in float32: x -> float32(x)
EDGE = [np.nan, np.inf, -np.inf, 1e300, -1e300, F32MAX, -F32MAX, BELOW, -BELOW,
        F32MAX + 0.99 * HALF_ULP,                        # rounds to FLT_MAX
        F32MAX + HALF_ULP, -(F32MAX + HALF_ULP),         # one float32 ulp beyond: +-inf
        1e-45, -1e-45, -0.0, 0.0]


def _edge_rows(M: int, rng: np.random.Generator, n_mixed: int = 30) -> np.ndarray:
    """Every edge value on every feature, then rows mixing them with normal values."""
    same = np.asarray([[v] * M for v in EDGE])
    mixed = rng.normal(size=(n_mixed, M))
    mask = rng.random((n_mixed, M)) < 0.5
    mixed[mask] = rng.choice(np.asarray(EDGE), size=int(mask.sum()))
    return np.vstack([same, mixed])


def _close(a, b, atol: float) -> None:
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), rtol=0, atol=atol)


def _host(a) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.asarray(a)


def _explain(model, rows, backend: str = "cpu", **kw) -> np.ndarray:
    """Values with the additivity check on (it raises ExplainerError where its reference takes another branch)
    and RuntimeWarnings as errors."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        return _host(shap.TreeExplainer(model, backend=backend, **kw).shap_values(rows, check_additivity=True))


# -- CatBoost objects ---------------------------------------------------------------------------------------------
def _catboost_model(nan_mode: str, grow_policy: str, seed: int = 0):
    catboost = pytest.importorskip("catboost")
    rng = np.random.default_rng(seed)
    n = 400
    X = rng.normal(size=(n, 3))
    X[rng.random(n) < 0.25, 0] = np.nan
    y = np.where(np.isnan(X[:, 0]), 10.0, X[:, 0]) + X[:, 1] + (X[:, 2] > 0)
    model = catboost.CatBoostRegressor(iterations=8, depth=3, nan_mode=nan_mode, grow_policy=grow_policy,
                                       random_seed=seed, thread_count=1, verbose=0, allow_writing_files=False)
    return model.fit(X, y), rng


def _catboost_shap(model, rows: np.ndarray) -> np.ndarray:
    import catboost

    return np.asarray(model.get_feature_importance(catboost.Pool(rows), type="ShapValues", thread_count=1))


@pytest.mark.parametrize("nan_mode", ["Min", "Max"])
@pytest.mark.parametrize("grow_policy", ["SymmetricTree", "Depthwise"])
def test_catboost_edge_rows_match_shapvalues(nan_mode, grow_policy):
    """NaN, +-inf, +-1e300, +-FLT_MAX and one float32 ulp either side, 1e-45, -0.0: CatBoost's own ShapValues, and
    the additivity check (against CatBoost's predict on the rows as given) does not raise."""
    model, rng = _catboost_model(nan_mode, grow_policy)
    doc_borders = [f["borders"] for f in json.loads(_json_text(model))["features_info"]["float_features"]]
    if nan_mode == "Max":   # the case the check's reference used to miss: NaN (and +inf) split off at FLT_MAX
        assert F32MAX in [np.float32(b) for b in doc_borders[0]]
    rows = _edge_rows(3, rng)
    raw = model.predict(rows, prediction_type="RawFormulaVal")
    ex = shap.TreeExplainer(model, backend="cpu")
    phi = _explain(model, rows)
    _close(phi.sum(axis=1) + ex.expected_value, raw, 1e-9)
    ref = _catboost_shap(model, rows)
    if grow_policy == "SymmetricTree":   # CatBoost's ShapValues of other trees need not sum to its prediction
        _close(phi, ref[:, :-1], 1e-9)
    for i in range(len(EDGE)):                     # one row at a time: each row's check on its own
        _close(_explain(model, rows[i:i + 1]), phi[i:i + 1], 1e-12)


def test_catboost_predicts_inf_rows_as_given():
    """CatBoost takes +-inf rows (no error) and reads +inf above the FLT_MAX border (nan_mode Max), FLT_MAX below
    it: a reference that clips inf to FLT_MAX would take the other branch."""
    model, _ = _catboost_model("Max", "SymmetricTree")
    raw = model.predict(np.array([[np.inf, 0.0, 0.0], [F32MAX, 0.0, 0.0], [np.nan, 0.0, 0.0]]),
                        prediction_type="RawFormulaVal")
    assert raw[0] == raw[2] and raw[0] != raw[1]


def _json_text(model) -> str:
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.json")
        model.save_model(path, format="json")
        return Path(path).read_text()


def test_catboost_json_model_equals_catboost_object(tmp_path):
    """load_catboost_json of a model's JSON gives the values of the catboost object itself, and its margin
    (json_margin, CatBoost's evaluation rules on the file) equals CatBoost's RawFormulaVal."""
    model, rng = _catboost_model("Max", "SymmetricTree", seed=1)
    path = tmp_path / "m.json"
    model.save_model(str(path), format="json")
    rows = _edge_rows(3, rng)
    loaded = load_catboost_json(path)
    assert load_catboost_json(json.loads(path.read_text())).shap_dict["base_offset"] == loaded.shap_dict[
        "base_offset"]
    _close(_explain(loaded, rows), _explain(model, rows), 0.0)
    _close(json_margin(loaded.doc, rows), model.predict(rows, prediction_type="RawFormulaVal"), 1e-12)


# -- XGBoost, scikit-learn, LightGBM: +-inf and 1e300 rows --------------------------------------------------------
def _xgb_model(tree_method: str):
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(5)
    n = 400
    X = rng.normal(size=(n, 3)).astype(np.float32)
    X[:, 2] = rng.choice(np.array([-F32MAX, -1e38, 0.0, 1e38, F32MAX], dtype=np.float32), n)
    y = X[:, 0] + (X[:, 1] > 0) + np.sign(X[:, 2]) * (np.abs(X[:, 2]) > 2e38)
    return xgb.XGBRegressor(tree_method=tree_method, n_estimators=6, max_depth=3).fit(X, y), rng


INF_ROWS = np.array([[np.inf, np.inf, np.inf], [-np.inf, -np.inf, -np.inf], [1e300, 1e300, 1e300],
                     [-1e300, -1e300, -1e300], [np.inf, 0.5, -np.inf], [-1e300, -0.5, 1e300],
                     [F32MAX, -F32MAX, BELOW], [np.nan, np.inf, 0.0]])


def _f32(rows: np.ndarray) -> np.ndarray:
    """Rows as float32 (beyond its range: +-inf), as XGBoost and scikit-learn read them."""
    with np.errstate(over="ignore"):
        return rows.astype(np.float32)


def _clipped(rows: np.ndarray) -> np.ndarray:
    return np.clip(_f32(rows), -F32MAX, F32MAX)


@pytest.mark.parametrize("tree_method", ["exact", "hist"])
def test_xgboost_inf_rows(tree_method):
    """+-inf and 1e300 rows (inf in float32): no spurious additivity error, and values that sum to XGBoost's own
    reading of the rows (inplace_predict, which takes inf). hist: +-FLT_MAX take inf's branch at every split, and
    the values equal XGBoost's pred_contribs of the rows so clipped (its DMatrix refuses inf). exact: the model
    has splits at split_cond = +inf (neighbouring values that sum past FLT_MAX), where +inf goes right and
    FLT_MAX left; no finite row stands for +inf and the check reads the rows through inplace_predict."""
    xgb = pytest.importorskip("xgboost")
    model, _ = _xgb_model(tree_method)
    booster = model.get_booster()
    phi = _explain(model, INF_ROWS)
    ex = shap.TreeExplainer(model, backend="cpu")
    own = booster.inplace_predict(_f32(INF_ROWS), predict_type="margin")
    _close(phi.sum(axis=1) + ex.expected_value, own, 1e-5)
    splits = booster.trees_to_dataframe().query("Feature == 'f2'")["Split"].to_numpy()
    ref = booster.predict(xgb.DMatrix(_clipped(INF_ROWS)), pred_contribs=True)
    if tree_method == "hist":
        assert not np.isinf(splits).any()
        _close(phi, ref[:, :-1], 2e-5)
    else:
        assert np.isposinf(splits).any()
        plus = np.isposinf(_f32(INF_ROWS))[:, 2]
        assert np.abs(phi[plus] - ref[plus, :-1]).max() > 0.1       # FLT_MAX does not stand for +inf here
        _close(phi[~plus], ref[~plus, :-1], 2e-5)


def test_xgboost_inf_split_reads_inf_through_inplace_predict():
    """Where a feature has a split that tells +inf from FLT_MAX (XGBoost's split_cond = +inf: shap's threshold
    FLT_MAX), no finite row stands for +inf: the reference is XGBoost's inplace_predict, which reads inf itself."""
    from hitml.shap_ext._native import _finite, library_margin

    model, _ = _xgb_model("hist")
    ex = shap.TreeExplainer(model, backend="cpu")
    ens = ex.model
    booster = model.get_booster()
    X = _f32(INF_ROWS).astype(np.float64)                     # the rows as the explainer hands them over
    assert _finite(X, ens) is not None                       # this model's splits: +-FLT_MAX stand for +-inf
    tl = ens.values.shape[0]
    _close(library_margin(model, ens, X, tl), booster.inplace_predict(X.astype(np.float32), predict_type="margin"),
           0.0)   # inplace_predict reads inf as the substitute does
    saved = ens.thresholds.copy()
    try:
        node = np.flatnonzero((ens.children_left[0] >= 0) & (ens.features[0] == 0))[0]
        ens.thresholds[0, node] = F32MAX                     # as shap writes XGBoost's split_cond = +inf
        assert _finite(X, ens) is None
        _close(library_margin(model, ens, X, tl),
               booster.inplace_predict(X.astype(np.float32), predict_type="margin"), 0.0)
        neg = np.where(np.isneginf(X), -np.inf, 0.0)
        ens.thresholds[0, node] = -np.inf                    # as shap writes split_cond = -FLT_MAX
        assert _finite(neg, ens) is None and _finite(np.where(np.isposinf(X), np.inf, 0.0), ens) is not None
    finally:
        ens.thresholds[...] = saved


@pytest.mark.parametrize("name", ["forest", "boosting", "extra"])
def test_sklearn_inf_rows(name):
    """scikit-learn refuses inf (check_array): +-inf and 1e300 rows are explained with the values of their
    +-FLT_MAX rows (thresholds lie in [-FLT_MAX, FLT_MAX)), without a spurious additivity error, and sum to the
    library's prediction of the clipped rows."""
    from sklearn.ensemble import ExtraTreesRegressor, GradientBoostingRegressor, RandomForestRegressor

    rng = np.random.default_rng(6)
    X = rng.normal(size=(300, 3)).astype(np.float32)
    X[:, 2] = rng.choice(np.array([-F32MAX, -1e38, 0.0, 1e38, F32MAX], dtype=np.float32), 300)
    y = X[:, 0] + np.sign(X[:, 2]) * (np.abs(X[:, 2]) > 2e38)
    cls = {"forest": RandomForestRegressor, "boosting": GradientBoostingRegressor, "extra": ExtraTreesRegressor}
    with np.errstate(over="ignore", invalid="ignore"):   # sklearn's finiteness check sums the rows
        model = cls[name](n_estimators=5, max_depth=4, random_state=0).fit(X, y)
    rows = np.where(np.isnan(INF_ROWS), 0.0, INF_ROWS)       # these models were fitted without missing values
    ex = shap.TreeExplainer(model, backend="cpu")
    phi = _explain(model, rows)
    _close(phi, _explain(model, _clipped(rows).astype(np.float64)), 0.0)
    with np.errstate(over="ignore", invalid="ignore"):   # sklearn's finiteness check sums the rows
        with pytest.raises(ValueError, match="infinity"):
            model.predict(rows)
        _close(phi.sum(axis=1) + ex.expected_value, model.predict(_clipped(rows)), 1e-9)


def test_lightgbm_and_hist_gradient_boosting_read_inf_rows_as_given():
    """LightGBM and HistGradientBoosting take +-inf: the reference predicts the rows as they are; LightGBM's
    values equal its own pred_contrib of the inf rows."""
    lgb = pytest.importorskip("lightgbm")
    from sklearn.ensemble import HistGradientBoostingRegressor

    rng = np.random.default_rng(7)
    X = rng.normal(size=(300, 3))
    X[:, 2] = rng.choice(np.array([-1e300, -1.0, 0.0, 1.0, 1e300, np.inf, -np.inf]), 300)
    y = X[:, 0] + np.sign(X[:, 2]) * (np.abs(X[:, 2]) > 1e299)
    lg = lgb.LGBMRegressor(n_estimators=6, num_leaves=6, min_child_samples=3, verbose=-1).fit(X, y)
    _close(_explain(lg, INF_ROWS), lg.predict(INF_ROWS, pred_contrib=True)[:, :-1], 1e-9)
    hgb = HistGradientBoostingRegressor(max_iter=6, max_depth=3).fit(X, y)
    ex = shap.TreeExplainer(hgb, backend="cpu")
    phi = _explain(hgb, INF_ROWS)
    _close(phi.sum(axis=1) + ex.expected_value, hgb.predict(INF_ROWS), 1e-9)


# -- CatBoost models saved as JSON, without catboost --------------------------------------------------------------
def _stored(name: str) -> dict:
    with np.load(DATA / f"{name}.npz") as z:
        return {k: z[k] for k in z.files}


def _engine_layout(ref: np.ndarray, K: int) -> np.ndarray:
    """CatBoost's ShapValues (n, M+1) or (n, K, M+1) as shap_values gives them: (n, M) or (n, M, K)."""
    return ref[:, :-1] if K == 1 else np.moveaxis(ref, 1, -1)[:, :-1, :]


def _check_stored(name: str, backend: str, cupy: bool = False) -> None:
    d = _stored(name)
    model = load_catboost_json(DATA / f"{name}.json")
    K = model.n_outputs
    rows = d["X"]
    _close(json_margin(model.doc, rows), d["raw"], 1e-12)
    ref = d["shap"]
    catboost_sums = ref.sum(axis=-1)
    additive = np.allclose(catboost_sums, d["raw"] if K == 1 else d["raw"], atol=1e-9)
    if name.startswith("lossguide"):   # CatBoost's own ShapValues of these trees miss RawFormulaVal
        assert not additive
    X = rows
    if cupy:
        import cupy as cp

        X = cp.asarray(rows)
    ex = shap.TreeExplainer(model, backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        phi = _host(ex.shap_values(X))                 # the check (json_margin) runs
    bias = np.asarray(ex.expected_value)
    total = phi.sum(axis=1) + bias
    _close(total, d["raw"], 1e-9)
    if additive:
        _close(phi, _engine_layout(ref, K), 1e-9)
        _close(bias, ref[0, -1] if K == 1 else ref[0, :, -1], 1e-12)
    if "inter" in d:
        inter = _host(ex.shap_interaction_values(X))
        r = d["inter"]                                 # (n, M+1, M+1) or (n, K, M+1, M+1)
        want = r[:, :-1, :-1] if K == 1 else np.moveaxis(r, 1, -1)[:, :-1, :-1, :]
        _close(inter, want, 1e-9)


@pytest.mark.parametrize("name", STORED)
def test_stored_catboost_json_cpu(name):
    _check_stored(name, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("name", STORED)
def test_stored_catboost_json_gpu(name):
    """The GPU engine on CatBoost models read from JSON (no catboost on the machine), NumPy and CuPy rows: CatBoost's
    stored references, and the CPU engine's values to float64 rounding (also interventional, probability for the
    Logloss models)."""
    _check_stored(name, "gpu")
    _check_stored(name, "gpu", cupy=True)
    d = _stored(name)
    model = load_catboost_json(DATA / f"{name}.json")
    rows = d["X"]
    _close(_host(shap.TreeExplainer(model, backend="gpu").shap_values(rows)),
           shap.TreeExplainer(model, backend="cpu").shap_values(rows), 1e-12)
    bg = rows[-20:]
    outputs = ["raw", "probability"] if "logloss" in name else ["raw"]
    for output in outputs:
        kw = dict(data=bg, feature_perturbation="interventional", model_output=output)
        cpu = shap.TreeExplainer(model, backend="cpu", **kw).shap_values(rows)
        _close(_host(shap.TreeExplainer(model, backend="gpu", **kw).shap_values(rows)), cpu, 1e-12)


def test_stored_files_are_small():
    assert STORED and sum(p.stat().st_size for p in DATA.iterdir()) < 2 << 20


def test_catboost_json_model_reads_frames_by_name(tmp_path):
    """A model trained on named columns keeps the names in its JSON (feature_id): a frame is read by name, as
    CatBoost reads it, values come back in the frame's order; duplicate and unknown names raise (CatBoostError
    where catboost is installed, ValueError where it is not)."""
    cb = pytest.importorskip("catboost")
    import pandas as pd

    rng = np.random.default_rng(5)
    df = pd.DataFrame(rng.normal(size=(300, 3)), columns=["a", "b", "c"])
    model = cb.CatBoostRegressor(iterations=5, depth=3, verbose=0, allow_writing_files=False, thread_count=1).fit(
        df, df.a * 2 - df.c)
    path = tmp_path / "named.json"
    model.save_model(str(path), format="json")
    loaded = load_catboost_json(path)
    assert loaded.feature_names_ == ["a", "b", "c"]
    frame = df.iloc[:20][["c", "a", "b"]]
    native = model.get_feature_importance(data=cb.Pool(frame), type="ShapValues", thread_count=1)
    phi = shap.TreeExplainer(loaded, backend="cpu").shap_values(frame)
    np.testing.assert_allclose(phi, native[:, [2, 0, 1]], rtol=1e-6, atol=1e-6)  # CatBoost's are in model order
    np.testing.assert_array_equal(phi, shap.TreeExplainer(model, backend="cpu").shap_values(frame))
    with pytest.raises(cb.CatBoostError):  # catboost is installed here: its own error type
        shap.TreeExplainer(loaded, backend="cpu").shap_values(frame.set_axis(["a", "a", "b"], axis=1))
    with pytest.raises(cb.CatBoostError):
        shap.TreeExplainer(loaded, backend="cpu").shap_values(frame.set_axis(["c", "b", "x"], axis=1))
