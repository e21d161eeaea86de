"""Random model configurations of the four tree libraries, each with its independent references (native SHAP, the
library's raw prediction, whether shap's C++ explainer is valid), for the differential TreeSHAP tests."""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

N_ROWS = 160      # training rows (the deep decision tree takes more)
N_EXPLAIN = 24    # rows explained per configuration


@dataclass
class Case:
    """A fitted model with its references. ``raw(X)`` is the library's own raw prediction ((n,) or (n, K));
    ``native(X)`` / ``native_inter(X)`` its own SHAP as ``(n, M+1, K)`` / ``(n, M+1, M+1, K)`` (bias last)."""

    config: dict
    model: Any
    X: Any                                   # rows to explain (what the user passes)
    Xnum: np.ndarray                         # the same rows as numbers (category codes), float64
    raw: Callable[[Any], np.ndarray]
    native: Callable[[Any], np.ndarray] | None = None
    native_inter: Callable[[Any], np.ndarray] | None = None
    native_rtol: float = 1e-6
    raw_rtol: float = 1e-6
    cpp: bool = True                         # shap's C++ TreeSHAP on shap's parse is a valid reference
    x32: bool = False                        # the library compares float32 rows
    interventional: bool = True              # brute-force interventional over ``raw`` is a valid reference
    frame: Callable[[np.ndarray], Any] | None = None  # numbers -> what the model predicts on (DataFrame)
    extra: dict = field(default_factory=dict)


def hostile_matrix(rng: np.random.Generator, n: int, m: int, nan: bool) -> np.ndarray:
    """Columns of normal, heavy-tailed (Student t, df 1.5), point-mass and sentinel (-999, 1e9) values; NaN."""
    X = np.empty((n, m))
    for j in range(m):
        kind = j % 4
        if kind == 0:
            X[:, j] = rng.normal(size=n)
        elif kind == 1:
            X[:, j] = rng.standard_t(1.5, size=n)
        elif kind == 2:
            X[:, j] = np.where(rng.random(n) < 0.6, 0.0, rng.normal(size=n))
        else:
            X[:, j] = np.where(rng.random(n) < 0.1, rng.choice([-999.0, 1e9], size=n), rng.normal(size=n))
    if nan:
        X[rng.random(X.shape) < 0.12] = np.nan
    return X


def target(rng: np.random.Generator, X: np.ndarray) -> np.ndarray:
    """A smooth target from column ranks (unaffected by heavy tails and sentinels) plus noise."""
    R = np.argsort(np.argsort(np.nan_to_num(X, nan=0.0), axis=0), axis=0) / len(X) - 0.5
    y = 2 * R[:, 0] + R[:, 1] * R[:, -1] * 4 + np.sin(6 * R[:, min(2, X.shape[1] - 1)])
    return y + 0.1 * rng.normal(size=len(X))


def classes(y: np.ndarray, k: int) -> np.ndarray:
    return np.digitize(y, np.quantile(y, np.linspace(0, 1, k + 1)[1:-1]))


def brute_force_interventional(f: Callable[[np.ndarray], np.ndarray], X: np.ndarray, bg: np.ndarray,
                               transform: Callable[[np.ndarray], np.ndarray] | None = None):
    """Exact interventional SHAP by enumerating every feature subset: ``(phi (n, M, K), E (K,))``.

    Per background row b the game is v(S) = f(x_S, b_rest) on the raw output f, averaged over b. With an output
    ``transform`` (shap's "probability"/"log_loss"), each (x, b) pair's values are rescaled by
    (T(f(x)) - T(f(b))) / (f(x) - f(b)), which is how shap's C++ (and hitml) define transformed values.
    """
    n, M = X.shape
    subsets = list(itertools.product([0, 1], repeat=M))
    rows = np.array([[np.where(s, x, b) for s in subsets] for x in X for b in bg]).reshape(-1, M)
    v = np.asarray(f(rows), dtype=np.float64).reshape(n, len(bg), len(subsets), -1)
    idx = {s: i for i, s in enumerate(subsets)}
    phi = np.zeros((n, len(bg), M, v.shape[-1]))
    for j in range(M):
        for s in subsets:
            if s[j]:
                continue
            size = sum(s)
            w = math.factorial(size) * math.factorial(M - size - 1) / math.factorial(M)
            phi[:, :, j] += w * (v[:, :, idx[s[:j] + (1,) + s[j + 1:]]] - v[:, :, idx[s]])
    full, empty = v[:, :, -1], v[:, :, 0]
    if transform is not None:
        phi *= ((transform(full) - transform(empty)) / (full - empty))[:, :, None, :]
        empty = transform(empty)
    return phi.mean(1), empty[0].mean(0)


