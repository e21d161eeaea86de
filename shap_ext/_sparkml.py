"""Spark ML's own tree models (``pyspark.ml`` decision trees, random forests, gradient-boosted trees) as shap's
dict-of-trees model format, read from the JVM model's node objects, with a margin predictor of our own."""
from __future__ import annotations

from typing import Any

import numpy as np

from ._categories import CategoricalSplits
from ._compat import spark_java_object

__all__ = ["SPARK_ML_MODELS", "SparkMLModel", "is_spark_ml_model"]

# class name -> (kind, family); kind "regression" | "classification", family "tree" | "forest" | "gbt"
SPARK_ML_MODELS = {
    "DecisionTreeRegressionModel": ("regression", "tree"),
    "RandomForestRegressionModel": ("regression", "forest"),
    "GBTRegressionModel": ("regression", "gbt"),
    "DecisionTreeClassificationModel": ("classification", "tree"),
    "RandomForestClassificationModel": ("classification", "forest"),
    "GBTClassificationModel": ("classification", "gbt"),
}


def is_spark_ml_model(model: Any) -> bool:
    """True for a fitted ``pyspark.ml`` tree model of the six kinds above (classic Spark, with a JVM model)."""
    return type(model).__module__.startswith("pyspark.ml.") and type(model).__name__ in SPARK_ML_MODELS \
        and spark_java_object(model) is not None


class _Node:
    """One node as Spark holds it: a leaf's values, or a split (continuous threshold or category sets)."""

    __slots__ = ("categorical", "count", "feature", "is_left", "left", "left_set", "right", "right_set",
                 "threshold", "value")

    def __init__(self) -> None:
        self.left = self.right = -1
        self.feature = -1
        self.threshold = np.nan
        self.categorical = False
        self.is_left = True
        self.left_set: frozenset[float] = frozenset()
        self.right_set: frozenset[float] = frozenset()
        self.value: np.ndarray | None = None
        self.count = np.nan


def _read_tree(root: Any, kind: str, n_classes: int) -> list[_Node]:
    """The nodes of one JVM tree (``org.apache.spark.ml.tree.Node``) in pre-order, the root first.

    Spark's node API (mllib/src/main/scala/org/apache/spark/ml/tree/Node.scala): ``InternalNode`` has ``split``,
    ``leftChild``, ``rightChild``; ``LeafNode`` has ``prediction``; both have ``impurityStats`` (null for models
    loaded from the old mllib format: then no covers are known). Splits (Split.scala): ``ContinuousSplit`` goes left
    iff ``features(featureIndex) <= threshold``; ``CategoricalSplit`` keeps ``leftCategories`` and
    ``rightCategories`` (both sorted, a partition of ``[0, numCategories)``).
    """
    nodes: list[_Node] = []
    stack: list[tuple[Any, int, bool]] = [(root, -1, False)]
    while stack:
        jnode, parent, is_right = stack.pop()
        i = len(nodes)
        nd = _Node()
        nodes.append(nd)
        if parent >= 0:
            if is_right:
                nodes[parent].right = i
            else:
                nodes[parent].left = i
        stats = jnode.impurityStats()
        if jnode.getClass().getSimpleName() == "LeafNode":
            if kind == "classification":
                if stats is None:
                    raise ValueError("a Spark ML classification tree without impurity statistics (a model in the "
                                     "old mllib format) has no class fractions at its leaves")
                counts = np.asarray(list(stats.stats()), dtype=np.float64)
                if counts.shape != (n_classes,):
                    raise ValueError(f"Spark ML leaf holds {counts.size} class counts for {n_classes} classes")
                nd.value = counts
            else:
                nd.value = np.asarray([float(jnode.prediction())])
            nd.count = float(stats.count()) if stats is not None else np.nan
            continue
        split = jnode.split()
        nd.feature = int(split.featureIndex())
        if split.getClass().getSimpleName() == "CategoricalSplit":
            nd.categorical = True
            nd.left_set = frozenset(float(c) for c in split.leftCategories())
            nd.right_set = frozenset(float(c) for c in split.rightCategories())
            # CategoricalSplit.isLeft: the set Spark tests is the left one iff it holds at most half the categories
            nd.is_left = len(nd.left_set) <= (len(nd.left_set) + len(nd.right_set)) // 2
        else:
            nd.threshold = float(split.threshold())
        # pushed right first, so the left subtree is numbered first (pre-order)
        stack.append((jnode.rightChild(), i, True))
        stack.append((jnode.leftChild(), i, False))
    return nodes


