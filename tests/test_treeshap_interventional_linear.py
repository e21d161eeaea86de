"""Interventional values in time linear in rows plus background (pattern tables and the sparse long-path form)
against brute force over all coalitions, shap's C++ TreeExplainer, and the host libraries' own predictions."""
import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hitml.kernels.treeshap import (_patterns, extract_paths, interventional_banzhaf_values,
                                    interventional_interaction_values, interventional_shap_values)
from test_treeshap_interventional import _GRID, _predict, _random_tree


def _brute(value, M):
    """(shapley (M,), interactions (M, M) in shap's convention, banzhaf (M,)) of the set function ``value``."""
    v = {S: value(frozenset(S)) for r in range(M + 1) for S in itertools.combinations(range(M), r)}
    get = lambda S: v[tuple(sorted(S))]  # noqa: E731 - a one-line value function for the brute-force reference
    phi, ban, inter = np.zeros(M), np.zeros(M), np.zeros((M, M))
    for i in range(M):
        others = [j for j in range(M) if j != i]
        for r in range(M):
            for S in itertools.combinations(others, r):
                d = get(set(S) | {i}) - get(S)
                phi[i] += math.factorial(r) * math.factorial(M - r - 1) / math.factorial(M) * d
                ban[i] += d / 2 ** (M - 1)
        for j in others:
            rest = [k for k in range(M) if k not in (i, j)]
            for r in range(M - 1):
                for S in itertools.combinations(rest, r):
                    S = set(S)
                    d2 = get(S | {i, j}) - get(S | {i}) - get(S | {j}) + get(S)
                    inter[i, j] += math.factorial(r) * math.factorial(M - r - 2) / math.factorial(M - 1) * d2 / 2
        inter[i, i] = phi[i] - inter[i].sum()
    return phi, inter, ban


def _reference(predict, X, R, w, M):
    """Weighted background means of the brute-force values of S -> predict(x_S, r_rest)."""
    n = len(X)
    phi, inter, ban = np.zeros((n, M + 1)), np.zeros((n, M + 1, M + 1)), np.zeros((n, M + 1))
    w = np.ones(len(R)) if w is None else np.asarray(w, float)
    for i, x in enumerate(X):
        for r, wr in zip(R, w):
            f = lambda S, x=x, r=r: predict(np.array([x[j] if j in S else r[j] for j in range(M)]))  # noqa: E731 - a one-line value function for the brute-force reference
            p, it, b = _brute(f, M)
            phi[i, :M] += wr * p
            inter[i, :M, :M] += wr * it
            ban[i, :M] += wr * b
            base = wr * f(frozenset())
            phi[i, M] += base
            inter[i, M, M] += base
            ban[i, M] += base
    return phi / w.sum(), inter / w.sum(), ban / w.sum()


@pytest.fixture(params=["tables", "sparse"])
def form(request, monkeypatch):
    """Every path through tables, or every path through the sparse long-path form."""
    if request.param == "sparse":
        monkeypatch.setattr(_patterns, "TABLE_ENTRIES", 0)
    return request.param


@st.composite
def _case(draw):
    M = draw(st.integers(1, 4))
    trees = [_random_tree(draw, M, draw(st.integers(0, 4))) for _ in range(draw(st.integers(1, 2)))]
    rows = lambda k: np.array([[draw(st.sampled_from(_GRID)) for _ in range(M)] for _ in range(k)])  # noqa: E731 - a one-line value function for the brute-force reference
    X, R = rows(draw(st.integers(1, 3))), rows(draw(st.integers(1, 6)))
    weighted = draw(st.booleans())
    w = np.array([draw(st.sampled_from([0.0, 0.5, 1.0, 3.0, 1e-3])) for _ in range(len(R))]) if weighted else None
    if w is not None and w.sum() == 0:
        w[0] = 1.0
    return M, trees, X, R, w


