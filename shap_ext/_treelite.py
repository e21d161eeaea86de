"""treelite ``Model`` objects (and cuML forests, through ``as_treelite()``) as shap's dict-of-trees model format."""
from __future__ import annotations

import json
from typing import Any

import numpy as np

from ._categories import CategoricalSplits

__all__ = ["TreeliteModel", "as_treelite_model", "is_treelite_like"]

# postprocessor -> shap's (tree_output, objective) for model_output="probability" / "log_loss"; the trees always
# hold the raw margin, which is what TreeSHAP explains
_UNITS = {
    "identity": ("raw_value", "squared_error"),
    "sigmoid": ("log_odds", "binary_crossentropy"),
}


def _treelite_model_class() -> Any:
    try:
        import treelite  # optional dependency

        return treelite.Model
    except ImportError:
        return None


def is_treelite_like(model: Any) -> bool:
    """True for a ``treelite.Model`` or an object exporting one through ``as_treelite()`` (cuML forests)."""
    cls = _treelite_model_class()
    if cls is not None and isinstance(model, cls):
        return True
    return callable(getattr(model, "as_treelite", None)) and not isinstance(model, dict)


def _to_treelite(model: Any) -> Any:
    cls = _treelite_model_class()
    if cls is not None and isinstance(model, cls):
        return model
    exported = model.as_treelite()  # cuML RandomForest*: a treelite.Model (older cuML: serialized bytes)
    if cls is None:
        raise ImportError(f"{type(model).__qualname__}.as_treelite() needs the treelite package: pip install treelite")
    if isinstance(exported, (bytes, bytearray)):
        exported = cls.deserialize_bytes(bytes(exported))
    if not isinstance(exported, cls):
        raise TypeError(f"{type(model).__qualname__}.as_treelite() returned {type(exported).__qualname__}, "
                        "not a treelite.Model")
    return exported


def _unsupported(msg: str) -> NotImplementedError:
    return NotImplementedError(f"treelite model not supported by hitml's TreeExplainer: {msg}")


