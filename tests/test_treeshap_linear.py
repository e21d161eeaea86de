"""The per-tree (Linear TreeShap, quadrature) CPU prototype against independent references: brute-force Shapley over
all subsets, XGBoost ``pred_contribs``, LightGBM ``pred_contrib`` and shap's own C++ TreeExplainer."""
import numpy as np
import pytest

from _shapley import exact_shapley
from hitml.kernels.treeshap._cpu_linear import linear_shap_values


# ----------------------------------------------------------------------------------------- brute force, by hand
def _random_tree(rng, M, depth, K):
    """Dense arrays of a random tree on few features (repeats on a path), zero and inconsistent covers, NaN
    defaults to the left, the right or neither child (-1)."""
    cl, cr, cd, ft, th, cov, val = [], [], [], [], [], [], []

    def node(d):
        i = len(cl)
        for a in (cl, cr, cd, ft):
            a.append(-1)
        th.append(0.0)
        cov.append(float(rng.choice([0.0, 1.0, 2.0, 3.0, 5.5], p=[0.1, 0.2, 0.3, 0.2, 0.2])))
        val.append(rng.normal(size=K))
        if d < depth and (d < 2 or rng.random() < 0.8):
            ft[i] = int(rng.integers(M))
            th[i] = float(rng.choice([-0.5, 0.0, 0.5]))
            cl[i] = node(d + 1)
            cr[i] = node(d + 1)
            cd[i] = int(rng.choice([cl[i], cr[i], -1], p=[0.45, 0.45, 0.1]))
        return i

    node(0)
    return (np.array([cl]), np.array([cr]), np.array([cd]), np.array([ft]), np.array([th]),
            np.array([val]), np.array([cov]))


def _expectation(tree, x, S):
    """E[f | x_S], path-dependent: features in S follow the row (NaN: the default child, none if neither), the
    others average the children by cover(child) / cover(parent) (0 where the parent's cover is 0)."""
    cl, cr, cd, ft, th, val, cov = (a[0] for a in tree)

    def rec(n):
        if cl[n] < 0:
            return val[n]
        f = ft[n]
        if f in S:
            v = x[f]
            child = cd[n] if np.isnan(v) else (cl[n] if v <= th[n] else cr[n])
            return rec(child) if child >= 0 else np.zeros(val.shape[1])
        pc = cov[n]
        if pc <= 0:
            return np.zeros(val.shape[1])
        return cov[cl[n]] / pc * rec(cl[n]) + cov[cr[n]] / pc * rec(cr[n])

    return rec(0)


@pytest.mark.parametrize("seed", range(12))
def test_matches_brute_force_shapley_with_repeats_zero_covers_and_nan(seed):
    rng = np.random.default_rng(seed)
    M, K = 5, 2
    tree = _random_tree(rng, M, depth=int(rng.integers(4, 9)), K=K)
    cl, cr, cd, ft, th, val, cov = tree
    X = rng.choice([-1.0, -0.5, 0.0, 0.25, 0.5, 1.0, np.nan], size=(6, M))
    phi = linear_shap_values(cl, cr, cd, ft, th, val, cov, np.array([0.3, -0.1]), X)
    for i, x in enumerate(X):
        ref = exact_shapley(lambda S: _expectation(tree, x, S), M)          # (M, K)
        np.testing.assert_allclose(phi[i, :M], ref, rtol=1e-11, atol=1e-12 * (1 + np.abs(ref).max()))
        np.testing.assert_allclose(phi[i, M], _expectation(tree, x, frozenset()) + [0.3, -0.1], rtol=1e-12,
                                   atol=1e-12)


