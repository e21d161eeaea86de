"""CatBoost models: oblivious trees on numeric features read from CatBoost's JSON, or CatBoost's own ShapValues."""
from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import numpy as np

from ._categories import CategoricalSplits

__all__ = ["CatBoostModel", "NotParseable", "is_catboost", "json_margin", "load_catboost_json",
           "native_expected_value", "native_margin", "native_values", "to_pool"]

# CatBoost loss -> shap's (tree_output, objective), for model_output="probability" / "log_loss"
_UNITS = {
    "RMSE": ("raw_value", "squared_error"),
    "Logloss": ("log_odds", "binary_crossentropy"),
    "CrossEntropy": ("log_odds", "binary_crossentropy"),
}


class NotParseable(Exception):
    """The model holds something the engine cannot take as trees over the input columns (reason in the text)."""


def is_catboost(model: Any) -> bool:
    return type(model).__module__.startswith("catboost") and hasattr(model, "get_cat_feature_indices")


def _dump(model: Any) -> dict[str, Any]:
    """CatBoost's JSON of ``model``; :class:`NotParseable` where its writer refuses the model (a split border at
    ±inf, from training data holding ±inf: ``library/cpp/json/writer/json.cpp`` writes no non-finite float)."""
    import catboost

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.json")
        borders = model.get_borders() if hasattr(model, "get_borders") else {}
        if any(np.isinf(np.asarray(b, dtype=np.float64)).any() for b in borders.values()):
            raise NotParseable("split borders at ±inf, which CatBoost's JSON export cannot write")
        try:
            model.save_model(path, format="json")
        except catboost.CatBoostError as exc:
            if "invalid float value" not in str(exc):
                raise
            raise NotParseable(f"a value CatBoost's JSON export cannot write ({exc})") from None
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)


def _loss_name(doc: dict[str, Any]) -> str:
    loss = doc.get("model_info", {}).get("params", {}).get("loss_function", {})
    return str(loss.get("type", "")) if isinstance(loss, dict) else str(loss)


def _nan_right(feature: dict[str, Any]) -> bool:
    """Whether CatBoost sends NaN right on this float feature: its evaluator replaces NaN by +inf (``AsTrue``,
    nan_mode 'Max') or -inf (``AsFalse``, 'Min') only where the feature had NaN in training (``has_nans``), and
    compares ``val > border`` (catboost/libs/model/cpu/quantization.h, ``BinarizeFeatures``): +inf is above every
    border, -inf and an unreplaced NaN above none."""
    return bool(feature.get("has_nans", True)) and feature.get("nan_value_treatment") == "AsTrue"


def _n_features(doc: dict[str, Any]) -> int:
    """Input columns of a CatBoost JSON model: one past the largest flat feature index it lists."""
    info = doc.get("features_info", {})
    flat = [int(f["flat_feature_index"]) for kind in ("float_features", "categorical_features", "text_features",
                                                      "embedding_features") for f in info.get(kind, []) or []]
    return max(flat) + 1 if flat else 0