def _split(X, n_explain=N_EXPLAIN):
    return X[:n_explain]


# -- XGBoost ---------------------------------------------------------------------------------------------------
def xgboost_case(cfg: dict) -> Case:
    import xgboost as xgb

    rng = np.random.default_rng(cfg["seed"])
    m = cfg["m"]
    X = hostile_matrix(rng, N_ROWS, m, cfg["missing"] == "nan")
    y = target(rng, X)
    params = dict(n_estimators=cfg["trees"], max_depth=cfg["depth"], learning_rate=0.3, n_jobs=1,
                  num_parallel_tree=cfg["npt"], booster=cfg["booster"], random_state=cfg["seed"])
    if cfg["npt"] > 1:
        params.update(subsample=0.7, colsample_bynode=0.8)
    if cfg["booster"] == "dart":
        params.update(rate_drop=0.3, skip_drop=0.0)
    if cfg["base_score"] is not None:
        params["base_score"] = cfg["base_score"]
    if cfg["missing"] == "sentinel":
        params["missing"] = -999.0
    frame = None
    if cfg["categorical"]:
        codes = rng.integers(0, 7, size=N_ROWS).astype(np.float64)
        codes[rng.random(N_ROWS) < 0.05] = np.nan
        X[:, 0] = codes
        y = y + np.isin(codes, [1, 4, 5]) * 1.5
        cats = list(range(7))

        def frame(A):
            df = pd.DataFrame(A, columns=[f"f{j}" for j in range(m)])
            df["f0"] = pd.Categorical(A[:, 0], categories=cats)
            return df

        params.update(enable_categorical=True, tree_method="hist", max_cat_to_onehot=cfg.get("onehot", 1))
    obj = cfg["objective"]
    fit_X = frame(X) if frame else X
    if obj == "reg":
        model = xgb.XGBRegressor(**params).fit(fit_X, y)
    elif obj == "poisson":
        model = xgb.XGBRegressor(objective="count:poisson", **params).fit(fit_X, np.floor(np.exp(y)))
    elif obj == "binary":
        model = xgb.XGBClassifier(**params).fit(fit_X, y > np.median(y))
    elif obj == "multi":
        model = xgb.XGBClassifier(**params).fit(fit_X, classes(y, 3))
    elif obj == "rank":
        qid = np.repeat(np.arange(N_ROWS // 20), 20)
        model = xgb.XGBRanker(objective="rank:pairwise", **params).fit(fit_X, classes(y, 4), qid=qid)
    else:
        raise ValueError(obj)
    booster = model.get_booster()
    missing = -999.0 if cfg["missing"] == "sentinel" else np.nan

    def dmatrix(A):
        A = np.asarray(A, dtype=np.float64)
        return xgb.DMatrix(frame(A) if frame else A, missing=missing, enable_categorical=bool(frame))

    def native(A):
        c = booster.predict(dmatrix(A), pred_contribs=True)
        return c[..., None] if c.ndim == 2 else np.moveaxis(c, 1, -1)

    def native_inter(A):
        c = booster.predict(dmatrix(A), pred_interactions=True)
        return c[..., None] if c.ndim == 3 else np.moveaxis(c, 1, -1)

    Xe = _split(X)
    return Case(cfg, model, frame(Xe) if frame else Xe, Xe,
                raw=lambda A: booster.predict(dmatrix(A), output_margin=True),
                native=native, native_inter=native_inter, native_rtol=2e-5, raw_rtol=2e-6, x32=True,
                # shap's C++ on its own parse: no category sets, forests, dart weights or `missing` sentinels
                cpp=not cfg["categorical"] and cfg["npt"] == 1 and cfg["booster"] != "dart"
                and cfg["missing"] != "sentinel",
                frame=frame)


# -- LightGBM --------------------------------------------------------------------------------------------------
def lightgbm_case(cfg: dict) -> Case:
    import lightgbm as lgb

    rng = np.random.default_rng(cfg["seed"])
    m = cfg["m"]
    X = hostile_matrix(rng, N_ROWS, m, cfg["nan"])
    y = target(rng, X)
    cat = []
    if cfg["categorical"]:
        n_cats = cfg["n_cats"]
        X[:, 1] = rng.integers(0, n_cats, size=N_ROWS)
        y = y + (X[:, 1] % 3 == 0) * 1.5
        cat = [1]
    params = dict(n_estimators=cfg["trees"], num_leaves=cfg["leaves"], min_child_samples=5, verbose=-1, n_jobs=1,
                  boost_from_average=cfg["bfa"], random_state=cfg["seed"], min_data_per_group=5, cat_smooth=1,
                  max_cat_to_onehot=cfg.get("onehot", 4))
    if cfg["rf"]:
        params.update(boosting_type="rf", bagging_fraction=0.7, bagging_freq=1)
    obj = cfg["objective"]
    if obj == "reg":
        model = lgb.LGBMRegressor(**params).fit(X, y, categorical_feature=cat or "auto")
    elif obj == "binary":
        model = lgb.LGBMClassifier(**params).fit(X, y > np.median(y), categorical_feature=cat or "auto")
    else:
        model = lgb.LGBMClassifier(**params).fit(X, classes(y, 3), categorical_feature=cat or "auto")
    K = 3 if obj == "multi" else 1

    def native(A):
        c = model.predict(np.asarray(A, dtype=np.float64), pred_contrib=True)
        return c.reshape(len(A), K, m + 1).transpose(0, 2, 1)

    Xe = _split(X)
    return Case(cfg, model, Xe, Xe, raw=lambda A: model.predict(np.asarray(A, dtype=np.float64), raw_score=True),
                native=native, cpp=not cfg["categorical"])


# -- scikit-learn ----------------------------------------------------------------------------------------------
def sklearn_case(cfg: dict) -> Case:
    from sklearn import dummy, ensemble, tree

    rng = np.random.default_rng(cfg["seed"])
    kind = cfg["kind"]
    m = cfg["m"]
    n = 400 if kind == "deep_tree" else N_ROWS
    nan = kind.startswith("hgb")
    X = hostile_matrix(rng, n, m, nan)
    y = target(rng, X)
    t, s = cfg["trees"], cfg["seed"]
    cpp = True
    if kind.startswith("hgb"):
        X[:, 1] = rng.integers(0, cfg["n_cats"], size=n)
        X[rng.random(n) < 0.05, 1] = np.nan
        y = y + (X[:, 1] % 3 == 0) * 1.5
        cls = ensemble.HistGradientBoostingRegressor if kind == "hgb_reg" else ensemble.HistGradientBoostingClassifier
        model = cls(max_iter=t, max_depth=cfg["depth"], categorical_features=[1], random_state=s, min_samples_leaf=5)
        model.fit(X, y if kind == "hgb_reg" else classes(y, cfg["k"]))
        raw = model.predict if kind == "hgb_reg" else model.decision_function
        cpp = False  # shap's parse drops HistGradientBoosting's category sets
    elif kind in ("rf_reg", "et_reg"):
        cls = ensemble.RandomForestRegressor if kind == "rf_reg" else ensemble.ExtraTreesRegressor
        model = cls(n_estimators=t, max_depth=cfg["depth"], random_state=s, n_jobs=1).fit(X, y)
        raw = model.predict
    elif kind in ("rf_clf", "et_clf"):
        cls = ensemble.RandomForestClassifier if kind == "rf_clf" else ensemble.ExtraTreesClassifier
        model = cls(n_estimators=t, max_depth=cfg["depth"], random_state=s, n_jobs=1).fit(X, classes(y, cfg["k"]))
        raw = model.predict_proba
    elif kind == "gb_reg":
        init = dummy.DummyRegressor(strategy="quantile", quantile=0.3) if cfg["init"] else None
        model = ensemble.GradientBoostingRegressor(n_estimators=t, max_depth=cfg["depth"], init=init,
                                                   random_state=s).fit(X, y)
        raw = model.predict
    elif kind == "gb_clf":
        init = dummy.DummyClassifier(strategy="prior") if cfg["init"] else None
        model = ensemble.GradientBoostingClassifier(n_estimators=t, max_depth=cfg["depth"], init=init,
                                                    random_state=s).fit(X, y > np.median(y))
        raw = model.decision_function
    elif kind == "iforest":
        from sklearn.ensemble._iforest import _average_path_length

        model = ensemble.IsolationForest(n_estimators=t, random_state=s).fit(X)
        c = _average_path_length(np.asarray([model.max_samples_]))[0]

        def raw(A):  # mean path length, which shap's IsolationForest trees sum to
            return -np.log2(-model.score_samples(A)) * c
    elif kind == "deep_tree":
        model = tree.DecisionTreeRegressor(random_state=s, min_samples_leaf=1).fit(X, y)
        raw = model.predict
    else:
        raise ValueError(kind)
    Xe = _split(X)
    return Case(cfg, model, Xe, Xe, raw=lambda A: raw(np.asarray(A, dtype=np.float64)), cpp=cpp,
                x32=not kind.startswith("hgb"), raw_rtol=1e-6)


# -- CatBoost --------------------------------------------------------------------------------------------------
def catboost_case(cfg: dict) -> Case:
    import catboost as cb

    rng = np.random.default_rng(cfg["seed"])
    m = cfg["m"]
    X = hostile_matrix(rng, N_ROWS, m, cfg["nan"])
    y = target(rng, X)
    params = dict(iterations=cfg["trees"], depth=cfg["depth"], verbose=0, thread_count=1, random_seed=cfg["seed"],
                  nan_mode=cfg["nan_mode"], allow_writing_files=False)
    loss = cfg["loss"]
    if loss == "RMSE":
        params["boost_from_average"] = cfg["bfa"]
    frame = None
    cat_idx = []
    if cfg["cat"]:
        words = np.array(["red", "green", "blue", "amber", "violet"])
        strings = words[rng.integers(0, len(words), N_ROWS)]
        y = y + (strings == "red") * 1.5
        cat_idx = [m]

        def frame(A, strings=strings):
            df = pd.DataFrame(np.asarray(A, dtype=np.float64)[:, :m], columns=[f"f{j}" for j in range(m)])
            df["colour"] = strings[: len(df)]
            return df

    fit_X = frame(X) if frame else X
    if loss == "RMSE":
        model = cb.CatBoostRegressor(loss_function="RMSE", cat_features=cat_idx or None, **params).fit(fit_X, y)
    elif loss == "Logloss":
        model = cb.CatBoostClassifier(loss_function="Logloss", cat_features=cat_idx or None, **params)
        model.fit(fit_X, y > np.median(y))
    else:
        model = cb.CatBoostClassifier(loss_function="MultiClass", cat_features=cat_idx or None, **params)
        model.fit(fit_X, classes(y, 3))

    def pool(A):
        return cb.Pool(frame(A) if frame else np.asarray(A, dtype=np.float64), cat_features=cat_idx or None)

    def native(A, kind="ShapValues"):
        c = np.asarray(model.get_feature_importance(data=pool(A), type=kind, thread_count=1))
        if kind == "ShapValues":
            return c[..., None] if c.ndim == 2 else np.moveaxis(c, 1, -1)
        return c[..., None] if c.ndim == 3 else np.moveaxis(c, 1, -1)

    Xe = _split(X)
    return Case(cfg, model, frame(Xe) if frame else Xe, Xe,
                raw=lambda A: model.predict(pool(A), prediction_type="RawFormulaVal", thread_count=1),
                native=native, native_inter=lambda A: native(A, "ShapInteractionValues"), cpp=False, x32=True,
                interventional=not cfg["cat"], frame=frame)


BUILDERS = {"xgboost": xgboost_case, "lightgbm": lightgbm_case, "sklearn": sklearn_case, "catboost": catboost_case}