def _stack(trees):
    """extract_paths arguments of several single-tree dense arrays (padded to one node count)."""
    N = max(t[0][0].shape[1] for t in trees)

    def pad(a, fill):
        return np.concatenate([a, np.full(a.shape[:1] + (N - a.shape[1],) + a.shape[2:], fill, a.dtype)], axis=1)

    arrays = [np.concatenate([pad(t[0][k], -1 if k < 4 else 0) for t in trees]) for k in range(7)]
    is_cat = np.concatenate([pad(t[1][0], False) for t in trees])
    nwords = np.concatenate([pad(t[1][2], 0) for t in trees])
    words, ptrs = [], []
    for t in trees:
        ptrs.append(pad(t[1][1] + sum(len(w) for w in words), 0))
        words.append(t[1][3])
    cats = (is_cat, np.concatenate(ptrs), nwords, np.concatenate(words).astype(np.uint32))
    return arrays, cats


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(case=_case())
def test_values_interactions_banzhaf_match_brute_force(case, form):
    """Random trees with numeric and categorical splits, NaN and +-inf, weighted backgrounds: all three values."""
    M, trees, X, R, w = case
    base = 0.25
    arrays, cats = _stack(trees)
    ps = extract_paths(*arrays, base, n_features=M, categories=cats)

    def predict(z):
        out = base
        for t in trees:
            v = _predict(t[2], z)
            out += 0.0 if v is None else v
        return out

    phi, inter, ban = _reference(predict, X, R, w, M)
    got = interventional_shap_values(ps, X, R, weights=w, progress=False)[..., 0]
    np.testing.assert_allclose(got, phi, rtol=1e-10, atol=1e-10)
    got_i = interventional_interaction_values(ps, X, R, weights=w, progress=False)[..., 0]
    np.testing.assert_allclose(got_i, inter, rtol=1e-10, atol=1e-10)
    got_b = interventional_banzhaf_values(ps, X, R, weights=w, progress=False)[..., 0]
    np.testing.assert_allclose(got_b, ban, rtol=1e-10, atol=1e-10)
    if w is None or np.all(w == 1):
        pairs = interventional_shap_values(ps, X, R, progress=False, method="pairs")[..., 0]
        np.testing.assert_allclose(got, pairs, rtol=1e-10, atol=1e-10)


def test_integer_weights_equal_repeated_rows(form):
    """A background row of weight k counts as k copies of it (exact: integer weights are summed as integers)."""
    rng = np.random.default_rng(5)
    trees = _deep_stumps(rng, 4, 6)
    ps = extract_paths(*trees, 0.0, n_features=6)
    X = rng.normal(size=(20, 6))
    R = rng.normal(size=(15, 6))
    R[rng.random(R.shape) < 0.1] = np.nan
    k = rng.integers(0, 4, size=15)
    k[0] = 1
    rep = np.repeat(R, k, axis=0)
    a = interventional_shap_values(ps, X, R, weights=k, progress=False)
    b = interventional_shap_values(ps, X, rep, progress=False)
    np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)
    ai = interventional_interaction_values(ps, X, R, weights=k.astype(float), progress=False)
    bi = interventional_interaction_values(ps, X, rep, progress=False)
    np.testing.assert_allclose(ai, bi, rtol=1e-13, atol=1e-13)


def _deep_stumps(rng, T, M, depth=4):
    """Dense arrays of T full trees of ``depth`` on random features (repeats included)."""
    n_int = 2 ** depth - 1
    N = 2 ** (depth + 1) - 1
    cl = np.full((T, N), -1)
    cr = np.full((T, N), -1)
    ft = np.full((T, N), -1)
    th = np.zeros((T, N))
    val = np.zeros((T, N, 1))
    cov = np.ones((T, N))
    for t in range(T):
        for i in range(n_int):
            cl[t, i], cr[t, i] = 2 * i + 1, 2 * i + 2
            ft[t, i] = rng.integers(0, M)
            th[t, i] = rng.normal() * 0.7
        val[t, n_int:, 0] = rng.normal(size=N - n_int)
        for i in range(N - 1, -1, -1):
            if i < n_int:
                cov[t, i] = cov[t, 2 * i + 1] + cov[t, 2 * i + 2]
    return cl, cr, cl.copy(), ft, th, val, cov


