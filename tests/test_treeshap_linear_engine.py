"""The CPU engine's per-tree kernel (``cpu.options.shap_linear``, ``_cpu_linear.program_values``) against the host
libraries' own SHAP values and shap's C++ explainer, on deep forests, deep and categorical boosters, multi-output
leaves and hostile rows; and against the per-path kernels it replaces."""
import contextlib

import numpy as np
import pytest

from hitml.kernels.treeshap import cpu, extract_paths
from hitml.kernels.treeshap.paths import tree_outputs, tree_program

shap = pytest.importorskip("shap")


@contextlib.contextmanager
def _mode(mode):
    old = cpu.options.shap_linear
    cpu.options.shap_linear = mode
    try:
        yield
    finally:
        cpu.options.shap_linear = old


def _paths(model, M, input_dtype=np.float32):
    ens = shap.TreeExplainer(model).model
    return extract_paths(ens.children_left, ens.children_right, ens.children_default, ens.features, ens.thresholds,
                         ens.values, ens.node_sample_weight, ens.base_offset, n_features=M, input_dtype=input_dtype)


def _rows(rng, n, M, nan=False):
    X = rng.normal(size=(n, M)).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.float32(1e-40)        # subnormal float32
    X[rng.random(X.shape) < 0.05] = 0.0
    X[rng.random(X.shape) < 0.03] = np.inf
    X[rng.random(X.shape) < 0.03] = -np.inf
    if nan:
        X[rng.random(X.shape) < 0.08] = np.nan
    return X


@pytest.mark.parametrize("n", [1, 7, 300])
def test_deep_forest_matches_shap_cpp_and_the_per_path_kernel(n):
    ens_mod = pytest.importorskip("sklearn.ensemble")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, 20))
    y = X[:, 0] + np.sin(3 * X[:, 1]) * X[:, 2] + X[:, 3:].sum(1) / 4 + 0.1 * rng.normal(size=2000)
    model = ens_mod.RandomForestRegressor(n_estimators=5, max_depth=25, random_state=0).fit(X, y)
    ps = _paths(model, 20)
    assert ps.max_length > cpu.LINEAR_MIN_PATH                         # "auto" takes this model
    Xt = _rows(rng, n, 20)
    got = cpu.shap_values(ps, Xt)
    assert cpu._linear_part(ps) is not None
    with _mode("never"):
        per_path = cpu.shap_values(ps, Xt)
    np.testing.assert_allclose(got, per_path, rtol=1e-10, atol=1e-11)
    ref = shap.TreeExplainer(model).shap_values(Xt.astype(np.float64), check_additivity=False)
    np.testing.assert_allclose(got[:, :20, 0], ref, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got[:, 20, 0], np.ravel(shap.TreeExplainer(model).expected_value)[0], rtol=1e-9)


def test_multiclass_extra_trees_match_sklearn_probabilities():
    ens_mod = pytest.importorskip("sklearn.ensemble")
    rng = np.random.default_rng(1)
    X = rng.normal(size=(1500, 6))
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(int) + (X[:, 3] > 1)
    model = ens_mod.ExtraTreesClassifier(n_estimators=4, random_state=0).fit(X, y)
    ps = _paths(model, 6)
    Xt = _rows(rng, 200, 6)
    with _mode("always"):
        got = cpu.shap_values(ps, Xt)
    with _mode("never"):
        per_path = cpu.shap_values(ps, Xt)
    np.testing.assert_allclose(got, per_path, rtol=1e-10, atol=1e-12)
    fin = np.isfinite(Xt).all(axis=1)                                  # sklearn's predict takes no infinity
    np.testing.assert_allclose(got[fin].sum(1), model.predict_proba(Xt[fin]), rtol=1e-7, atol=1e-9)


