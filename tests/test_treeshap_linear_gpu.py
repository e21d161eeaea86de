"""The GPU's per-tree linear TreeSHAP kernel (linear.cu, options.shap_linear) and its walk program.

The walk program (``paths.tree_program``) is checked on the CPU by running it in NumPy the way the kernel does,
against brute-force Shapley values and XGBoost ``pred_contribs``. The GPU kernel is checked against its CPU twin
(``_cpu_linear.linear_shap_values``, which reads shap's arrays itself), XGBoost, LightGBM and shap's C++ explainer,
on deep forests, multi-output leaves, hostile rows (NaN, +-inf, subnormals) and models whose trees it only partly
takes (categorical splits).
"""
import contextlib

import numpy as np
import pytest

from _shapley import exact_shapley
from hitml.kernels.treeshap import extract_paths
from hitml.kernels.treeshap._cpu_linear import linear_shap_values
from hitml.kernels.treeshap._cpu_quad import gauss_legendre
from hitml.kernels.treeshap.paths import tree_program, walk_program
from test_treeshap_linear import _expectation, _random_tree


def _coef(op, on, zp, zn, tt):
    """C_e at the Gauss nodes (n, Q): 0 where op = 0, else by the edge's case (linear.cu, UP)."""
    g1 = zp + tt * (1 - zp)
    c_on = (zp - zn) / (g1 * (zn + tt * (1 - zn)))
    c_off = -zn / (g1 * (zn * (1 - tt) + (1.0 if zn == 0.0 else 0.0)))
    return np.where(op[:, None], np.where(on[:, None], c_on, c_off), 0.0)


def _program_arrays(ps, X):
    """The rows as the model compares them (float64), n, K, the zeroed (n, M, K) output and the Gauss rules."""
    Xf = np.asarray(X).astype(ps.input_dtype).astype(np.float64)
    tq, wq = gauss_legendre(32)
    return Xf, Xf.shape[0], ps.n_outputs, np.zeros(Xf.shape + (ps.n_outputs,)), tq, wq


def _run_program(ps, X, fold=True):
    """SHAP values (n, M, K) of the trees ``tree_program`` takes, by running their events as linear.cu does
    (vectorised over rows and Gauss nodes); the trees it does not take are left out."""
    ok, q_of, levels, ptr, evi, evd = tree_program(ps.trees, ps.n_features, fold)
    Xf, n, K, phi, tq, wq = _program_arrays(ps, X)
    for t in np.flatnonzero(ok):
        Q, L = int(q_of[t]), int(levels[t])
        tt = tq[Q, :Q][None, :]
        P = np.zeros((L, n, Q))
        S = np.zeros((L, n, Q, K))
        on = np.ones((64, n), bool)
        dead = np.full(n, 1 << 30)
        P[0] = wq[Q, :Q][None, :]
        for e in range(ptr[t], ptr[t + 1]):
            code, a, pd, _ = (int(v) for v in evi[e])
            kind, d = code & 3, (code >> 2) & 127
            zp, zn = evd[e, 1], evd[e, 2]
            op = np.ones(n, bool) if pd < 0 else on[pd]
            if kind == 0:
                x = Xf[:, a]
                le = x <= evd[e, 0]
                go = np.where(np.isnan(x), bool(code >> 10 & 1), le if code >> 9 & 1 else ~le)
                on[d] = op & go
                alive = dead > d - 1
                newly = alive & ~on[d] & (zn == 0.0)
                dead[newly] = d
                live = alive & ~newly
                g = np.where(op[:, None], zp + tt * (1 - zp), zp * (1 - tt))
                gn = np.where(on[d][:, None], zn + tt * (1 - zn), zn * (1 - tt))
                with np.errstate(divide="ignore", invalid="ignore"):
                    P[d][live] = (P[d - 1] * (gn / g))[live]
            elif kind == 1:
                pv = np.where((dead > d)[:, None], P[d], 0.0)
                S[d] = pv[:, :, None] * ps.leaf_value[a][None, None, :]
            elif kind == 3:                                  # an edge into a leaf: DOWN, LEAF and UP at once
                x = Xf[:, a]
                le = x <= evd[e, 0]
                go = np.where(np.isnan(x), bool(code >> 10 & 1), le if code >> 9 & 1 else ~le)
                onv = op & go
                live = (dead > d - 1) & ~(~onv & (zn == 0.0))
                g = np.where(op[:, None], zp + tt * (1 - zp), zp * (1 - tt))
                gn = np.where(onv[:, None], zn + tt * (1 - zn), zn * (1 - tt))
                with np.errstate(divide="ignore", invalid="ignore"):
                    pv = np.where(live[:, None], P[d - 1] * (gn / g), 0.0)
                sl = pv[:, :, None] * ps.leaf_value[int(evi[e, 3])][None, None, :]
                S[d - 1] = sl if code >> 11 & 1 else S[d - 1] + sl
                phi[:, a, :] += (_coef(op, onv, zp, zn, tt)[:, :, None] * sl).sum(1)
            else:
                S[d - 1] = S[d] if code >> 11 & 1 else S[d - 1] + S[d]
                phi[:, a, :] += (_coef(op, on[d], zp, zn, tt)[:, :, None] * S[d]).sum(1)
                dead[dead == d] = 1 << 30
    return phi, ok


