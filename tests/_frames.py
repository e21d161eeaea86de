"""Seeded model configurations explained on realistic pandas inputs, each checked against what the model's own library
does with the same input: its contributions (XGBoost ``pred_contribs``, LightGBM ``pred_contrib``, CatBoost
``ShapValues`` where exact), its raw prediction (additivity), or the exception it raises.

``configs(n, seed)`` draws configurations; ``run(cfg)`` builds the model, draws the input, explains it with
``shap_ext.TreeExplainer(backend=...)`` and returns a short outcome string or raises AssertionError. Nothing here
reads the input the way the explainer does: references go through the libraries themselves.
"""
from __future__ import annotations

import os
import tempfile
import warnings
from typing import Any, Callable

import numpy as np
import pandas as pd


def ours(model, *args, **kw):
    """hitml's CPU explainer of ``model`` (what a test compares with the library's own numbers)."""
    from hitml import shap_ext

    return shap_ext.TreeExplainer(model, *args, backend="cpu", **kw)


def close(actual, expected, rtol=1e-6):
    """Equal to ``rtol`` of the larger of 1 and the reference's magnitude; shapes equal."""
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    scale = max(1.0, float(np.abs(expected).max())) if expected.size else 1.0
    np.testing.assert_allclose(actual, expected, rtol=0, atol=rtol * scale)


N_TRAIN = 200
N_EXPLAIN = 12
WORDS = np.array(["red", "green", "blue", "amber", "violet", "teal"])

VARIANTS = ("as_trained", "codes", "cats_inferred", "cats_reordered", "unseen", "nan_cat", "reordered", "duplicate",
            "series", "row1d", "zero_rows", "inf", "mixed_dtypes")


class Skip(Exception):
    """A configuration the library itself cannot build (e.g. too few classes after the draw)."""


def configs(n: int, seed: int = 20261126) -> list[dict]:
    """``n`` seeded configurations cycling through the four libraries and every input variant."""
    rng = np.random.default_rng(seed)
    out = []

    def pick(values):
        return values[int(rng.integers(len(values)))]

    for i in range(n):
        fam = ("xgboost", "lightgbm", "sklearn", "catboost", "xgboost", "lightgbm")[i % 6]
        cfg: dict[str, Any] = dict(family=fam, seed=int(rng.integers(1 << 30)), index=i, variant=VARIANTS[i % 13],
                                   m=int(rng.integers(3, 6)), trees=int(rng.integers(2, 9)),
                                   depth=int(rng.integers(1, 6)), cat=pick(["none", "string", "int"]),
                                   nan=bool(rng.random() < 0.5))
        if fam == "xgboost":
            cfg.update(objective=pick(["reg", "binary", "multi", "poisson", "gamma", "logistic", "rank"]),
                       booster=pick(["gbtree", "gbtree", "dart"]), npt=pick([1, 1, 3]),
                       missing=pick(["nan", "nan", "sentinel"]), iteration_range=pick([None, None, 1, 2]),
                       interventional=bool(rng.random() < 0.15))
        elif fam == "lightgbm":
            cfg.update(objective=pick(["reg", "binary", "multi", "poisson", "huber", "xentropy", "multiova"]),
                       form=pick(["sklearn", "booster", "model_str", "model_file"]),
                       use_missing=bool(rng.random() < 0.7), zero_as_missing=bool(rng.random() < 0.3),
                       linear_tree=bool(rng.random() < 0.06), rf=bool(rng.random() < 0.15),
                       num_iteration=pick([None, None, 1, 2]), zeros=bool(rng.random() < 0.5),
                       interventional=bool(rng.random() < 0.15))
        elif fam == "sklearn":
            cfg.update(kind=pick(["rf_reg", "rf_clf", "et_reg", "gb_reg", "gb_clf", "hgb_reg", "hgb_clf",
                                  "hgb_reg", "hgb_clf"]), k=pick([2, 3]))
        else:
            cfg.update(loss=pick(["RMSE", "Logloss", "MultiClass"]),
                       grow=pick(["SymmetricTree", "Depthwise", "Lossguide"]), nan_mode=pick(["Min", "Max"]),
                       interventional=bool(rng.random() < 0.1))
            cfg["depth"] = min(cfg["depth"], 4)
            if cfg["cat"] != "none":  # CatBoost's own SHAP explains category features: path-dependent only
                cfg["interventional"] = False
        out.append(cfg)
    return out


