"""CPU quadrature kernels against the EXTEND/UNWIND DP, brute force and LightGBM / XGBoost native SHAP."""
import itertools

import numpy as np
import pytest
from _shapley import exact_shapley
from hitml.kernels.treeshap import PathSet, cpu, extract_paths
from hitml.kernels.treeshap import _cpu_quad as quad


@pytest.fixture
def dp_kernel(monkeypatch):
    """Run a call with the DP kernel: ``dp_kernel(fn, *args)``."""
    def run(fn, *args, **kw):
        monkeypatch.setattr(cpu.options, "row_kernel", "dp")
        try:
            return fn(*args, **kw)
        finally:
            monkeypatch.setattr(cpu.options, "row_kernel", "quadrature")
    return run


def test_gauss_legendre_rules_integrate_polynomials_exactly():
    t, w = quad.gauss_legendre(8)
    for q in range(1, 9):
        for deg in range(2 * q):
            np.testing.assert_allclose((w[q, :q] * t[q, :q] ** deg).sum(), 1.0 / (deg + 1), rtol=1e-13)


def _random_paths(rng, P, M, K, max_len, zero_cover=True):
    """A hand-built PathSet: random bounds, NaN defaults, zero fractions in [0, 1] (exact zeros included)."""
    lens = rng.integers(0, max_len + 1, size=P)
    lens[0] = max_len
    ptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    E = int(ptr[-1])
    feats = np.concatenate([np.sort(rng.choice(M, size=m, replace=False)) for m in lens]).astype(np.int32)
    a, b = rng.normal(size=E), rng.normal(size=E)
    lower = np.where(rng.random(E) < 0.3, -np.inf, np.minimum(a, b))
    upper = np.where(rng.random(E) < 0.3, np.inf, np.maximum(a, b))
    zero = rng.random(E)
    if zero_cover:
        zero[rng.random(E) < 0.05] = 0.0
    leaf = rng.normal(size=(P, K))
    leaf[rng.random((P, K)) < 0.3] = 0.0
    return PathSet(n_features=M, n_outputs=K, path_ptr=ptr, feature=feats, lower=lower, upper=upper,
                   missing_ok=rng.random(E) < 0.5, cat_ptr=np.full(E, -1, np.int64), cat_nwords=np.zeros(E, np.int32),
                   cat_words=np.zeros(0, np.uint32), zero_fraction=zero, leaf_value=leaf,
                   tree_index=np.arange(P, dtype=np.int32), base_offset=np.zeros(K))


@pytest.mark.parametrize("max_len,n", [(3, 1), (8, 33), (17, 40)])
def test_quadrature_matches_dp_on_random_paths(dp_kernel, max_len, n):
    """Long paths (Q up to 9 nodes), zero covers, NaN, tails of row blocks: quadrature equals the DP."""
    rng = np.random.default_rng(max_len)
    M, K = 20, 2
    ps = _random_paths(rng, 60, M, K, max_len)
    X = rng.normal(size=(n, M))
    X[rng.random(X.shape) < 0.1] = np.nan
    X[0, :3] = [np.inf, -np.inf, 0.0]
    got, ref = cpu.shap_values(ps, X, progress=False), dp_kernel(cpu.shap_values, ps, X, progress=False)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10)
    Xi = X[:9]
    got, ref = cpu.interaction_values(ps, Xi, progress=False), dp_kernel(cpu.interaction_values, ps, Xi,
                                                                         progress=False)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10)


def test_zero_cover_tree_matches_brute_force():
    """A child with zero cover (z = 0): the row that takes it gets exact Shapley values, the others 0 from it."""
    cl = np.array([[1, 3, 5, -1, -1, -1, -1]])
    cr = np.array([[2, 4, 6, -1, -1, -1, -1]])
    ft = np.array([[0, 1, 2, -1, -1, -1, -1]])
    th = np.array([[0.0, 0.0, 0.0, 0, 0, 0, 0]])
    cov = np.array([[4.0, 3.0, 1.0, 1.0, 2.0, 0.0, 1.0]])
    val = np.array([[0, 0, 0, 1.0, -2.0, 5.0, 7.0]])[:, :, None]
    ps = extract_paths(cl, cr, cl, ft, th, val, cov, 0.0, n_features=3)
    X = np.array([[1.0, -1, 1], [-1, 1, -1], [1, 1, -1]])

    def expect(x, S, node=0):
        if cl[0, node] < 0:
            return val[0, node, 0]
        f = ft[0, node]
        if f in S:
            return expect(x, S, cl[0, node] if x[f] <= th[0, node] else cr[0, node])
        c = cov[0]
        return sum(c[ch] * expect(x, S, ch) for ch in (cl[0, node], cr[0, node])) / c[node]

    got = cpu.shap_values(ps, X, progress=False)
    for i, x in enumerate(X):
        ref = exact_shapley(lambda S, x=x: np.array([expect(x, set(S))]), 3)
        np.testing.assert_allclose(got[i, :3], ref, atol=1e-12)