class CatBoostModel:
    """A CatBoost model of symmetric (oblivious) trees on numeric features, in shap's dict-of-trees format.

    Split ``s`` of a tree sends ``x`` right when ``x > border`` (CatBoost compares in float32, so X is rounded to
    float32); NaN goes right only for ``nan_mode='Max'`` (``AsTrue``) on a feature that had NaN in training. The
    leaf index is ``sum_s bit_s << s``, so the first listed split is the deepest level of the unrolled binary tree.
    Leaf values are multiplied by the model's scale and its bias (``boost_from_average``) becomes the base offset:
    the trees then sum to ``predict(prediction_type='RawFormulaVal')``. Covers are CatBoost's ``leaf_weights``.
    Non-symmetric trees (``grow_policy`` Depthwise / Lossguide) are read from their nested JSON nodes the same way:
    exact TreeSHAP of these trees sums to the prediction (CatBoost's own ShapValues there do not, by up to 10%).
    Raises :class:`NotParseable` for categorical (one-hot / CTR) splits.

    ``model`` is the catboost object (its JSON dump is read), or None with ``doc``, a JSON document already read
    (:meth:`from_json`): the model's own prediction is then :func:`json_margin`, and catboost is not needed.
    """

    def __init__(self, model: Any, doc: dict[str, Any] | None = None) -> None:
        self.model = model
        doc = _dump(model) if doc is None else doc
        self.doc = doc
        if "oblivious_trees" not in doc and "trees" not in doc:
            raise NotParseable("a tree layout this reader does not know")
        info = doc.get("features_info", {})
        if info.get("categorical_features"):
            raise NotParseable("categorical features (one-hot and CTR splits act on hashed categories)")
        floats = info.get("float_features", [])
        flat = [int(f["flat_feature_index"]) for f in floats]
        nan_right = [_nan_right(f) for f in floats]
        scale, bias = doc.get("scale_and_bias", [1.0, [0.0]])
        self.base_offset = np.atleast_1d(np.asarray(bias, dtype=np.float64))
        K = len(self.base_offset)
        self.n_outputs = K
        self.n_features_in_ = len(model.feature_names_) if model is not None else _n_features(doc)
        ids = {int(f["flat_feature_index"]): str(f.get("feature_id", "")) for f in floats}
        # the file's feature ids, by which CatBoost reads a frame; None where it was trained without names
        self.feature_names_ = [str(n) for n in model.feature_names_] if model is not None else (
            [ids[j] for j in range(self.n_features_in_)] if sorted(ids) == list(range(self.n_features_in_))
            and all(ids.values()) else None)
        self.input_dtype = np.dtype(np.float32)
        if "oblivious_trees" in doc:
            trees = [self._tree(t, tree, flat, nan_right, float(scale), K)
                     for t, tree in enumerate(doc["oblivious_trees"])]
        else:  # grow_policy Depthwise / Lossguide: nested nodes
            trees = [self._nested_tree(t, tree, flat, nan_right, float(scale), K)
                     for t, tree in enumerate(doc["trees"])]
        if not trees:
            raise NotParseable("the model has no trees")
        max_nodes = max(len(tr["children_left"]) for tr in trees)
        self.categories = CategoricalSplits((len(trees), max_nodes), {})
        tree_output, objective = _UNITS.get(_loss_name(doc), (None, None))
        if K > 1:
            tree_output, objective = None, None  # softmax outputs have no per-output shap transform
        self.shap_dict = {"trees": trees, "base_offset": self.base_offset, "input_dtype": np.float32,
                          "internal_dtype": np.float64, "tree_output": tree_output, "objective": objective}

    @staticmethod
    def _tree(t: int, tree: dict[str, Any], flat: list[int], nan_right: list[bool], scale: float,
              K: int) -> dict[str, np.ndarray]:
        splits = tree.get("splits", [])
        d = len(splits)
        for s in splits:
            if s.get("split_type") != "FloatFeature":
                raise NotParseable(f"tree {t} has a {s.get('split_type')} split")
        n_leaves = 1 << d
        leaves = np.asarray(tree["leaf_values"], dtype=np.float64).reshape(n_leaves, K) * scale
        weights = np.asarray(tree["leaf_weights"], dtype=np.float64).reshape(n_leaves)
        n = 2 * n_leaves - 1
        first_leaf = n_leaves - 1
        idx = np.arange(n)
        internal = idx < first_leaf
        cl = np.where(internal, 2 * idx + 1, -1).astype(np.int32)
        cr = np.where(internal, 2 * idx + 2, -1).astype(np.int32)
        level = np.floor(np.log2(idx + 1)).astype(np.int64)  # exact for these small integers
        feat = np.full(n, -2, dtype=np.int32)
        thr = np.full(n, -2.0, dtype=np.float64)
        cd = np.full(n, -1, dtype=np.int32)
        for i in np.nonzero(internal)[0]:
            s = splits[d - 1 - level[i]]
            f = int(s["float_feature_index"])
            feat[i] = flat[f]
            thr[i] = float(np.float32(s["border"]))
            cd[i] = cr[i] if nan_right[f] else cl[i]
        vals = np.zeros((n, K), dtype=np.float64)
        vals[first_leaf:] = leaves
        cover = np.zeros(n, dtype=np.float64)
        cover[first_leaf:] = weights
        for i in range(first_leaf - 1, -1, -1):
            cover[i] = cover[2 * i + 1] + cover[2 * i + 2]
        return {"children_left": cl, "children_right": cr, "children_default": cd, "features": feat,
                "thresholds": thr, "values": vals, "node_sample_weight": cover}

    @staticmethod
    def _nested_tree(t: int, tree: dict[str, Any], flat: list[int], nan_right: list[bool], scale: float,
                     K: int) -> dict[str, np.ndarray]:
        """A non-symmetric tree (``{"split", "left", "right"}`` nodes, ``{"value", "weight"}`` leaves): ``x > border``
        goes right, NaN as the feature's ``nan_value_treatment``. Node 0 is the root, children are numbered in
        pre-order."""
        cl: list[int] = []
        cr: list[int] = []
        cd: list[int] = []
        feat: list[int] = []
        thr: list[float] = []
        vals: list[np.ndarray] = []
        cover: list[float] = []

        def visit(node: dict[str, Any]) -> int:
            i = len(cl)
            for arr, v in ((cl, -1), (cr, -1), (cd, -1), (feat, -2), (thr, -2.0), (cover, 0.0)):
                arr.append(v)
            vals.append(np.zeros(K))
            if "split" not in node:
                vals[i] = np.asarray(node["value"], dtype=np.float64).reshape(K) * scale
                cover[i] = float(node["weight"])
                return i
            s = node["split"]
            if s.get("split_type") != "FloatFeature":
                raise NotParseable(f"tree {t} has a {s.get('split_type')} split")
            f = int(s["float_feature_index"])
            left = visit(node["left"])
            right = visit(node["right"])
            cl[i], cr[i] = left, right
            cd[i] = right if nan_right[f] else left
            feat[i] = flat[f]
            thr[i] = float(np.float32(s["border"]))
            cover[i] = cover[left] + cover[right]
            return i

        visit(tree)
        return {"children_left": np.asarray(cl, dtype=np.int32), "children_right": np.asarray(cr, dtype=np.int32),
                "children_default": np.asarray(cd, dtype=np.int32), "features": np.asarray(feat, dtype=np.int32),
                "thresholds": np.asarray(thr, dtype=np.float64), "values": np.asarray(vals, dtype=np.float64),
                "node_sample_weight": np.asarray(cover, dtype=np.float64)}

    @classmethod
    def from_json(cls, source: str | os.PathLike | dict[str, Any]) -> CatBoostModel:
        """The model of a CatBoost JSON file (``save_model(path, format="json")``), without catboost.

        See :func:`load_catboost_json`.
        """
        if isinstance(source, dict):
            return cls(None, source)
        with open(source, encoding="utf-8") as fh:
            return cls(None, json.load(fh))

    def predict_margin(self, X: np.ndarray, tree_limit: int | None = None) -> np.ndarray:
        """CatBoost's own ``RawFormulaVal`` (scale and bias included) of the first ``tree_limit`` trees; for a model
        read from JSON alone, CatBoost's evaluation rules applied to the JSON trees (:func:`json_margin`)."""
        if self.model is None:
            return json_margin(self.doc, X, tree_limit)
        return native_margin(self.model, X, tree_limit)