# -- training data ------------------------------------------------------------------------------------------------
def _train_frame(cfg: dict, rng: np.random.Generator, n: int) -> tuple[pd.DataFrame, np.ndarray]:
    """Numeric columns (normal, heavy tails, point mass at 0), one int column, optionally a category column."""
    m = cfg["m"]
    cols: dict[str, Any] = {}
    for j in range(m):
        kind = j % 3
        if kind == 0:
            v = rng.normal(size=n)
        elif kind == 1:
            v = rng.standard_t(1.5, size=n)
        else:
            v = np.where(rng.random(n) < 0.5, 0.0, rng.normal(size=n))
        if cfg.get("nan") and j > 0:
            v[rng.random(n) < 0.1] = np.nan
        cols[f"x{j}"] = v
    df = pd.DataFrame(cols)
    R = df.rank(pct=True).fillna(0.5).to_numpy() - 0.5
    y = 2 * R[:, 0] + 3 * R[:, 1] * R[:, -1] + np.sin(5 * R[:, min(2, m - 1)])
    if cfg["cat"] != "none":
        idx = rng.integers(0, 5, size=n)
        labels = WORDS[idx] if cfg["cat"] == "string" else (idx + 1) * 10
        col = pd.Categorical(labels)
        if cfg.get("nan"):
            col = pd.Categorical(np.where(rng.random(n) < 0.05, None, labels).tolist(), categories=col.categories)
        df.insert(1, "colour", col)
        y = y + np.isin(idx, [1, 3]) * 1.5 - (idx == 4) * 1.0
    return df, y + 0.1 * rng.normal(size=n)


def _classes(y: np.ndarray, k: int) -> np.ndarray:
    return np.digitize(y, np.quantile(y, np.linspace(0, 1, k + 1)[1:-1]))


# -- the explained input ------------------------------------------------------------------------------------------
def draw_input(cfg: dict, train: pd.DataFrame, rng: np.random.Generator) -> tuple[Any, Any]:
    """``(X_user, X_ref)``: what the user passes, and the frame the library's reference is computed on (the same
    rows as the library must read them; None where the user input itself is the reference)."""
    rows = train.sample(N_EXPLAIN, random_state=int(rng.integers(1 << 30))).reset_index(drop=True)
    v = cfg["variant"]
    has_cat = "colour" in rows.columns
    if cfg["family"] == "catboost" and has_cat and v in ("codes", "row1d"):
        v = "as_trained" if v == "codes" else "series"  # CatBoost hashes category labels: codes are other labels
    if v == "codes":
        if has_cat:
            rows["colour"] = rows["colour"].cat.codes.replace(-1, np.nan).astype(np.float64)
        return rows.to_numpy(dtype=np.float64), None
    if v in ("cats_inferred", "cats_reordered", "unseen", "nan_cat") and has_cat:
        labels = rows["colour"].astype(object).to_numpy()
        train_cats = list(train["colour"].cat.categories)
        if v == "cats_inferred":  # pandas infers the categories from the explained rows (a subset, other codes)
            rows["colour"] = pd.Categorical(labels)
        elif v == "cats_reordered":
            rows["colour"] = pd.Categorical(labels, categories=train_cats[::-1])
        elif v == "unseen":
            new = "ultraviolet" if cfg["cat"] == "string" else 999
            labels = labels.copy()
            labels[:3] = new
            rows["colour"] = pd.Categorical(labels)
        else:
            labels = labels.copy()
            labels[::3] = None
            rows["colour"] = pd.Categorical(labels.tolist(), categories=train_cats)
        return rows, None
    if v == "reordered":
        cols = list(rows.columns)
        return rows[cols[1:] + cols[:1]], None
    if v == "duplicate":
        dup = rows.copy()
        names = list(dup.columns)
        names[-1] = names[0]
        dup.columns = names
        return dup, None
    if v == "series":
        return rows.iloc[0], rows.iloc[:1]
    if v == "row1d":
        ref = rows.iloc[:1] if cfg["family"] != "sklearn" else None  # scikit-learn reads raw values, not codes
        if has_cat:
            rows["colour"] = rows["colour"].cat.codes.replace(-1, np.nan).astype(np.float64)
        return rows.iloc[0].to_numpy(dtype=np.float64), ref
    if v == "zero_rows":
        return rows.iloc[:0], None
    if v == "inf":
        num = [c for c in rows.columns if c != "colour"]
        ref = rows.copy()
        rows.loc[0, num[0]] = np.inf
        rows.loc[1, num[-1]] = -np.inf
        big = float(np.finfo(np.float32).max)  # the same branch at every finite float32 threshold
        ref.loc[0, num[0]] = big
        ref.loc[1, num[-1]] = -big
        return rows, ref
    if v == "mixed_dtypes":
        num = [c for c in rows.columns if c != "colour"]
        rows[num[0]] = rows[num[0]].astype(np.float32)
        if len(num) > 2:
            rows[num[2]] = rows[num[2]].fillna(0.0).round().astype(np.int64)
        return rows, None
    return rows, None


