"""CPU TreeSHAP engine against GPUTreeShap's fixtures, brute-force Shapley values and shap's C++ extension."""
import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hitml.kernels.treeshap import extract_paths, interaction_values, interventional_shap_values, shap_values

from _trees import basic_tree, duplicates_tree
from _shapley import exact_shapley

# --------------------------------------------------------------------------------------------- fixtures


def _basic():
    cl, cr, ft, th, val, cov = basic_tree()
    return extract_paths(cl, cr, cl, ft, th, val, cov, 0.0, n_features=3)


def test_fixture_basic_paths():
    phi = shap_values(_basic(), np.array([[1.0, 1, 0], [1, 0, 0]]), progress=False)[..., 0]
    np.testing.assert_allclose(phi, [[0.6277778, 0.5027776, 0.1694444, -0.3],
                                     [0.24444449, -1.005555, 0.0611111, -0.3]], atol=1e-6)


def test_fixture_duplicates():
    cl, cr, ft, th, val, cov = duplicates_tree()
    ps = extract_paths(cl, cr, cl, ft, th, val, cov, 0.0, n_features=1)
    np.testing.assert_allclose(shap_values(ps, np.array([[2.0]]))[0, :, 0], [1.1666666, 0.83333337], atol=1e-6)


def test_fixture_interactions():
    got = interaction_values(_basic(), np.array([[1.0, 1, 0], [1, 1, 1]]))[..., 0]
    expected = [[[0.46111116, 0.125, 0.04166666, 0], [0.125, 0.34444442, 0.03333333, 0],
                 [0.04166666, 0.03333335, 0.09444444, 0], [0, 0, 0, -0.3]],
                [[0.47222224, 0.1083333, -0.04166666, 0], [0.10833332, 0.35555553, -0.03333333, 0],
                 [-0.04166666, -0.03333332, -0.09444447, 0], [0, 0, 0, -0.3]]]
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_fixture_interventional():
    # paths: f0>5,f1>5 -> 8 ; f0>5,f1<=5,f2>-5 -> 6 ; f0>5,f1<=5,f2<=-5 -> 5
    cl = np.array([[1, -1, 3, 5, 7, -1, -1, -1, -1]])
    cr = np.array([[2, -1, 4, 6, 8, -1, -1, -1, -1]])
    ft = np.array([[0, -1, 1, 2, 0, -1, -1, -1, -1]])
    th = np.array([[5, 0, 5, -5, 5, 0, 0, 0, 0.0]])
    val = np.array([[0, 0, 0, 0, 0, 5, 6, 0, 8.0]])[:, :, None]
    ps = extract_paths(cl, cr, cl, ft, th, val, np.ones((1, 9)), 0.0, n_features=3)
    got = interventional_shap_values(ps, np.array([[10.0, 0, 10]]), np.array([[10.0, 10, -10], [10, 10, 10]]))
    np.testing.assert_allclose(got[0, :, 0], [0, -2.25, 0.25, 8.0], atol=1e-12)


# --------------------------------------------------------------------------------------------- brute force


def _random_tree(draw, M, K, max_depth):
    """Dense arrays of a random binary tree: small threshold grid (repeats), random NaN defaults, covers summing."""
    nodes = []  # (feature, threshold, left, right, default, cover, value)

    def build(depth):
        idx = len(nodes)
        nodes.append(None)
        if depth >= max_depth or draw(st.integers(0, 3)) == 0:
            nodes[idx] = (-1, 0.0, -1, -1, -1, float(draw(st.integers(1, 5))),
                          [draw(st.floats(-3, 3, allow_nan=False)) for _ in range(K)])
            return idx
        f = draw(st.integers(0, M - 1))
        t = draw(st.sampled_from([-1.0, -0.5, 0.0, 0.5, 1.0]))
        left = build(depth + 1)
        right = build(depth + 1)
        default = left if draw(st.booleans()) else right
        nodes[idx] = (f, t, left, right, default, nodes[left][5] + nodes[right][5], [0.0] * K)
        return idx

    build(0)
    n = len(nodes)
    arr = lambda j, dt: np.array([[nd[j] for nd in nodes]], dtype=dt)  # noqa: E731 - a one-line helper local to this test
    vals = np.array([[nd[6] for nd in nodes]])
    return (arr(2, np.int64), arr(3, np.int64), arr(4, np.int64), arr(0, np.int64), arr(1, float), vals,
            arr(5, float)), n


