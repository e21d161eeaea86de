"""Which route a model takes (shap's parser, a library dump, CatBoost's own SHAP) and the refusals shap makes."""
from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
from ._categories import hist_gradient_boosting_layout
from ._catboost import CatBoostModel, NotParseable, is_catboost
from ._compat import InvalidModelError, TreeEnsemble
from ._native import LibraryEnsemble
from ._sparkml import SparkMLModel, is_spark_ml_model
from ._treelite import as_treelite_model, is_treelite_like

__all__ = ["ROUTES", "build_ensemble", "convert_model"]

ROUTES = ("shap-parser", "catboost-json", "treelite-json", "catboost-native", "spark-ml")


def _is_sklearn(model: Any) -> bool:
    return type(model).__module__.split(".")[0] == "sklearn"


def _xgboost_booster(model: Any) -> Any | None:
    if type(model).__module__.split(".")[0] != "xgboost":
        return None
    from sklearn.exceptions import NotFittedError  # what XGBoost's sklearn wrapper raises unfitted

    try:
        return model.get_booster() if hasattr(model, "get_booster") else model
    except NotFittedError:  # an unfitted sklearn wrapper: shap's own error follows
        return None


def _refuse_xgboost(booster: Any) -> None:
    """gblinear and vector-leaf XGBoost models have no trees a TreeSHAP can explain (shap fails on both)."""
    cfg = json.loads(booster.save_config())
    learner = cfg.get("learner", {})
    name = learner.get("gradient_booster", {}).get("name", "")
    if name == "gblinear":
        raise InvalidModelError("XGBoost booster='gblinear' is a linear model, not trees: TreeExplainer cannot "
                                "explain it (use shap.LinearExplainer on its coefficients, or booster='gbtree')")
    strategy = learner.get("learner_train_param", {}).get("multi_strategy")
    if strategy == "multi_output_tree":
        raise InvalidModelError("XGBoost vector-leaf trees (multi_strategy='multi_output_tree') are not supported "
                                "by TreeExplainer (shap refuses them too); train with "
                                "multi_strategy='one_output_per_tree'")


def convert_model(model: Any, has_data: bool) -> tuple[Any, Any, str]:
    """``(model_for_shap, converted, route)``: what shap's TreeEnsemble parses, the converted model (or None)."""
    if is_spark_ml_model(model):  # read from the JVM model's nodes (shap raises on these models)
        conv = SparkMLModel(model)
        if not conv.covers_known and not has_data:
            raise ValueError(f"this {conv.model_name} keeps no node statistics (impurityStats), which "
                             "feature_perturbation='tree_path_dependent' needs; pass background data")
        return conv.shap_dict, conv, "spark-ml"
    if is_treelite_like(model):
        conv = as_treelite_model(model)
        return conv.shap_dict, conv, "treelite-json"
    if isinstance(model, CatBoostModel):  # read from CatBoost's JSON alone (load_catboost_json)
        return model.shap_dict, model, "catboost-json"
    if is_catboost(model):
        try:
            conv = CatBoostModel(model)
        except NotParseable as why:
            if has_data:
                raise NotImplementedError(
                    f"CatBoost model with {why}: only CatBoost's own path-dependent ShapValues can explain it, so "
                    "background data (feature_perturbation='interventional') is not supported; leave data out"
                ) from None
            return model, None, "catboost-native"
        return conv.shap_dict, conv, "catboost-json"
    booster = _xgboost_booster(model)
    if booster is not None:
        _refuse_xgboost(booster)
    booster = _lightgbm_booster(model)
    if booster is not None:
        _refuse_lightgbm(booster)
    return model, None, "shap-parser"