class TreeliteModel:
    """A treelite model converted once into shap's dict format, with its categorical splits and a margin predictor.

    Numeric tests ``x < t``, ``x > t``, ``x >= t`` become shap's ``x <= t' goes left`` (``t' = nextafter(t, -inf)`` in
    the model's threshold precision for strict tests; children exchanged for ``>``/``>=``). ``average_tree_output``
    divides each output by the number of trees contributing to it; ``base_scores`` become ``base_offset``.
    Node covers are ``sum_hess`` (else ``data_count``); ``covers_known`` is False when a node has neither.
    """

    def __init__(self, model: Any) -> None:
        self.treelite_model = _to_treelite(model)
        doc = json.loads(self.treelite_model.dump_as_json(pretty_print=False))
        self.n_features_in_ = int(doc["num_feature"])
        self.input_dtype = np.dtype(np.float32 if doc["threshold_type"] == "float32" else np.float64)
        num_class = [int(c) for c in doc["num_class"]]
        n_targets = int(doc["num_target"])
        if n_targets > 1 and len(set(num_class)) > 1:
            raise _unsupported(f"targets with different numbers of classes {num_class}")
        self.n_targets, self.n_classes = n_targets, max(num_class)
        K = n_targets * self.n_classes
        self.n_outputs = K
        self.postprocessor = doc["postprocessor"]
        trees = doc["trees"]
        T = len(trees)
        if T == 0:
            raise _unsupported("the model has no trees")
        lv_shape = tuple(int(s) for s in doc["leaf_vector_shape"])
        contributes = np.zeros((T, K), dtype=bool)
        for t in range(T):
            contributes[t, self._out_index(doc["target_id"][t], doc["class_id"][t])] = True
        scale = np.ones(K)
        if doc["average_tree_output"]:
            scale = 1.0 / np.maximum(contributes.sum(0), 1)
        self.base_offset = np.asarray(doc["base_scores"], dtype=np.float64).reshape(-1)[:K]
        if self.base_offset.shape != (K,):
            raise _unsupported(f"base_scores of length {self.base_offset.size} for {K} outputs")
        self.covers_known = True
        left_sets: dict[tuple[int, int], list[int]] = {}
        swaps: list[tuple[int, int]] = []
        shap_trees = []
        for t, tree in enumerate(trees):
            out = self._out_index(doc["target_id"][t], doc["class_id"][t])
            shap_trees.append(self._tree(t, tree, out, lv_shape, K, scale, left_sets, swaps))
        max_nodes = max(len(tr["children_left"]) for tr in shap_trees)
        swap = np.zeros((T, max_nodes), dtype=bool)
        for t, node in swaps:
            swap[t, node] = True
        self.categories = CategoricalSplits((T, max_nodes), left_sets, swap)
        tree_output, objective = _UNITS.get(self.postprocessor, (None, None))
        if self.postprocessor in ("identity", "identity_multiclass") and doc["average_tree_output"] \
                and doc["task_type"] in ("kBinaryClf", "kMultiClf"):
            tree_output, objective = "probability", "binary_crossentropy"  # averaged class fractions (forests)
        if self.postprocessor == "sigmoid" and (float(doc["sigmoid_alpha"]) != 1.0 or K != 1):
            tree_output, objective = None, None
        self.shap_dict = {
            "trees": shap_trees, "base_offset": self.base_offset, "input_dtype": self.input_dtype.type,
            "internal_dtype": np.float64, "tree_output": tree_output, "objective": objective,
        }
        self._dense: tuple[np.ndarray, ...] | None = None

    def _out_index(self, target_id: int, class_id: int) -> np.ndarray:
        targets = range(self.n_targets) if target_id < 0 else [target_id]
        classes = range(self.n_classes) if class_id < 0 else [class_id]
        return np.asarray([tg * self.n_classes + c for tg in targets for c in classes], dtype=np.int64)

    def _tree(self, t: int, tree: dict[str, Any], out: np.ndarray, lv_shape: tuple[int, ...], K: int,
              scale: np.ndarray, left_sets: dict, swaps: list) -> dict[str, np.ndarray]:
        nodes = tree["nodes"]
        n = max(int(nd["node_id"]) for nd in nodes) + 1
        cl = np.full(n, -1, dtype=np.int32)
        cr = np.full(n, -1, dtype=np.int32)
        cd = np.full(n, -1, dtype=np.int32)
        feat = np.full(n, -2, dtype=np.int32)
        thr = np.full(n, -2.0, dtype=np.float64)
        vals = np.zeros((n, K), dtype=np.float64)
        cover = np.zeros(n, dtype=np.float64)
        dt = self.input_dtype.type
        for nd in nodes:
            i = int(nd["node_id"])
            c = nd.get("sum_hess", nd.get("data_count"))
            if c is None:
                self.covers_known = False
            else:
                cover[i] = float(c)
            if "leaf_value" in nd:
                leaf = np.asarray(nd["leaf_value"], dtype=np.float64).reshape(-1)
                if leaf.size != out.size:
                    raise _unsupported(f"tree {t} leaf {i}: {leaf.size} leaf values for {out.size} outputs "
                                       f"(leaf_vector_shape {list(lv_shape)})")
                vals[i, out] = leaf * scale[out]
                continue
            left, right = int(nd["left_child"]), int(nd["right_child"])
            feat[i] = int(nd["split_feature_id"])
            cd[i] = left if nd["default_left"] else right
            kind = nd["node_type"]
            if kind == "numerical_test_node":
                op, tv = nd["comparison_op"], dt(nd["threshold"])
                if op in ("<", ">="):  # x < t  <=>  x <= nextafter(t, -inf) in the model's precision
                    tv = np.nextafter(tv, dt(-np.inf))
                elif op not in ("<=", ">"):
                    raise _unsupported(f"tree {t} node {i}: comparison operator {op!r}")
                if op in (">", ">="):  # x > t goes left  <=>  x <= t goes right
                    left, right = right, left
                thr[i] = float(tv)
            elif kind == "categorical_test_node":
                left_sets[(t, i)] = [int(v) for v in nd["category_list"]]
                thr[i] = 0.0
                if nd["category_list_right_child"]:
                    swaps.append((t, i))  # the listed categories go right: exchanged later, as for XGBoost
            else:
                raise _unsupported(f"tree {t} node {i}: node type {kind!r}")
            cl[i], cr[i] = left, right
        return {"children_left": cl, "children_right": cr, "children_default": cd, "features": feat,
                "thresholds": thr, "values": vals, "node_sample_weight": cover}

    # -- margin prediction (used where shap's C predictor cannot route category sets) --------------------------
    def predict_margin(self, X: np.ndarray, tree_limit: int | None = None) -> np.ndarray:
        """Raw margin ``(n,)`` or ``(n, K)`` of the first ``tree_limit`` trees: treelite's own predictor (GTIL)
        for the whole model, else a walk of the converted trees."""
        trees = self.shap_dict["trees"]
        T = len(trees) if tree_limit is None else min(int(tree_limit), len(trees))
        if T == len(trees):
            try:
                from treelite import gtil

                out = gtil.predict(self.treelite_model, np.ascontiguousarray(X, dtype=self.input_dtype),
                                   nthread=1, pred_margin=True)
                out = np.asarray(out, dtype=np.float64).reshape(len(X), -1)
                return out[:, 0] if self.n_outputs == 1 else out
            except ImportError:
                pass
        X = np.asarray(X, dtype=self.input_dtype).astype(np.float64)
        out = np.tile(self.base_offset, (X.shape[0], 1))
        rows = np.arange(X.shape[0])
        by_tree: dict[int, list[tuple[int, list[int]]]] = {}
        for (t, nd), cats in self.categories.left_sets.items():
            by_tree.setdefault(t, []).append((nd, cats))
        for t in range(T):
            tr = trees[t]
            swap = self.categories.swap[t, :len(tr["children_left"])]
            cl = np.where(swap, tr["children_right"], tr["children_left"])
            cr = np.where(swap, tr["children_left"], tr["children_right"])
            node = np.zeros(X.shape[0], dtype=np.int64)
            while True:
                live = cl[node] >= 0
                if not live.any():
                    break
                f = np.where(live, tr["features"][node], 0)
                x = X[rows, f]
                go_left = x <= tr["thresholds"][node]
                for nd, cats in by_tree.get(t, ()):
                    at = live & (node == nd)
                    xv = x[at]
                    ok = (xv >= 0) & (xv < 2.0 ** 32)
                    go_left[at] = ok & np.isin(np.where(ok, np.floor(xv), -1), cats)
                nxt = np.where(np.isnan(x), tr["children_default"][node], np.where(go_left, cl[node], cr[node]))
                node = np.where(live, nxt, node)
            out += tr["values"][node]
        return out[:, 0] if self.n_outputs == 1 else out


def as_treelite_model(model: Any) -> TreeliteModel:
    """Convert a ``treelite.Model`` or a cuML forest (anything with ``as_treelite()``)."""
    return model if isinstance(model, TreeliteModel) else TreeliteModel(model)