def test_deep_spine_tree_on_three_features_matches_brute_force():
    """A path of 40 splits on 3 features (Q from merged elements, not depth) and 20 rows through it."""
    rng = np.random.default_rng(7)
    depth, M = 40, 3
    n = 2 * depth + 1
    cl = np.full(n, -1)
    cr = np.full(n, -1)
    ft = np.full(n, -1)
    th = np.zeros(n)
    for d in range(depth):
        cl[2 * d], cr[2 * d] = 2 * d + 1, 2 * d + 2
        ft[2 * d] = rng.integers(M)
        th[2 * d] = rng.normal() * 0.1
    cov = rng.uniform(0.5, 2.0, size=n)
    val = rng.normal(size=(n, 1))
    tree = (cl[None], cr[None], cl[None], ft[None], th[None], val[None], cov[None])
    X = rng.normal(size=(20, M)) * 0.1
    phi = linear_shap_values(*tree[:5], tree[5], tree[6], 0.0, X)
    for i, x in enumerate(X):
        ref = exact_shapley(lambda S: _expectation(tree, x, S), M)
        np.testing.assert_allclose(phi[i, :M], ref, rtol=1e-10, atol=1e-13)


def test_categorical_splits_raise():
    cl = np.array([[1, -1, -1]])
    cr = np.array([[2, -1, -1]])
    cats = (np.array([[True, False, False]]), np.zeros((1, 3), np.int64), np.ones((1, 3), np.int32),
            np.array([1], np.uint32))
    with pytest.raises(NotImplementedError):
        linear_shap_values(cl, cr, cl, np.zeros((1, 3)), np.zeros((1, 3)), np.zeros((1, 3)), np.ones((1, 3)), 0.0,
                           np.zeros((1, 1)), categories=cats)


# ------------------------------------------------------------------------------------------ library references
def _ensemble(model):
    """shap's TreeEnsemble arrays as hitml's explainer holds them (the reference is the library's own output)."""
    from hitml.shap_ext import TreeExplainer

    ens = TreeExplainer(model, backend="cpu", progress=False).model
    return (ens.children_left, ens.children_right, ens.children_default, ens.features, ens.thresholds, ens.values,
            ens.node_sample_weight, ens.base_offset), ens.input_dtype


def _data(rng, n, M, nan=0.1):
    X = rng.normal(size=(n, M))
    y = X[:, 0] + np.sin(3 * X[:, 1]) * X[:, 2] + 0.3 * (X[:, 3] > 0) + 0.1 * rng.normal(size=n)
    X[rng.random(X.shape) < nan] = np.nan
    return X, y


@pytest.mark.parametrize("seed", range(3))
def test_xgboost_regression_matches_pred_contribs(seed):
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(seed)
    X, y = _data(rng, 1500, 8)
    depth = (4, 8, 12)[seed]
    model = xgb.XGBRegressor(n_estimators=15, max_depth=depth, learning_rate=0.3, base_score=0.2,
                             random_state=seed).fit(X, y)
    arrays, dtype = _ensemble(model)
    Xt = X[:300]                       # rows in several row blocks, the last one partly filled
    phi = linear_shap_values(*arrays, Xt, input_dtype=dtype)[:, :, 0]
    ref = model.get_booster().predict(xgb.DMatrix(Xt), pred_contribs=True)
    # XGBoost's TreeSHAP runs in float32 (src/predictor/treeshap.h: CalculateContributions, float out_contribs)
    np.testing.assert_allclose(phi, ref, rtol=0, atol=2e-5 * (1 + np.abs(ref).max()))
    np.testing.assert_allclose(phi.sum(1), model.predict(Xt, output_margin=True), rtol=0, atol=1e-4)


def test_xgboost_multiclass_matches_pred_contribs():
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(3)
    X, y = _data(rng, 1500, 6)
    cls = np.digitize(y, np.quantile(y, [0.33, 0.66]))
    model = xgb.XGBClassifier(n_estimators=6, max_depth=10, random_state=0).fit(X, cls)
    arrays, dtype = _ensemble(model)
    Xt = X[:40]
    phi = linear_shap_values(*arrays, Xt, input_dtype=dtype)                 # (n, M + 1, K)
    ref = model.get_booster().predict(xgb.DMatrix(Xt), pred_contribs=True)   # (n, K, M + 1)
    np.testing.assert_allclose(phi.transpose(0, 2, 1), ref, rtol=0, atol=2e-5 * (1 + np.abs(ref).max()))