def _run_slots(ps, X, split):
    """SHAP values (n, M, K) of ``walk_program(..., split)``'s walks run with linear.cu's stack: one slot per level
    (P in output 0 while the walk is in the first child it entered, then S), P of the level above carried in
    ``p_hold`` into the second child, and DOWN choosing between them by its first-entered bit, as the kernel does."""
    src, ok, q_of, levels, ptr, evi, evd = walk_program(ps.trees, ps.n_features, True, split)
    Xf, n, K, phi, tq, wq = _program_arrays(ps, X)
    for w in np.flatnonzero(ok):
        Q, L = int(q_of[w]), int(levels[w])
        tt = tq[Q, :Q][None, :]
        V = np.zeros((L + 1, n, Q, K))
        V[0, :, :, 0] = wq[Q, :Q][None, :]
        hold = np.zeros((n, Q))
        on = np.ones((64, n), bool)
        dead = np.full(n, 1 << 30)
        for e in range(ptr[w], ptr[w + 1]):
            code, a, pd, leaf = (int(v) for v in evi[e])
            kind, d, first = code & 3, (code >> 2) & 127, bool(code >> 11 & 1)
            zp, zn = evd[e, 1], evd[e, 2]
            op = np.ones(n, bool) if pd < 0 else on[pd]
            if kind in (0, 3):
                x = Xf[:, a]
                go = np.where(np.isnan(x), bool(code >> 10 & 1), x <= evd[e, 0] if code >> 9 & 1 else ~(x <= evd[e, 0]))
                onv = op & go
                g = np.where(op[:, None], zp + tt * (1 - zp), zp * (1 - tt))
                gn = np.where(onv[:, None], zn + tt * (1 - zn), zn * (1 - tt))
                pp = V[d - 1, :, :, 0] if first else hold
                with np.errstate(divide="ignore", invalid="ignore"):
                    ratio = gn / g
            if kind == 0:
                on[d] = onv
                alive = dead > d - 1
                newly = alive & ~onv & (zn == 0.0)
                dead[newly] = d
                live = alive & ~newly
                V[d, live, :, 0] = (pp * ratio)[live]
            elif kind == 3:
                live = (dead > d - 1) & (onv | (zn != 0.0))
                pv = np.where(live[:, None], pp * ratio, 0.0)
                if first:
                    hold = pp.copy()
                sl = pv[:, :, None] * ps.leaf_value[leaf][None, None, :]
                V[d - 1] = sl if first else V[d - 1] + sl
                phi[:, a, :] += (_coef(op, onv, zp, zn, tt)[:, :, None] * sl).sum(1)
            elif kind == 1:
                pv = np.where((dead > d)[:, None], V[d, :, :, 0], 0.0)
                V[d] = pv[:, :, None] * ps.leaf_value[a][None, None, :]
            else:
                if first:
                    hold = V[d - 1, :, :, 0].copy()
                V[d - 1] = V[d] if first else V[d - 1] + V[d]
                phi[:, a, :] += (_coef(op, on[d], zp, zn, tt)[:, :, None] * V[d]).sum(1)
                dead[dead == d] = 1 << 30
    return phi, ok, src