def _expect(tree, x, S, node=0):
    """E[f(x) | x_S] with cover weighting (tree_path_dependent), by recursion."""
    cl, cr, cd, ft, th, vals, cov = (a[0] for a in tree)
    if cl[node] < 0:
        return vals[node]
    f = ft[node]
    if f in S:
        xv = x[f]
        nxt = cd[node] if np.isnan(xv) else (cl[node] if xv <= th[node] else cr[node])
        return _expect(tree, x, S, nxt)
    return (cov[cl[node]] * _expect(tree, x, S, cl[node]) + cov[cr[node]] * _expect(tree, x, S, cr[node])) / cov[node]


def _predict(tree, x):
    return _expect(tree, x, set(range(len(x))))


def _brute_shap(v, M):
    """Shapley values of the set function v (dict frozenset -> (K,)) over M players, plus v(empty)."""
    phi = np.zeros((M + 1, len(v[frozenset()])))
    if M:
        phi[:M] = exact_shapley(v.__getitem__, M)
    phi[M] = v[frozenset()]
    return phi


def _brute_interactions(v, M):
    phi = _brute_shap(v, M)
    out = np.zeros((M + 1, M + 1, phi.shape[1]))
    for i, j in itertools.permutations(range(M), 2):
        others = [k for k in range(M) if k not in (i, j)]
        for r in range(M - 1):
            for S in itertools.combinations(others, r):
                S = frozenset(S)
                wgt = math.factorial(r) * math.factorial(M - r - 2) / (2 * math.factorial(M - 1))
                out[i, j] += wgt * (v[S | {i, j}] - v[S | {i}] - v[S | {j}] + v[S])
    for i in range(M):
        out[i, i] = phi[i] - out[i, :M].sum(0) + out[i, i]
    out[M, M] = phi[M]
    return out


def _subsets(M):
    return [frozenset(S) for r in range(M + 1) for S in itertools.combinations(range(M), r)]


@st.composite
def _case(draw):
    M = draw(st.integers(1, 5))
    K = draw(st.integers(1, 2))
    tree, _ = _random_tree(draw, M, K, draw(st.integers(0, 5)))
    grid = st.sampled_from([-1.0, -0.7, -0.5, 0.0, 0.3, 0.5, 1.0, 2.0, np.nan])
    X = np.array([[draw(grid) for _ in range(M)] for _ in range(draw(st.integers(1, 3)))])
    R = np.array([[draw(grid) for _ in range(M)] for _ in range(draw(st.integers(1, 3)))])
    return M, K, tree, X, R


_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(_case())
def test_path_dependent_matches_brute_force(case):
    M, K, tree, X, _ = case
    base = np.arange(K) * 0.5 - 0.25
    ps = extract_paths(*tree, base, n_features=M)
    got = shap_values(ps, X, progress=False)
    inter = interaction_values(ps, X, progress=False)
    for i, x in enumerate(X):
        v = {S: _expect(tree, x, S) for S in _subsets(M)}
        ref = _brute_shap(v, M)
        ref[M] += base
        np.testing.assert_allclose(got[i], ref, rtol=1e-9, atol=1e-9)
        iref = _brute_interactions(v, M)
        iref[M, M] += base
        np.testing.assert_allclose(inter[i], iref, rtol=1e-9, atol=1e-9)