class SparkMLModel:
    """A Spark ML tree model read once into shap's dict format, with its categorical splits and a predictor.

    Units explained (``model_output="raw"``), from the models' prediction code in Spark
    (mllib/src/main/scala/org/apache/spark/ml/{regression,classification}/*.scala):

    - ``DecisionTreeRegressionModel``: ``prediction``; ``RandomForestRegressionModel``: the mean of its trees'
      predictions; ``GBTRegressionModel``: ``sum_t treeWeights[t] * tree_t`` (``prediction``).
    - ``GBTClassificationModel``: ``rawPrediction[1]``, Spark's raw prediction, as shap's own parse explains it.
      Spark's ``predictRaw`` is ``[-m, m]`` with ``m = sum_t treeWeights[t] * tree_t``, and ``probability[1] =
      1 / (1 + exp(-2 m))`` (mllib/.../tree/loss/LogLoss.scala, ``computeProbability``): ``m`` is half the
      log-odds, so shap's ``model_output="probability"`` (a logistic of the raw output) does not apply; as in shap,
      the trees are declared ``raw_value`` and shap refuses it.
    - ``DecisionTreeClassificationModel``: ``probability`` (the leaf's class counts over their sum), one output per
      class; ``RandomForestClassificationModel``: ``rawPrediction / numTrees`` (``predictRaw`` sums each tree's
      class fractions), which is ``probability`` (their sum is ``numTrees`` wherever every leaf holds data).

    Splits: a continuous split sends ``x`` left iff ``x <= threshold`` (NaN goes right, as ``NaN <= t`` is false);
    a categorical split tests set membership of the double value (``CategoricalSplit.shouldGoLeft``): where the
    left set holds at most half the categories (``isLeft``), values in it go left and every other value (NaN, a
    value that is no category code) goes right; otherwise values in the right set go right and every other value
    goes left. In the engine's form the left set (or, exchanging the children, the right set) is the bitset; the
    row reader sends values that are no category code outside every bitset (``InputReader.missing_rules``).

    Node covers are ``impurityStats.count`` of the leaves (the weighted training rows), summed up the tree;
    ``covers_known`` is False for models without impurity statistics.
    """

    def __init__(self, model: Any) -> None:
        name = type(model).__name__
        if name not in SPARK_ML_MODELS:
            raise TypeError(f"not a Spark ML tree model: {type(model).__qualname__}")
        kind, family = SPARK_ML_MODELS[name]
        self.kind, self.family, self.model_name = kind, family, name
        self.n_features_in_ = int(model.numFeatures)
        self.features_col = model.getFeaturesCol()
        self.n_classes = int(model.numClasses) if kind == "classification" else 1
        self.input_dtype = np.dtype(np.float64)  # Spark's vectors hold doubles and its splits compare doubles
        if family == "tree":
            jtrees = [spark_java_object(model)]
            weights = np.ones(1)
        else:
            jtrees = [spark_java_object(t) for t in model.trees]
            weights = np.asarray(model.treeWeights, dtype=np.float64)
        if not jtrees:
            raise ValueError(f"{name} has no trees")
        n_tree_classes = self.n_classes if kind == "classification" and family != "gbt" else 1
        self.spark_trees = [_read_tree(jt.rootNode(), "classification" if n_tree_classes > 1 else "regression",
                                       n_tree_classes) for jt in jtrees]
        self.tree_scale = self._scales(weights, len(jtrees))
        self.n_outputs = n_tree_classes
        self.covers_known = all(not np.isnan(nd.count) for tree in self.spark_trees for nd in tree
                                if nd.left < 0)
        self.base_offset = np.zeros(self.n_outputs)
        trees, left_sets, swaps = [], {}, []
        for t, nodes in enumerate(self.spark_trees):
            trees.append(self._shap_tree(t, nodes, left_sets, swaps))
        max_nodes = max(len(tr["children_left"]) for tr in trees)
        swap = np.zeros((len(trees), max_nodes), dtype=bool)
        for t, node in swaps:
            swap[t, node] = True
        self.categories = CategoricalSplits((len(trees), max_nodes), left_sets, swap)
        self.cat_features = np.asarray(sorted({nd.feature for tree in self.spark_trees for nd in tree
                                               if nd.categorical}), dtype=np.int64)
        if kind == "regression" or family == "gbt":   # GBT classifiers: regression trees on half the log-odds
            tree_output, objective = "raw_value", "squared_error"
        else:
            tree_output, objective = "probability", None
        self.shap_dict = {"trees": trees, "base_offset": self.base_offset, "input_dtype": np.float64,
                          "internal_dtype": np.float64, "tree_output": tree_output, "objective": objective}

    def _scales(self, weights: np.ndarray, n_trees: int) -> np.ndarray:
        """What each tree's leaf values are multiplied by to give the explained output (see the class notes)."""
        if self.family == "forest":
            return np.full(n_trees, 1.0 / n_trees)
        if self.family == "gbt":
            return weights
        return np.ones(n_trees)

    def _leaf_values(self, nd: _Node, scale: float) -> np.ndarray:
        if self.n_outputs > 1:  # class counts -> class fractions (predictRaw skips a leaf whose counts sum to 0)
            total = nd.value.sum()
            return (nd.value / total if total != 0 else np.zeros_like(nd.value)) * scale
        return nd.value * scale

    def _shap_tree(self, t: int, nodes: list[_Node], left_sets: dict, swaps: list) -> dict[str, np.ndarray]:
        n = len(nodes)
        cl = np.full(n, -1, dtype=np.int32)
        cr = np.full(n, -1, dtype=np.int32)
        cd = np.full(n, -1, dtype=np.int32)
        feat = np.full(n, -2, dtype=np.int32)
        thr = np.full(n, -2.0, dtype=np.float64)
        vals = np.zeros((n, self.n_outputs), dtype=np.float64)
        cover = np.zeros(n, dtype=np.float64)
        scale = float(self.tree_scale[t])
        for i in range(n - 1, -1, -1):  # children come after their parent in pre-order
            nd = nodes[i]
            if nd.left < 0:
                vals[i] = self._leaf_values(nd, scale)
                cover[i] = 0.0 if np.isnan(nd.count) else nd.count
                continue
            cl[i], cr[i], feat[i] = nd.left, nd.right, nd.feature
            cover[i] = cover[nd.left] + cover[nd.right]
            if not nd.categorical:
                thr[i] = nd.threshold
                cd[i] = nd.right  # NaN <= t is false: NaN goes right
                continue
            thr[i] = 0.0
            if nd.is_left:
                left_sets[(t, i)] = [int(c) for c in nd.left_set]
                cd[i] = nd.right  # a value outside the tested (left) set goes right
            else:
                # the tested set is the right one: stored as the engine's LEFT set with the children exchanged, so
                # that every value outside it lands on Spark's left child
                left_sets[(t, i)] = [int(c) for c in nd.right_set]
                swaps.append((t, i))
                cd[i] = nd.left
        return {"children_left": cl, "children_right": cr, "children_default": cd, "features": feat,
                "thresholds": thr, "values": vals, "node_sample_weight": cover}

    # -- prediction: Spark's own routing rules on the nodes as Spark holds them ---------------------------------
    def predict_margin(self, X: np.ndarray, tree_limit: int | None = None) -> np.ndarray:
        """The explained output ``(n,)`` or ``(n, K)`` of the first ``tree_limit`` trees: each tree walked with
        Spark's split rules (``ContinuousSplit`` / ``CategoricalSplit.shouldGoLeft``) on float64 rows."""
        X = np.asarray(X, dtype=np.float64)
        n = X.shape[0]
        T = len(self.spark_trees) if tree_limit is None else min(int(tree_limit), len(self.spark_trees))
        out = np.zeros((n, self.n_outputs))
        rows = np.arange(n)
        for t in range(T):
            nodes = self.spark_trees[t]
            scale = float(self.tree_scale[t])
            left = np.asarray([nd.left for nd in nodes])
            right = np.asarray([nd.right for nd in nodes])
            feature = np.asarray([max(nd.feature, 0) for nd in nodes])
            threshold = np.asarray([nd.threshold for nd in nodes])
            leaf = np.stack([self._leaf_values(nd, scale) if nd.left < 0 else np.zeros(self.n_outputs)
                             for nd in nodes])
            node = np.zeros(n, dtype=np.int64)
            while True:
                live = left[node] >= 0
                if not live.any():
                    break
                x = X[rows, feature[node]]
                with np.errstate(invalid="ignore"):
                    go_left = x <= threshold[node]   # categorical nodes (NaN threshold) are set below
                for i in np.unique(node[live]):
                    nd = nodes[i]
                    if not nd.categorical:
                        continue
                    at = node == i
                    tested = np.fromiter(nd.left_set if nd.is_left else nd.right_set, dtype=np.float64)
                    member = np.isin(x[at], tested)
                    go_left[at] = member if nd.is_left else ~member
                node = np.where(live, np.where(go_left, left[node], right[node]), node)
            out += leaf[node]
        return out[:, 0] if self.n_outputs == 1 else out
