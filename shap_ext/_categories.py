"""Categorical splits of XGBoost, LightGBM and HistGradientBoosting models as the engine's "bitset of categories going LEFT" form."""
from __future__ import annotations

import json
from typing import Any

import numpy as np

from ._compat import hgb_predictors, hgb_preprocessor

__all__ = ["CategoricalSplits", "categorical_splits", "hist_gradient_boosting_layout"]


class CategoricalSplits:
    """Per-node category sets of a ``TreeEnsemble``, in the layout ``kernels.treeshap.extract_paths`` takes.

    ``left_sets[t][node]`` is the set of category codes that go LEFT at a categorical node. ``swap[t, node]`` marks
    nodes whose children must be exchanged first (XGBoost sends the categories of its stored set RIGHT; after the
    swap they go LEFT and every other category, including unseen or negative codes, goes RIGHT, i.e. to XGBoost's
    original left child). NaN keeps following ``children_default`` (a node id, untouched by the swap).
    """

    def __init__(self, shape: tuple[int, int], left_sets: dict[tuple[int, int], list[int]],
                 swap: np.ndarray | None = None) -> None:
        self.shape = shape
        self.left_sets = left_sets
        self.swap = np.zeros(shape, dtype=bool) if swap is None else swap

    def __bool__(self) -> bool:
        return bool(self.left_sets)

    def engine_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(is_categorical, node_cat_ptr, node_cat_nwords, cat_words)`` for ``extract_paths(categories=...)``."""
        is_cat = np.zeros(self.shape, dtype=bool)
        ptr = np.full(self.shape, -1, dtype=np.int64)
        nwords = np.zeros(self.shape, dtype=np.int32)
        words: list[np.ndarray] = []
        offset = 0
        for (t, node), cats in sorted(self.left_sets.items()):
            cats_arr = np.asarray(sorted(set(int(c) for c in cats)), dtype=np.int64)
            if cats_arr.size and cats_arr[0] < 0:
                raise ValueError(f"tree {t} node {node}: negative category code {cats_arr[0]} in a split set")
            nw = int(cats_arr[-1]) // 32 + 1 if cats_arr.size else 1
            bits = np.zeros(nw, dtype=np.uint32)
            np.bitwise_or.at(bits, cats_arr // 32, (np.uint32(1) << (cats_arr % 32).astype(np.uint32)))
            is_cat[t, node] = True
            ptr[t, node] = offset
            nwords[t, node] = nw
            words.append(bits)
            offset += nw
        cat_words = np.concatenate(words) if words else np.zeros(0, dtype=np.uint32)
        return is_cat, ptr, nwords, cat_words

    def children(self, children_left: np.ndarray, children_right: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the child arrays with the marked nodes' children exchanged."""
        if not self.swap.any():
            return children_left, children_right
        left = np.where(self.swap, children_right, children_left)
        right = np.where(self.swap, children_left, children_right)
        return left, right


def _xgboost_trees(booster: Any) -> list[dict[str, Any]]:
    model = json.loads(booster.save_raw(raw_format="json"))
    gb = model["learner"]["gradient_booster"]
    if "model" not in gb and "gbtree" in gb:  # dart wraps a gbtree
        gb = gb["gbtree"]
    return gb["model"]["trees"]


def _xgboost_splits(booster: Any, shape: tuple[int, int]) -> CategoricalSplits:
    trees = _xgboost_trees(booster)
    if len(trees) != shape[0]:
        raise ValueError(f"XGBoost model has {len(trees)} trees but shap parsed {shape[0]}")
    left_sets: dict[tuple[int, int], list[int]] = {}
    swap = np.zeros(shape, dtype=bool)
    for t, tree in enumerate(trees):
        nodes = tree.get("categories_nodes") or []
        segments = tree.get("categories_segments") or []
        sizes = tree.get("categories_sizes") or []
        cats = tree.get("categories") or []
        split_type = tree.get("split_type") or []
        for k, node in enumerate(nodes):
            node = int(node)
            if split_type and int(split_type[node]) != 1:
                raise ValueError(f"XGBoost tree {t}: node {node} lists categories but is not a categorical split")
            beg, size = int(segments[k]), int(sizes[k])
            left_sets[(t, node)] = [int(c) for c in cats[beg:beg + size]]
            swap[t, node] = True  # XGBoost: categories in the set go RIGHT
    return CategoricalSplits(shape, left_sets, swap)


def _lightgbm_splits(booster: Any, shape: tuple[int, int]) -> CategoricalSplits:
    tree_info = booster.dump_model()["tree_info"]
    if len(tree_info) != shape[0]:
        raise ValueError(f"LightGBM model has {len(tree_info)} trees but shap parsed {shape[0]}")
    left_sets: dict[tuple[int, int], list[int]] = {}
    for t, tree in enumerate(tree_info):
        stack = [tree["tree_structure"]]
        while stack:
            node = stack.pop()
            if "split_index" not in node:
                continue
            if node.get("decision_type") == "==" or isinstance(node.get("threshold"), str):
                # LightGBM: categories listed in "a||b||c" go LEFT (shap's node id for a split is split_index)
                left_sets[(t, int(node["split_index"]))] = [int(c) for c in str(node["threshold"]).split("||")]
            stack.append(node["left_child"])
            stack.append(node["right_child"])
    return CategoricalSplits(shape, left_sets)