@_SETTINGS
@given(_case())
def test_interventional_matches_brute_force(case):
    M, K, tree, X, R = case
    ps = extract_paths(*tree, 0.1, n_features=M)
    got = interventional_shap_values(ps, X, R, progress=False)
    for i, x in enumerate(X):
        v = {}
        for S in _subsets(M):
            mask = np.array([j in S for j in range(M)])
            v[S] = 0.1 + np.mean([_predict(tree, np.where(mask, x, r)) for r in R], axis=0)
        np.testing.assert_allclose(got[i], _brute_shap(v, M), rtol=1e-9, atol=1e-9)


# --------------------------------------------------------------------------------------------- shap's C++


def _shap_ensemble(model):
    shap = pytest.importorskip("shap")
    return shap.TreeExplainer(model).model


def _paths(ens, M):
    return extract_paths(ens.children_left, ens.children_right, ens.children_default, ens.features, ens.thresholds,
                         ens.values, ens.node_sample_weight, ens.base_offset, n_features=M,
                         input_dtype=ens.input_dtype)


def _cext(ens, X, *, R=None, y=None, transform=0, interactions=False, perturbation=1):
    """shap's own C++ dense_tree_shap on the TreeEnsemble arrays (node expectations filled by shap's cext)."""
    from shap import _cext

    vals = ens.values.copy()
    for t in range(vals.shape[0]):
        _cext.compute_expectations(ens.children_left[t], ens.children_right[t], ens.node_sample_weight[t], vals[t])
    X = np.ascontiguousarray(X, dtype=np.float64)
    n, M = X.shape
    K = vals.shape[2]
    phi = np.zeros((n, M + 1, M + 1, K) if interactions else (n, M + 1, K))
    R = None if R is None else np.ascontiguousarray(R, dtype=np.float64)
    _cext.dense_tree_shap(ens.children_left, ens.children_right, ens.children_default, ens.features, ens.thresholds,
                          ens.threshold_types, vals, ens.node_sample_weight, ens.max_depth, X, np.isnan(X),
                          None if y is None else np.asarray(y, dtype=np.float64), R,
                          None if R is None else np.isnan(R), vals.shape[0], ens.base_offset, phi, perturbation,
                          transform, interactions)
    return phi


def _data(n, M, seed, nan=0.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, M)).astype(np.float32)
    y = X[:, 0] + np.sin(3 * X[:, 1]) + X[:, 2] * X[:, min(3, M - 1)] + rng.normal(scale=0.1, size=n)
    if nan:
        X[rng.random(X.shape) < nan] = np.nan
    return X, y


def _close(a, b, rtol):
    scale = max(np.abs(b).max(), 1e-12)
    assert np.abs(a - b).max() <= rtol * scale, (np.abs(a - b).max(), scale)


@pytest.fixture(scope="module")
def xgb_models():
    xgb = pytest.importorskip("xgboost")
    X, y = _data(600, 5, 0, nan=0.1)
    reg = xgb.XGBRegressor(n_estimators=20, max_depth=4, learning_rate=0.3).fit(X, y)
    clf = xgb.XGBClassifier(n_estimators=15, max_depth=3, learning_rate=0.3).fit(X, (y > 0).astype(int))
    mc = xgb.XGBClassifier(n_estimators=8, max_depth=3).fit(X, np.digitize(y, [-0.5, 0.5]))
    return X, y, reg, clf, mc


@pytest.mark.parametrize("which", ["reg", "clf", "multiclass"])
def test_xgboost_matches_shap_cext(xgb_models, which):
    X, y, reg, clf, mc = xgb_models
    model = {"reg": reg, "clf": clf, "multiclass": mc}[which]
    ens = _shap_ensemble(model)
    ps = _paths(ens, X.shape[1])
    Xt = X[:40].astype(np.float64)
    _close(shap_values(ps, Xt), _cext(ens, Xt), 1e-7)
    _close(interaction_values(ps, Xt[:10]), _cext(ens, Xt[:10], interactions=True), 1e-7)
    R = X[100:130].astype(np.float64)
    # shap's interventional C++ runs in float32 internally (thresholds, leaf values, weights)
    _close(interventional_shap_values(ps, Xt, R), _cext(ens, Xt, R=R, perturbation=0), 2e-6)
    # additivity against XGBoost's own margin (float32)
    phi = shap_values(ps, Xt)
    margin = model.predict(X[:40], output_margin=True).reshape(40, -1)
    np.testing.assert_allclose(phi.sum(1), margin, atol=2e-5)