def _fix_xgboost(ens: Any) -> None:
    """What shap's XGBoost parser misses, read from the booster's JSON: dart's per-tree ``weight_drop`` (prediction
    multiplies each tree by it) and, with ``num_parallel_tree > 1``, the output of each tree (``tree_info``; shap
    assumes tree ``i`` belongs to output ``i % K``, while XGBoost stores an iteration's trees output by output)."""
    model = json.loads(ens.original_model.save_raw(raw_format="json"))
    gb = model["learner"]["gradient_booster"]
    gb = gb["gbtree"] if "model" not in gb and "gbtree" in gb else gb
    T = ens.values.shape[0]
    weights = gb.get("weight_drop", gb["model"].get("weight_drop"))
    if weights is not None:
        weights = np.asarray(weights, dtype=np.float64)
        if len(weights) != T:
            raise InvalidModelError(f"XGBoost dart model lists {len(weights)} tree weights but shap parsed {T} trees")
        if np.any(weights != 1.0):
            ens.values = ens.values * weights[:, None, None].astype(ens.values.dtype)
    K = ens.num_outputs
    if K <= 1 or ens.num_stacked_models == K:
        return
    groups = np.asarray(gb["model"]["tree_info"], dtype=np.int64)
    if len(groups) != T:
        raise InvalidModelError(f"XGBoost model lists {len(groups)} trees in tree_info but shap parsed {T}")
    shap_groups = np.arange(T) % K
    if not np.array_equal(groups, shap_groups):
        vals = np.zeros_like(ens.values)
        rows = np.arange(T)
        vals[rows, :, groups] = ens.values[rows, :, shap_groups]
        ens.values = vals


def _lightgbm_booster(model: Any) -> Any | None:
    if type(model).__module__.split(".")[0] != "lightgbm":
        return None
    return getattr(model, "booster_", model) if hasattr(model, "booster_") or hasattr(model, "dump_model") else None


def _refuse_lightgbm(booster: Any, model_string: str | None = None) -> None:
    """Linear trees: each leaf holds a linear model over the rows, which TreeSHAP over the tree cannot explain.

    LightGBM's own ``pred_contrib`` (what shap calls) raises ``LightGBMError`` for them; so do we, in every mode
    (shap's interventional path would ignore the leaves' linear parts without a word). Without ``model_string``
    only the booster's parameters are read (before shap parses the trees); :func:`_fix_lightgbm` calls it again
    with the model string it reads anyway, whose trees say ``is_linear=1`` (``Tree::ToString``)."""
    import lightgbm

    linear = bool(booster.params.get("linear_tree")) if getattr(booster, "params", None) else False
    if not linear and model_string is not None:
        linear = "\nis_linear=1" in model_string
    if linear:
        raise lightgbm.basic.LightGBMError(
            "Predicting SHAP feature contributions is not implemented for linear trees. (LightGBM's linear_tree=True "
            "models hold a linear model in each leaf, which TreeSHAP does not explain; hitml refuses them as "
            "LightGBM and shap do)")


_LGB_OBJECTIVES = {  # LightGBM objective (first word of the model string's objective=) -> shap's (objective, tree_output)
    "regression": ("squared_error", "raw_value"), "regression_l2": ("squared_error", "raw_value"),
    "binary": ("binary_crossentropy", "log_odds"), "cross_entropy": ("cross_entropy", "log_odds"),
    "multiclass": (None, None), "multiclassova": (None, None),
}


_LGB_CATEGORICAL = 1    # Tree's kCategoricalMask (include/LightGBM/tree.h)
_LGB_DEFAULT_LEFT = 2   # kDefaultLeftMask
_LGB_MISSING = {0: "None", 1: "Zero", 2: "NaN"}   # (decision_type >> 2) & 3, Tree::GetMissingType