def load_catboost_json(source: str | os.PathLike | dict[str, Any]) -> CatBoostModel:
    """A CatBoost model saved as JSON, for ``shap.TreeExplainer`` without catboost installed.

    CatBoost writes the file with ``model.save_model(path, format="json")``; the model it returns goes to
    ``shap.TreeExplainer(model, backend=...)`` (after ``import hitml.shap_ext``) in place of the catboost object,
    and gives the same values. Rows are NumPy or CuPy arrays with the model's columns in order, or frames: read by
    name where the file keeps the training names (``feature_id``), with values in the frame's column order, as for
    a catboost model; by position otherwise. CatBoost rounds rows to float32. The additivity check compares with CatBoost's evaluation
    rules applied to the file's trees (:func:`json_margin`), as catboost is not there to predict.

    Parameters
    ----------
    source : str, os.PathLike or dict
        The JSON file's path, or its document already parsed (``json.load``).

    Returns
    -------
    CatBoostModel
        The model's trees in shap's dict-of-trees format (``.shap_dict``), and ``predict_margin``.

    Raises
    ------
    NotParseable
        For models with categorical (one-hot / CTR) splits, which need CatBoost's own hashing.

    See Also
    --------
    TreeExplainer : explains the returned model on either backend.

    Examples
    --------
    A one-split model (CatBoost's JSON layout: ``x0 > 0.5`` goes right):

    >>> import numpy as np, shap
    >>> import hitml.shap_ext
    >>> from hitml.shap_ext import load_catboost_json
    >>> doc = {"features_info": {"float_features": [
    ...            {"flat_feature_index": 0, "feature_index": 0, "borders": [0.5], "has_nans": False,
    ...             "nan_value_treatment": "AsIs"}]},
    ...        "oblivious_trees": [{"splits": [{"split_type": "FloatFeature", "float_feature_index": 0,
    ...                                          "border": 0.5}],
    ...                             "leaf_values": [-1.0, 1.0], "leaf_weights": [3.0, 1.0]}],
    ...        "scale_and_bias": [1.0, [0.0]]}
    >>> model = load_catboost_json(doc)
    >>> explainer = shap.TreeExplainer(model, backend="cpu")
    >>> explainer.shap_values(np.array([[0.0], [1.0]])).round(2).tolist()
    [[-0.5], [1.5]]
    """
    return CatBoostModel.from_json(source)