@pytest.mark.parametrize("seed", range(2))
def test_lightgbm_matches_pred_contrib(seed):
    lgb = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(10 + seed)
    X, y = _data(rng, 2000, 8)
    model = lgb.LGBMRegressor(n_estimators=20, num_leaves=int(rng.choice([31, 255])), min_child_samples=2,
                              verbose=-1, random_state=seed).fit(X, y)
    arrays, dtype = _ensemble(model)
    Xt = X[:60]
    phi = linear_shap_values(*arrays, Xt, input_dtype=dtype)[:, :, 0]
    ref = model.predict(Xt, pred_contrib=True)            # LightGBM's TreeSHAP runs in double
    np.testing.assert_allclose(phi, ref, rtol=1e-10, atol=1e-10 * (1 + np.abs(ref).max()))


def _sklearn_arrays(model):
    """Dense arrays read from scikit-learn's own ``tree_`` (not shap's parsing): the forest's mean as the sum of
    trees of values / n_trees; ``x <= threshold`` goes left (sklearn.tree._tree.Tree.apply), rows in float32."""
    trees = [e.tree_ for e in model.estimators_]
    T, N = len(trees), max(t.node_count for t in trees)
    K = trees[0].value.shape[1] * trees[0].value.shape[2]
    cl = np.full((T, N), -1)
    cr = np.full((T, N), -1)
    ft = np.full((T, N), -1)
    th = np.zeros((T, N))
    val = np.zeros((T, N, K))
    cov = np.zeros((T, N))
    for i, t in enumerate(trees):
        n = t.node_count
        cl[i, :n], cr[i, :n], th[i, :n] = t.children_left, t.children_right, t.threshold
        ft[i, :n] = np.where(t.children_left >= 0, t.feature, -1)
        val[i, :n] = t.value.reshape(n, K) / T
        cov[i, :n] = t.weighted_n_node_samples
    return (cl, cr, cl, ft, th, val, cov, 0.0), np.float32


@pytest.mark.parametrize("kind", ["rf_reg", "et_reg", "rf_clf"])
def test_deep_sklearn_forests_match_shap_cpp(kind):
    pytest.importorskip("sklearn")
    from sklearn.ensemble import ExtraTreesRegressor, RandomForestClassifier, RandomForestRegressor

    from hitml.shap_ext._explainer import _ShapTreeExplainer

    rng = np.random.default_rng(21)
    X, y = _data(rng, 3000, 10, nan=0.0)
    params = dict(n_estimators=4, max_depth=25, random_state=0, n_jobs=1)
    if kind == "rf_reg":
        model = RandomForestRegressor(**params).fit(X, y)
    elif kind == "et_reg":
        model = ExtraTreesRegressor(**params).fit(X, y)
    else:
        model = RandomForestClassifier(**params).fit(X, np.digitize(y, np.quantile(y, [0.3, 0.7])))
    assert max(e.tree_.max_depth for e in model.estimators_) >= 20
    arrays, dtype = _sklearn_arrays(model)
    Xt = X[:25]
    phi = linear_shap_values(*arrays, Xt, input_dtype=dtype)
    ref = np.asarray(_ShapTreeExplainer(model).shap_values(Xt))             # shap's C++ tree_shap, float64
    ref = ref.reshape(phi[:, :-1].shape)
    np.testing.assert_allclose(phi[:, :-1], ref, rtol=1e-9, atol=1e-10 * (1 + np.abs(ref).max()))
    pred = model.predict_proba(Xt) if kind == "rf_clf" else model.predict(Xt)[:, None]
    np.testing.assert_allclose(phi.sum(1), pred, rtol=0, atol=1e-9)