def test_rows_do_not_depend_on_block_position_or_threads():
    """Same bytes for a row wherever it falls in a block of rows, and on 1 or 2 threads."""
    import numba
    rng = np.random.default_rng(5)
    ps = _random_paths(rng, 80, 12, 1, 8)
    X = rng.normal(size=(70, 12))
    a = cpu.shap_values(ps, X, progress=False)
    b = cpu.shap_values(ps, X[5:], progress=False)
    assert a[5:].tobytes() == b.tobytes()
    ai = cpu.interaction_values(ps, X[:40], progress=False)
    bi = cpu.interaction_values(ps, X[3:40], progress=False)
    assert ai[3:].tobytes() == bi.tobytes()
    old = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        c = cpu.shap_values(ps, X, progress=False)                            # blocks of 32 rows (2 threads: 8)
        d = cpu.shap_values(ps, np.tile(X, (4, 1)), progress=False)[:70]       # blocks of 128
    finally:
        numba.set_num_threads(old)
    assert a.tobytes() == c.tobytes() == d.tobytes()


def test_repeated_features_of_a_hand_built_path(dp_kernel):
    """Unmerged repeats of one feature on a path (players of their own): quadrature equals the DP."""
    rng = np.random.default_rng(9)
    ps = _random_paths(rng, 30, 4, 1, 4)
    feats = ps.feature.copy()
    feats[: len(feats) // 2] = 1                       # many repeats, and out of order
    ps = PathSet(**{**ps.__dict__, "feature": feats})
    X = rng.normal(size=(10, 4))
    np.testing.assert_allclose(cpu.shap_values(ps, X), dp_kernel(cpu.shap_values, ps, X), atol=1e-10)
    np.testing.assert_allclose(cpu.interaction_values(ps, X), dp_kernel(cpu.interaction_values, ps, X), atol=1e-10)


def test_lightgbm_categorical_matches_native():
    lgb = pytest.importorskip("lightgbm")
    pd = pytest.importorskip("pandas")
    from hitml.shap_ext import TreeExplainer
    rng = np.random.default_rng(3)
    n = 800
    cat = rng.integers(0, 40, size=n)
    num = rng.normal(size=(n, 3))
    num[rng.random(num.shape) < 0.1] = np.nan
    y = (cat % 7) * 0.3 + np.nan_to_num(num[:, 0]) + rng.normal(scale=0.1, size=n)
    X = pd.DataFrame({"c": pd.Categorical(cat), "a": num[:, 0], "b": num[:, 1], "d": num[:, 2]})
    model = lgb.LGBMRegressor(n_estimators=30, num_leaves=31, min_child_samples=5, verbose=-1).fit(X, y)
    Xe = X.iloc[:50]
    ref = model.predict(Xe, pred_contrib=True)
    got = TreeExplainer(model, backend="cpu", progress=False).shap_values(Xe)
    np.testing.assert_allclose(got, ref[:, :4], rtol=1e-9, atol=1e-9)


def test_xgboost_multiclass_interactions_match_native():
    xgb = pytest.importorskip("xgboost")
    from hitml.shap_ext import TreeExplainer
    rng = np.random.default_rng(4)
    X = rng.normal(size=(500, 6)).astype(np.float32)
    X[rng.random(X.shape) < 0.1] = np.nan
    y = np.digitize(np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 1] * X[:, 2]), [-0.5, 0.5])
    model = xgb.XGBClassifier(n_estimators=10, max_depth=5).fit(X, y)
    ref = model.get_booster().predict(xgb.DMatrix(X[:20]), pred_interactions=True)     # (n, K, M+1, M+1), f32
    got = TreeExplainer(model, backend="cpu", progress=False).shap_interaction_values(X[:20])
    got = np.moveaxis(np.asarray(got), -1, 1)
    for i, j in itertools.product(range(6), repeat=2):
        np.testing.assert_allclose(got[:, :, i, j], ref[:, :, i, j], atol=2e-6 * np.abs(ref).max())