def test_deep_xgboost_with_missing_values_matches_pred_contribs():
    xgb = pytest.importorskip("xgboost")
    from _deep_models import deep_xgboost
    rng = np.random.default_rng(2)
    model = deep_xgboost(rng, 6)
    ps = _paths(model, 6)
    Xt = _rows(rng, 150, 6, nan=True)
    # threshold-exact values (XGBoost's split values, float32, where x < t decides) and tiny ones
    split = model.get_booster().trees_to_dataframe().query("Feature != 'Leaf'")
    for i in range(0, 60):
        row = split.iloc[(7 * i) % len(split)]
        Xt[i, int(row["Feature"][1:])] = np.float32(row["Split"])
    Xt[60:70, :] = np.float32(1e-36) * rng.choice([-1, 1], size=(10, 6))
    with _mode("always"):
        got = cpu.shap_values(ps, Xt)
    fin = ~np.isinf(Xt).any(axis=1)                                     # XGBoost's DMatrix rejects infinity
    want = model.get_booster().predict(xgb.DMatrix(Xt[fin], missing=np.nan), pred_contribs=True)
    np.testing.assert_allclose(got[fin, :, 0], want, rtol=1e-4, atol=1e-4)
    with _mode("never"):
        np.testing.assert_allclose(got, cpu.shap_values(ps, Xt), rtol=1e-10, atol=1e-11)


def test_lightgbm_with_categorical_trees_left_to_the_per_path_kernel():
    pytest.importorskip("lightgbm")
    pytest.importorskip("pandas")
    from _adult import categorical_case

    from hitml import shap_ext
    model, df, rows = categorical_case()
    ex = shap_ext.TreeExplainer(model, backend="cpu")
    with _mode("always"):
        sv = np.asarray(ex.shap_values(rows))
        ps = ex._paths(df.shape[1])
        part = cpu._linear_part(ps)
    ok = tree_program(ps.trees, df.shape[1])[0]
    assert ok.any() and not ok.all() and part is not None and part[1] is not None
    want = model.predict(rows, pred_contrib=True)[:, :-1]
    np.testing.assert_allclose(sv.reshape(want.shape), want, rtol=1e-6, atol=1e-6)


def test_shallow_boosters_keep_the_per_path_kernel_under_auto():
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(3)
    X = rng.normal(size=(500, 5)).astype(np.float32)
    model = xgb.XGBRegressor(n_estimators=5, max_depth=4).fit(X, X[:, 0] - X[:, 1])
    ps = _paths(model, 5)
    assert cpu._linear_part(ps) is None
    with _mode("always"):
        assert cpu._linear_part(ps) is not None
        got = cpu.shap_values(ps, X[:50])
    want = model.get_booster().predict(xgb.DMatrix(X[:50]), pred_contribs=True)
    np.testing.assert_allclose(got[:, :, 0], want, rtol=1e-5, atol=1e-5)


def test_a_rows_bytes_do_not_depend_on_its_block_or_the_call():
    """Row blocks of 8, 32 or 128 lanes (by the call's row count) and any position in them give a row the same
    bytes."""
    ens_mod = pytest.importorskip("sklearn.ensemble")
    rng = np.random.default_rng(4)
    X = rng.normal(size=(1500, 16))
    model = ens_mod.RandomForestRegressor(n_estimators=3, max_depth=20, random_state=0).fit(X, X[:, 0] * X[:, 1])
    ps = _paths(model, 16)
    Xt = _rows(rng, 700, 16)
    with _mode("always"):
        whole = cpu.shap_values(ps, Xt)
        for a, b in ((0, 1), (5, 9), (3, 70), (100, 357)):
            assert cpu.shap_values(ps, Xt[a:b]).tobytes() == whole[a:b].tobytes()


def test_boosted_multiclass_walks_each_tree_for_its_one_output():
    """LightGBM multiclass: each tree feeds one class (the kernel walks that output only); values equal LightGBM's
    pred_contrib and the per-path kernel's."""
    lgb = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(5)
    X = rng.normal(size=(3000, 20))
    y = np.digitize(X[:, 0] + X[:, 1] * X[:, 2] + X[:, 3:].sum(1) / 4, [-1.0, 0.0, 1.0])
    model = lgb.LGBMClassifier(n_estimators=8, num_leaves=63, min_child_samples=3, verbose=-1, n_jobs=1).fit(X, y)
    from hitml import shap_ext
    ex = shap_ext.TreeExplainer(model, backend="cpu")      # LightGBM's own reading of NaN (missing type None: 0)
    ps = ex._paths(20)
    assert (tree_outputs(ps) == np.arange(8 * 4) % 4).all() and ps.n_outputs == 4     # LightGBM: class = tree % K
    Xt = rng.normal(size=(90, 20))
    Xt[::5, 1] = np.nan
    with _mode("always"):
        got = np.asarray(ex.shap_values(Xt))
        assert cpu._linear_part(ps) is not None
    with _mode("never"):
        np.testing.assert_allclose(got, np.asarray(ex.shap_values(Xt)), rtol=1e-10, atol=1e-12)
    want = model.predict(Xt, pred_contrib=True).reshape(len(Xt), 4, 21)[:, :, :20]
    np.testing.assert_allclose(got.reshape(want.shape[0], 20, 4).transpose(0, 2, 1), want, rtol=1e-6, atol=1e-6)


