"""treelite models (from scikit-learn, XGBoost and treelite's builder) in shap_ext.TreeExplainer vs independent references."""
from __future__ import annotations

import json
import math
import operator

import numpy as np
import pytest

treelite = pytest.importorskip("treelite")
xgb = pytest.importorskip("xgboost")
import shap  # noqa: E402 - after the pytest.importorskip above
import treelite.gtil as gtil  # noqa: E402 - after the pytest.importorskip above
import treelite.model_builder as mb  # noqa: E402 - after the pytest.importorskip above
from sklearn.ensemble import (  # noqa: E402 - after the pytest.importorskip above
    GradientBoostingClassifier,
    GradientBoostingRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)

from hitml import shap_ext  # noqa: E402 - after the pytest.importorskip above
from hitml.shap_ext._treelite import TreeliteModel  # noqa: E402 - after the pytest.importorskip above
from _shapley import exact_shapley  # noqa: E402 - after the pytest.importorskip above


def _rel(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-12))


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 5)).astype(np.float32)
    y = X[:, 0] + X[:, 1] * X[:, 2] + 0.1 * rng.normal(size=400)
    yc = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.3)
    Xn = X.copy()
    Xn[rng.random(X.shape) < 0.15] = np.nan
    return X, y, yc, Xn


SKLEARN = {
    "rf_reg": lambda X, y, yc: RandomForestRegressor(8, max_depth=6, random_state=0).fit(X, y),
    "rf_clf": lambda X, y, yc: RandomForestClassifier(8, max_depth=6, random_state=0).fit(X, yc),
    "gb_reg": lambda X, y, yc: GradientBoostingRegressor(n_estimators=15, max_depth=3, random_state=0).fit(X, y),
    "gb_bin": lambda X, y, yc: GradientBoostingClassifier(n_estimators=15, max_depth=3, random_state=0).fit(X, yc > 0),
}


@pytest.mark.parametrize("name", list(SKLEARN))
def test_sklearn_treelite_matches_shap_cpp(data, name):
    X, y, yc, _ = data
    model = SKLEARN[name](X, y, yc)
    tm = treelite.sklearn.import_model(model)
    rows, bg = X[:40], X[200:260]
    # path-dependent: shap's C++ explainer on the original sklearn model
    ours = shap_ext.TreeExplainer(tm, backend="cpu")
    ref = shap.TreeExplainer(model)
    assert _rel(ours.shap_values(rows), ref.shap_values(rows)) < 1e-6
    assert _rel(np.ravel(ours.expected_value), np.ravel(ref.expected_value)) < 1e-6
    # interventional with background data
    ours = shap_ext.TreeExplainer(tm, bg, feature_perturbation="interventional", backend="cpu")
    ref = shap.TreeExplainer(model, bg, feature_perturbation="interventional")
    assert _rel(ours.shap_values(rows), ref.shap_values(rows)) < 1e-6
    assert _rel(np.ravel(ours.expected_value), np.ravel(ref.expected_value)) < 1e-6


XGB = {
    "reg": ({"objective": "reg:squarederror", "base_score": 0.3}, "y"),
    "binary": ({"objective": "binary:logistic", "base_score": 0.3}, "bin"),
    "multiclass": ({"objective": "multi:softprob", "num_class": 3}, "yc"),
}


def _xgb(data, kind):
    X, y, yc, Xn = data
    params, label = XGB[kind]
    lab = {"y": y, "bin": yc > 0, "yc": yc}[label]
    booster = xgb.train({"max_depth": 5, "eta": 0.3, **params}, xgb.DMatrix(Xn, label=lab), 12)
    return booster, treelite.frontend.from_xgboost(booster), Xn


def _contribs(booster, X, interactions=False):
    out = booster.predict(xgb.DMatrix(X), pred_contribs=not interactions, pred_interactions=interactions)
    if interactions:
        return out.transpose(0, 2, 3, 1)[:, :-1, :-1] if out.ndim == 4 else out[:, :-1, :-1]
    return out.transpose(0, 2, 1)[:, :-1] if out.ndim == 3 else out[:, :-1]