def _float32_rows(X: Any) -> np.ndarray:
    with np.errstate(over="ignore"):   # |x| beyond float32's range reads as +-inf, as CatBoost's float cast does
        return np.asarray(X, dtype=np.float32)


def json_margin(doc: dict[str, Any], X: Any, tree_limit: int | None = None) -> np.ndarray:
    """``RawFormulaVal`` of a CatBoost JSON model's first ``tree_limit`` trees, by CatBoost's evaluation rules.

    catboost/libs/model/cpu/quantization.h (``BinarizeFeatures``, ``BinarizeFloats``): each value is a float32;
    on a feature that had NaN in training, NaN becomes -inf (``AsFalse``) or +inf (``AsTrue``); a split is the bit
    ``val > border`` (an unreplaced NaN: 0). An oblivious tree's leaf is ``sum_s bit_s << s`` over its listed
    splits (catboost/libs/model/cpu/evaluator_impl.cpp); a non-symmetric tree goes right on a set bit. The trees'
    leaf values are summed and then scaled and shifted (``scale_and_bias``). Independent of the unrolled trees
    :class:`CatBoostModel` gives the engine. (n,) for one output, (n, K) for several.
    """
    x = _float32_rows(X)
    if x.ndim == 1:
        x = x[None, :]
    floats = {int(f.get("feature_index", j)): f
              for j, f in enumerate(doc.get("features_info", {}).get("float_features", []))}
    cols = {}
    for i, f in floats.items():
        col = x[:, int(f["flat_feature_index"])]
        if f.get("has_nans", True) and f.get("nan_value_treatment") in ("AsTrue", "AsFalse"):
            inf = np.float32(np.inf if f["nan_value_treatment"] == "AsTrue" else -np.inf)
            col = np.where(np.isnan(col), inf, col)
        cols[i] = col

    def bit(split: dict[str, Any]) -> np.ndarray:
        return cols[int(split["float_feature_index"])] > np.float32(split["border"])

    scale, bias = doc.get("scale_and_bias", [1.0, [0.0]])
    bias = np.atleast_1d(np.asarray(bias, dtype=np.float64))
    K = len(bias)
    n = x.shape[0]
    total = np.zeros((n, K))
    if "oblivious_trees" in doc:
        for tree in doc["oblivious_trees"][:tree_limit]:
            leaf = np.zeros(n, dtype=np.int64)
            for s, split in enumerate(tree.get("splits", [])):
                leaf |= bit(split).astype(np.int64) << s
            total += np.asarray(tree["leaf_values"], dtype=np.float64).reshape(-1, K)[leaf]
    else:
        for tree in doc["trees"][:tree_limit]:
            total += _nested_values(tree, bit, np.arange(n), K, n)
    out = total * float(scale) + bias
    return out[:, 0] if K == 1 else out