def test_pure_leaf_forest_classifier_trees_feed_every_class():
    """A fully grown forest classifier has pure leaves (one nonzero class value each), as a boosted multiclass
    model's paths do; yet each tree feeds every class, so it is not taken for boosted multiclass."""
    ens_mod = pytest.importorskip("sklearn.ensemble")
    rng = np.random.default_rng(8)
    X = rng.normal(size=(600, 6))
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(int)
    model = ens_mod.ExtraTreesClassifier(n_estimators=4, random_state=0).fit(X, y)
    ps = _paths(model, 6)
    assert ((ps.leaf_value != 0).sum(axis=1) <= 1).all()              # pure leaves
    assert (tree_outputs(ps) == -1).all()


def test_tree_limit_and_single_leaf_trees():
    """tree_limit restricts the per-tree kernel's trees too, and a tree that is one leaf (bias only) sits beside
    deep ones."""
    ens_mod = pytest.importorskip("sklearn.ensemble")
    rng = np.random.default_rng(6)
    X = rng.normal(size=(800, 16))
    y = X[:, 0] * X[:, 1] + X[:, 2:].sum(1) / 3
    model = ens_mod.RandomForestRegressor(n_estimators=4, max_depth=18, random_state=0).fit(X, y)
    ens = shap.TreeExplainer(model).model
    cl, cr = ens.children_left.copy(), ens.children_right.copy()
    cl[2, :] = -1                                                     # tree 2 becomes its root leaf
    cr[2, :] = -1
    ps = extract_paths(cl, cr, ens.children_default, ens.features, ens.thresholds, ens.values,
                       ens.node_sample_weight, ens.base_offset, n_features=16)
    Xt = rng.normal(size=(40, 16))
    for tl in (None, 1, 3):
        with _mode("always"):
            got = cpu.shap_values(ps, Xt, tree_limit=tl)
        with _mode("never"):
            want = cpu.shap_values(ps, Xt, tree_limit=tl)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_gpu_linear_auto_rule():
    """The GPU's "auto" choice of the per-tree kernel (decided on the host; no GPU needed): where the planner leaves
    every path to the DP, or splits with tables for under half of the elements; never over the user's options."""
    from hitml.kernels.treeshap._gpu_linear import LINEAR_SPLIT_SHARE, wanted

    assert wanted("dp", "auto", "auto")
    assert wanted("split", "auto", "auto", 0.41) and not wanted("split", "auto", "auto", 0.68)
    assert not wanted("split", "auto", "auto", LINEAR_SPLIT_SHARE)
    assert not wanted("table", "auto", "auto")
    assert not wanted("dp", "dp", "auto")                  # a forced shap_variant keeps the per-path kernels
    assert wanted("table", "auto", "always") and not wanted("dp", "auto", "never")


@contextlib.contextmanager
def _split(split):
    old = cpu.LEAF_SPLIT
    cpu.LEAF_SPLIT = split
    cpu._LINEAR.clear()
    try:
        yield
    finally:
        cpu.LEAF_SPLIT = old
        cpu._LINEAR.clear()