def _paths_of(tree, M):
    cl, cr, cd, ft, th, val, cov = tree
    return extract_paths(cl, cr, cd, ft, th, val, cov, np.zeros(val.shape[2]), n_features=M)


# ----------------------------------------------------------------------------------------- the walk program, CPU
@pytest.mark.parametrize("fold", [True, False])
@pytest.mark.parametrize("seed", range(10))
def test_program_matches_brute_force_with_repeats_zero_covers_and_nan(seed, fold):
    rng = np.random.default_rng(seed)
    M, K = 5, 2
    tree = _random_tree(rng, M, depth=6, K=K)
    ps = _paths_of(tree, M)
    X = rng.choice([-1.0, -0.5, 0.0, 0.25, 0.5, 1.0, np.nan, np.inf, -np.inf], size=(6, M))
    phi, ok = _run_program(ps, X, fold)
    assert ok.all()
    for i, x in enumerate(X):
        want = exact_shapley(lambda S: _expectation(tree, x, S), M)
        np.testing.assert_allclose(phi[i], want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("split", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("seed", range(8))
def test_leaf_class_walks_with_the_kernels_stack_match_brute_force(seed, split):
    """A tree's leaves walked in two classes (paths.walk_program with a split; 0: one walk), run with linear.cu's
    one-slot stack and first-entered bits: brute-force Shapley values, with repeated features, zero covers, NaN and
    infinite inputs; a walk entering only a split's right child takes the level's P from its slot."""
    rng = np.random.default_rng(100 + seed)
    M, K = 5, 2
    tree = _random_tree(rng, M, depth=6, K=K)
    ps = _paths_of(tree, M)
    X = rng.choice([-1.0, -0.5, 0.0, 0.25, 0.5, 1.0, np.nan, np.inf, -np.inf], size=(6, M))
    phi, ok, src = _run_slots(ps, X, split)
    assert ok.all()
    for i, x in enumerate(X):
        want = exact_shapley(lambda S: _expectation(tree, x, S), M)
        np.testing.assert_allclose(phi[i], want, rtol=1e-10, atol=1e-12)


def test_program_matches_xgboost_on_deep_trees_with_missing_values():
    xgb = pytest.importorskip("xgboost")
    shap = pytest.importorskip("shap")
    rng = np.random.default_rng(3)
    X = rng.normal(size=(3000, 8)).astype(np.float32)
    X[rng.random(X.shape) < 0.1] = np.nan
    Z = np.nan_to_num(X)
    y = Z[:, 0] * Z[:, 1] + Z[:, 2] ** 2 + rng.normal(size=len(X))
    model = xgb.XGBRegressor(n_estimators=5, max_depth=14, learning_rate=0.5, min_child_weight=0).fit(X, y)
    ens = shap.TreeExplainer(model).model
    ps = extract_paths(ens.children_left, ens.children_right, ens.children_default, ens.features, ens.thresholds,
                       ens.values, ens.node_sample_weight, ens.base_offset, n_features=8, input_dtype=np.float32)
    Xt = X[:40]
    phi, ok = _run_program(ps, Xt)
    assert ok.all()
    want = model.get_booster().predict(xgb.DMatrix(Xt), pred_contribs=True)
    np.testing.assert_allclose(phi[:, :, 0], want[:, :-1], rtol=1e-4, atol=1e-5)


def test_program_leaves_out_categorical_trees_and_nonfinite_thresholds():
    from hitml.kernels.treeshap.paths import _tiny_paths
    ps = _tiny_paths()
    ok = tree_program(ps.trees, ps.n_features)[0]
    assert ok.tolist() == [True, False]                  # tree 1 splits on a category
    cl = np.array([[1, -1, -1]])
    cr = np.array([[2, -1, -1]])
    for bad in (-np.inf, np.nan):
        p = extract_paths(cl, cr, cl, np.array([[0, -1, -1]]), np.array([[bad, 0, 0]]),
                          np.array([[0.0, 1.0, 2.0]]), np.array([[2.0, 1.0, 1.0]]), np.zeros(1), n_features=1)
        assert not tree_program(p.trees, 1)[0][0]


# ------------------------------------------------------------------------------------------------------ GPU
@contextlib.contextmanager
def _options(gpu, **kw):
    old = {k: getattr(gpu.options, k) for k in kw}
    try:
        for k, v in kw.items():
            setattr(gpu.options, k, v)
        yield
    finally:
        for k, v in old.items():
            setattr(gpu.options, k, v)


def _gpu():
    cp = pytest.importorskip("cupy")
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no GPU")
    except cp.cuda.runtime.CUDARuntimeError:
        pytest.skip("no GPU")
    from hitml.kernels.treeshap import gpu
    return gpu


def _ens_paths(model, M, input_dtype=np.float32):
    shap = pytest.importorskip("shap")
    ens = shap.TreeExplainer(model).model
    ps = extract_paths(ens.children_left, ens.children_right, ens.children_default, ens.features, ens.thresholds,
                       ens.values, ens.node_sample_weight, ens.base_offset, n_features=M, input_dtype=input_dtype)
    return ens, ps


def _twin(ens, X, input_dtype=np.float32):
    return linear_shap_values(ens.children_left, ens.children_right, ens.children_default, ens.features,
                              ens.thresholds, ens.values, ens.node_sample_weight, ens.base_offset, X,
                              input_dtype=input_dtype)


def _hostile(rng, n, M, dtype=np.float32):
    X = rng.normal(size=(n, M)).astype(dtype)
    X[rng.random(X.shape) < 0.05] = np.nan
    X[rng.random(X.shape) < 0.03] = np.inf
    X[rng.random(X.shape) < 0.03] = -np.inf
    sub = np.float32(1e-40) if dtype == np.float32 else 1e-310
    X[rng.random(X.shape) < 0.05] = sub
    X[rng.random(X.shape) < 0.05] = -sub
    X[rng.random(X.shape) < 0.05] = 0.0
    return X


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gpu_linear_matches_twin_and_shap_on_deep_forest(dtype):
    gpu = _gpu()
    sk = pytest.importorskip("sklearn.ensemble")
    shap = pytest.importorskip("shap")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 10))
    X[:, 3] = np.where(rng.random(3000) < 0.5, 0.0, X[:, 3])           # ties at 0: splits near 0
    y = X[:, 0] + np.sin(3 * X[:, 1]) * X[:, 2] + 0.1 * rng.normal(size=3000)
    model = sk.RandomForestRegressor(n_estimators=6, max_depth=30, random_state=0).fit(X, y)
    ens, ps = _ens_paths(model, 10)
    Xt = _hostile(rng, 300, 10, dtype)
    Xt = np.where(np.isnan(Xt), 0.0, Xt).astype(dtype)   # sklearn's forests take no NaN at their splits here
    with _options(gpu, shap_linear="always"):
        got = gpu.shap_values(ps, Xt)
        gpu.clear_cache()
        gpu._gpu_linear.FOLD_LEAVES = False          # the program without folded leaves: the same values
        try:
            unfolded = gpu.shap_values(ps, Xt)
        finally:
            gpu._gpu_linear.FOLD_LEAVES = True
            gpu.clear_cache()
    np.testing.assert_allclose(unfolded, got, rtol=1e-12, atol=1e-12)
    assert np.asarray(got).shape == (300, 11, 1)
    twin = _twin(ens, Xt)
    np.testing.assert_allclose(got, twin, rtol=1e-9, atol=1e-9)
    ref = shap.TreeExplainer(model).shap_values(Xt.astype(np.float64), check_additivity=False)
    np.testing.assert_allclose(got[:, :10, 0], ref, rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("tables", [False, True])
@pytest.mark.parametrize("split", [0, 6])
@pytest.mark.parametrize("local", [True, False])
@pytest.mark.parametrize("bits", [True, False])
def test_gpu_linear_stack_and_branch_variants_match_twin(local, bits, split, tables, monkeypatch):
    """The walk's stack in local or shared memory, the row's branches tested per chunk of events or per event, one
    walk per tree or its leaves walked in two classes (paths of at most 6 features apart), each chunk's ratios and
    coefficients divided per row or filled once per block (TABLES, 32 events per chunk): the CPU twin's values on a
    3-class forest of unlimited depth (three outputs per walk) and on a spine of 61 levels (one split per level on
    one feature: the stack's deepest levels), with infinite, zero and subnormal rows."""
    gpu = _gpu()
    sk = pytest.importorskip("sklearn.ensemble")
    tree = pytest.importorskip("sklearn.tree")
    monkeypatch.setattr(gpu._gpu_linear, "LOCAL_STACK", local)
    monkeypatch.setattr(gpu._gpu_linear, "BRANCH_BITS", bits)
    monkeypatch.setattr(gpu._gpu_linear, "LEAF_SPLIT", split)
    monkeypatch.setattr(gpu._gpu_linear, "TABLES", tables)
    rng = np.random.default_rng(11)
    X = rng.normal(size=(3000, 8))
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(int) + (X[:, 3] > 1)
    forest = sk.ExtraTreesClassifier(n_estimators=4, random_state=0).fit(X, y)
    xs = np.arange(62.0)[:, None]
    spine = tree.DecisionTreeRegressor(random_state=0).fit(xs, 4.0 ** np.arange(62))   # isolates the top point
    assert spine.get_depth() == 61
    Xt = _hostile(rng, 200, 8)
    Xt = np.where(np.isnan(Xt), 0.0, Xt).astype(np.float32)
    Xs = np.concatenate([xs, xs + 0.5, [[-np.inf], [np.inf], [np.float32(1e-40)]]]).astype(np.float32)
    for model, rows, M in ((forest, Xt, 8), (spine, Xs, 1)):
        ens, ps = _ens_paths(model, M)
        gpu.clear_cache()
        with _options(gpu, shap_linear="always"):
            got = gpu.shap_values(ps, rows)
        gpu.clear_cache()
        twin = _twin(ens, rows)
        np.testing.assert_allclose(got, twin, rtol=1e-9, atol=1e-9 * max(1.0, float(np.abs(twin).max())))


@pytest.mark.gpu
@pytest.mark.parametrize("specialized", [True, False])
@pytest.mark.parametrize("group_events", [1 << 16, 300])
def test_gpu_linear_modules_groups_and_streams_match_twin(specialized, group_events, monkeypatch):
    """The walk's modules built for a lane width and output count (LIN_QL, LIN_KS) and the one that reads them at
    run time; tree groups of many events or of a tree or two (many blocks per row block); the lane-width classes
    launched on one stream or on a stream each: the CPU twin's values on forests of one output (a regressor) and two
    (a binary classifier), with leaves walked in two classes, hostile rows in float32 and float64; the same bytes
    on every call and with or without the streams (fixed-point sums)."""
    gpu = _gpu()
    sk = pytest.importorskip("sklearn.ensemble")
    monkeypatch.setattr(gpu._gpu_linear, "LEAF_SPLIT", 6)
    monkeypatch.setattr(gpu._gpu_linear, "GROUP_EVENTS", group_events)
    if not specialized:
        monkeypatch.setattr(gpu._gpu_linear, "SPECIALIZED", frozenset())
    rng = np.random.default_rng(5)
    X = rng.normal(size=(3000, 9))
    yr = X[:, 0] + np.sin(3 * X[:, 1]) * X[:, 2] + 0.1 * rng.normal(size=3000)
    yc = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(int)
    models = (sk.RandomForestRegressor(n_estimators=5, max_depth=25, random_state=0).fit(X, yr),
              sk.ExtraTreesClassifier(n_estimators=4, random_state=0).fit(X, yc))
    for model in models:
        for dtype in (np.float32, np.float64):
            Xt = _hostile(rng, 211, 9, dtype)
            Xt = np.where(np.isnan(Xt), 0.0, Xt).astype(dtype)
            ens, ps = _ens_paths(model, 9, dtype)
            got = {}
            for conc in (False, True, True):
                monkeypatch.setattr(gpu._gpu_linear, "CONCURRENT", conc)
                gpu.clear_cache()
                with _options(gpu, shap_linear="always"):
                    out = np.asarray(gpu.shap_values(ps, Xt))
                if conc in got:
                    assert out.tobytes() == got[conc].tobytes()
                got[conc] = out
            assert got[True].tobytes() == got[False].tobytes()
            lp = gpu._gpu_linear.part(gpu.packed_paths(ps))
            assert len(lp.classes) >= 2                      # lane widths of both leaf classes: a launch each
            twin = _twin(ens, Xt, dtype)
            np.testing.assert_allclose(got[True], twin, rtol=1e-9, atol=1e-9 * max(1.0, float(np.abs(twin).max())))
    gpu.clear_cache()


@pytest.mark.gpu
def test_gpu_linear_multiclass_forest_matches_the_per_path_kernel_twin_and_sklearn():
    gpu = _gpu()
    sk = pytest.importorskip("sklearn.ensemble")
    rng = np.random.default_rng(1)
    X = rng.normal(size=(4000, 12))
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(int) + (X[:, 3] > 1)
    model = sk.ExtraTreesClassifier(n_estimators=5, random_state=0).fit(X, y)       # unlimited depth, 3 classes
    ens, ps = _ens_paths(model, 12)
    Xt = _hostile(rng, 257, 12)
    Xt = np.where(np.isnan(Xt), 0.0, Xt).astype(np.float32)
    with _options(gpu, shap_linear="always"):
        a = gpu.shap_values(ps, Xt)
        b = gpu.shap_values(ps, Xt)
    assert np.asarray(a).tobytes() == np.asarray(b).tobytes()           # the same bytes on every call
    with _options(gpu, shap_linear="never"):
        dp = gpu.shap_values(ps, Xt)
    np.testing.assert_allclose(a, dp, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(a, _twin(ens, Xt), rtol=1e-9, atol=1e-10)
    fin = np.isfinite(Xt).all(axis=1)                                  # sklearn's predict takes no infinity
    proba = model.predict_proba(Xt[fin])
    np.testing.assert_allclose(np.asarray(a)[fin].sum(1), proba, rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
def test_gpu_linear_matches_xgboost_and_lightgbm_with_categorical_trees_left_to_paths():
    gpu = _gpu()
    xgb = pytest.importorskip("xgboost")
    from _deep_models import deep_xgboost
    rng = np.random.default_rng(2)
    model = deep_xgboost(rng, 8)
    ens, ps = _ens_paths(model, 6)
    Xt = _hostile(rng, 200, 6)
    with _options(gpu, shap_linear="always"):
        got = np.asarray(gpu.shap_values(ps, Xt))
    np.testing.assert_allclose(got, _twin(ens, Xt), rtol=1e-9, atol=1e-9)       # every row, +-inf included
    fin = ~np.isinf(Xt).any(axis=1)                                     # XGBoost's DMatrix rejects infinity
    want = model.get_booster().predict(xgb.DMatrix(Xt[fin], missing=np.nan), pred_contribs=True)
    np.testing.assert_allclose(got[fin, :, 0], want, rtol=1e-4, atol=1e-4)

    pytest.importorskip("lightgbm")
    pytest.importorskip("pandas")
    from _adult import categorical_case

    from hitml import shap_ext
    model, df, rows = categorical_case()
    ex = shap_ext.TreeExplainer(model, backend="gpu")
    with _options(gpu, shap_linear="always"):
        sv = np.asarray(ex.shap_values(rows))
        ps2 = ex._paths(df.shape[1])
        lp = gpu._gpu_linear.part(gpu.packed_paths(ps2))
    ok = tree_program(ps2.trees, df.shape[1])[0]
    assert ok.any() and not ok.all()                             # trees with categorical splits ...
    assert lp is not None and lp.rest is not None                # ... keep the per-path kernels
    want2 = model.predict(rows, pred_contrib=True)
    np.testing.assert_allclose(sv.reshape(want2[:, :-1].shape), want2[:, :-1], rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
def test_gpu_auto_takes_pure_leaf_forest_classifiers_and_leaves_boosted_multiclass():
    """options.shap_linear "auto": a fully grown binary forest classifier (pure leaves: one nonzero value a path,
    yet each tree feeds both classes) runs on the linear kernel, with shap's C++ values; LightGBM multiclass (a tree
    per class) keeps the per-path kernels."""
    gpu = _gpu()
    sk = pytest.importorskip("sklearn.ensemble")
    shap = pytest.importorskip("shap")
    rng = np.random.default_rng(3)
    X = rng.normal(size=(4000, 30))    # 30 features: merged paths past the tables' 12
    y = (X[:, 0] + X[:, 1] * X[:, 2] + 0.5 * rng.normal(size=4000) > 0).astype(int)
    model = sk.ExtraTreesClassifier(n_estimators=6, random_state=0).fit(X, y)        # unlimited depth
    ens, ps = _ens_paths(model, 30)
    assert ((ps.leaf_value != 0).sum(axis=1) <= 1).all() and ps.n_outputs == 2
    Xt = rng.normal(size=(300, 30)).astype(np.float32)
    with _options(gpu, shap_linear="auto"):
        gpu.clear_cache()
        pk = gpu.packed_paths(ps)
        assert gpu._linear_part(pk, "shap") is not None
        got = np.asarray(gpu.shap_values(ps, Xt))
    ref = np.asarray(shap.TreeExplainer(model).shap_values(Xt.astype(np.float64), check_additivity=False))
    np.testing.assert_allclose(got[:, :30, :], ref, rtol=1e-6, atol=1e-6)

    lgb = pytest.importorskip("lightgbm")
    yc = np.digitize(X[:, 0] + X[:, 1] * X[:, 2], [-1.0, 0.0, 1.0])
    boosted = lgb.LGBMClassifier(n_estimators=5, num_leaves=255, min_child_samples=2, verbose=-1,
                                 n_jobs=1).fit(X, yc)
    _, ps2 = _ens_paths(boosted, 30)
    assert gpu._one_output_trees(gpu.packed_paths(ps2)) and not gpu._one_output_trees(pk)


@pytest.mark.gpu
def test_gpu_auto_takes_leafy_lossguide_boosters_and_matches_xgboost():
    """A leaf-wise XGBoost booster (lossguide, 1,024 leaves) whose tables would cover under half of the path
    elements runs on the linear kernel under "auto", with XGBoost's own pred_contribs and the per-path kernels'
    values."""
    gpu = _gpu()
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(4)
    X = rng.standard_normal((30000, 50), dtype=np.float32)
    y = X[:, 0] * X[:, 1] + np.sin(2 * X[:, 2]) + (X[:, 3] > 0.5) * X[:, 4] + X[:, 5:15].sum(1) / 6
    model = xgb.XGBRegressor(n_estimators=40, grow_policy="lossguide", max_leaves=1024, max_depth=0,
                             tree_method="hist", n_jobs=4).fit(X, y)
    ens, ps = _ens_paths(model, 50)
    Xt = _hostile(rng, 400, 50)
    Xt[np.isinf(Xt)] = np.nan                                  # XGBoost's DMatrix rejects infinity
    with _options(gpu, shap_linear="auto"):
        gpu.clear_cache()
        pk = gpu.packed_paths(ps)
        if gpu._planned(pk, "shap")[0] != "split":
            pytest.skip("the planner did not split this model's paths on this device")
        assert gpu._linear_part(pk, "shap") is not None
        got = np.asarray(gpu.shap_values(ps, Xt))
    with _options(gpu, shap_linear="never"):
        gpu.clear_cache()
        per_path = np.asarray(gpu.shap_values(ps, Xt))
    np.testing.assert_allclose(got, per_path, rtol=1e-9, atol=1e-10)
    want = model.get_booster().predict(xgb.DMatrix(Xt, missing=np.nan), pred_contribs=True)
    np.testing.assert_allclose(got[:, :, 0], want, rtol=1e-4, atol=1e-4)
