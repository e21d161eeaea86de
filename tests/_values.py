"""Value-hostile differential: seeded models of XGBoost, LightGBM, scikit-learn and CatBoost trained on data that
holds hostile values (near-zero, subnormal, signed zero, NaN, huge, beyond float32), explained on rows built from
every split threshold of the model (read from the LIBRARY's own dump) and one ulp either side in float32 and float64,
and from the hostile values themselves, given as NumPy float64, NumPy float32 and pandas frames.

Every answer is checked against the library itself, never against shap or hitml:

- path-dependent SHAP values: XGBoost ``pred_contribs``, LightGBM ``pred_contrib``, CatBoost ``ShapValues``
  (symmetric trees), and for scikit-learn a brute-force path-dependent Shapley over all feature subsets whose
  routing is the library's own (``apply``; a HistGradientBoosting predictor whose leaf values are node ids);
- the sum of the values plus the expected value against the library's raw prediction;
- interaction values: XGBoost ``pred_interactions``, CatBoost ``ShapInteractionValues``, brute force (LightGBM routes
  through ``pred_leaf``, scikit-learn through ``apply``);
- interventional values (raw, and ``model_output="probability"`` for binary classifiers): brute force over all
  subsets of the library's raw prediction on hybrid rows of a small background.

Refusals. Where the library refuses an input value, the reference is the library's answer on the nearest input it
accepts that takes the same branch at every split of the model (checked against the thresholds of the library's
dump, with the library's own comparison); hitml must give those values or raise the library's exception type. Where
no such input exists, hitml must raise (XGBoost's ``inplace_predict``, which reads any value, still checks the sum).
The rules, with their sources:

- XGBoost: ``DMatrix`` refuses a value whose float32 cast is infinite unless ``missing`` is that value
  (src/data/data.cc, the ``valid`` check: "Input data contains `inf` or a value too large, while `missing` is not
  set"); ``inplace_predict`` has no such check. A split sends ``x < split_condition`` left, in float32
  (include/xgboost/tree_model.h, ``RegTree::GetNext``), NaN to the default child.
- scikit-learn trees: ``check_array`` on float32 refuses inf and values beyond float32 (sklearn/utils/validation.py,
  ``_assert_all_finite``); ``x <= threshold`` goes left (sklearn/tree/_tree.pyx, ``apply_dense``).
  GradientBoosting refuses NaN (no missing-value rule: no same-branch input exists).
- LightGBM, HistGradientBoosting and CatBoost read every value.

``configs(n)`` draws configurations; ``run(cfg, backend)`` builds, explains and checks one and returns a
:class:`Result` (its ``disagreements`` empty when hitml agrees with the library).
"""
from __future__ import annotations

import itertools
import json
import math
import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

FLT_MAX = float(np.finfo(np.float32).max)
LGB_ZERO = float(np.float32(1e-35))  # LightGBM's kZeroThreshold (a float): 1.0000000180025095e-35
FLT_HALFWAY = 3.4028235677973366e38  # float64 midpoint of FLT_MAX and the next float32: rounds to inf
N_TRAIN = 160
FAMILIES = ("xgboost", "lightgbm", "sklearn", "catboost")
FORMS = ("f64", "f32", "frame")
SEED = 20261201


def _up64(v: float) -> float:
    with np.errstate(over="ignore"):
        return float(np.nextafter(v, np.inf))


def _down64(v: float) -> float:
    with np.errstate(over="ignore"):
        return float(np.nextafter(v, -np.inf))


def _up32(v: float) -> float:
    with np.errstate(over="ignore"):
        return float(np.nextafter(np.float32(v), np.float32(np.inf)))


def _down32(v: float) -> float:
    with np.errstate(over="ignore"):
        return float(np.nextafter(np.float32(v), np.float32(-np.inf)))


# (tag, value): near zero, subnormal, signed zero, NaN, huge, float32's edge and beyond
HOSTILE: list[tuple[str, float]] = [
    ("tiny", 1e-35), ("tiny", -1e-35), ("tiny", 5e-36), ("tiny", -1e-36), ("tiny", 1e-38), ("tiny", 2e-35),
    ("kzero", LGB_ZERO), ("kzero", -LGB_ZERO), ("kzero64+", _up64(LGB_ZERO)), ("kzero64-", _down64(LGB_ZERO)),
    ("kzero32+", _up32(LGB_ZERO)), ("kzero32-", _down32(LGB_ZERO)), ("kzero64+", -_up64(LGB_ZERO)),
    ("sub32", 1e-40), ("sub32", -1e-42), ("sub32", 1.401298464324817e-45), ("sub32", float(np.float32(-3e-39))),
    ("sub64", 5e-324), ("sub64", -1e-310), ("sub64", 2e-308),
    ("negzero", -0.0), ("zero", 0.0), ("nan", float("nan")),
    ("inf", float("inf")), ("inf", float("-inf")), ("1e300", 1e300), ("1e300", -1e300),
    ("fltmax", 3.4028235e38), ("fltmax", -3.4028235e38), ("fltmax", FLT_MAX), ("fltmax", -FLT_MAX),
    ("fltmax64+", _up64(FLT_MAX)), ("halfway", FLT_HALFWAY), ("halfway", -FLT_HALFWAY),
    ("beyond32", 3.4028236e38), ("beyond32", -3.4028236e38),
]