def _shap_bitmask_splits(ensemble: Any, shape: tuple[int, int]) -> CategoricalSplits:
    """shap's own encoding (threshold_types == 1): category c >= 1 goes left iff bit c-1 of int(threshold) is set."""
    left_sets: dict[tuple[int, int], list[int]] = {}
    internal = ensemble.children_left >= 0
    for t, node in zip(*np.nonzero((ensemble.threshold_types == 1) & internal)):
        mask = int(ensemble.thresholds[t, node])
        left_sets[(int(t), int(node))] = [b + 1 for b in range(mask.bit_length()) if mask >> b & 1]
    return CategoricalSplits(shape, left_sets)


def _bits(row: np.ndarray) -> set[int]:
    return {32 * w + b for w, word in enumerate(row) for b in range(32) if int(word) >> b & 1}


def hist_gradient_boosting_layout(model: Any) -> tuple[np.ndarray, list[np.ndarray]] | None:
    """``(column, codes)`` of a HistGradientBoosting model with categorical features, else None.

    scikit-learn encodes categorical columns first (an OrdinalEncoder inside a ColumnTransformer) and its trees
    split on that encoded layout: ``column[f]`` is the input column of encoded feature ``f`` and ``codes[f]`` the
    codes of the known categories of encoded categorical feature ``f``. Rows reach the engine through the model's
    own encoder (``InputReader``), so category sets are kept as codes, whatever the labels (numbers or strings).
    """
    pre = hgb_preprocessor(model)
    if pre is None or getattr(model, "is_categorical_", None) is None:
        return None
    is_cat = np.asarray(model.is_categorical_, dtype=bool)
    column = np.concatenate([np.flatnonzero(is_cat), np.flatnonzero(~is_cat)])
    enc = pre.named_transformers_["encoder"]
    cats = []
    for raw in enc.categories_:
        known = sum(1 for v in raw if not (isinstance(v, float) and np.isnan(v)) and v is not None)
        cats.append(np.arange(known, dtype=np.int64))
    return column, cats


def _hist_gradient_boosting_splits(model: Any, shape: tuple[int, int]) -> CategoricalSplits:
    """scikit-learn's HistGradientBoosting category bitsets (which shap's parser drops), as encoder codes.

    scikit-learn sends a category in the node's bitset left, another known category right, and NaN, negative
    and unknown categories to the missing side. Where that side is left, the children are exchanged and the
    LEFT set becomes the known categories that go right, so every other value lands on the missing side.
    """
    _, cats = hist_gradient_boosting_layout(model)
    left_sets: dict[tuple[int, int], list[int]] = {}
    swap = np.zeros(shape, dtype=bool)
    t = 0
    for predictors in hgb_predictors(model):
        for pred in predictors:
            nodes = pred.nodes
            for node in np.nonzero(nodes["is_categorical"] & ~nodes["is_leaf"].astype(bool))[0]:
                nd = nodes[node]
                raw = cats[nd["feature_idx"]]
                left = {int(raw[c]) for c in _bits(pred.raw_left_cat_bitsets[nd["bitset_idx"]]) if c < len(raw)}
                if nd["missing_go_to_left"]:
                    left_sets[(t, int(node))] = sorted(set(raw.tolist()) - left)
                    swap[t, node] = True
                else:
                    left_sets[(t, int(node))] = sorted(left)
            t += 1
    if t != shape[0]:
        raise ValueError(f"HistGradientBoosting model has {t} trees but shap parsed {shape[0]}")
    return CategoricalSplits(shape, left_sets, swap)


def categorical_splits(ensemble: Any, model: Any = None) -> CategoricalSplits:
    """The categorical splits of a parsed shap ``TreeEnsemble`` of ``model`` (empty when it has none).

    XGBoost: read from the booster's JSON (``split_type``, ``categories*``), which shap's loader parses but does not
    use. LightGBM: read from ``dump_model()`` threshold strings (exact, including category 0 and codes >= 32, which
    shap's float bitmask cannot hold). Anything else with ``threshold_types == 1``: shap's bitmask.
    """
    shape = ensemble.children_left.shape
    if "HistGradientBoosting" in type(model).__name__ and hgb_preprocessor(model) is not None:
        return _hist_gradient_boosting_splits(model, shape)
    model_type = getattr(ensemble, "model_type", "internal")
    original = getattr(ensemble, "original_model", None)
    if model_type == "xgboost" and original is not None:
        types = getattr(original, "feature_types", None) or []
        if "c" in types:  # XGBoost keeps feature types in the model; without a "c" there is no categorical split
            return _xgboost_splits(original, shape)
        return CategoricalSplits(shape, {})
    has_type1 = bool(np.any((ensemble.threshold_types == 1) & (ensemble.children_left >= 0)))
    if model_type == "lightgbm" and original is not None and has_type1:
        return _lightgbm_splits(original, shape)
    if has_type1:
        return _shap_bitmask_splits(ensemble, shape)
    return CategoricalSplits(shape, {})
