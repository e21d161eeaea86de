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
from ._treelite import as_treelite_model, is_treelite_like

__all__ = ["ROUTES", "build_ensemble", "convert_model"]

ROUTES = ("shap-parser", "catboost-json", "treelite-json", "catboost-native")


def _is_sklearn(model: Any) -> bool:
    return type(model).__module__.split(".")[0] == "sklearn"


def _xgboost_booster(model: Any) -> Any | None:
    if type(model).__module__.split(".")[0] != "xgboost":
        return None
    try:
        return model.get_booster() if hasattr(model, "get_booster") else model
    except Exception:  # noqa: BLE001 - an unfitted sklearn wrapper: shap's own error follows
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
    if is_treelite_like(model):
        conv = as_treelite_model(model)
        return conv.shap_dict, conv, "treelite-json"
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


def _refuse_lightgbm(booster: Any) -> None:
    """Linear trees: each leaf holds a linear model over the rows, which TreeSHAP over the tree cannot explain.

    LightGBM's own ``pred_contrib`` (what shap calls) raises ``LightGBMError`` for them; so do we, in every mode
    (shap's interventional path would ignore the leaves' linear parts without a word)."""
    import lightgbm

    linear = bool(booster.params.get("linear_tree")) if getattr(booster, "params", None) else False
    if not linear:
        linear = "\nis_linear=1" in booster.model_to_string(num_iteration=-1)
    if linear:
        raise lightgbm.basic.LightGBMError(
            "Predicting SHAP feature contributions is not implemented for linear trees. (LightGBM's linear_tree=True "
            "models hold a linear model in each leaf, which TreeSHAP does not explain; hitml refuses them as "
            "LightGBM and shap do)")


_LGB_OBJECTIVES = {  # LightGBM objective (first word of dump_model()["objective"]) -> shap's (objective, tree_output)
    "regression": ("squared_error", "raw_value"), "regression_l2": ("squared_error", "raw_value"),
    "binary": ("binary_crossentropy", "log_odds"), "cross_entropy": ("cross_entropy", "log_odds"),
    "multiclass": (None, None), "multiclassova": (None, None),
}


def _fix_lightgbm(ens: Any) -> None:
    """What shap's LightGBM parser misses, read from ``dump_model()``.

    - Multiclass ``Booster`` objects (also loaded from a model string or file): shap stacks one output; LightGBM
      stores ``num_tree_per_iteration`` trees per round, tree ``t`` for class ``t % K``.
    - Missing values per split, as LightGBM's ``Tree::NumericalDecision`` reads them: missing type ``None`` turns
      NaN into 0.0 (so NaN goes where 0.0 goes), ``Zero`` sends NaN and values within 1e-35 of zero (IsZero) to the
      default child, ``NaN`` sends NaN to the default child. Categorical splits send NaN right
      (``CategoricalDecision``). The Zero features are kept in ``ens._lgb_zero_features``: rows are read with their
      near-zero values as NaN there.
    """
    booster = ens.original_model
    dump = booster.dump_model()
    K = int(dump.get("num_tree_per_iteration", 1) or 1)
    T = ens.values.shape[0]
    if K > 1 and ens.num_stacked_models != K:
        vals = np.zeros(ens.values.shape[:2] + (K,), dtype=ens.values.dtype)
        rows = np.arange(T)
        vals[rows, :, rows % K] = ens.values[:, :, 0]
        ens.values = vals
        ens.num_stacked_models = K
        ens.base_offset = np.zeros(K, dtype=np.float64)
    if ens.objective is None and ens.tree_output is None:
        ens.objective, ens.tree_output = _LGB_OBJECTIVES.get(str(dump.get("objective", "")).split(" ")[0],
                                                             (None, None))
    zero_features: set[int] = set()
    nan_features: set[int] = set()
    cat_features: set[int] = set()
    cd = ens.children_default
    for t, tree in enumerate(dump["tree_info"]):
        stack = [tree["tree_structure"]]
        while stack:
            node = stack.pop()
            if "split_index" not in node:
                continue
            i = int(node["split_index"])
            left, right = ens.children_left[t, i], ens.children_right[t, i]
            if node.get("decision_type") == "==":
                cd[t, i] = right
                cat_features.add(int(node["split_feature"]))
            elif node.get("missing_type") == "None":
                cd[t, i] = left if 0.0 <= float(node["threshold"]) else right
            elif node.get("missing_type") == "Zero":
                zero_features.add(int(node["split_feature"]))
            else:
                nan_features.add(int(node["split_feature"]))
            stack.append(node["left_child"])
            stack.append(node["right_child"])
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
    layout = hist_gradient_boosting_layout(user_model) if "HistGradientBoosting" in type(user_model).__name__ \
        else None
    if layout is not None:  # shap reads the encoded layout's feature numbers as input columns
        internal = ens.children_left >= 0
        ens.features = np.where(internal, layout[0][np.where(internal, ens.features, 0)], ens.features)
    return ens