# -- per-library cases --------------------------------------------------------------------------------------------
class Case:
    """A fitted model, how to explain it, and the library's own answers on a frame."""

    def __init__(self, model: Any, native: Callable[[Any], np.ndarray] | None,
                 raw: Callable[[Any], np.ndarray], K: int, native_exact: bool = True,
                 tree_limit: int | None = None, rtol: float = 1e-5, refusal: type | None = None,
                 names_by_position: bool = False, additive: bool = True) -> None:
        self.model, self.native, self.raw, self.K = model, native, raw, K
        self.additive = additive
        self.native_exact, self.tree_limit, self.rtol = native_exact, tree_limit, rtol
        self.refusal = refusal
        self.names_by_position = names_by_position


def _xgboost(cfg: dict, rng: np.random.Generator) -> tuple[Case, pd.DataFrame]:
    import xgboost as xgb

    train, y = _train_frame(cfg, rng, N_TRAIN)
    p = dict(n_estimators=cfg["trees"], max_depth=cfg["depth"], learning_rate=0.3, n_jobs=1, booster=cfg["booster"],
             num_parallel_tree=cfg["npt"], random_state=cfg["seed"] % 1000, enable_categorical=True,
             tree_method="hist", max_cat_to_onehot=int(rng.choice([1, 8])))
    if cfg["npt"] > 1:
        p.update(subsample=0.7, colsample_bynode=0.8)
    if cfg["booster"] == "dart":
        p.update(rate_drop=0.3, skip_drop=0.0)
    missing = np.nan
    if cfg["missing"] == "sentinel":
        missing = -999.0
        p["missing"] = missing
        train = train.copy()
        for c in train.columns:
            if c != "colour":
                train[c] = train[c].fillna(-999.0)
    obj = cfg["objective"]
    if obj == "reg":
        model = xgb.XGBRegressor(**p).fit(train, y)
    elif obj == "poisson":
        model = xgb.XGBRegressor(objective="count:poisson", **p).fit(train, np.floor(np.exp(y)))
    elif obj == "gamma":
        model = xgb.XGBRegressor(objective="reg:gamma", **p).fit(train, np.exp(y))
    elif obj == "logistic":
        model = xgb.XGBRegressor(objective="reg:logistic", **p).fit(train, 1 / (1 + np.exp(-y)))
    elif obj == "binary":
        model = xgb.XGBClassifier(**p).fit(train, y > np.median(y))
    elif obj == "multi":
        model = xgb.XGBClassifier(**p).fit(train, _classes(y, 3))
    else:
        qid = np.repeat(np.arange(N_TRAIN // 20), 20)
        model = xgb.XGBRanker(objective="rank:pairwise", **p).fit(train, _classes(y, 4), qid=qid)
    booster = model.get_booster()
    K = 3 if obj == "multi" else 1
    it = cfg["iteration_range"]
    n_rounds = booster.num_boosted_rounds()
    it = None if it is None or it >= n_rounds else it
    ir = (0, it if it is not None else n_rounds)

    def dm(X):
        if isinstance(X, np.ndarray):  # rows of codes by position, as shap hands arrays to XGBoost
            return xgb.DMatrix(X, missing=missing, feature_types=booster.feature_types, enable_categorical=True)
        return xgb.DMatrix(X, missing=missing, enable_categorical=True)

    def native(X):
        c = booster.predict(dm(X), pred_contribs=True, iteration_range=ir, validate_features=not isinstance(X, np.ndarray))
        return c[..., None] if c.ndim == 2 else np.moveaxis(c, 1, -1)

    def raw(X):
        return booster.predict(dm(X), output_margin=True, iteration_range=ir,
                               validate_features=not isinstance(X, np.ndarray))

    tl = None if it is None else it * K * cfg["npt"]
    return Case(model, native, raw, K, tree_limit=tl, rtol=2e-5), train


def _lightgbm(cfg: dict, rng: np.random.Generator) -> tuple[Case, pd.DataFrame]:
    import lightgbm as lgb

    train, y = _train_frame(cfg, rng, N_TRAIN)
    if cfg["zeros"]:  # values at and around zero, which missing type Zero reads as missing
        c = train.columns[-1]
        train[c] = np.where(rng.random(N_TRAIN) < 0.3, rng.choice([0.0, 1e-36, -1e-36], N_TRAIN), train[c])
    p = dict(n_estimators=cfg["trees"], num_leaves=int(rng.integers(2, 16)), min_child_samples=5, verbose=-1,
             n_jobs=1, random_state=cfg["seed"] % 1000, min_data_per_group=5, cat_smooth=1,
             max_cat_to_onehot=int(rng.choice([1, 4])), use_missing=cfg["use_missing"],
             zero_as_missing=cfg["zero_as_missing"], linear_tree=cfg["linear_tree"])
    if cfg["rf"]:
        p.update(boosting_type="rf", bagging_fraction=0.7, bagging_freq=1)
    obj = cfg["objective"]
    K = 3 if obj in ("multi", "multiova") else 1
    if obj in ("reg", "poisson", "huber"):
        target = y if obj != "poisson" else np.floor(np.exp(y))
        est = lgb.LGBMRegressor(objective={"reg": "regression"}.get(obj, obj), **p).fit(train, target)
    elif obj == "xentropy":
        est = lgb.LGBMRegressor(objective="cross_entropy", **p).fit(train, 1 / (1 + np.exp(-y)))
    elif obj == "binary":
        est = lgb.LGBMClassifier(**p).fit(train, y > np.median(y))
    else:
        est = lgb.LGBMClassifier(objective="multiclass" if obj == "multi" else "multiclassova", **p)
        est.fit(train, _classes(y, 3))
    form = cfg["form"]
    if form == "sklearn":
        model = est
    elif form == "booster":
        model = est.booster_
    elif form == "model_str":
        model = lgb.Booster(model_str=est.booster_.model_to_string())
    else:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "model.txt")
            est.booster_.save_model(path)
            model = lgb.Booster(model_file=path)
    booster = est.booster_
    it = cfg["num_iteration"]
    it = None if it is None or it >= booster.current_iteration() else it

    def native(X):
        c = booster.predict(X, pred_contrib=True, num_iteration=it)
        n, M = len(X), X.shape[1]
        return np.asarray(c).reshape(n, K, M + 1).transpose(0, 2, 1)

    def raw(X):
        return booster.predict(X, raw_score=True, num_iteration=it)

    refusal = lgb.basic.LightGBMError if cfg["linear_tree"] else None
    return Case(model, native, raw, K, tree_limit=None if it is None else it * K, rtol=1e-6, refusal=refusal,
                names_by_position=True), train


def _sklearn(cfg: dict, rng: np.random.Generator) -> tuple[Case, pd.DataFrame]:
    from sklearn import ensemble

    kind = cfg["kind"]
    hgb = kind.startswith("hgb")
    if not hgb:
        cfg = dict(cfg, cat="none")
    train, y = _train_frame(cfg, rng, N_TRAIN)
    s, t, d = cfg["seed"] % 1000, cfg["trees"], cfg["depth"]
    if kind == "rf_reg":
        model = ensemble.RandomForestRegressor(n_estimators=t, max_depth=d, random_state=s, n_jobs=1).fit(train, y)
        raw = model.predict
    elif kind == "et_reg":
        model = ensemble.ExtraTreesRegressor(n_estimators=t, max_depth=d, random_state=s, n_jobs=1).fit(train, y)
        raw = model.predict
    elif kind == "rf_clf":
        model = ensemble.RandomForestClassifier(n_estimators=t, max_depth=d, random_state=s, n_jobs=1)
        model.fit(train, _classes(y, cfg["k"]))
        raw = model.predict_proba
    elif kind == "gb_reg":
        model = ensemble.GradientBoostingRegressor(n_estimators=t, max_depth=d, random_state=s).fit(train.fillna(0), y)
        raw = model.predict
    elif kind == "gb_clf":
        model = ensemble.GradientBoostingClassifier(n_estimators=t, max_depth=d, random_state=s)
        model.fit(train.fillna(0), y > np.median(y))
        raw = model.decision_function
    else:
        cls = ensemble.HistGradientBoostingRegressor if kind == "hgb_reg" else ensemble.HistGradientBoostingClassifier
        model = cls(max_iter=t, max_depth=max(d, 2), random_state=s, min_samples_leaf=5)
        model.fit(train, y if kind == "hgb_reg" else _classes(y, cfg["k"]))

        def raw(X):
            r = model._raw_predict(X)
            return r[:, 0] if r.shape[1] == 1 else r
    if kind.startswith("gb"):
        train = train.fillna(0)
    K = cfg["k"] if kind == "rf_clf" and cfg["k"] > 2 else (2 if kind == "rf_clf" else 1)
    if kind == "hgb_clf" and cfg["k"] > 2:
        K = cfg["k"]
    return Case(model, None, raw, K, native_exact=False, rtol=1e-6), train


def _catboost(cfg: dict, rng: np.random.Generator) -> tuple[Case, pd.DataFrame]:
    import catboost as cb

    train, y = _train_frame(cfg, rng, N_TRAIN)
    cat_features = ["colour"] if "colour" in train.columns else None
    if cat_features:
        train["colour"] = train["colour"].astype(str).where(train["colour"].notna(), "None")
        train["colour"] = pd.Categorical(train["colour"])
    p = dict(iterations=cfg["trees"], depth=cfg["depth"], verbose=0, thread_count=1, random_seed=cfg["seed"] % 1000,
             nan_mode=cfg["nan_mode"], allow_writing_files=False, grow_policy=cfg["grow"],
             cat_features=cat_features)
    if cfg["grow"] == "Lossguide":
        p["max_leaves"] = int(rng.integers(3, 12))
    loss = cfg["loss"]
    if loss == "RMSE":
        model = cb.CatBoostRegressor(loss_function="RMSE", **p).fit(train, y)
        K = 1
    elif loss == "Logloss":
        model = cb.CatBoostClassifier(loss_function="Logloss", **p).fit(train, y > np.median(y))
        K = 1
    else:
        model = cb.CatBoostClassifier(loss_function="MultiClass", **p).fit(train, _classes(y, 3))
        K = 3

    def pool(X):
        return cb.Pool(X, cat_features=cat_features)

    def native(X):
        c = np.asarray(model.get_feature_importance(data=pool(X), type="ShapValues", thread_count=1))
        return c[..., None] if c.ndim == 2 else np.moveaxis(c, 1, -1)

    def raw(X):
        return model.predict(pool(X), prediction_type="RawFormulaVal", thread_count=1)

    # CatBoost's own ShapValues are exact TreeSHAP for symmetric trees only (not additive otherwise); with category
    # features they are what the explainer returns, whatever the trees
    symmetric = cfg["grow"] == "SymmetricTree"
    return Case(model, native, raw, K, native_exact=symmetric or bool(cat_features), rtol=1e-5,
                additive=symmetric or not cat_features), train


BUILD = {"xgboost": _xgboost, "lightgbm": _lightgbm, "sklearn": _sklearn, "catboost": _catboost}


# -- the check ----------------------------------------------------------------------------------------------------
def _library_answer(case: Case, X: Any) -> tuple[Any, Any, BaseException | None]:
    """``(native, raw, error)`` of the library on frame/array ``X``."""
    try:
        native = case.native(X) if case.native is not None else None
        raw = np.asarray(case.raw(X), dtype=np.float64)
        return native, raw, None
    except Exception as exc:
        return None, None, exc


def _close(actual: np.ndarray, expected: np.ndarray, rtol: float, what: str) -> None:
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    if not actual.size:
        return
    scale = max(1.0, float(np.nanmax(np.abs(expected))))
    err = float(np.max(np.abs(actual - expected)))
    assert err <= rtol * scale, f"{what}: max |diff| {err:.3g} > {rtol:g} x scale {scale:.3g}"


def _as_nmk(values: np.ndarray, K: int, flat: bool) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    if flat:
        v = v[None]
    return v if v.ndim == 3 else v[..., None]


def _positional(X: pd.DataFrame) -> pd.DataFrame:
    """A frame with the same columns under unique names (how a library reading by position sees duplicates)."""
    out = X.copy()
    out.columns = [f"{c}__{j}" if list(X.columns).count(c) > 1 else c for j, c in enumerate(X.columns)]
    return out


def run(cfg: dict, backend: str = "cpu") -> str:
    """Build, explain, compare. Returns "values", "error:<Type>", "refused" or "skip"; AssertionError on a
    mismatch."""
    from hitml import shap_ext

    rng = np.random.default_rng(cfg["seed"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            case, train = BUILD[cfg["family"]](cfg, rng)
        except Exception as exc:
            return f"skip:{type(exc).__name__}"
        X_user, X_ref = draw_input(cfg, train, rng)
    if case.refusal is not None:
        try:
            shap_ext.TreeExplainer(case.model, backend=backend).shap_values(X_user)
        except case.refusal:
            return "refused"
        raise AssertionError(f"expected {case.refusal.__name__}: the library refuses this model")
    ref_in = X_ref if X_ref is not None else X_user
    if isinstance(ref_in, np.ndarray) and ref_in.ndim == 1:
        ref_in = ref_in[None]
    if cfg["variant"] == "duplicate" and case.names_by_position:
        ref_in = _positional(X_user)
    elif cfg["variant"] == "duplicate" and cfg["family"] == "sklearn":
        ref_in = _positional(X_user).set_axis(list(train.columns), axis=1)  # shap reads a duplicate frame by position
    elif cfg["variant"] == "reordered" and case.names_by_position:
        ref_in = X_user.set_axis(list(train.columns), axis=1)  # LightGBM reads columns by position
    n_rows = 1 if np.ndim(X_user) == 1 else len(X_user)
    if n_rows == 0:
        native, raw, lib_err = None, None, None
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            native, raw, lib_err = _library_answer(case, ref_in)
    interventional = bool(cfg.get("interventional")) and lib_err is None and n_rows > 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bg = train.iloc[:8] if interventional else None
        try:
            ex = shap_ext.TreeExplainer(case.model, bg, backend=backend)
            values = ex.shap_values(X_user, tree_limit=case.tree_limit)
        except Exception as exc:
            if lib_err is not None:
                assert isinstance(exc, type(lib_err)) or isinstance(lib_err, type(exc)), \
                    f"library raised {type(lib_err).__name__}: {lib_err}; we raised {type(exc).__name__}: {exc}"
                return f"error:{type(lib_err).__name__}"
            raise AssertionError(f"we raised {type(exc).__name__}: {exc}; the library answers") from exc
    if lib_err is not None:
        raise AssertionError(f"the library raised {type(lib_err).__name__}: {lib_err}; we returned values")
    flat = np.ndim(X_user) == 1
    M = len(X_user) if flat else X_user.shape[1]
    vals = np.asarray(values)
    if n_rows == 0:
        expect = (0, M) + ((case.K,) if case.K > 1 else ())
        assert vals.shape == expect, f"zero rows: shape {vals.shape} != {expect}"
        return "values"
    phi = _as_nmk(vals, case.K, flat)
    assert phi.shape == (n_rows, M, case.K), f"shape {vals.shape}, expected {(n_rows, M, case.K)}"
    ev = np.atleast_1d(np.asarray(ex.expected_value, dtype=np.float64))
    raw = raw.reshape(n_rows, -1)
    if not interventional and case.native is not None and case.native_exact:
        nat = np.asarray(native, dtype=np.float64)
        if cfg["family"] == "catboost" and isinstance(X_user, (pd.DataFrame, pd.Series)):
            cols = list(X_user.columns if isinstance(X_user, pd.DataFrame) else X_user.index)
            pos = {c: j for j, c in enumerate(case.model.feature_names_)}
            nat = np.concatenate([nat[:, [pos[c] for c in cols], :], nat[:, -1:, :]], axis=1)
        _close(phi, nat[:, :-1, :], case.rtol, "native contributions")
        _close(ev, nat[0, -1, :], case.rtol, "native bias")
    if case.additive:
        _close(phi.sum(1) + ev, raw, max(case.rtol, 1e-6) * 10, "additivity vs the library's raw prediction")
    return "values"


def run_pair(cfg: dict) -> str:
    """The check of :func:`run` on the GPU backend, then GPU values equal to the CPU twin's (1e-9 of scale)."""
    from hitml import shap_ext

    outcome = run(cfg, backend="gpu")
    if outcome != "values":
        return outcome
    rng = np.random.default_rng(cfg["seed"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        case, train = BUILD[cfg["family"]](cfg, rng)
        X_user, _ = draw_input(cfg, train, rng)
        bg = train.iloc[:8] if cfg.get("interventional") else None
        out = []
        for backend in ("cpu", "gpu"):
            v = shap_ext.TreeExplainer(case.model, bg, backend=backend).shap_values(X_user, tree_limit=case.tree_limit)
            out.append(v.get() if hasattr(v, "get") else np.asarray(v))
    _close(out[1], out[0], 1e-9, "GPU vs CPU twin")
    return outcome