def test_input_errors():
    rng = np.random.default_rng(0)
    ps = extract_paths(*_deep_stumps(rng, 2, 3, 2), 0.0, n_features=3)
    X = rng.normal(size=(4, 3))
    with pytest.raises(ValueError, match="weights"):
        interventional_shap_values(ps, X, X, weights=np.ones(3))
    with pytest.raises(ValueError, match="non-negative"):
        interventional_shap_values(ps, X, X, weights=-np.ones(4))
    with pytest.raises(ValueError, match="sum to zero"):
        interventional_shap_values(ps, X, X, weights=np.zeros(4))
    with pytest.raises(ValueError, match="identity"):
        interventional_shap_values(ps, X, X, transform="logistic", method="patterns")


# -- host libraries: shap's C++ TreeExplainer and the library's own predictions ----------------------------------

def _data(n, M, seed, nan=0.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, M))
    y = X[:, 0] + X[:, 1] * X[:, 2] - np.abs(X[:, 3 % M]) + 0.1 * rng.normal(size=n)
    if nan:
        X[rng.random(X.shape) < nan] = np.nan
    return X, y


def _shap_cpp(model, bg, X, **kw):
    import shap

    ex = shap.TreeExplainer(model, data=shap.maskers.Independent(bg, max_samples=len(bg)),
                            feature_perturbation="interventional", **kw)
    return np.asarray(ex.shap_values(X, check_additivity=False)), ex.expected_value


def _ours(model, bg, X, **kw):
    from hitml.shap_ext import TreeExplainer

    ex = TreeExplainer(model, data=__import__("shap").maskers.Independent(bg, max_samples=len(bg)),
                       feature_perturbation="interventional", backend="cpu", **kw)
    return ex


@pytest.mark.parametrize("kind", ["xgboost", "lightgbm", "rf", "et_classifier"])
def test_matches_shap_cpp(kind):
    """Against shap's C++ dense_independent (float32 thresholds: differences at the float32 level) with NaN."""
    X, y = _data(400, 6, 1, nan=0.0 if kind in ("rf", "et_classifier") else 0.05)
    bg, Xe = X[:150], X[150:190]
    if kind == "xgboost":
        import xgboost as xgb

        model = xgb.XGBRegressor(n_estimators=20, max_depth=5, learning_rate=0.3).fit(X, y)
    elif kind == "lightgbm":
        import lightgbm as lgb

        model = lgb.LGBMRegressor(n_estimators=20, num_leaves=24, verbose=-1).fit(X, y)
    elif kind == "rf":
        from sklearn.ensemble import RandomForestRegressor

        model = RandomForestRegressor(n_estimators=8, max_depth=7, random_state=0).fit(X, y)
    else:
        from sklearn.ensemble import ExtraTreesClassifier

        model = ExtraTreesClassifier(n_estimators=6, max_depth=6, random_state=0).fit(X, y > 0)
    ref, ev = _shap_cpp(model, bg, Xe)
    ex = _ours(model, bg, Xe)
    got = np.asarray(ex.shap_values(Xe))
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ex.expected_value, ev, rtol=1e-6, atol=1e-6)


def test_wide_row_blocks_match_shap_cpp():
    """Values of many rows go through rows_kernel in wide blocks (a partial last one, three outputs): against shap's
    C++ dense_independent."""
    import numba
    import xgboost as xgb

    from hitml.kernels.treeshap import _cpu_patterns

    X, y = _data(2600, 6, 3, nan=0.05)
    bg, Xe = X[:60], X[:2500]
    model = xgb.XGBClassifier(n_estimators=6, max_depth=4, learning_rate=0.5).fit(X, np.digitize(y, [-0.5, 0.5]))
    assert _cpu_patterns.row_block(6, 7 * 3, len(Xe), numba.get_num_threads(), False) > _cpu_patterns._ROW_BLOCK
    ref, ev = _shap_cpp(model, bg, Xe)
    ex = _ours(model, bg, Xe)
    np.testing.assert_allclose(np.asarray(ex.shap_values(Xe)), ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ex.expected_value, ev, rtol=1e-6, atol=1e-6)


def test_deep_forest_long_paths_match_shap_cpp(monkeypatch):
    """An unlimited-depth forest, paths of over 6 distinct features in the sparse form, shorter ones in tables."""
    from sklearn.ensemble import RandomForestRegressor

    monkeypatch.setattr(_patterns, "TABLE_ENTRIES", 1 << 9)
    X, y = _data(300, 14, 2)
    model = RandomForestRegressor(n_estimators=3, random_state=0, min_samples_leaf=1).fit(X, y)
    bg, Xe = X[:120], X[120:140]
    ref, _ = _shap_cpp(model, bg, Xe)
    ex = _ours(model, bg, Xe)
    lens = np.diff(ex.paths.path_ptr)
    assert (lens > 6).any() and (lens <= 6).any()   # both forms run
    got = np.asarray(ex.shap_values(Xe))
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