def test_pattern_tables_match_dp(dp_kernel, monkeypatch):
    """Short paths from pattern tables, the rest by quadrature, in one call: equal to the DP."""
    monkeypatch.setattr(cpu.options, "pattern_tables", True)
    rng = np.random.default_rng(11)
    ps = _random_paths(rng, 200, 15, 2, 9)
    off = cpu._t.plan_tables(ps.path_ptr)
    lens = np.diff(ps.path_ptr)
    assert (off >= 0).any() and (off < 0).any() and lens[off >= 0].max() <= lens[(off < 0) & (lens > 0)].min()
    X = rng.normal(size=(45, 15))
    X[rng.random(X.shape) < 0.1] = np.nan
    np.testing.assert_allclose(cpu.shap_values(ps, X), dp_kernel(cpu.shap_values, ps, X), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("M", [3, 60])
def test_interaction_mirror_and_direct_writes_match_dp(dp_kernel, M):
    """Few features (mirror copy of the upper triangle) and many (both entries written per pair), multiclass."""
    rng = np.random.default_rng(M)
    ps = _random_paths(rng, 40, M, 3, min(M, 5))
    leaf = np.zeros_like(ps.leaf_value)
    leaf[np.arange(ps.n_paths), rng.integers(0, 3, ps.n_paths)] = rng.normal(size=ps.n_paths)
    ps = PathSet(**{**ps.__dict__, "leaf_value": leaf})           # one class per path: class-major storage
    X = rng.normal(size=(12, M))
    got = cpu.interaction_values(ps, X, progress=False)
    np.testing.assert_allclose(got, dp_kernel(cpu.interaction_values, ps, X, progress=False), atol=1e-10)
    np.testing.assert_array_equal(got, got.transpose(0, 2, 1, 3))


def test_multiclass_rows_do_not_depend_on_blocks_groups_or_threads(dp_kernel, monkeypatch):
    """One output per path (work items of row blocks x path groups, each group summing only the features it uses):
    the same bytes for any block width, groups per item and thread count, equal to the DP, and exact zeros for the
    features no path of an output uses."""
    import numba
    rng = np.random.default_rng(21)
    M, K = 40, 4
    ps = _random_paths(rng, 60, M, K, 5)
    leaf = np.zeros_like(ps.leaf_value)
    leaf[np.arange(ps.n_paths), rng.integers(0, K, ps.n_paths)] = rng.normal(size=ps.n_paths)
    leaf[:5] = 0.0                                                # paths of no output join output 0's group
    ps = PathSet(**{**ps.__dict__, "leaf_value": leaf})
    X = rng.normal(size=(300, M))
    X[rng.random(X.shape) < 0.1] = np.nan
    ref = cpu.shap_values(ps, X, progress=False)
    ref_i = cpu.interaction_values(ps, X[:40], progress=False)
    _, _, _, feat_ptr, feats = cpu._path_groups(ps)
    for k in range(K):
        unused = np.setdiff1d(np.arange(M), feats[feat_ptr[k]:feat_ptr[k + 1]])
        assert len(unused) > 0 and not ref[:, unused, k].any()
    np.testing.assert_allclose(ref, dp_kernel(cpu.shap_values, ps, X, progress=False), atol=1e-10)
    np.testing.assert_allclose(ref_i, dp_kernel(cpu.interaction_values, ps, X[:40], progress=False), atol=1e-10)
    old = numba.get_num_threads()
    try:
        for threads in {1, old}:
            numba.set_num_threads(threads)
            for block, gpi in [(8, 1), (32, 3), (128, 4), (128, 1)]:
                monkeypatch.setattr(quad, "block_for", lambda *a, b=block, g=gpi, **k: (b, g))
                assert cpu.shap_values(ps, X, progress=False).tobytes() == ref.tobytes()
                assert cpu.interaction_values(ps, X[:40], progress=False).tobytes() == ref_i.tobytes()
    finally:
        numba.set_num_threads(old)


def test_sparse_interaction_output_without_huge_pages_is_the_same(monkeypatch):
    """A large output with few pair writes goes to anonymous memory without huge pages: same bytes, writable."""
    rng = np.random.default_rng(31)
    ps = _random_paths(rng, 30, 60, 3, 3)
    leaf = np.zeros_like(ps.leaf_value)
    leaf[np.arange(ps.n_paths), rng.integers(0, 3, ps.n_paths)] = rng.normal(size=ps.n_paths)
    ps = PathSet(**{**ps.__dict__, "leaf_value": leaf})
    X = rng.normal(size=(10, 60))
    ref = cpu.interaction_values(ps, X, progress=False)
    monkeypatch.setattr(cpu, "_SPARSE_BYTES", 0)
    got = cpu.interaction_values(ps, X, progress=False)
    assert got.tobytes() == ref.tobytes() and got.flags.writeable
    base = got
    while base.base is not None and isinstance(base.base, np.ndarray):
        base = base.base
    assert not isinstance(base.base, np.ndarray) and base.base is not None   # the anonymous mapping, not NumPy's
