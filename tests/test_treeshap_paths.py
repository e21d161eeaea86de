"""Path extraction: structure on hand-built trees, predictions and expectations against sklearn trees."""
import numpy as np
import pytest
from sklearn.tree import DecisionTreeRegressor

from hitml.kernels.treeshap.paths import extract_paths

from _trees import basic_tree, duplicates_tree


def _satisfies(ps, e, x):
    """Independent element test written from the PathSet docstring."""
    if np.isnan(x):
        return bool(ps.missing_ok[e])
    if not ((ps.lower[e] == -np.inf or ps.lower[e] < x) and x <= ps.upper[e]):
        return False
    if ps.cat_ptr[e] < 0:
        return True
    nw = ps.cat_nwords[e]
    if x < 0 or not np.isfinite(x) or int(x) >= 32 * nw:
        return bool(ps.cat_outside_ok[e])
    c = int(x)
    return bool((int(ps.cat_words[ps.cat_ptr[e] + c // 32]) >> (c % 32)) & 1)


def _predict_from_paths(ps, X):
    out = np.tile(ps.base_offset, (len(X), 1))
    for i, x in enumerate(X):
        for p in range(ps.n_paths):
            els = range(ps.path_ptr[p], ps.path_ptr[p + 1])
            if all(_satisfies(ps, e, x[ps.feature[e]]) for e in els):
                out[i] += ps.leaf_value[p]
    return out


def test_basic_paths_structure():
    cl, cr, ft, th, val, cov = basic_tree()
    ps = extract_paths(cl, cr, cl, ft, th, val, cov, 0.25, n_features=3)
    assert ps.n_paths == 4 and ps.n_outputs == 1
    np.testing.assert_array_equal(ps.path_ptr, [0, 1, 3, 6, 9])
    np.testing.assert_array_equal(ps.feature, [0, 0, 1, 0, 1, 2, 0, 1, 2])
    np.testing.assert_allclose(ps.zero_fraction, [0.4, 0.6, 1 / 3, 0.6, 2 / 3, 0.5, 0.6, 2 / 3, 0.5])
    np.testing.assert_array_equal(ps.upper[:3], [0.5, np.inf, 0.5])
    np.testing.assert_array_equal(ps.lower[:3], [-np.inf, 0.5, -np.inf])
    np.testing.assert_array_equal(ps.missing_ok, [True, False, True, False, False, True, False, False, False])
    np.testing.assert_array_equal(ps.leaf_value[:, 0], [-1, -1, 1, 0.5])
    # expected value under cover weighting: 0.4*-1 + 0.2*-1 + 0.2*1 + 0.2*0.5 = -0.3, plus base offset
    np.testing.assert_allclose(ps.bias(), [-0.3 + 0.25])
    assert ps.restrict(0).n_paths == 0
    np.testing.assert_allclose(ps.restrict(0).bias(), [0.25])


def test_duplicates_merged():
    # f0 split at 0.5, 1.5 and 2.5 on one path (GPUTreeShap's BasicPathsWithDuplicates)
    cl, cr, ft, th, val, cov = duplicates_tree()
    cd = np.array([[1, -1, 4, -1, 6, -1, -1]])  # NaN: left, right, right
    ps = extract_paths(cl, cr, cd, ft, th, val, cov, 0.0, n_features=1)
    assert ps.n_paths == 4
    np.testing.assert_array_equal(np.diff(ps.path_ptr), [1, 1, 1, 1])
    np.testing.assert_allclose(ps.lower, [-np.inf, 0.5, 1.5, 2.5])
    np.testing.assert_allclose(ps.upper, [0.5, 1.5, 2.5, np.inf])
    np.testing.assert_allclose(ps.zero_fraction, [1 / 3, 1 / 3, 1 / 6, 1 / 6])
    np.testing.assert_array_equal(ps.missing_ok, [True, False, False, False])
    np.testing.assert_allclose(ps.bias(), [-1 / 3 + 1 / 3 + 2 / 6 + 3 / 6])


def test_categorical_left_set_and_complement():
    # root: categorical on f0 with LEFT set {1, 3, 40} -> leaf 1; its right child splits f0 again with
    # LEFT set {2, 5}: leaves 2 (left) and 3 (right). Missing goes right at the root, then left.
    cl = np.array([[1, -1, 3, -1, -1]])
    cr = np.array([[2, -1, 4, -1, -1]])
    cd = np.array([[2, -1, 3, -1, -1]])
    ft = np.array([[0, -1, 0, -1, -1]])
    th = np.zeros((1, 5))
    cov = np.array([[4, 2, 2, 1, 1.0]])
    val = np.array([[0, 1, 0, 2, 3.0]])[:, :, None]
    words = np.array([(1 << 1) | (1 << 3), 1 << (40 - 32), (1 << 2) | (1 << 5)], dtype=np.uint32)
    is_cat = np.array([[True, False, True, False, False]])
    ncp = np.array([[0, 0, 2, 0, 0]])
    ncn = np.array([[2, 0, 1, 0, 0]], dtype=np.int32)
    ps = extract_paths(cl, cr, cd, ft, th, val, cov, 0.0, n_features=1, categories=(is_cat, ncp, ncn, words))
    assert ps.n_paths == 3
    np.testing.assert_array_equal(np.diff(ps.path_ptr), [1, 1, 1])
    np.testing.assert_array_equal(ps.cat_outside_ok, [False, False, True])
    X = np.array([[1.0], [3], [40], [2], [5], [0], [4], [100], [-1], [np.nan], [2.7]])
    expected = [1, 1, 1, 2, 2, 3, 3, 3, 3, 2, 2]  # NaN: right then left; 2.7 -> category 2
    np.testing.assert_allclose(_predict_from_paths(ps, X)[:, 0], expected)


@pytest.mark.parametrize("seed", [0, 1])
def test_paths_reproduce_sklearn_tree(seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(300, 4)).astype(np.float32)
    X[:, 3] = np.round(X[:, 3])  # ties and repeated splits on one feature
    y = X[:, 0] * 2 + np.sin(3 * X[:, 1]) + X[:, 3] ** 2 + rng.normal(scale=0.1, size=300)
    model = DecisionTreeRegressor(max_depth=7, random_state=seed).fit(X, y)
    t = model.tree_
    cl, cr = t.children_left[None], t.children_right[None]
    ps = extract_paths(cl, cr, cl, t.feature[None], t.threshold[None], t.value[None, :, 0, :],
                       t.weighted_n_node_samples[None], 0.0, n_features=4, input_dtype=np.float32)
    assert ps.n_paths == t.n_leaves
    for p in range(ps.n_paths):  # features sorted and unique within each path
        f = ps.feature[ps.path_ptr[p]:ps.path_ptr[p + 1]]
        assert np.all(np.diff(f) > 0)
    Xt = rng.normal(size=(50, 4)).astype(np.float32)
    np.testing.assert_allclose(_predict_from_paths(ps, Xt.astype(np.float64))[:, 0], model.predict(Xt),
                               rtol=1e-12)
    np.testing.assert_allclose(ps.bias(), t.value[0, 0], rtol=1e-12)


def test_stump_tree_and_multioutput_order():
    cl = np.array([[-1, -1, -1], [1, -1, -1]])
    cr = np.array([[-1, -1, -1], [2, -1, -1]])
    ft = np.array([[-1, -1, -1], [1, -1, -1]])
    th = np.array([[0, 0, 0], [0.0, 0, 0]])
    cov = np.array([[10, 0, 0], [10, 4, 6.0]])
    val = np.zeros((2, 3, 2))
    val[0, 0] = [1, 2]
    val[1, 1] = [3, 0]
    val[1, 2] = [0, 5]
    ps = extract_paths(cl, cr, cl, ft, th, val, cov, [0.5, -0.5], n_features=2)
    np.testing.assert_array_equal(ps.tree_index, [0, 1, 1])
    np.testing.assert_array_equal(np.diff(ps.path_ptr), [0, 1, 1])
    np.testing.assert_allclose(ps.bias(), [0.5 + 1 + 0.4 * 3, -0.5 + 2 + 0.6 * 5])
    np.testing.assert_allclose(ps.bias(tree_limit=1), [1.5, 1.5])


def test_bad_inputs():
    cl, cr, ft, th, val, cov = basic_tree()
    with pytest.raises(ValueError, match="outside"):
        extract_paths(cl, cr, cl, ft, th, val, cov, 0.0, n_features=2)
    with pytest.raises(ValueError, match="shape"):
        extract_paths(cl, cr[:, :3], cl, ft, th, val, cov, 0.0, n_features=3)


def test_select_splits_shap_additively():
    """PathSet.select: SHAP is additive over paths, so the CPU engine on two complementary subsets sums to the full
    result (the bias counts base_offset once per subset)."""
    from hitml.kernels.treeshap import cpu
    rng = np.random.default_rng(5)
    X = rng.normal(size=(400, 9))
    y = X[:, 0] * X[:, 1] + np.sin(2 * X[:, 2]) + rng.normal(scale=0.1, size=400)
    trees = [DecisionTreeRegressor(max_depth=d, random_state=d).fit(X, y).tree_ for d in (2, 5, 9)]
    T, N = len(trees), max(t.node_count for t in trees)
    cl = np.full((T, N), -1, np.int64)
    cr, ft = cl.copy(), np.zeros((T, N), np.int64)
    th, cov, vals = np.zeros((T, N)), np.zeros((T, N)), np.zeros((T, N, 1))
    for i, t in enumerate(trees):
        n = t.node_count
        cl[i, :n], cr[i, :n], ft[i, :n] = t.children_left, t.children_right, np.maximum(t.feature, 0)
        th[i, :n], cov[i, :n], vals[i, :n, 0] = t.threshold, t.weighted_n_node_samples, t.value[:, 0, 0]
    ps = extract_paths(cl, cr, cl, ft, th, vals, cov, np.array([0.3]), n_features=9)
    keep = np.diff(ps.path_ptr) <= 4
    assert 0 < keep.sum() < ps.n_paths
    a, b = ps.select(keep), ps.select(~keep)
    assert a.n_paths + b.n_paths == ps.n_paths and len(a.feature) + len(b.feature) == len(ps.feature)
    Xt = rng.normal(size=(50, 9))
    full, pa, pb = cpu.shap_values(ps, Xt), cpu.shap_values(a, Xt), cpu.shap_values(b, Xt)
    np.testing.assert_allclose(pa[:, :9] + pb[:, :9], full[:, :9], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(a.bias() + b.bias() - ps.base_offset, ps.bias(), rtol=1e-12)
    with pytest.raises(ValueError, match="keep must have shape"):
        ps.select(keep[:-1])


def test_path_probability_is_the_product_in_element_order():
    """Each path's product of zero fractions equals math.prod over its elements in order (bytes), empty paths 1.0."""
    import math

    from hitml.kernels.treeshap.paths import _path_probability

    rng = np.random.default_rng(3)
    lens = rng.integers(0, 9, size=400)
    lens[:5] = 0
    ptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    z = rng.uniform(0.01, 1.0, size=int(ptr[-1])) ** rng.uniform(0.5, 30.0, size=int(ptr[-1]))
    got = _path_probability(ptr, z)
    want = np.array([math.prod(z[ptr[p]:ptr[p + 1]].tolist()) for p in range(len(lens))])
    assert got.tobytes() == want.tobytes()
    assert _path_probability(np.zeros(1, np.int64), np.zeros(0)).shape == (0,)