def test_lightgbm_categorical_matches_shap_cpp_and_brute_force_with_predictions():
    """LightGBM categorical splits: shap's C++ (which reads LightGBM category sets) and brute force over the
    coalitions with LightGBM's own raw predictions of hybrid rows (interactions and Banzhaf too)."""
    import lightgbm as lgb

    rng = np.random.default_rng(3)
    n, M = 500, 4
    X = np.column_stack([rng.integers(0, 6, n), rng.normal(size=n), rng.normal(size=n), rng.integers(0, 3, n)])
    X = X.astype(float)
    y = np.isin(X[:, 0], [1, 4]) * 2.0 + X[:, 1] * (X[:, 3] == 2) + 0.1 * rng.normal(size=n)
    X[rng.random(X.shape) < 0.05] = np.nan
    model = lgb.LGBMRegressor(n_estimators=6, num_leaves=8, min_child_samples=5, min_data_per_group=5,
                              cat_smooth=1, verbose=-1).fit(X, y, categorical_feature=[0, 3])
    assert "'decision_type': '=='" in str(model.booster_.dump_model())
    bg, Xe = X[:12], X[100:104]
    ex = _ours(model, bg, Xe)
    phi = np.asarray(ex.shap_values(Xe))
    predict = lambda z: float(model.predict(z[None], raw_score=True)[0])  # noqa: E731 - a one-line value function for the brute-force reference
    ref_phi, ref_int, ref_ban = _reference(predict, Xe, bg, None, M)
    np.testing.assert_allclose(phi, ref_phi[:, :M], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(np.asarray(ex.shap_interaction_values(Xe)), ref_int[:, :M, :M], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(np.asarray(ex.banzhaf_values(Xe)), ref_ban[:, :M], rtol=1e-9, atol=1e-9)


def test_xgboost_interactions_and_banzhaf_brute_force_with_library_predictions():
    """XGBoost (NaN, weighted background): values, interactions and Banzhaf against brute force over coalitions
    with XGBoost's own margins of hybrid rows; interaction rows sum to the SHAP values."""
    import xgboost as xgb

    X, y = _data(300, 4, 4, nan=0.1)
    model = xgb.XGBRegressor(n_estimators=8, max_depth=4, learning_rate=0.5).fit(X, y)
    bg, Xe = X[:10].astype(np.float32).astype(float), X[50:54].astype(np.float32).astype(float)
    w = np.linspace(0.5, 2.0, 10)
    ex = _ours(model, bg, Xe, background_weights=w)
    booster = model.get_booster()
    predict = lambda z: float(booster.predict(xgb.DMatrix(z[None]), output_margin=True)[0])  # noqa: E731 - a one-line value function for the brute-force reference
    ref_phi, ref_int, ref_ban = _reference(predict, Xe, bg, w, 4)
    phi = np.asarray(ex.shap_values(Xe))
    inter = np.asarray(ex.shap_interaction_values(Xe))
    np.testing.assert_allclose(phi, ref_phi[:, :4], rtol=1e-5, atol=1e-5)   # XGBoost margins are float32
    np.testing.assert_allclose(inter, ref_int[:, :4, :4], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(inter.sum(axis=2), phi, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(ex.banzhaf_values(Xe)), ref_ban[:, :4], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ex.expected_value, ref_phi[0, 4], rtol=1e-5, atol=1e-5)


def test_max_samples_and_multiclass_and_probability_outputs():
    """The masker's max_samples picks the background (same rows as shap's); multiclass; the probability output
    (a non-identity transform) keeps the exact pair walk and matches shap's C++."""
    import shap
    import xgboost as xgb

    X, y = _data(400, 5, 6, nan=0.05)
    cls = np.digitize(y, np.quantile(y, [0.33, 0.66]))
    model = xgb.XGBClassifier(n_estimators=6, max_depth=3).fit(X, cls)
    Xe = X[:15]
    masker = shap.maskers.Independent(X, max_samples=40)
    ref = shap.TreeExplainer(model, data=masker, feature_perturbation="interventional").shap_values(Xe)
    from hitml.shap_ext import TreeExplainer

    got = TreeExplainer(model, data=masker, feature_perturbation="interventional", backend="cpu").shap_values(Xe)
    np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=1e-6, atol=1e-6)
    binary = xgb.XGBClassifier(n_estimators=6, max_depth=3).fit(X, cls > 0)
    bg = X[100:160]
    ref_p = shap.TreeExplainer(binary, data=bg, model_output="probability",
                               feature_perturbation="interventional").shap_values(Xe)
    got_p = TreeExplainer(binary, data=bg, model_output="probability", feature_perturbation="interventional",
                          backend="cpu").shap_values(Xe)
    np.testing.assert_allclose(np.asarray(got_p), np.asarray(ref_p), rtol=1e-6, atol=1e-6)


def test_sibling_pairs_match_unpaired(monkeypatch):
    """One table lookup for both leaves of a sibling pair (CPU values) gives the unpaired values; the XGBoost model
    has such pairs (NaN sent to one side), and multiclass pairs keep their output."""
    import xgboost as xgb

    from hitml.kernels.treeshap import _cpu_patterns, cpu

    X, y = _data(400, 6, 9, nan=0.1)
    for model in (xgb.XGBRegressor(n_estimators=10, max_depth=4).fit(X, y),
                  xgb.XGBClassifier(n_estimators=5, max_depth=3).fit(X, np.digitize(y, [-0.5, 0.5]))):
        ps = _ours(model, X[:50], X).paths
        P = ps.n_paths
        mode, k, bit = np.zeros(P, np.int8), np.zeros(P, np.int64), np.zeros(P, np.int64)
        _cpu_patterns.sibling_pairs(ps.path_ptr, ps.tree_index, ps.feature, ps.lower, ps.upper, ps.missing_ok,
                                    ps.cat_ptr, ps.leaf_value, np.ones(P, bool), mode, k, bit)
        assert (mode == 1).sum() >= P // 8
        paired = interventional_shap_values(ps, X[100:160], X[:80], progress=False)
        banz = interventional_banzhaf_values(ps, X[100:160], X[:80], progress=False)
        monkeypatch.setattr(cpu.options, "sibling_pairs", False)
        np.testing.assert_allclose(paired, interventional_shap_values(ps, X[100:160], X[:80], progress=False),
                                   rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(banz, interventional_banzhaf_values(ps, X[100:160], X[:80], progress=False),
                                   rtol=1e-12, atol=1e-12)
        monkeypatch.setattr(cpu.options, "sibling_pairs", True)


def test_weights_with_output_transform_equal_repeated_rows():
    """The exact pair walk (logistic and log-loss transforms) weights background rows as repeated copies."""
    rng = np.random.default_rng(8)
    ps = extract_paths(*_deep_stumps(rng, 3, 5, 3), 0.1, n_features=5)
    X = rng.normal(size=(7, 5))
    R = rng.normal(size=(9, 5))
    k = rng.integers(1, 4, size=9)
    y = rng.random(7)
    for transform in ("logistic", "logistic_nlogloss"):
        a = interventional_shap_values(ps, X, R, weights=k, transform=transform, y=y, progress=False)
        b = interventional_shap_values(ps, X, np.repeat(R, k, axis=0), transform=transform, y=y, progress=False)
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_chunked_interactions_equal_dense():
    from hitml.kernels.treeshap import iter_interventional_interactions

    rng = np.random.default_rng(12)
    ps = extract_paths(*_deep_stumps(rng, 3, 5, 3), 0.0, n_features=5)
    X, R = rng.normal(size=(23, 5)), rng.normal(size=(11, 5))
    dense = interventional_interaction_values(ps, X, R, progress=False)
    parts = list(iter_interventional_interactions(ps, X, R, chunk_rows=5))
    assert [(a, b) for a, b, _ in parts] == [(0, 5), (5, 10), (10, 15), (15, 20), (20, 23)]
    np.testing.assert_array_equal(np.concatenate([v for _, _, v in parts]), dense)
    w = rng.random(11) * 4                       # weights go into the one count of the background
    dense_w = interventional_interaction_values(ps, X, R, weights=w, progress=False)
    parts_w = list(iter_interventional_interactions(ps, X, R, chunk_rows=7, weights=w))
    np.testing.assert_array_equal(np.concatenate([v for _, _, v in parts_w]), dense_w)


def _fail_sets_numpy(ps, p, R):
    """Fail set (bit t: row fails element t) of every row of ``R`` on path ``p``, from PathSet's documented element
    test, in plain NumPy."""
    s, e1 = int(ps.path_ptr[p]), int(ps.path_ptr[p + 1])
    fails = np.zeros(len(R), np.int64)
    for t, e in enumerate(range(s, e1)):
        x = R[:, ps.feature[e]]
        nan = np.isnan(x)
        with np.errstate(invalid="ignore"):
            ok = ((ps.lower[e] == -np.inf) | (ps.lower[e] < x)) & (x <= ps.upper[e])
            if ps.cat_ptr[e] >= 0:
                nw = int(ps.cat_nwords[e])
                inside = (x >= 0) & (x < 32 * nw)
                c = np.where(inside, x, 0).astype(np.int64)
                words = ps.cat_words[ps.cat_ptr[e] + c // 32].astype(np.int64)
                ok &= np.where(inside, (words >> (c % 32)) & 1 == 1, bool(ps.cat_outside_ok[e]))
        ok = np.where(nan, bool(ps.missing_ok[e]), ok)
        fails |= (~ok).astype(np.int64) << t
    return fails


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("kind", ["lightgbm_cat", "xgboost_deep", "rf_wide"])
def test_background_histograms_match_numpy(kind, weighted):
    """The background pass (distinct conditions into 64-row bit masks, fail sets counted per path; several row
    blocks, a partial last word, paths longer than the bit-sliced limit, categorical splits, NaN and +-inf,
    sibling pairs skipped) against per-row fail sets computed in NumPy from PathSet's element semantics."""
    from hitml.kernels.treeshap import _cpu_patterns as kp
    from hitml.kernels.treeshap.cpu import _background_histograms, _path_args

    rng = np.random.default_rng(7)
    if kind == "lightgbm_cat":
        import lightgbm as lgb

        n, M = 3000, 6
        X = rng.normal(size=(n, M))
        X[:, 0] = rng.integers(0, 40, n)
        y = np.isin(X[:, 0], [1, 4, 9, 33]) * 2.0 + X[:, 1] * X[:, 2] + 0.1 * rng.normal(size=n)
        X[rng.random(X.shape) < 0.05] = np.nan
        model = lgb.LGBMRegressor(n_estimators=12, num_leaves=40, min_child_samples=5, verbose=-1).fit(
            X, y, categorical_feature=[0])
    elif kind == "xgboost_deep":
        import xgboost as xgb

        n, M = 3000, 14
        X = rng.normal(size=(n, M))
        y = X[:, :6].prod(axis=1) + X[:, 6] * X[:, 7] + 0.1 * rng.normal(size=n)
        X[rng.random(X.shape) < 0.05] = np.nan
        model = xgb.XGBRegressor(n_estimators=8, max_depth=11, learning_rate=0.5).fit(X, y)
    else:
        from sklearn.ensemble import RandomForestRegressor

        n, M = 2000, 300
        X = rng.normal(size=(n, M))
        y = X[:, 0] + X[:, 1] * X[:, 2] + 0.1 * rng.normal(size=n)
        model = RandomForestRegressor(n_estimators=40, max_depth=6, random_state=0).fit(X, y)
    ps = _ours(model, X[:10], X[:2]).paths
    R = rng.normal(size=(9000 if M < 100 else 2500, M)) * 2
    if kind == "lightgbm_cat":
        R[:, 0] = rng.integers(-3, 80, len(R))
    R[rng.random(R.shape) < 0.05] = np.nan
    R[rng.random(R.shape) < 0.01] = np.inf
    R[rng.random(R.shape) < 0.01] = -np.inf
    R = np.ascontiguousarray(R)
    lens = np.diff(ps.path_ptr)
    plan = _patterns.plan_paths(ps.path_ptr, False)
    chunk = np.concatenate(plan.chunks)
    if kind == "xgboost_deep":
        assert lens[chunk].max() > kp._SLICED_MAX     # both counting forms run
    wint = rng.integers(1, 1 << 40, len(R)).astype(np.int64) if weighted else np.ones(len(R), np.int64)
    mode = np.zeros(ps.n_paths, np.int8)
    mode[chunk[1::3]] = 2                              # skipped paths keep their zeros
    hist = np.zeros(plan.hist_size[0] if len(plan.chunks) == 1 else int(plan.hist_off.max() + 4096), np.int64)
    pa = _path_args(ps)
    cond = _patterns.distinct_conditions(*pa[:6], chunk)
    assert len(cond.feature) < (lens[chunk]).sum()     # conditions are shared between paths
    _background_histograms(R, wint, weighted, chunk, pa, plan.hist_off, mode, hist)
    for p in chunk:
        h = hist[plan.hist_off[p]:plan.hist_off[p] + (1 << int(lens[p]))]
        if mode[p] == 2:
            assert not h.any()
            continue
        ref = np.zeros(1 << int(lens[p]), np.int64)
        np.add.at(ref, _fail_sets_numpy(ps, p, R), wint)
        np.testing.assert_array_equal(h, ref)


def test_large_background_matches_shap_cpp():
    """A background of several row blocks, values against shap's C++ dense_independent."""
    import xgboost as xgb

    X, y = _data(12000, 8, 5, nan=0.03)
    model = xgb.XGBRegressor(n_estimators=30, max_depth=6, learning_rate=0.3).fit(X, y)
    bg, Xe = X[:11000], X[11000:11020]
    ref, ev = _shap_cpp(model, bg, Xe)
    ex = _ours(model, bg, Xe)
    np.testing.assert_allclose(np.asarray(ex.shap_values(Xe)), ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ex.expected_value, ev, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("M", [12, 190])
def test_interactions_both_output_layouts_brute_force(M):
    """Interventional interactions summed in a feature-major copy of the block's output (12 features) and written in
    place (190 features: the copy does not fit): against brute force over the coalitions of the four features the
    model uses, with XGBoost's own margins of hybrid rows (two outputs); entries of unused features are zero."""
    import xgboost as xgb

    from hitml.kernels.treeshap import _cpu_patterns as kp

    rng = np.random.default_rng(11)
    used = np.array([1, 5, 7, 10]) if M == 12 else np.array([3, 77, 150, 189])
    n = 400
    X = np.zeros((n, M))
    X[:, used] = rng.normal(size=(n, 4))
    y = np.digitize(X[:, used[0]] * X[:, used[1]] + X[:, used[2]] - X[:, used[3]], [-0.5, 0.5])
    model = xgb.XGBClassifier(n_estimators=5, max_depth=4, learning_rate=0.5).fit(X, y)
    Xe = rng.normal(size=(70, M)).astype(np.float32).astype(float)
    bg = rng.normal(size=(9, M)).astype(np.float32).astype(float)
    bg[0, used[2]] = np.nan
    ex = _ours(model, bg, Xe)
    W = (M + 1) ** 2 * 3
    b = kp.row_block(M, W, len(Xe), 2, True)
    assert (b * 8 * (M + W + 1) <= kp._INTERACTION_BLOCK_BYTES) == (M == 12)   # both layouts run
    inter = np.asarray(ex.shap_interaction_values(Xe))          # (n, M, M, 3)
    booster = model.get_booster()
    for k_row in (0, 33):
        x = Xe[k_row]

        def predict(z4, k, x=x):
            z = x.copy()
            z[used] = z4
            return float(booster.predict(xgb.DMatrix(z[None]), output_margin=True)[0, k])

        for k in range(3):
            _, ref_int, _ = _reference(lambda z4, k=k: predict(z4, k), x[used][None], bg[:, used], None, 4)
            np.testing.assert_allclose(inter[k_row][np.ix_(used, used)][..., k], ref_int[0, :4, :4], rtol=1e-5,
                                       atol=1e-5)
    mask = np.ones((M, M), bool)
    mask[np.ix_(used, used)] = False
    assert not inter[:, mask].any()
    np.testing.assert_allclose(inter.sum(axis=2), np.asarray(ex.shap_values(Xe)), rtol=1e-10, atol=1e-10)