@pytest.mark.parametrize("transform,code", [("logistic", 1), ("logistic_nlogloss", 2), ("squared_loss", 3)])
def test_interventional_transforms_match_shap_cext(xgb_models, transform, code):
    X, y, reg, clf, mc = xgb_models
    ens = _shap_ensemble(clf)
    ps = _paths(ens, X.shape[1])
    Xt, R = X[:25].astype(np.float64), X[200:220].astype(np.float64)
    yt = (y[:25] > 0).astype(np.float64)
    got = interventional_shap_values(ps, Xt, R, transform=transform, y=yt)
    _close(got, _cext(ens, Xt, R=R, y=yt, transform=code, perturbation=0), 2e-6)


def test_sklearn_forest_and_deep_tree_match_shap_cext():
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.tree import DecisionTreeRegressor

    X, y = _data(800, 6, 1)
    for model in (RandomForestRegressor(n_estimators=8, max_depth=7, random_state=0).fit(X, y),
                  DecisionTreeRegressor(max_depth=20, random_state=0).fit(X, y)):
        ens = _shap_ensemble(model)
        ps = _paths(ens, X.shape[1])
        Xt = X[:30].astype(np.float64)
        ref = _cext(ens, Xt)
        _close(shap_values(ps, Xt), ref, 1e-7)
        np.testing.assert_allclose(shap_values(ps, Xt).sum(1)[:, 0], model.predict(X[:30]), rtol=1e-9, atol=1e-9)
        inter = interaction_values(ps, Xt[:5])
        _close(inter, _cext(ens, Xt[:5], interactions=True), 1e-7)
        np.testing.assert_allclose(inter, inter.transpose(0, 2, 1, 3), atol=1e-9)
        np.testing.assert_allclose(inter.sum(2), ref[:5], atol=1e-9)
        if ens.max_depth >= 20:
            assert ps.max_length >= 1 and ens.max_depth == 20
    R = X[300:320].astype(np.float64)
    _close(interventional_shap_values(ps, Xt, R), _cext(ens, Xt, R=R, perturbation=0), 2e-6)


def test_tree_limit_and_bad_inputs(xgb_models):
    X, y, reg, clf, mc = xgb_models
    ens = _shap_ensemble(reg)
    ps = _paths(ens, X.shape[1])
    Xt = X[:5].astype(np.float64)
    limited = shap_values(ps, Xt, tree_limit=7)
    margin = reg.predict(X[:5], output_margin=True, iteration_range=(0, 7))
    np.testing.assert_allclose(limited.sum(1)[:, 0], margin, atol=2e-5)
    with pytest.raises(ValueError, match="5"):
        shap_values(ps, Xt[:, :4])
    with pytest.raises(ValueError, match="empty"):
        shap_values(ps, Xt[:0])
    with pytest.raises(ValueError, match="2-D"):
        shap_values(ps, Xt[0])
    with pytest.raises(TypeError, match="numeric"):
        shap_values(ps, np.array([["a"] * 5]))
    with pytest.raises(ValueError, match="background"):
        interventional_shap_values(ps, Xt, Xt[:, :3])
    with pytest.raises(ValueError, match="empty"):
        interventional_shap_values(ps, Xt, Xt[:0])
    with pytest.raises(ValueError, match="labels"):
        interventional_shap_values(ps, Xt, Xt, transform="squared_loss")
    with pytest.raises(ValueError, match="transform"):
        interventional_shap_values(ps, Xt, Xt, transform="probit")
    with pytest.raises(ValueError, match="backend"):
        shap_values(ps, Xt, backend="tpu")
    inf_row = Xt.copy()
    inf_row[:, 0] = np.inf
    assert np.isfinite(shap_values(ps, inf_row)).all()