@pytest.mark.parametrize("kind", list(XGB))
def test_xgboost_treelite_with_nan(data, kind):
    booster, tm, Xn = _xgb(data, kind)
    rows, bg = Xn[:40], Xn[200:280]
    # path-dependent vs XGBoost's exact pred_contribs (float32 arithmetic there: 1e-5)
    ours = shap_ext.TreeExplainer(tm, backend="cpu")
    assert _rel(ours.shap_values(rows), _contribs(booster, rows)) < 1e-5
    bias = booster.predict(xgb.DMatrix(rows[:1]), pred_contribs=True)[0, ..., -1]
    assert _rel(np.ravel(ours.expected_value), np.ravel(bias)) < 1e-5
    # interventional vs shap's C++ interventional explainer on the booster (float32 thresholds on both sides)
    ours = shap_ext.TreeExplainer(tm, bg, backend="cpu")
    ref = shap.TreeExplainer(booster, bg, feature_perturbation="interventional")
    assert _rel(ours.shap_values(rows), ref.shap_values(rows)) < 1e-5
    assert _rel(np.ravel(ours.expected_value), np.ravel(ref.expected_value)) < 1e-5


def test_xgboost_treelite_interactions_and_hook(data):
    booster, tm, Xn = _xgb(data, "multiclass")
    rows = Xn[:8]
    explainer = shap.TreeExplainer(tm, backend="cpu")  # through the hook installed by `import shap_ext`
    assert isinstance(explainer, shap_ext.TreeExplainer)
    assert _rel(explainer.shap_interaction_values(rows), _contribs(booster, rows, interactions=True)) < 1e-5


def test_probability_output_binary(data):
    booster, tm, Xn = _xgb(data, "binary")
    rows, bg = Xn[:30], Xn[200:260]
    ours = shap_ext.TreeExplainer(tm, bg, model_output="probability", backend="cpu")
    ref = shap.TreeExplainer(booster, bg, model_output="probability")
    assert _rel(ours.shap_values(rows), ref.shap_values(rows)) < 1e-5
    assert _rel(np.ravel(ours.expected_value), np.ravel(ref.expected_value)) < 1e-6


def test_softmax_probability_refused(data):
    _, tm, Xn = _xgb(data, "multiclass")
    with pytest.raises(NotImplementedError, match="softmax"):
        shap_ext.TreeExplainer(tm, Xn[200:220], model_output="probability", backend="cpu")


def test_xgboost_categorical_treelite():
    rng = np.random.default_rng(1)
    X = np.column_stack([rng.normal(size=400), rng.integers(0, 40, 400), rng.normal(size=400)]).astype(np.float32)
    X[rng.random(X.shape) < 0.1] = np.nan
    y = np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 1]) % 3

    def dm(A, **kw):
        return xgb.DMatrix(A, feature_types=["q", "c", "q"], enable_categorical=True, **kw)

    booster = xgb.train({"max_depth": 4, "max_cat_to_onehot": 1}, dm(X, label=y), 10)
    tm = treelite.frontend.from_xgboost(booster)
    conv = TreeliteModel(tm)
    assert conv.categories and conv.categories.swap.any()  # XGBoost lists the categories going right
    X_odd = np.vstack([X, [[0.5, 77.0, 0.1], [0.5, -3.0, 0.1], [0.5, 2.7, np.nan]]]).astype(np.float32)
    assert _rel(conv.predict_margin(X_odd), gtil.predict(tm, X_odd, pred_margin=True).reshape(-1)) < 1e-6
    rows = X[:40]
    ours = shap_ext.TreeExplainer(tm, backend="cpu")
    ref = booster.predict(dm(rows), pred_contribs=True)[:, :-1]
    assert _rel(ours.shap_values(rows), ref) < 1e-5
    inter = shap_ext.TreeExplainer(tm, X[200:260], backend="cpu")  # expected value from the category-aware margin
    margin = gtil.predict(tm, X[200:260], pred_margin=True).reshape(-1)
    assert abs(inter.expected_value - margin.mean()) < 1e-5 * abs(margin).max()
    sv = inter.shap_values(rows)  # check_additivity against the category-aware margin
    assert np.allclose(sv.sum(1) + inter.expected_value, gtil.predict(tm, rows, pred_margin=True).reshape(-1),
                       rtol=1e-5, atol=1e-5)