def _nested_values(node: dict[str, Any], bit: Any, rows: np.ndarray, K: int, n: int) -> np.ndarray:
    """Leaf values (n, K) of a non-symmetric tree's ``rows`` (zeros elsewhere)."""
    out = np.zeros((n, K))
    stack = [(node, rows)]
    while stack:
        node, rows = stack.pop()
        if "split" not in node:
            out[rows] = np.asarray(node["value"], dtype=np.float64).reshape(K)
            continue
        right = bit(node["split"])[rows]
        stack += [(node["left"], rows[~right]), (node["right"], rows[right])]
    return out


def to_pool(model: Any, X: Any) -> Any:
    """``X`` as a ``catboost.Pool`` with the model's categorical columns (a Pool is used as it is)."""
    import catboost

    if isinstance(X, catboost.Pool):
        return X
    cats = model.get_cat_feature_indices() or None
    if cats and hasattr(X, "columns"):  # a frame is read by name (its columns may be in another order)
        cats = [model.feature_names_[i] for i in cats]
    return catboost.Pool(X, cat_features=cats)


def native_margin(model: Any, X: Any, tree_limit: int | None = None) -> np.ndarray:
    """``model.predict(X, prediction_type='RawFormulaVal')``: (n,) for one output, (n, K) for several."""
    kw = {} if tree_limit is None else {"ntree_end": int(tree_limit)}
    return np.asarray(model.predict(to_pool(model, X), prediction_type="RawFormulaVal", thread_count=1, **kw),
                      dtype=np.float64)


def native_values(model: Any, X: Any, interactions: bool) -> np.ndarray:
    """CatBoost's ShapValues / ShapInteractionValues in the engine's layout: (n, M+1, K) or (n, M+1, M+1, K)."""
    kind = "ShapInteractionValues" if interactions else "ShapValues"
    phi = np.asarray(model.get_feature_importance(data=to_pool(model, X), type=kind, thread_count=1),
                     dtype=np.float64)
    if interactions:
        return phi[..., None] if phi.ndim == 3 else np.moveaxis(phi, 1, -1)
    return phi[..., None] if phi.ndim == 2 else np.moveaxis(phi, 1, -1)


def symmetric_trees(model: Any) -> bool:
    """Whether the model's trees are symmetric (``grow_policy='SymmetricTree'``, CatBoost's default)."""
    from catboost import CatBoostError

    try:
        return model.get_all_params().get("grow_policy", "SymmetricTree") == "SymmetricTree"
    except CatBoostError:  # a model without stored parameters: the default policy
        return True


def warn_not_additive(values: np.ndarray, bias: np.ndarray, margin: np.ndarray) -> None:
    """CatBoost's own ShapValues of non-symmetric trees do not sum to its prediction (by up to ~10% of the margin
    on a binary model); say so, with the gap, instead of failing shap's 1% additivity check on CatBoost's numbers."""
    import warnings

    total = values.sum(axis=1) + bias
    gap = float(np.max(np.abs(total.reshape(margin.shape) - margin))) if margin.size else 0.0
    scale = float(np.max(np.abs(margin))) if margin.size else 0.0
    if gap > 1e-2 * max(scale, 1e-2):
        warnings.warn(
            f"CatBoost's own ShapValues (used for this model's categorical features) are not additive for "
            f"non-symmetric trees: they miss RawFormulaVal by up to {gap:.3g} (prediction scale {scale:.3g}) "
            "beyond the expected value. The values are CatBoost's; train with grow_policy='SymmetricTree', or "
            "without cat_features, for exact TreeSHAP.", UserWarning, stacklevel=4)


def native_expected_value(model: Any) -> Any:
    """The bias column of CatBoost's ShapValues (the same on every row), from one placeholder row."""
    import pandas as pd

    names = list(model.feature_names_)
    cats = set(model.get_cat_feature_indices())
    row = pd.DataFrame([["0" if j in cats else 0.0 for j in range(len(names))]], columns=names)
    bias = native_values(model, row, interactions=False)[0, -1, :]
    return bias[0] if len(bias) == 1 else [bias[i] for i in range(len(bias))]