def _lightgbm_model_string(model_string: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """``(header, trees)`` of ``Booster.model_to_string()``: the ``key=value`` lines before the first tree, and per
    tree (in order) its ``key=value`` lines (``GBDT::SaveModelToString``, ``Tree::ToString``)."""
    header: dict[str, str] = {}
    trees: list[dict[str, str]] = []
    current = header
    for line in model_string.split("\n"):
        if line.startswith("end of trees"):
            break
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key == "Tree":
            current = {}
            trees.append(current)
        else:
            current[key] = value.strip()
    return header, trees


def _fix_lightgbm(ens: Any) -> None:
    """What shap's LightGBM parser misses, read from the model as LightGBM stores it (``model_to_string()``; shap
    parses ``dump_model()``, which holds the same trees).

    - Numerical split thresholds as LightGBM compares them: ``dump_model()`` writes them through
      ``Common::AvoidInf`` (``Tree::NodeToJSON``), so +inf (a split of NaN against every number), thresholds
      beyond +-1e300 and ``-DBL_MAX`` (next to -inf) come out as +-1e300. The model string writes ``threshold_``
      with ``{:.17g}`` (``Tree::ToString``, ``ArrayToString<true>``; ``inf`` included), which round-trips; LightGBM
      itself reads a loaded model from it (``Tree::Tree(const char*)``).
    - Multiclass ``Booster`` objects (also loaded from a model string or file): shap stacks one output; LightGBM
      stores ``num_tree_per_iteration`` trees per round, tree ``t`` for class ``t % K``.
    - Missing values per split, as LightGBM's ``Tree::NumericalDecision`` reads them: missing type ``None`` turns
      NaN into 0.0 (so NaN goes where 0.0 goes), ``Zero`` sends NaN and values within 1e-35 of zero (IsZero) to the
      default child, ``NaN`` sends NaN to the default child. Categorical splits send NaN right
      (``CategoricalDecision``). The Zero features are kept in ``ens._lgb_zero_features``: rows are read with their
      near-zero values as NaN there.

    Node ``i`` of tree ``t`` in the model string's arrays is LightGBM's node index, the ``split_index`` shap numbers
    its nodes by. Raises ``InvalidModelError`` where the string and shap's parse disagree on the trees.
    """
    booster = ens.original_model
    # the default num_iteration, as shap's dump_model() call: both stop at best_iteration where one is set
    text = booster.model_to_string()
    _refuse_lightgbm(booster, text)
    header, trees = _lightgbm_model_string(text)
    K = int(header.get("num_tree_per_iteration", 1) or 1)
    T = ens.values.shape[0]
    if len(trees) != T:
        raise InvalidModelError(f"LightGBM's model string holds {len(trees)} trees but shap parsed {T}")
    if K > 1 and ens.num_stacked_models != K:
        vals = np.zeros(ens.values.shape[:2] + (K,), dtype=ens.values.dtype)
        rows = np.arange(T)
        vals[rows, :, rows % K] = ens.values[:, :, 0]
        ens.values = vals
        ens.num_stacked_models = K
        ens.base_offset = np.zeros(K, dtype=np.float64)
    if ens.objective is None and ens.tree_output is None:
        ens.objective, ens.tree_output = _LGB_OBJECTIVES.get(header.get("objective", "").split(" ")[0],
                                                             (None, None))
    zero_features: set[int] = set()
    nan_features: set[int] = set()
    cat_features: set[int] = set()
    cd = ens.children_default
    for t, tree in enumerate(trees):
        n_split = int(tree["num_leaves"]) - 1
        if n_split <= 0:
            continue
        features = np.asarray(tree["split_feature"].split(" "), dtype=np.int64)
        # NumPy reads "inf"/"-inf" and rounds {:.17g} back to the same double, as LightGBM's AtofPrecise does
        thresholds = np.asarray(tree["threshold"].split(" "), dtype=np.float64)
        decisions = np.asarray(tree["decision_type"].split(" "), dtype=np.int64)
        if not (len(features) == len(thresholds) == len(decisions) == n_split) or \
                np.any(ens.children_left[t, :n_split] < 0) or np.any(ens.features[t, :n_split] != features):
            raise InvalidModelError(f"LightGBM tree {t}: the model string and shap's parse of dump_model() "
                                    "disagree on its splits")
        for i in range(n_split):
            f, dt = int(features[i]), int(decisions[i])
            left, right = ens.children_left[t, i], ens.children_right[t, i]
            if dt & _LGB_CATEGORICAL:
                cd[t, i] = right
                cat_features.add(f)
                continue
            thr = float(thresholds[i])
            ens.thresholds[t, i] = thr
            missing = _LGB_MISSING.get((dt >> 2) & 3)
            if missing is None:
                raise InvalidModelError(f"LightGBM tree {t} node {i}: unknown missing type in decision_type {dt}")
            if missing == "None":
                cd[t, i] = left if 0.0 <= thr else right
                continue
            cd[t, i] = left if dt & _LGB_DEFAULT_LEFT else right
            (zero_features if missing == "Zero" else nan_features).add(f)
    if zero_features & nan_features:
        raise InvalidModelError(f"LightGBM model splits features {sorted(zero_features & nan_features)} with both "
                                "missing type Zero and NaN; hitml reads one missing rule per feature")
    ens._lgb_zero_features = np.asarray(sorted(zero_features), dtype=np.int64)
    ens._cat_features = np.asarray(sorted(cat_features), dtype=np.int64)


def build_ensemble(model: Any, user_model: Any, converted: Any, data: Any, model_output: str) -> TreeEnsemble:
    """shap's TreeEnsemble of ``model`` with the library's prediction as ``predict`` (a LibraryEnsemble)."""
    if isinstance(model, TreeEnsemble):
        return model
    if isinstance(data, pd.DataFrame):
        arr = data.values
    elif data is not None and hasattr(data, "data") and not isinstance(data, np.ndarray):
        arr = data.data  # shap maskers / DenseData
    else:
        arr = data
    missing = None if arr is None else pd.isna(arr)
    try:
        ens = TreeEnsemble(model, arr, missing, model_output)
    except InvalidModelError as exc:
        raise InvalidModelError(f"hitml TreeExplainer: {exc}") from exc
    if ens.model_type == "xgboost" or (_is_sklearn(user_model) and "HistGradientBoosting" not in
                                       type(user_model).__name__):
        ens._row_dtype = np.float32  # the library rounds rows to float32: near a split they take its branch
    ens.__class__ = LibraryEnsemble
    ens._library_model = user_model
    if converted is not None:
        ens.original_model = converted
    if getattr(ens, "trees", None) is None or not hasattr(ens, "children_left"):
        return ens  # no trees (CatBoost's native route, or shap failed): the caller decides
    if ens.model_type == "xgboost":
        _fix_xgboost(ens)
        types = getattr(ens.original_model, "feature_types", None) or []
        ens._cat_features = np.asarray([j for j, t in enumerate(types) if t == "c"], dtype=np.int64)
    if ens.model_type == "lightgbm":
        _fix_lightgbm(ens)
    if isinstance(converted, SparkMLModel):
        ens._cat_features = converted.cat_features  # read by InputReader.missing_rules (Spark's category test)
        ens._library_model = converted  # the trees read from the JVM model, which (unlike the model) pickle
    layout = hist_gradient_boosting_layout(user_model) if "HistGradientBoosting" in type(user_model).__name__ \
        else None
    if layout is not None:  # shap reads the encoded layout's feature numbers as input columns
        internal = ens.children_left >= 0
        ens.features = np.where(internal, layout[0][np.where(internal, ens.features, 0)], ens.features)
    _lowest_splits(ens)
    return ens


def _lowest_splits(ens: Any) -> None:
    """Numerical splits at -inf, stored at -DBL_MAX, and the one row value that then changes sides.

    The engines read an element's lower bound of -inf as "no lower bound" (x = -inf satisfies it), so a right child
    of a split at -inf would also take x = -inf. Such splits come from training data holding -inf:
    scikit-learn's HistGradientBoosting (``x <= -inf`` goes left, ``_predictor.pyx``), and XGBoost's exact and
    approx methods, whose split value ``(a + b) * 0.5f`` overflows to -inf in float32 (``x < split_cond`` goes left,
    ``predict_fn.h``, ``GetNextNode``: nothing goes left; shap's parser keeps the -inf). At -DBL_MAX:
    - ``x <= t`` libraries (float64 rows) read every value as before but -DBL_MAX, which must go right: the row
      reader moves it to the next double up (``InputReader.missing_rules``);
    - XGBoost (float32 rows) reads every value as before but -inf, which must go right: it moves to -FLT_MAX, below
      every other split of the feature (shap's ``t``, the double below a float32 ``split_cond``).
    A feature also split between -DBL_MAX and the moved value would need both sides of it, so it raises.
    """
    internal = ens.children_left >= 0
    cats = getattr(ens, "_cat_features", None)
    numeric = internal if cats is None or not len(cats) else internal & ~np.isin(ens.features, cats)
    thresholds = np.asarray(ens.thresholds, dtype=np.float64)
    lowest = numeric & (thresholds == -np.inf)
    if not lowest.any():
        return
    dbl_max = float(np.finfo(np.float64).max)
    if ens.model_type == "xgboost":
        move = (-np.inf, -float(np.finfo(np.float32).max))
    else:
        move = (-dbl_max, float(np.nextafter(-dbl_max, 0.0)))
    features = np.unique(ens.features[lowest])
    clash = numeric & (thresholds >= -dbl_max) & (thresholds < move[1]) & np.isin(ens.features, features)
    if clash.any():
        raise InvalidModelError(f"the model splits features {sorted(set(ens.features[clash].tolist()))} both at "
                                f"-inf and at {thresholds[clash].min()!r}, which hitml cannot tell apart")
    ens.thresholds = np.where(lowest, -dbl_max, thresholds)
    ens._lowest_features = features.astype(np.int64)
    ens._lowest_move = move