def test_leaf_classes_walk_each_leaf_once_with_fewer_gauss_nodes():
    """paths.walk_program with a split: the walks of a tree enter its leaves once each (the short-path walk the
    leaves of at most ``split`` features, with at most ceil(split / 2) Gauss nodes), left and first-entered bits as
    the tree has them, and one walk for trees whose leaves all fall on one side."""
    ens_mod = pytest.importorskip("sklearn.ensemble")
    from hitml.kernels.treeshap.paths import walk_program

    rng = np.random.default_rng(5)
    X = rng.normal(size=(1500, 12))
    y = X[:, 0] + np.sin(3 * X[:, 1]) * X[:, 2] + X[:, 3:].sum(1) / 4
    ps = _paths(ens_mod.RandomForestRegressor(n_estimators=4, max_depth=20, random_state=0).fit(X, y), 12)
    src, ok, q_of, levels, ptr, evi, evd = walk_program(ps.trees, 12, True, 6)
    assert ok.all() and src.size > ps.n_trees
    _, ok1, q1, _, _, _, _ = walk_program(ps.trees, 12, True, 0)
    for t in range(ps.n_trees):
        walks = np.flatnonzero(src == t)
        seen = []
        for w in walks:
            ev = evi[ptr[w]:ptr[w + 1]]
            seen += list(ev[(ev[:, 0] & 3) == 3, 3])
        leaves = ps.tree_index == t
        assert sorted(seen) == sorted(np.flatnonzero(leaves))           # every leaf of the tree, once
        lens = np.diff(ps.path_ptr)[np.flatnonzero(leaves)]
        if walks.size == 2:
            assert lens.min() <= 6 < lens.max()
            assert q_of[walks[0]] <= 3 and q_of[walks[1]] == q1[t]
        else:
            assert lens.max() <= 6 or lens.min() > 6
    # a walk that enters only the right child of a split enters it first: left and first-entered bits then differ
    down = (evi[:, 0] & 3) != 2
    assert (((evi[down, 0] >> 11) & 1) != ((evi[down, 0] >> 9) & 1)).any()
    assert not (((evi[down, 0] >> 11) & 1) < ((evi[down, 0] >> 9) & 1)).any()     # a left child is always first


@pytest.mark.parametrize("split", [2, 5, 9])
def test_leaf_classes_match_one_walk_shap_cpp_and_xgboost(split):
    """The CPU engine with each tree's leaves walked in two classes: the one-walk values to float rounding on a deep
    forest (shap's C++ explainer too), a 3-class extra-trees forest (sklearn's probabilities), and XGBoost's own
    pred_contribs on a deep booster with missing values, threshold-exact and tiny inputs."""
    ens_mod = pytest.importorskip("sklearn.ensemble")
    xgb = pytest.importorskip("xgboost")
    from _deep_models import deep_xgboost

    rng = np.random.default_rng(3)
    X = rng.normal(size=(2000, 20))
    y = X[:, 0] + np.sin(3 * X[:, 1]) * X[:, 2] + X[:, 3:].sum(1) / 4 + 0.1 * rng.normal(size=2000)
    forest = ens_mod.RandomForestRegressor(n_estimators=4, max_depth=25, random_state=0).fit(X, y)
    yc = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(int) + (X[:, 3] > 1)
    extra = ens_mod.ExtraTreesClassifier(n_estimators=3, random_state=0).fit(X[:, :6], yc)
    booster = deep_xgboost(rng, 6)
    split_seen = False                                                  # some tree's leaves fall on both sides
    for model, M, nan in ((forest, 20, False), (extra, 6, False), (booster, 6, True)):
        ps = _paths(model, M)
        Xt = _rows(rng, 120, M, nan=nan)
        with _mode("always"):
            one = cpu.shap_values(ps, Xt)
            with _split(split):
                got = cpu.shap_values(ps, Xt)
                walks = cpu._linear_part(ps)[0][2].size - 1
                assert walks >= ps.n_trees
                split_seen |= walks > ps.n_trees
        np.testing.assert_allclose(got, one, rtol=1e-10, atol=1e-11)
        fin = np.isfinite(Xt).all(axis=1) if not nan else ~np.isinf(Xt).any(axis=1)
        if model is forest:
            ref = shap.TreeExplainer(model).shap_values(Xt.astype(np.float64), check_additivity=False)
            np.testing.assert_allclose(got[:, :M, 0], ref, rtol=1e-6, atol=1e-7)
        elif model is extra:
            np.testing.assert_allclose(got[fin].sum(1), model.predict_proba(Xt[fin]), rtol=1e-7, atol=1e-9)
        else:
            want = model.get_booster().predict(xgb.DMatrix(Xt[fin], missing=np.nan), pred_contribs=True)
            np.testing.assert_allclose(got[fin, :, 0], want, rtol=1e-4, atol=1e-4)
    assert split_seen