# -- hand-built treelite models: every comparison operator, missing covers, unsupported content --------------------
_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


def _built_model(ops, *, covers=True, threshold_type="float32", num_class=(1,), postprocessor="identity"):
    """Two depth-2 trees over 3 features; node 0 and its children use the given comparison operators."""
    n_out = num_class[0]
    builder = mb.ModelBuilder(
        threshold_type=threshold_type, leaf_output_type=threshold_type,
        metadata=mb.Metadata(num_feature=3, task_type="kRegressor" if n_out == 1 else "kMultiClf",
                             average_tree_output=False, num_target=len(num_class), num_class=list(num_class),
                             leaf_vector_shape=(1, n_out)),
        tree_annotation=mb.TreeAnnotation(num_tree=2, target_id=[0, 0], class_id=[0, 0] if n_out == 1 else [-1, -1]),
        postprocessor=mb.PostProcessorFunc(name=postprocessor), base_scores=[0.25] * n_out * len(num_class),
    )
    spec = [  # (feature, threshold, default_left, hess per node)
        [(0, 0.5, True), (1, -0.25, False), (2, 1.0, True)],
        [(2, 0.0, False), (0, 0.5, True), (1, 0.75, False)],
    ]
    hess = [[10.0, 6.0, 4.0, 2.0, 4.0, 3.0, 1.0], [10.0, 3.0, 7.0, 1.0, 2.0, 5.0, 2.0]]
    for t in range(2):
        builder.start_tree()
        for node, (f, thr, dleft) in enumerate(spec[t]):
            builder.start_node(node)
            builder.numerical_test(f, thr, default_left=dleft, opname=ops[node], left_child_key=2 * node + 1,
                                   right_child_key=2 * node + 2)
            if covers:
                builder.sum_hess(hess[t][node])
            builder.end_node()
        for leaf in range(3, 7):
            builder.start_node(leaf)
            value = float(leaf * (t + 1)) - 4.0
            builder.leaf(value if n_out == 1 else [value * (k + 1) for k in range(n_out)])
            if covers:
                builder.sum_hess(hess[t][leaf])
            builder.end_node()
        builder.end_tree()
    return builder.commit()


def _json_cond_exp(tree, x, S):
    """E[tree(x) | x_S] with cover weighting, read straight from treelite's JSON (the path-dependent reference)."""
    nodes = {nd["node_id"]: nd for nd in tree["nodes"]}

    def rec(i):
        nd = nodes[i]
        if "leaf_value" in nd:
            return float(np.asarray(nd["leaf_value"]).reshape(-1)[0])
        f = nd["split_feature_id"]
        left, right = nd["left_child"], nd["right_child"]
        if f in S:
            v = x[f]
            if math.isnan(v):
                return rec(left if nd["default_left"] else right)
            return rec(left if _OPS[nd["comparison_op"]](np.float32(v), np.float32(nd["threshold"])) else right)
        cover = nd["sum_hess"]
        return (nodes[left]["sum_hess"] * rec(left) + nodes[right]["sum_hess"] * rec(right)) / cover

    return rec(0)