def configs(n: int, seed: int = SEED) -> list[dict]:
    """``n`` seeded configurations cycling through the four libraries (every option of each drawn)."""
    rng = np.random.default_rng(seed)
    out = []

    def pick(values):
        return values[int(rng.integers(len(values)))]

    for i in range(n):
        fam = FAMILIES[i % 4]
        cfg: dict[str, Any] = dict(index=i, family=fam, seed=int(rng.integers(1 << 30)), m=int(rng.integers(3, 7)),
                                   trees=int(rng.integers(1, 5)), depth=int(rng.integers(1, 5)),
                                   objective=("reg", "binary", "multi")[(i // 4) % 3],
                                   inter_form=FORMS[(i // 12) % 3], int_form=FORMS[(i // 36) % 3])
        if fam == "xgboost":
            cfg["method"] = ("hist", "exact", "approx")[(i // 4) % 9 // 3]
        elif fam == "lightgbm":
            cfg.update(use_missing=bool(rng.random() < 0.7), zero_as_missing=bool(rng.random() < 0.4),
                       leaves=int(rng.integers(2, 13)))
        elif fam == "sklearn":
            cfg["kind"] = ("dt", "rf", "et", "gb", "hgb")[(i // 12) % 5]
        else:
            cfg.update(grow=pick(["SymmetricTree", "Depthwise"]), nan_mode=pick(["Min", "Max"]))
            cfg["depth"] = min(cfg["depth"], 3)
        out.append(cfg)
    return out


# -- training data -------------------------------------------------------------------------------------------------
def _train(cfg: dict, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Columns of near-zero, huge, normal (with NaN) and zero-mass values; a target that splits on each."""
    n, m, fam = N_TRAIN, cfg["m"], cfg["family"]
    wide = fam in ("lightgbm", "catboost") or cfg.get("kind") == "hgb"   # reads values beyond float32
    nan = cfg.get("kind") != "gb"                                          # GradientBoosting refuses NaN
    X = np.empty((n, m))
    for j in range(m):
        kind = j % 4
        if kind == 0:   # near zero: both sides of 1e-35 and of float32's subnormal range
            mag = 10.0 ** rng.uniform(-45, -30, size=n)
            v = np.where(rng.random(n) < 0.5, -mag, mag)
            pts = [0.0, -0.0, LGB_ZERO, -LGB_ZERO, 1e-35, 1e-40, -1e-40, 1.401298464324817e-45]
            if wide:
                pts += [5e-324, -1e-310]
            v = np.where(rng.random(n) < 0.35, rng.choice(pts, size=n), v)
        elif kind == 1:  # huge: up to float32's edge, beyond it where the library reads float64
            mag = np.minimum(10.0 ** rng.uniform(25, 38.6, size=n), FLT_MAX)
            v = np.where(rng.random(n) < 0.5, -mag, mag)
            pts = [FLT_MAX, -FLT_MAX, 3e38, -3e38] + ([1e300, -1e300, np.inf, -np.inf] if wide else [])
            v = np.where(rng.random(n) < 0.3, rng.choice(pts, size=n), v)
        elif kind == 2:
            v = rng.normal(size=n)
        else:            # point mass at zero (LightGBM's zero-as-missing), with near-zero neighbours
            v = np.where(rng.random(n) < 0.5, rng.choice([0.0, -0.0, 1e-36, -2e-35, 3e-35], size=n),
                         rng.normal(size=n))
        if nan and kind != 1:
            v[rng.random(n) < 0.08] = np.nan
        X[:, j] = v
    R = pd.DataFrame(X).rank(pct=True).fillna(0.5).to_numpy() - 0.5
    coef = rng.uniform(0.5, 2.0, size=m)
    y = (np.floor(R * 4) / 4) @ coef + 2 * R[:, 0] * R[:, 1] + 0.05 * rng.normal(size=n)
    # missing values with an effect of their own: splits that part NaN from every number (LightGBM's threshold is
    # then its last bin's upper bound, +inf; scikit-learn's is inf)
    y = y + 1.5 * np.isnan(X[:, min(2, m - 1)])
    return X, y


def _classes(y: np.ndarray, k: int) -> np.ndarray:
    return np.digitize(y, np.quantile(y, np.linspace(0, 1, k + 1)[1:-1]))


def _target(cfg: dict, y: np.ndarray) -> np.ndarray:
    return y if cfg["objective"] == "reg" else (y > np.median(y)).astype(int) if cfg["objective"] == "binary" \
        else _classes(y, 3)


# -- the library's view of the model -------------------------------------------------------------------------------
@dataclass
class LeafTree:
    """One tree for the brute-force path-dependent game: its leaves' paths (features and cover fractions, from the
    library's tree arrays), a training row reaching each leaf, the library's prediction of the tree on that row, and
    the library's own routing (rows -> leaf id)."""

    leaves: np.ndarray                      # leaf ids as ``route`` returns them
    feats: list[np.ndarray]                 # per leaf: the split features on its path
    fracs: list[np.ndarray]                 # per leaf: cover(child on the path) / cover(node)
    witness: np.ndarray                     # (n_leaves, M)
    values: np.ndarray                      # (n_leaves, K)
    route: Callable[[np.ndarray], np.ndarray]


@dataclass
class Lib:
    """A fitted model and the library's own answers."""

    family: str
    model: Any
    K: int
    raw: Callable[[Any], np.ndarray]                       # (n, K): the library's raw prediction
    thresholds: dict[int, np.ndarray]                      # feature -> thresholds from the library's dump
    error: type = Exception                                # the library's exception type for refused input
    native: Callable[[Any], np.ndarray] | None = None      # (n, M+1, K)
    native_inter: Callable[[Any], np.ndarray] | None = None  # (n, M+1, M+1, K)
    native_rtol: float = 1e-6
    refused_value: Callable[[np.ndarray], np.ndarray] | None = None  # values -> bool: the library refuses them
    goes_left: Callable[[float, float], bool] | None = None  # the library's split rule (for substitution)
    raw_any: Callable[[Any], np.ndarray] | None = None     # a raw prediction that reads refused values too
    game: list[LeafTree] | None = None                     # brute-force path-dependent game
    probability: bool = False                              # binary: model_output="probability" applies
    refusal: str = ""                                      # the library's rule for the values it refuses
    unavailable: list[str] = field(default_factory=list)


def _as_nk(a: Any, n: int) -> np.ndarray:
    return np.asarray(a, dtype=np.float64).reshape(n, -1)


def _native3(c: np.ndarray) -> np.ndarray:
    c = np.asarray(c, dtype=np.float64)
    return c[..., None] if c.ndim == 2 else np.moveaxis(c, 1, -1)


def _native4(c: np.ndarray) -> np.ndarray:
    c = np.asarray(c, dtype=np.float64)
    return c[..., None] if c.ndim == 3 else np.moveaxis(c, 1, -1)


def _thresholds(pairs: list[tuple[int, float]]) -> dict[int, np.ndarray]:
    out: dict[int, list] = {}
    for f, t in pairs:
        out.setdefault(int(f), []).append(float(t))
    return {f: np.unique(np.asarray(v)) for f, v in out.items()}


def _beyond32(values: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return np.isinf(np.asarray(values, dtype=np.float64).astype(np.float32))


def _xgboost(cfg: dict, X: np.ndarray, y: np.ndarray) -> Lib:
    import xgboost as xgb

    p = dict(n_estimators=cfg["trees"], max_depth=cfg["depth"], learning_rate=0.5, n_jobs=1,
             tree_method=cfg["method"], random_state=cfg["seed"] % 1000, min_child_weight=0.1, base_score=0.3
             if cfg["objective"] == "reg" else None)
    cls = xgb.XGBRegressor if cfg["objective"] == "reg" else xgb.XGBClassifier
    model = cls(**p).fit(X, _target(cfg, y))
    booster = model.get_booster()
    K = 3 if cfg["objective"] == "multi" else 1
    trees = json.loads(booster.save_raw("json"))["learner"]["gradient_booster"]["model"]["trees"]
    pairs = [(f, t) for tr in trees for f, t, lc in zip(tr["split_indices"], tr["split_conditions"],
                                                        tr["left_children"]) if lc != -1]

    def dm(A):
        return xgb.DMatrix(A)

    def raw_any(A):  # inplace_predict reads inf (no DMatrix validity check)
        return _as_nk(booster.inplace_predict(A, predict_type="margin"), len(A))

    def goes_left(x, t):
        return bool(np.float32(x) < np.float32(t))

    return Lib("xgboost", model, K, raw=lambda A: _as_nk(booster.predict(dm(A), output_margin=True), len(A)),
               thresholds=_thresholds(pairs), error=xgb.core.XGBoostError,
               native=lambda A: _native3(booster.predict(dm(A), pred_contribs=True)),
               native_inter=lambda A: _native4(booster.predict(dm(A), pred_interactions=True)), native_rtol=2e-5,
               refused_value=_beyond32, goes_left=goes_left, raw_any=raw_any,
               probability=cfg["objective"] == "binary",
               refusal="XGBoost DMatrix refuses a value whose float32 cast is inf (data.cc valid check)")


def _tree_leaves(left: np.ndarray, right: np.ndarray, feature: np.ndarray, cover: np.ndarray):
    """``{leaf: (features, fractions)}`` of every root-to-leaf path of a tree in array form."""
    out = {}
    stack = [(0, [], [])]
    while stack:
        node, feats, fracs = stack.pop()
        if left[node] < 0:
            out[node] = (np.asarray(feats, dtype=np.int64), np.asarray(fracs, dtype=np.float64))
            continue
        for child in (left[node], right[node]):
            stack.append((child, feats + [feature[node]], fracs + [cover[child] / cover[node]]))
    return out


def _leaf_tree(paths: dict, route: Callable, train: np.ndarray, predict: Callable, K: int, k: int | None):
    """A :class:`LeafTree`; None where some leaf is reached by no training row (no witness)."""
    leaf_of = route(train)
    leaves = np.asarray(sorted(paths))
    wit = []
    for leaf in leaves:
        hit = np.flatnonzero(leaf_of == leaf)
        if not hit.size:
            return None
        wit.append(train[hit[0]])
    W = np.asarray(wit)
    v = np.asarray(predict(W), dtype=np.float64).reshape(len(W), -1)
    if k is not None:  # a tree of one output among K
        full = np.zeros((len(W), K))
        full[:, k] = v[:, 0]
        v = full
    return LeafTree(leaves, [paths[i][0] for i in leaves], [paths[i][1] for i in leaves], W, v, route)


def _lightgbm(cfg: dict, X: np.ndarray, y: np.ndarray) -> Lib:
    import lightgbm as lgb

    p = dict(n_estimators=cfg["trees"], num_leaves=cfg["leaves"], min_child_samples=3, verbose=-1, n_jobs=1,
             random_state=cfg["seed"] % 1000, use_missing=cfg["use_missing"], zero_as_missing=cfg["zero_as_missing"],
             min_data_in_bin=1)
    obj = cfg["objective"]
    cls = lgb.LGBMRegressor if obj == "reg" else lgb.LGBMClassifier
    model = cls(**p).fit(X, _target(cfg, y))
    booster = model.booster_
    K = 3 if obj == "multi" else 1
    M = X.shape[1]
    pairs = []
    text = booster.model_to_string()
    feats = None
    for line in text.splitlines():
        if line.startswith("split_feature="):
            feats = [int(v) for v in line.split("=", 1)[1].split()]
        elif line.startswith("threshold=") and feats is not None:
            pairs += list(zip(feats, [float(v) for v in line.split("=", 1)[1].split()]))
            feats = None

    def native(A):
        c = booster.predict(A, pred_contrib=True)
        return np.asarray(c).reshape(len(A), K, M + 1).transpose(0, 2, 1)

    lib = Lib("lightgbm", model, K, raw=lambda A: _as_nk(booster.predict(A, raw_score=True), len(A)),
              thresholds=_thresholds(pairs), error=lgb.basic.LightGBMError, native=native, native_rtol=1e-6,
              probability=obj == "binary")
    # the brute-force game: LightGBM's own routing (pred_leaf), its dump's counts as covers
    game = []
    for t, info in enumerate(booster.dump_model()["tree_info"]):
        left, right, feature, cover, leaf_ids = [], [], [], [], {}

        def add(node):
            i = len(left)
            left.append(-1), right.append(-1), feature.append(-1)
            if "leaf_index" in node or "split_index" not in node:
                cover.append(node.get("leaf_count", 0))
                leaf_ids[i] = node.get("leaf_index", 0)
                return i
            cover.append(node["internal_count"])
            feature[i] = node["split_feature"]
            left[i] = add(node["left_child"])
            right[i] = add(node["right_child"])
            return i

        add(info["tree_structure"])
        paths = _tree_leaves(np.asarray(left), np.asarray(right), np.asarray(feature), np.asarray(cover, float))
        paths = {leaf_ids[node]: v for node, v in paths.items()}

        def route(A, t=t):
            return np.asarray(booster.predict(A, pred_leaf=True)).reshape(len(A), -1)[:, t]

        def predict(A, t=t):
            r = np.asarray(booster.predict(A, raw_score=True, start_iteration=t // K, num_iteration=1))
            return r.reshape(len(A), -1)[:, t % K]

        lt = _leaf_tree(paths, route, X, predict, K, t % K if K > 1 else None)
        if lt is None:
            lib.unavailable.append("lightgbm brute force: a leaf no training row reaches")
            return lib
        game.append(lt)
    lib.game = game
    return lib


def _sklearn(cfg: dict, X: np.ndarray, y: np.ndarray) -> Lib:
    from sklearn import ensemble, tree

    kind, obj = cfg["kind"], cfg["objective"]
    if kind == "gb" and obj == "multi":  # shap (and so hitml) explain binary GradientBoostingClassifier only
        obj = "binary"
        cfg = dict(cfg, objective=obj)
    s, t, d = cfg["seed"] % 1000, cfg["trees"], cfg["depth"]
    target = _target(cfg, y)
    reg = obj == "reg"
    if kind == "dt":
        model = (tree.DecisionTreeRegressor if reg else tree.DecisionTreeClassifier)(max_depth=d, random_state=s)
    elif kind == "rf":
        model = (ensemble.RandomForestRegressor if reg else ensemble.RandomForestClassifier)(
            n_estimators=t, max_depth=d, random_state=s, n_jobs=1)
    elif kind == "et":
        model = (ensemble.ExtraTreesRegressor if reg else ensemble.ExtraTreesClassifier)(
            n_estimators=t, max_depth=d, random_state=s, n_jobs=1)
    elif kind == "gb":
        model = (ensemble.GradientBoostingRegressor if reg else ensemble.GradientBoostingClassifier)(
            n_estimators=t, max_depth=d, random_state=s)
    else:
        model = (ensemble.HistGradientBoostingRegressor if reg else ensemble.HistGradientBoostingClassifier)(
            max_iter=t, max_depth=max(d, 2), random_state=s, min_samples_leaf=3)
    model.fit(X, target)
    n_cls = 1 if reg else len(np.unique(target))
    game: list[LeafTree] = []
    pairs = []
    lib_unavail = []
    if kind == "hgb":
        from sklearn.ensemble._hist_gradient_boosting.predictor import TreePredictor

        K = 1 if n_cls <= 2 else n_cls
        bitsets, f_idx = model._bin_mapper.make_known_categories_bitsets()

        def raw(A):
            return _as_nk(model._raw_predict(np.asarray(A) if not isinstance(A, pd.DataFrame) else A), len(A))

        for preds in model._predictors:
            for k, pred in enumerate(preds):
                nd = pred.nodes
                internal = ~nd["is_leaf"].astype(bool)
                pairs += list(zip(nd["feature_idx"][internal], nd["num_threshold"][internal]))
                ids = nd.copy()
                ids["value"] = np.arange(len(nd))  # the predictor's own routing, its leaves naming themselves
                router = TreePredictor(ids, pred.binned_left_cat_bitsets, pred.raw_left_cat_bitsets)
                left = np.where(internal, nd["left"].astype(np.int64), -1)
                right = np.where(internal, nd["right"].astype(np.int64), -1)
                paths = _tree_leaves(left, right, nd["feature_idx"].astype(np.int64), nd["count"].astype(float))

                def route(A, router=router):
                    return router.predict(np.ascontiguousarray(A, dtype=np.float64), bitsets, f_idx, 1).astype(
                        np.int64)

                def predict(A, pred=pred):
                    return pred.predict(np.ascontiguousarray(A, dtype=np.float64), bitsets, f_idx, 1)

                lt = _leaf_tree(paths, route, X, predict, K, k if K > 1 else None)
                if lt is None:
                    lib_unavail.append("sklearn brute force: a leaf no training row reaches")
                game.append(lt)
        refused = None
        goes_left = None
    else:
        estimators = [model] if kind == "dt" else list(np.ravel(model.estimators_))
        n_est = len(estimators) if kind in ("rf", "et") else 1
        if kind == "gb":
            K = model.estimators_.shape[1]
            lr = model.learning_rate
            raw = (lambda A: _as_nk(model.predict(A), len(A))) if reg else \
                (lambda A: _as_nk(model.decision_function(A), len(A)))
        else:
            K = 1 if reg else n_cls
            raw = (lambda A: _as_nk(model.predict(A), len(A))) if reg else \
                (lambda A: _as_nk(model.predict_proba(A), len(A)))
        for i, est in enumerate(estimators):
            tr = est.tree_
            internal = tr.children_left >= 0
            pairs += list(zip(tr.feature[internal], tr.threshold[internal]))
            paths = _tree_leaves(tr.children_left, tr.children_right, tr.feature,
                                 tr.weighted_n_node_samples.astype(float))
            if kind == "gb":
                k = i % K

                def predict(A, est=est):
                    return est.predict(A) * lr
            else:
                k = None

                def predict(A, est=est):
                    return (est.predict(A) if reg else est.predict_proba(A)) / n_est

            def route(A, est=est):
                return est.apply(np.asarray(A, dtype=np.float64))

            lt = _leaf_tree(paths, route, X, predict, K, k if kind == "gb" and K > 1 else None)
            if lt is None:
                lib_unavail.append("sklearn brute force: a leaf no training row reaches")
            game.append(lt)

        def refused(values):
            out = _beyond32(values)
            return out | np.isnan(values) if kind == "gb" else out

        def goes_left(x, t):
            return bool(np.float32(x) <= t)

    lib = Lib("sklearn", model, K, raw=raw, thresholds=_thresholds(pairs), error=ValueError,
              refused_value=refused, goes_left=goes_left, game=None if lib_unavail else game,
              probability=obj == "binary" and kind in ("gb", "hgb"),
              refusal="scikit-learn check_array refuses inf and values beyond float32" + (
                  " and GradientBoosting NaN" if kind == "gb" else "") + " (validation.py _assert_all_finite)")
    lib.unavailable += lib_unavail
    return lib


def _catboost(cfg: dict, X: np.ndarray, y: np.ndarray) -> Lib:
    import catboost as cb

    obj = cfg["objective"]
    p = dict(iterations=cfg["trees"], depth=cfg["depth"], verbose=0, thread_count=1, random_seed=cfg["seed"] % 1000,
             nan_mode=cfg["nan_mode"], allow_writing_files=False, grow_policy=cfg["grow"], border_count=64)
    if obj == "reg":
        model = cb.CatBoostRegressor(loss_function="RMSE", **p).fit(X, y)
    else:
        model = cb.CatBoostClassifier(loss_function="Logloss" if obj == "binary" else "MultiClass", **p)
        model.fit(X, _target(cfg, y))
    K = 3 if obj == "multi" else 1
    # the model's borders as CatBoost stores them (its JSON writer refuses an infinite border, get_borders does not)
    pairs = [(f, b) for f, borders in model.get_borders().items() for b in borders]

    def pool(A):
        return cb.Pool(A)

    def native(A, kind="ShapValues"):
        c = model.get_feature_importance(data=pool(A), type=kind, thread_count=1)
        return _native3(c) if kind == "ShapValues" else _native4(c)

    symmetric = cfg["grow"] == "SymmetricTree"  # CatBoost's ShapValues are exact TreeSHAP for these only
    return Lib("catboost", model, K,
               raw=lambda A: _as_nk(model.predict(pool(A), prediction_type="RawFormulaVal", thread_count=1), len(A)),
               thresholds=_thresholds(pairs), error=cb.CatBoostError,
               native=native if symmetric else None,
               native_inter=(lambda A: native(A, "ShapInteractionValues")) if symmetric else None,
               native_rtol=1e-5, probability=obj == "binary")


BUILD = {"xgboost": _xgboost, "lightgbm": _lightgbm, "sklearn": _sklearn, "catboost": _catboost}


def build(cfg: dict) -> tuple[Lib, np.ndarray]:
    """The configuration's fitted model and its training rows."""
    rng = np.random.default_rng(cfg["seed"])
    X, y = _train(cfg, rng)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return BUILD[cfg["family"]](cfg, X, y), X


# -- the explained rows --------------------------------------------------------------------------------------------
def threshold_values(t: float) -> list[tuple[str, float]]:
    """A threshold, one float64 ulp either side, its float32 rounding and one float32 ulp either side."""
    t32 = float(np.float32(t)) if abs(t) <= FLT_MAX or math.isinf(t) else math.copysign(math.inf, t)
    out = [("thr", t), ("thr64-", _down64(t)), ("thr64+", _up64(t))]
    if not math.isinf(t32):
        out += [("thr32", t32), ("thr32-", _down32(t32)), ("thr32+", _up32(t32))]
    return [(tag, v) for tag, v in out if not math.isnan(v)]


def rows(lib: Lib, train: np.ndarray, rng: np.random.Generator, cap: int | None = None) -> tuple[np.ndarray, list[str]]:
    """Explained rows (float64) and a tag per row: training rows with one feature set to a threshold value or a
    hostile value, and rows hostile in every feature."""
    M = train.shape[1]
    out, tags = [], []
    base = train[rng.integers(len(train), size=4096)]
    b = 0
    for j in range(M):
        pool = HOSTILE + [tv for t in lib.thresholds.get(j, []) for tv in threshold_values(t)]
        for tag, v in pool:
            r = base[b % len(base)].copy()
            b += 1
            r[j] = v
            out.append(r)
            tags.append(f"{tag}={v!r}@f{j}")
    for _ in range(8):
        r = np.array([HOSTILE[int(rng.integers(len(HOSTILE)))][1] for _ in range(M)])
        out.append(r)
        tags.append("all-hostile")
    for i in range(4):
        out.append(train[i].copy())
        tags.append("train")
    A = np.asarray(out)
    if cap is not None and len(A) > cap:
        keep = np.sort(rng.choice(len(A), size=cap, replace=False))
        A, tags = A[keep], [tags[i] for i in keep]
    return A, tags


def feature_names(lib: Lib, M: int) -> list[str]:
    """Frame columns: the model's own feature names where it stores them (CatBoost and LightGBM name every
    model's features), else f0, f1, ..."""
    if lib.family == "catboost":
        return [str(n) for n in lib.model.feature_names_]
    if lib.family == "lightgbm":
        return list(lib.model.booster_.feature_name())
    return [f"f{j}" for j in range(M)]


def as_form(A: np.ndarray, form: str, names: list[str]) -> Any:
    """The rows as the user passes them: float64 array, float32 array, or a frame (first column float32)."""
    with np.errstate(over="ignore"):
        if form == "f64":
            return A.copy()
        if form == "f32":
            return A.astype(np.float32)
        df = pd.DataFrame(A, columns=names)
        df[names[0]] = df[names[0]].astype(np.float32)
        return df


def _edges(lib: Lib) -> str:
    """The model's non-finite and extreme thresholds, for messages."""
    out = [f"f{j}: {t!r}" for j, ts in lib.thresholds.items() for t in ts if not np.isfinite(t) or abs(t) > 1e300]
    return ", ".join(out) or "all finite"


def _values(X: Any) -> np.ndarray:
    """The numbers the library reads from ``X`` (frames with a float32 column widen exactly)."""
    return np.asarray(X, dtype=np.float64)


def _take(X: Any, keep: np.ndarray) -> Any:
    return X.iloc[keep] if isinstance(X, pd.DataFrame) else X[keep]


# -- references ----------------------------------------------------------------------------------------------------
def substitute(lib: Lib, X: Any) -> tuple[Any, np.ndarray, np.ndarray]:
    """``(X_sub, refused, no_match)``: rows the library refuses, each refused value replaced by the nearest value
    it accepts (+-FLT_MAX) where that takes the same branch at every threshold of its feature; ``no_match`` marks
    rows where some refused value has no such substitute (NaN where the library has no missing rule, an inf beyond
    an inf threshold)."""
    V = _values(X)
    n = len(V)
    if lib.refused_value is None:
        return X, np.zeros(n, bool), np.zeros(n, bool)
    bad = lib.refused_value(V)
    refused = bad.any(1)
    no_match = np.zeros(n, bool)
    if not refused.any():
        return X, refused, no_match
    S = V.copy()
    for i, j in zip(*np.nonzero(bad)):
        v = V[i, j]
        if math.isnan(v):
            no_match[i] = True
            continue
        s = math.copysign(FLT_MAX, v)
        if any(lib.goes_left(v, t) != lib.goes_left(s, t) for t in lib.thresholds.get(j, [])):
            no_match[i] = True
        S[i, j] = s
    if isinstance(X, pd.DataFrame):
        Xs = pd.DataFrame(S, columns=X.columns, index=X.index).astype(X.dtypes.to_dict())
    else:
        Xs = S.astype(X.dtype)
    return Xs, refused, no_match


def _probe_refusal(lib: Lib, X: Any, refused: np.ndarray) -> str | None:
    """The library's own word: it refuses each row marked refused (one probe each) and reads the others."""
    for i in np.flatnonzero(refused)[:6]:
        try:
            lib.raw(_take(X, np.asarray([i])))
        except lib.error:
            continue
        except ValueError:
            continue
        return f"the library reads row {i}, which the harness marks refused"
    return None


_SUBSETS: dict[int, tuple] = {}


def _subsets(M: int):
    if M not in _SUBSETS:
        S = np.asarray(list(itertools.product([0, 1], repeat=M)), dtype=bool)
        idx = {tuple(s): i for i, s in enumerate(S.astype(int))}
        _SUBSETS[M] = (S, idx)
    return _SUBSETS[M]


def path_game(lib: Lib, X: np.ndarray) -> np.ndarray:
    """``v[n, s, K]``: the path-dependent value of every subset s for every row, summed over trees, routed by the
    library: a leaf counts for subset S iff its witness row with x_S put in reaches it (then every split on a
    feature in S on its path sends x that way); splits on other features weigh by cover."""
    n, M = X.shape
    S, _ = _subsets(M)
    v = np.zeros((n, len(S), lib.K))
    for tree in lib.game:
        L = len(tree.leaves)
        Z = np.broadcast_to(tree.witness[None, None], (n, len(S), L, M)).copy()
        mask = np.broadcast_to(S[None, :, None, :], Z.shape)
        Z[mask] = np.broadcast_to(X[:, None, None, :], Z.shape)[mask]
        hit = tree.route(Z.reshape(-1, M)).reshape(n, len(S), L) == tree.leaves[None, None, :]
        w = np.ones((len(S), L))
        for li in range(L):
            out = ~S[:, tree.feats[li]]  # (subsets, path nodes): the node's feature is not in S
            w[:, li] = np.prod(np.where(out, tree.fracs[li][None, :], 1.0), axis=1)
        v += np.einsum("nsl,sl,lk->nsk", hit, w, tree.values)
    return v


def shapley(v: np.ndarray, M: int) -> np.ndarray:
    """Shapley values ``(n, M, K)`` of games ``v[n, s, K]`` over the subsets of :func:`_subsets`."""
    S, idx = _subsets(M)
    phi = np.zeros((v.shape[0], M, v.shape[2]))
    for si, s in enumerate(S.astype(int)):
        size = int(s.sum())
        for j in range(M):
            if s[j]:
                continue
            w = math.factorial(size) * math.factorial(M - size - 1) / math.factorial(M)
            t = list(s)
            t[j] = 1
            phi[:, j] += w * (v[:, idx[tuple(t)]] - v[:, si])
    return phi


def interactions(v: np.ndarray, M: int) -> np.ndarray:
    """Shapley interaction values ``(n, M, M, K)`` as shap defines them (off-diagonal halves, diagonal the rest)."""
    S, idx = _subsets(M)
    out = np.zeros((v.shape[0], M, M, v.shape[2]))
    for i, j in itertools.combinations(range(M), 2):
        acc = 0
        for si, s in enumerate(S.astype(int)):
            if s[i] or s[j]:
                continue
            size = int(s.sum())
            w = math.factorial(size) * math.factorial(M - size - 2) / math.factorial(M - 1)
            a, b, ab = list(s), list(s), list(s)
            a[i] = 1
            b[j] = 1
            ab[i] = ab[j] = 1
            acc = acc + w * (v[:, idx[tuple(ab)]] - v[:, idx[tuple(a)]] - v[:, idx[tuple(b)]] + v[:, si])
        out[:, i, j] = out[:, j, i] = acc / 2
    phi = shapley(v, M)
    for i in range(M):
        out[:, i, i] = phi[:, i] - out[:, i].sum(1) + out[:, i, i]
    return out


def interventional(f: Callable[[np.ndarray], np.ndarray], X: np.ndarray, bg: np.ndarray, probability: bool):
    """Brute-force interventional values over the library's raw prediction ``f`` on hybrid rows (the shap/hitml
    definition of the probability output: each (x, b) pair's values rescaled by (T(f(x)) - T(f(b))) / (f(x) -
    f(b)), T the logistic function; a pair with f(x) == f(b), whose values sum to zero, is left unscaled)."""
    n, M = X.shape
    S, idx = _subsets(M)
    H = np.where(S[None, None], X[:, None, None, :], bg[None, :, None, :]).reshape(-1, M)
    v = np.asarray(f(H), dtype=np.float64).reshape(n * len(bg), len(S), -1)
    phi = shapley(v, M).reshape(n, len(bg), M, -1)
    full, empty = v[:, -1].reshape(n, len(bg), -1), v[:, 0].reshape(n, len(bg), -1)
    if probability:
        def T(a):
            return 1 / (1 + np.exp(-a))

        with np.errstate(invalid="ignore", divide="ignore"):
            scale = np.where(full == empty, 1.0, (T(full) - T(empty)) / (full - empty))
        phi = phi * scale[:, :, None, :]
        empty = T(empty)
    return phi.mean(1), empty[0].mean(0)


# -- the check -----------------------------------------------------------------------------------------------------
@dataclass
class Result:
    """What one configuration found: checks made, refusals (with reasons), disagreements, references missing."""

    cfg: dict
    checks: int = 0
    refusals: list[str] = field(default_factory=list)
    disagreements: list[str] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)
    skipped: str | None = None


def _to_host(a: Any) -> np.ndarray:
    return np.asarray(a.get() if hasattr(a, "get") else a, dtype=np.float64)


def _compare(res: Result, what: str, actual: np.ndarray, expected: np.ndarray, rtol: float, tags: list[str],
             rows_idx: np.ndarray | None = None, rows_of: Any = None) -> None:
    """Record a disagreement naming the worst rows' tags (relative to max(1, |expected|))."""
    res.checks += 1
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if actual.shape != expected.shape:
        res.disagreements.append(f"{what}: shape {actual.shape} != {expected.shape}")
        return
    if not actual.size:
        return
    scale = max(1.0, float(np.nanmax(np.abs(expected))) if np.isfinite(expected).any() else 1.0)
    with np.errstate(invalid="ignore"):
        err = np.abs(actual - expected).reshape(len(actual), -1)
    err = np.where(np.isnan(err), np.where(np.isnan(actual) == np.isnan(expected), 0.0, np.inf).reshape(err.shape),
                   err)
    row_err = err.max(1)
    bad = np.flatnonzero(row_err > rtol * scale)
    if bad.size:
        idx = rows_idx if rows_idx is not None else np.arange(len(actual))
        worst = bad[np.argsort(-row_err[bad])][:4]
        names = "; ".join(f"{tags[idx[i]]} ({row_err[i]:.3g})" for i in worst)
        row = "" if rows_of is None else " worst row " + np.array2string(
            _values(_take(rows_of, np.asarray([idx[worst[0]]])))[0], precision=17, separator=",",
            max_line_width=10_000)
        res.disagreements.append(f"{what}: {bad.size}/{len(actual)} rows differ > {rtol:g} x {scale:.3g}: "
                                 f"{names};{row}")


def _phi3(values: Any, K: int) -> np.ndarray:
    v = _to_host(values)
    return v if v.ndim == 3 else v[..., None]


def _phi4(values: Any) -> np.ndarray:
    v = _to_host(values)
    return v if v.ndim == 4 else v[..., None]


def _ev(ex) -> np.ndarray:
    return np.atleast_1d(_to_host(np.asarray(ex.expected_value, dtype=object).astype(np.float64)
                                  if isinstance(ex.expected_value, list) else ex.expected_value))


def _explain(res: Result, lib: Lib, ex, X: Any, refused: np.ndarray, what: str, call: str = "shap_values"):
    """hitml's answer on X: ``(values, rows)``; where it raises on rows the library refuses, its answer on the rest
    (a refusal), and where it raises on rows the library reads, a disagreement."""
    fn = getattr(ex, call)
    try:
        return fn(X), np.arange(len(X))
    except Exception as exc:  # any exception is an outcome to classify against the library's
        if not refused.any():
            res.disagreements.append(f"{what}: hitml raised {type(exc).__name__}: {str(exc)[:120]}; the library "
                                     "reads every row")
            if call == "shap_values":  # the values behind a failed additivity check, to name the rows that differ
                try:
                    return fn(X, check_additivity=False), np.arange(len(X))
                except Exception:  # already recorded as a disagreement
                    return None, None
            return None, None
        if not isinstance(exc, lib.error):
            res.disagreements.append(f"{what}: hitml raised {type(exc).__name__} on rows the library refuses with "
                                     f"{lib.error.__name__}: {str(exc)[:160]}")
        else:
            res.refusals.append(f"{what}: hitml raised {type(exc).__name__} on the {int(refused.sum())} refused "
                                "rows (the library's type; the other rows checked)")
        keep = np.flatnonzero(~refused)
        try:
            return fn(_take(X, keep)), keep
        except Exception as exc2:  # classified as above
            res.disagreements.append(f"{what}: hitml raised {type(exc2).__name__} on the rows the library reads: "
                                     f"{str(exc2)[:200]}")
            return None, None


def run(cfg: dict, backend: str = "cpu", compare_cpu: bool = False, cap: int | None = None,
        bf_rows: int = 12) -> Result:
    """Build, explain on every form, check against the library. ``compare_cpu``: also the CPU engine's values on
    the same inputs (1e-9 of scale), for the GPU backend. ``cap`` limits the explained rows, ``bf_rows`` the rows of
    each brute-force check."""
    from hitml import shap_ext

    res = Result(cfg)
    try:
        lib, train = build(cfg)
    except ImportError as exc:
        res.skipped = f"ImportError: {exc}"
        return res
    res.unavailable += lib.unavailable
    rng = np.random.default_rng(cfg["seed"] + 1)
    A, tags = rows(lib, train, rng, cap)
    M = A.shape[1]
    names = feature_names(lib, M)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ex = shap_ext.TreeExplainer(lib.model, backend=backend)
            cpu = shap_ext.TreeExplainer(lib.model, backend="cpu") if compare_cpu else None
        except Exception as exc:  # the library explains this model: any exception disagrees
            res.disagreements.append(f"TreeExplainer(model) raised {type(exc).__name__}: {str(exc)[:200]}; the "
                                     f"library predicts with this model (thresholds {_edges(lib)})")
            return res
        for form in FORMS:
            _check_form(res, lib, ex, cpu, as_form(A, form, names), form, tags, bf_rows, rng)
        _check_interventional(res, lib, train, as_form(A, cfg["int_form"], names), cfg["int_form"], tags,
                                  backend, compare_cpu, rng)
    return res


def _check_form(res: Result, lib: Lib, ex, cpu, X: Any, form: str, tags: list[str], bf_rows: int,
                rng: np.random.Generator) -> None:
    what = f"{form}"
    Xs, refused, no_match = substitute(lib, X)
    probe = _probe_refusal(lib, X, refused)
    if probe:
        res.disagreements.append(f"harness: {probe}")
    if refused.any():
        kinds = sorted({tags[i].split("=")[0] for i in np.flatnonzero(refused)})
        res.refusals.append(f"{form}: {lib.refusal}: {int(refused.sum())} rows ({', '.join(kinds)}), "
                            f"{int(no_match.sum())} with no same-branch input")
    values, kept = _explain(res, lib, ex, X, refused, f"{what} shap_values")
    if values is None:
        return
    if refused[kept].any():
        res.refusals.append(f"{form}: hitml answered {int(refused[kept].sum())} refused rows (checked against the "
                            "library on the same-branch input, or by their sum where none exists)")
    phi = _phi3(values, lib.K)
    ev = _ev(ex)
    # rows compared: those the library reads, or reads once substituted with the same branches
    ok = ~no_match[kept]
    idx = kept[ok]
    Xk = _take(Xs, idx)
    if cpu is not None:
        ref = _phi3(cpu.shap_values(_take(X, kept), check_additivity=False), lib.K)
        _compare(res, f"{what} GPU vs CPU engine", phi, ref, 1e-9, tags, kept, X)
    if no_match[kept].any():
        bad = kept[~ok]
        if lib.raw_any is not None:
            raw = lib.raw_any(_take(X, bad))
            _compare(res, f"{what} sum vs inplace_predict (no same-branch input)", phi[~ok].sum(1) + ev, raw,
                     1e-5, tags, bad, X)
            res.refusals.append(f"{form}: no same-branch input for {len(bad)} rows (an infinite split condition): "
                                "their sum checked against inplace_predict, which reads inf")
        else:
            res.disagreements.append(f"{what}: hitml returned values for {len(bad)} rows that the library refuses "
                                     f"and no same-branch input exists for ({tags[bad[0]]})")
    if not len(idx):
        return
    phi_k = phi[ok]
    raw = lib.raw(Xk)
    _compare(res, f"{what} sum vs the library's raw prediction", phi_k.sum(1) + ev, raw, 1e-5 if lib.family in (
        "xgboost", "catboost") else 1e-6, tags, idx, X)
    if lib.native is not None:
        nat = lib.native(Xk)
        _compare(res, f"{what} vs native contributions", phi_k, nat[:, :-1], lib.native_rtol, tags, idx, X)
        _compare(res, f"{what} expected value vs native bias", ev, nat[0, -1], lib.native_rtol, ["bias"])
    sub = np.sort(rng.choice(len(idx), size=min(bf_rows, len(idx)), replace=False))
    if lib.game is not None:
        V = _values(Xk)[sub]
        v = path_game(lib, V)
        bf = shapley(v, V.shape[1])
        _compare(res, f"{what} vs brute-force path-dependent", phi_k[sub], bf, 1e-7, tags, idx[sub], X)
        # the game's own check: v(all features) is the library's prediction less a constant offset
        offset = raw[sub] - v[:, -1]
        if np.ptp(offset, axis=0).max() > 1e-7 * max(1.0, np.abs(raw).max()):
            res.disagreements.append(f"harness: {form} brute-force game does not reproduce the library's prediction")
        _compare(res, f"{what} expected value vs brute-force", ev, v[0, 0] + offset[0], 1e-7, ["bias"])
    elif lib.native is None:
        res.unavailable.append(f"{form}: no per-feature reference (additivity only)")
    if form != res.cfg["inter_form"]:
        return
    # interactions, on a few rows the library reads
    sub = sub[: min(8, len(sub))]
    Xi = _take(X, idx[sub])
    inter, _ = _explain(res, lib, ex, Xi, np.zeros(len(sub), bool), f"{what} interactions",
                        "shap_interaction_values")
    if inter is None:
        return
    I4 = _phi4(inter)
    if cpu is not None:
        _compare(res, f"{what} GPU vs CPU interactions", I4, _phi4(cpu.shap_interaction_values(Xi)), 1e-9, tags,
                 idx[sub], X)
    if lib.native_inter is not None:
        nat = lib.native_inter(_take(Xs, idx[sub]))
        _compare(res, f"{what} interactions vs native", I4, nat[:, :-1, :-1], lib.native_rtol, tags, idx[sub], X)
    elif lib.game is not None:
        V = _values(_take(Xs, idx[sub]))
        ref = interactions(path_game(lib, V), V.shape[1])
        _compare(res, f"{what} interactions vs brute force", I4, ref, 1e-7, tags, idx[sub], X)
    else:
        _compare(res, f"{what} interactions sum to the values", I4.sum(2), phi_k[sub], 1e-9, tags, idx[sub], X)


def _check_interventional(res: Result, lib: Lib, train: np.ndarray, X: Any, form: str, tags: list[str],
                          backend: str, compare_cpu: bool, rng: np.random.Generator) -> None:
    from hitml import shap_ext

    Xs, refused, no_match = substitute(lib, X)
    ok = np.flatnonzero(~no_match)
    pick = np.sort(rng.choice(ok, size=min(6, len(ok)), replace=False))
    # a background of training rows and one hostile row the library reads
    hostile = np.flatnonzero(~refused)
    bg = np.vstack([train[:3], _values(X)[hostile[int(rng.integers(len(hostile)))]][None]])
    bg_form = pd.DataFrame(bg, columns=X.columns) if isinstance(X, pd.DataFrame) else bg.astype(X.dtype)
    Xp = _take(X, pick)
    V = _values(_take(Xs, pick))
    f = lib.raw_any if lib.raw_any is not None else lib.raw
    outputs = ["raw"] + (["probability"] if lib.probability else [])
    for output in outputs:
        what = f"{form} interventional {output}"
        try:
            ex = shap_ext.TreeExplainer(lib.model, bg_form, model_output=output,
                                        feature_perturbation="interventional", backend=backend)
        except NotImplementedError as exc:
            if "borders at ±inf" not in str(exc):
                raise
            # CatBoost's JSON export writes no border at ±inf, so only CatBoost's own path-dependent SHAP can
            # explain the model: hitml refuses background data, naming why (docs/design/readers.md)
            res.refusals.append("catboost: hitml refuses background data for a model with a border at ±inf "
                                "(CatBoost's JSON export cannot write it)")
            return
        values, kept = _explain(res, lib, ex, Xp, refused[pick], what)
        if values is None:
            continue
        phi = _phi3(values, lib.K)
        ref_phi, ref_ev = interventional(f, V[kept] if lib.raw_any is None else _values(Xp)[kept],
                                         _values(bg_form), output == "probability")
        _compare(res, what, phi, ref_phi, 1e-6, tags, pick[kept], X)
        _compare(res, f"{what} expected value", _ev(ex), ref_ev, 1e-6, ["bias"])
        if compare_cpu:
            cpu = shap_ext.TreeExplainer(lib.model, bg_form, model_output=output,
                                         feature_perturbation="interventional", backend="cpu")
            _compare(res, f"{what} GPU vs CPU engine", phi, _phi3(cpu.shap_values(_take(Xp, kept)), lib.K), 1e-9,
                     tags, pick[kept], X)


# -- CatBoost models saved as JSON (for a machine without catboost) ----------------------------------------------
SAVED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "catboost")


def saved_catboost() -> list[str]:
    """Names of the CatBoost models saved under tests/data/catboost (JSON, with CatBoost's own references)."""
    if not os.path.isdir(SAVED):
        return []
    return sorted(f[:-5] for f in os.listdir(SAVED) if f.endswith(".json")
                  and os.path.exists(os.path.join(SAVED, f[:-5] + ".npz")))


def run_saved(name: str, backend: str = "cpu", compare_cpu: bool = False) -> Result:
    """A saved CatBoost model (``load_catboost_json``) explained on its stored rows as float64, float32 and a frame,
    against CatBoost's stored references: ``ShapValues`` / ``ShapInteractionValues`` (symmetric trees, where they
    are exact TreeSHAP) and ``RawFormulaVal`` (every model)."""
    from hitml import shap_ext

    res = Result({"family": "catboost", "saved": name})
    model = shap_ext.load_catboost_json(os.path.join(SAVED, name + ".json"))
    d = np.load(os.path.join(SAVED, name + ".npz"))
    A = np.asarray(d["X"], dtype=np.float64)
    raw = np.asarray(d["raw"], dtype=np.float64).reshape(len(A), -1)
    K = raw.shape[1]
    exact = name.startswith("symmetric")
    nat = _native3(d["shap"]) if exact else None
    tags = [f"{name} row {i}" for i in range(len(A))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex = shap_ext.TreeExplainer(model, backend=backend)
        cpu = shap_ext.TreeExplainer(model, backend="cpu") if compare_cpu else None
        for form in FORMS:
            X = as_form(A, form, [f"f{j}" for j in range(A.shape[1])])
            values, kept = _explain(res, Lib("catboost", model, K, raw=lambda B: raw, thresholds={}),
                                    ex, X, np.zeros(len(A), bool), f"{name} {form} shap_values")
            if values is None:
                continue
            phi = _phi3(values, K)
            ev = _ev(ex)
            _compare(res, f"{name} {form} sum vs CatBoost's RawFormulaVal", phi.sum(1) + ev, raw, 1e-5, tags,
                     kept, X)
            if nat is not None:
                _compare(res, f"{name} {form} vs CatBoost's ShapValues", phi, nat[:, :-1], 1e-5, tags, kept, X)
            if cpu is not None:
                _compare(res, f"{name} {form} GPU vs CPU engine", phi,
                         _phi3(cpu.shap_values(X, check_additivity=False), K), 1e-9, tags, kept, X)
            if form == "f64" and exact and "inter" in d.files:
                inter = _phi4(ex.shap_interaction_values(X))
                _compare(res, f"{name} interactions vs CatBoost's ShapInteractionValues", inter,
                         _native4(d["inter"])[:, :-1, :-1], 1e-5, tags, kept, X)
    return res


# -- the known disagreement classes (issue #39), for the runner's report ------------------------------------------
def classify(family: str, backend: str, message: str) -> str:
    """The known class a disagreement message most likely belongs to, from the library, the backend and the values
    of the worst row that differs; "other" for anything else (to be investigated)."""
    row = np.array([])
    if "worst row [" in message:
        text = message.split("worst row [", 1)[1].split("]", 1)[0]
        row = np.array([float(v) for v in text.replace(" ", "").split(",") if v])
    with np.errstate(invalid="ignore"):
        near_zero = bool(((np.abs(row) <= LGB_ZERO) & (row != 0)).any())
        sub32 = bool(((np.abs(row) < np.finfo(np.float32).tiny) & (row != 0)).any())
        infinite = bool(np.isinf(row).any() or (np.abs(row) > FLT_MAX).any())
    if "worst row [" not in message and family in ("lightgbm", "xgboost"):
        return "no row named (an additivity check that raised, an expected value): see the configuration's other lines"
    if backend == "gpu" and sub32:
        return "(4) GPU float32 subnormals flushed to zero"
    huge = bool((np.abs(row) >= 1e300).any())
    if family == "lightgbm" and near_zero and huge:
        return "(2) or (3) LightGBM: the row holds both a near-zero and an infinite value"
    if family == "lightgbm" and near_zero:
        return "(2) LightGBM reads |x| <= 1.0000000180025095e-35 as 0.0 on every feature"
    if family == "lightgbm" and (huge or "ExplainerError" in message):
        return "(3) LightGBM +inf thresholds capped at 1e300 by dump_model"
    if family == "catboost" and "TreeExplainer(model) raised CatBoostError" in message and "inf" in message:
        return "(A) CatBoost model with an infinite border: hitml cannot read it (CatBoost's JSON writer refuses inf)"
    if family == "catboost" and (infinite or "ExplainerError" in message):
        return "(5) CatBoost +-inf replaced by +-FLT_MAX in the additivity check's reference"
    if family in ("xgboost", "sklearn") and (np.isneginf(row).any() or (row < -FLT_MAX).any()):
        return ("(B) a split at threshold -inf (XGBoost exact/approx, HistGradientBoosting): x = -inf satisfies both "
                "children's path elements in hitml's PathSet (lower == -inf read as no bound)")
    return "other"