@pytest.mark.parametrize("ops", [("<", "<", "<"), (">", ">=", "<="), (">=", ">", "<")])
def test_comparison_operators_brute_force(ops):
    tm = _built_model(ops)
    doc = json.loads(tm.dump_as_json(pretty_print=False))
    thr = np.float32
    # rows sitting exactly on thresholds, just beside them, and missing
    X = np.array([[0.5, -0.25, 1.0], [np.nextafter(thr(0.5), thr(-1)), 0.75, 0.0], [0.5000001, np.nan, 1.0],
                  [np.nan, -0.2500001, np.nextafter(thr(0.0), thr(1))], [-1.0, 2.0, np.nan]], dtype=np.float32)
    explainer = shap_ext.TreeExplainer(tm, backend="cpu")
    sv = explainer.shap_values(X)
    margin = gtil.predict(tm, X, pred_margin=True).reshape(-1)
    for r, x in enumerate(X):
        def value(S, x=x):
            return 0.25 + sum(_json_cond_exp(tree, x, S) for tree in doc["trees"])

        assert np.allclose(sv[r], exact_shapley(value, 3), rtol=1e-6, atol=1e-9)
        assert np.isclose(sv[r].sum() + explainer.expected_value, margin[r], rtol=1e-6)
    # interventional with one background row: v(S) = f(x_S, b_rest), f = treelite's own predictor
    b = np.array([[0.1, 0.3, -0.4]], dtype=np.float32)
    inter = shap_ext.TreeExplainer(tm, b, feature_perturbation="interventional", backend="cpu").shap_values(X)
    for r, x in enumerate(X):
        def hybrid(S, x=x):
            z = b.copy()
            z[0, list(S)] = x[list(S)]
            return float(gtil.predict(tm, z, pred_margin=True).reshape(-1)[0])

        assert np.allclose(inter[r], exact_shapley(hybrid, 3), rtol=1e-6, atol=1e-9)


def test_missing_covers_needs_background():
    tm = _built_model(("<=", "<=", "<="), covers=False)
    with pytest.raises(ValueError, match="node covers"):
        shap_ext.TreeExplainer(tm, backend="cpu")
    rng = np.random.default_rng(3)
    bg = rng.normal(size=(50, 3)).astype(np.float32)
    X = rng.normal(size=(10, 3)).astype(np.float32)
    sv = shap_ext.TreeExplainer(tm, bg, backend="cpu").shap_values(X)  # interventional: no covers needed
    margin = gtil.predict(tm, X, pred_margin=True).reshape(-1)
    base = gtil.predict(tm, bg, pred_margin=True).mean()
    assert np.allclose(sv.sum(1) + base, margin, rtol=1e-6)


def test_multiclass_leaf_vectors():
    tm = _built_model(("<=", ">", "<"), num_class=(3,), postprocessor="identity_multiclass")
    X = np.random.default_rng(4).normal(size=(20, 3)).astype(np.float32)
    explainer = shap_ext.TreeExplainer(tm, backend="cpu")
    sv = explainer.shap_values(X)
    assert sv.shape == (20, 3, 3)
    margin = gtil.predict(tm, X, pred_margin=True).reshape(20, 3)
    assert np.allclose(sv.sum(1) + np.asarray(explainer.expected_value), margin, rtol=1e-6)


def test_unsupported_content_is_refused():
    tm = _built_model(("==", "<=", "<="))
    with pytest.raises(NotImplementedError, match="comparison operator '=='"):
        shap_ext.TreeExplainer(tm, backend="cpu")


class _FakeCuML:
    """Duck-typed stand-in for a cuML forest: only ``as_treelite()``."""

    def __init__(self, tm):
        self._tm = tm

    def as_treelite(self):
        return self._tm


def test_cuml_duck_typed(data):
    X, y, yc, _ = data
    model = SKLEARN["rf_reg"](X, y, yc)
    fake = _FakeCuML(treelite.sklearn.import_model(model))
    assert _rel(shap_ext.TreeExplainer(fake, backend="cpu").shap_values(X[:20]),
                shap.TreeExplainer(model).shap_values(X[:20])) < 1e-6
    fake_bytes = _FakeCuML(treelite.sklearn.import_model(model).serialize_bytes())  # older cuML: bytes
    assert _rel(shap_ext.TreeExplainer(fake_bytes, backend="cpu").shap_values(X[:20]),
                shap.TreeExplainer(model).shap_values(X[:20])) < 1e-6


@pytest.mark.gpu
def test_gpu_matches_cpu_on_treelite(data):
    booster, tm, Xn = _xgb(data, "multiclass")
    rows = Xn[:100]
    cpu = shap_ext.TreeExplainer(tm, backend="cpu").shap_values(rows)
    gpu = shap_ext.TreeExplainer(tm, backend="gpu").shap_values(rows)
    assert _rel(gpu, cpu) < 1e-6
    assert _rel(gpu, _contribs(booster, rows)) < 1e-5
