"""GPU TreeSHAP engine against the CPU twin (kernels.treeshap.cpu) and shap's C++ explainer, within 1e-6 relative."""
from __future__ import annotations

import numpy as np
import pytest

from hitml.kernels.treeshap import cpu, extract_paths

from _treeshap_gpu import (
    TRANSFORMS, _close, _data, _dense, _gpu, _multiclass_models, _paths_from, _regression_paths, _sk_tree, _spine_tree,
)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def reg():
    return _regression_paths()


@pytest.mark.parametrize("variant,row", [("dp", "quadrature"), ("dp", "dp"), ("smem", "dp"), ("table", "quadrature")])
def test_path_dependent_and_interactions(reg, variant, row, monkeypatch):
    ps, X = reg
    Xt, _ = _data(300, ps.n_features, 7, nan=0.1)
    g = _gpu()
    monkeypatch.setattr(g.options, "shap_variant", variant)
    monkeypatch.setattr(g.options, "shap_row_kernel", row)
    monkeypatch.setattr(g.options, "inter_row_kernel", row)
    _close(g.shap_values(ps, Xt), cpu.shap_values(ps, Xt))
    _close(g.interaction_values(ps, Xt[:40]), cpu.interaction_values(ps, Xt[:40]))


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_interventional(reg, transform):
    ps, X = reg
    Xt, _ = _data(60, ps.n_features, 8, nan=0.05)
    R = X[:37]
    y = (np.random.default_rng(0).random(60) > 0.5).astype(np.float64)
    _close(_gpu().interventional_shap_values(ps, Xt, R, transform=transform, y=y),
           cpu.interventional_shap_values(ps, Xt, R, transform=transform, y=y))


def test_multiclass_dense_and_sparse():
    dense, sparse, X = _multiclass_models(5, 8, 5)
    Xt, _ = _data(200, 7, 4, nan=0.1)
    g = _gpu()
    for ps in (dense, sparse):
        for variant in ("dp", "smem", "table"):
            g.options.shap_variant = variant
            _close(g.shap_values(ps, Xt), cpu.shap_values(ps, Xt))
        g.options.shap_variant = "auto"
        _close(g.interaction_values(ps, Xt[:15]), cpu.interaction_values(ps, Xt[:15]))
        for tr in ("identity", "logistic"):
            _close(g.interventional_shap_values(ps, Xt[:30], X[:20], transform=tr),
                   cpu.interventional_shap_values(ps, Xt[:30], X[:20], transform=tr))


def test_categorical_bitsets():
    from sklearn.tree import DecisionTreeRegressor
    rng = np.random.default_rng(5)
    M = 5
    X, y = _data(700, M, 5)
    X[:, 0] = rng.integers(0, 70, size=len(X))          # a categorical feature with 70 levels (3 words)
    y = y + (X[:, 0] % 3)
    trees = [_sk_tree(DecisionTreeRegressor(max_depth=6, random_state=i).fit(X, y), 1) for i in range(3)]
    cl, cr, cd, ft, th, cov, vals = _dense(trees, 1)
    T, N = cl.shape
    is_cat = (ft == 0) & (cl >= 0)
    ptr = np.zeros((T, N), np.int64)
    nw = np.zeros((T, N), np.int32)
    words = []
    for t, n in zip(*np.nonzero(is_cat)):
        k = int(rng.integers(1, 4))
        ptr[t, n], nw[t, n] = len(words), k
        words.extend(rng.integers(0, 2**32, size=k, dtype=np.uint64).astype(np.uint32).tolist())
    ps = extract_paths(cl, cr, cd, ft, th, vals, cov, np.zeros(1), n_features=M, input_dtype=np.float32,
                       categories=(is_cat, ptr, nw, np.array(words, np.uint32)))
    Xt, _ = _data(200, M, 6, nan=0.05)
    Xt[:, 0] = rng.integers(-3, 110, size=len(Xt)) + rng.choice([0.0, 0.5], size=len(Xt))
    Xt[:5, 0] = [np.nan, np.inf, -np.inf, 95.0, 31.99]
    g = _gpu()
    _close(g.shap_values(ps, Xt), cpu.shap_values(ps, Xt))
    _close(g.interaction_values(ps, Xt[:20]), cpu.interaction_values(ps, Xt[:20]))
    _close(g.interventional_shap_values(ps, Xt[:20], Xt[50:70]), cpu.interventional_shap_values(ps, Xt[:20], Xt[50:70]))


def test_paths_longer_than_a_warp():
    rng = np.random.default_rng(11)
    M = 60
    trees = [_spine_tree(M, 50, rng), _spine_tree(M, 40, rng), _spine_tree(M, 10, rng), _spine_tree(M, 33, rng)]
    ps = _paths_from(trees, M, 1)
    assert ps.max_length > 32
    X = (rng.normal(size=(64, M)) * 0.2).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    g = _gpu()
    for variant, row in (("dp", "dp"), ("dp", "quadrature"), ("table", "quadrature")):
        g.options.shap_variant, g.options.shap_row_kernel = variant, row    # table: short paths from tables, long ones by the fallback
        _close(g.shap_values(ps, X), cpu.shap_values(ps, X))
    g.options.shap_variant, g.options.shap_row_kernel = "auto", "dp"
    ref = cpu.interaction_values(ps, X[:6])
    for variant, row in (("dp", "dp"), ("dp", "quadrature"), ("auto", "quadrature")):
        g.options.inter_variant, g.options.inter_row_kernel = variant, row    # auto: tables for paths of <= 12 elements, else per row
        _close(g.interaction_values(ps, X[:6]), ref)          # quadrature up to 16 nodes (paths of 31 elements)
    g.options.inter_variant, g.options.inter_row_kernel = "auto", "quadrature"
    for tr in ("identity", "logistic"):
        _close(g.interventional_shap_values(ps, X[:10], X[20:30], transform=tr),
               cpu.interventional_shap_values(ps, X[:10], X[20:30], transform=tr))
    assert g.packed_paths(ps).n_long > 0


def test_depth_20_and_float64_model():
    from sklearn.tree import DecisionTreeRegressor
    X, y = _data(3000, 10, 12)
    m = DecisionTreeRegressor(max_depth=20, random_state=0).fit(X, y)
    assert m.get_depth() == 20
    g = _gpu()
    for dt in (np.float32, np.float64):
        ps = _paths_from([_sk_tree(m, 1)], 10, 1, input_dtype=dt)
        Xt, _ = _data(500, 10, 13, nan=0.02)
        _close(g.shap_values(ps, Xt.astype(np.float64)), cpu.shap_values(ps, Xt.astype(np.float64)))
        _close(g.interaction_values(ps, Xt[:10]), cpu.interaction_values(ps, Xt[:10]))
    np.testing.assert_allclose(g.shap_values(ps, X[:50]).sum(1)[:, 0], m.predict(X[:50]), rtol=1e-9, atol=1e-9)


def test_cupy_in_cupy_out_and_chunking(reg, monkeypatch):
    import cupy as cp
    ps, X = reg
    Xt, _ = _data(257, ps.n_features, 9, nan=0.05)
    g = _gpu()
    ref = cpu.shap_values(ps, Xt)
    out = g.shap_values(ps, cp.asarray(Xt))
    assert isinstance(out, cp.ndarray)
    _close(out, ref)
    monkeypatch.setattr(g.options, "memory_budget", 5000)           # a few rows per chunk
    _close(g.shap_values(ps, Xt), ref)
    _close(g.interaction_values(ps, cp.asarray(Xt[:9])), cpu.interaction_values(ps, Xt[:9]))
    _close(g.interventional_shap_values(ps, Xt[:30], X[:10], transform="logistic"),
           cpu.interventional_shap_values(ps, Xt[:30], X[:10], transform="logistic"))
    import pandas as pd
    res = g.shap_values(ps, pd.DataFrame(Xt))
    assert isinstance(res, np.ndarray)
    _close(res, ref)


def test_tree_limit(reg):
    ps, X = reg
    Xt, _ = _data(50, ps.n_features, 10, nan=0.05)
    g = _gpu()
    for tl in (0, 1, 2):
        _close(g.shap_values(ps, Xt, tree_limit=tl), cpu.shap_values(ps, Xt, tree_limit=tl))
        _close(g.interventional_shap_values(ps, Xt, X[:7], tree_limit=tl),
               cpu.interventional_shap_values(ps, Xt, X[:7], tree_limit=tl))


def test_float32_threshold_edges():
    """x exactly at a float32-rounded threshold and its neighbours must take the model's own branch."""
    from sklearn.tree import DecisionTreeRegressor
    X, y = _data(500, 3, 14)
    m = DecisionTreeRegressor(max_depth=4, random_state=0).fit(X, y)
    ps = _paths_from([_sk_tree(m, 1)], 3, 1)
    t = m.tree_.threshold[m.tree_.children_left >= 0]
    f = m.tree_.feature[m.tree_.children_left >= 0]
    rows = []
    for ti, fi in zip(t, f):
        t32 = np.float32(ti)
        for v in (t32, np.nextafter(t32, np.float32(-np.inf)), np.nextafter(t32, np.float32(np.inf))):
            r = X[len(rows) % len(X)].copy()
            r[fi] = v
            rows.append(r)
    Xe = np.array(rows, dtype=np.float32)
    g = _gpu()
    got = g.shap_values(ps, Xe)
    _close(got, cpu.shap_values(ps, Xe))
    np.testing.assert_allclose(got.sum(1)[:, 0], m.predict(Xe), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("xgb_rule", [False, True])
def test_splits_at_zero_and_subnormal_values(xgb_rule):
    """Splits at 0.0 and at +-subnormal thresholds, rows of 0.0, -0.0 and subnormals: float32 compares are exact
    although CuPy compiles with -ftz=true (a flushed bound of -1.4e-45 once sent x = 0.0 to the wrong side)."""
    tiny = float(np.nextafter(np.float32(0), np.float32(1)))            # 1.4e-45, the smallest float32 subnormal
    thr = np.array([0.0, tiny, -tiny, 3 * tiny, 0.0, -tiny, 0.0])
    if xgb_rule:  # shap's parse of XGBoost's "x < t": x <= nextafter(t, -inf) in float64
        thr = np.nextafter(thr, -np.inf)
    # a full tree of depth 3 on features (0, 1, 2): node i splits on feature depth(i) at thr[i]
    cl = np.array([1, 3, 5, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1])
    cr = np.array([2, 4, 6, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1])
    cl[3:7], cr[3:7] = [7, 9, 11, 13], [8, 10, 12, 14]
    feat = np.array([0, 1, 1, 2, 2, 2, 2] + [0] * 8)
    th = np.r_[thr, np.zeros(8)]
    cover = np.r_[[16.0, 9, 7, 5, 4, 4, 3], [3.0, 2, 1, 3, 2, 2, 2, 1]]
    vals = np.r_[np.zeros(7), np.arange(8) * 1.5 - 4.0][:, None]
    ps = _paths_from([(cl, cr, cl.copy(), feat, th, cover, vals)], 3, 1)
    grid = np.array([0.0, -0.0, tiny, -tiny, 2 * tiny, 3 * tiny, 4 * tiny, -2 * tiny, 1.0, -1.0], np.float32)
    Xe = np.array(np.meshgrid(grid, grid, grid)).reshape(3, -1).T.astype(np.float32)
    ref = cpu.shap_values(ps, Xe)
    _close(_gpu().shap_values(ps, Xe), ref, rtol=1e-12)
    _close(_gpu().interaction_values(ps, Xe[:200]), cpu.interaction_values(ps, Xe[:200]), rtol=1e-12)


def test_bad_input(reg):
    ps, X = reg
    g = _gpu()
    with pytest.raises(ValueError, match="features"):
        g.shap_values(ps, X[:, :3])
    with pytest.raises(ValueError, match="empty"):
        g.shap_values(ps, X[:0])
    with pytest.raises(TypeError):
        g.shap_values(ps, np.array([["a"] * ps.n_features]))


def test_xgboost_against_shap_cext():
    xgb = pytest.importorskip("xgboost")
    shap = pytest.importorskip("shap")
    from shap import _cext
    X, y = _data(800, 6, 15, nan=0.1)
    mc = xgb.XGBClassifier(n_estimators=10, max_depth=5, learning_rate=0.3).fit(X, np.digitize(y, [-0.5, 0.5]))
    reg_m = xgb.XGBRegressor(n_estimators=30, max_depth=6, learning_rate=0.3).fit(X, y)
    for model in (reg_m, mc):
        ens = shap.TreeExplainer(model).model
        ps = extract_paths(ens.children_left, ens.children_right, ens.children_default, ens.features,
                           ens.thresholds, ens.values, ens.node_sample_weight, ens.base_offset, n_features=6,
                           input_dtype=ens.input_dtype)
        vals = ens.values.copy()
        for t in range(vals.shape[0]):
            _cext.compute_expectations(ens.children_left[t], ens.children_right[t], ens.node_sample_weight[t],
                                       vals[t])
        Xt = np.ascontiguousarray(X[:100], dtype=np.float64)
        for inter in (False, True):
            Xi = Xt[:20] if inter else Xt
            n, K = len(Xi), vals.shape[2]
            phi = np.zeros((n, 7, 7, K) if inter else (n, 7, K))
            _cext.dense_tree_shap(ens.children_left, ens.children_right, ens.children_default, ens.features,
                                  ens.thresholds, ens.threshold_types, vals, ens.node_sample_weight, ens.max_depth,
                                  Xi, np.isnan(Xi), None, None, None, vals.shape[0], ens.base_offset, phi, 1, 0,
                                  inter)
            got = _gpu().interaction_values(ps, Xi) if inter else _gpu().shap_values(ps, Xi)
            _close(got, phi)
        margin = model.predict(X[:100], output_margin=True).reshape(100, -1)
        np.testing.assert_allclose(_gpu().shap_values(ps, X[:100]).sum(1), margin, atol=2e-5)


def test_split_variant_tables_for_short_paths_dp_for_long(monkeypatch):
    """Mixed path lengths (some > TABLE_DMAX elements): "split" and auto agree with the CPU twin; a table cap that
    fits only the shortest paths' tables lowers dmax."""
    ps, _ = _regression_paths(M=20, depths=(3, 6, 16, 18), seed=3)
    g = _gpu()
    pk = g.packed_paths(ps)
    assert ps.max_length > g.TABLE_DMAX and (pk.path_m <= g.TABLE_DMAX).any()
    Xt, _ = _data(257, 20, 9, nan=0.1)
    ref = cpu.shap_values(ps, Xt)
    monkeypatch.setattr(g, "SPLIT_MIN_SHARE", 0.0)
    for variant in ("split", "auto", "table"):
        monkeypatch.setattr(g.options, "shap_variant", variant)
        assert g._shap_variant(pk, 20, 1)[:2] == ("split", g.TABLE_DMAX)
        _close(g.shap_values(ps, Xt), ref)
    # a cap that fits the tables of the paths of <= 4 elements and two of the 5-element paths
    five = g._table_bytes(5, "shap")
    assert (pk.path_m == 5).sum() > 2
    monkeypatch.setattr(g, "TABLE_BYTES", int(g._table_bytes(pk.path_m[pk.path_m <= 4], "shap").sum() + 2 * five))
    assert g._shap_variant(pk, 20, 1) == ("split", 4, 2)
    _close(g.shap_values(ps, Xt), ref)
    monkeypatch.setattr(g.options, "inter_variant", "split")
    monkeypatch.setattr(g, "TABLE_BYTES", int(g._table_bytes(pk.path_m[pk.path_m <= 3], "inter").sum()
                                              + 3 * g._table_bytes(4, "inter")))
    assert g._inter_plan(pk) == ("split", 3, 3)
    _close(g.interaction_values(ps, Xt[:20]), cpu.interaction_values(ps, Xt[:20]))


@pytest.mark.parametrize("variant,dmax,row", [("dp", 12, "quadrature"), ("dp", 12, "dp"), ("table", 12, "quadrature"),
                                               ("split", 4, "quadrature"), ("split", 4, "dp"),
                                               ("auto", 5, "quadrature"), ("table", 3, "dp")])
def test_interaction_variants(variant, dmax, row, monkeypatch):
    """Interaction tables (whole and split) and the per-row kernels (quadrature, DP) against the CPU twin: regression,
    XGBoost-style sparse and random-forest dense multiclass leaves, a float64 model, NaN rows."""
    g = _gpu()
    monkeypatch.setattr(g.options, "inter_variant", variant)
    monkeypatch.setattr(g.options, "inter_row_kernel", row)
    monkeypatch.setattr(g, "TABLE_DMAX", dmax)
    monkeypatch.setattr(g, "SPLIT_MIN_SHARE", 0.0)
    dense, sparse, _ = _multiclass_models(4, 6, 6)
    models = [_regression_paths()[0], dense, sparse, _regression_paths(input_dtype=np.float64)[0]]
    for ps in models:
        assert ps.max_length <= 7
        pk = g.packed_paths(ps)
        m = pk.path_m          # tables for every path when all are short enough, a split when some are
        expect = "dp" if variant == "dp" else "table" if m.max() <= dmax else "split" if m.min() <= dmax else "dp"
        assert g._inter_plan(pk)[:2] == (expect, 0 if expect == "dp" else dmax)
        Xt, _ = _data(37, ps.n_features, 4, nan=0.1)
        if np.dtype(ps.input_dtype) == np.float64:
            Xt = Xt.astype(np.float64) + 1e-9
        got = g.interaction_values(ps, Xt)
        _close(got, cpu.interaction_values(ps, Xt))
        got = got.get() if hasattr(got, "get") else got
        np.testing.assert_array_equal(got, got.transpose(0, 2, 1, 3))       # mirrored exactly


def test_cupy_output_larger_than_the_gpu_is_a_clear_error():
    import cupy as cp
    from sklearn.tree import DecisionTreeRegressor
    M = 3000                                            # (M + 1)^2 doubles per row: 72 MB; 4000 rows > any GPU
    X, y = _data(400, M, 1)
    ps = _paths_from([_sk_tree(DecisionTreeRegressor(max_depth=3, random_state=0).fit(X, y), 1)], M, 1)
    with pytest.raises(MemoryError, match="pass NumPy input"):
        _gpu().interaction_values(ps, cp.zeros((4000, M), cp.float32))
    _gpu().clear_cache()
    assert not _gpu()._CACHE


@pytest.mark.parametrize("group", [1, 3, 1 << 30])
def test_row_block_groups(reg, group, monkeypatch):
    """warp_task's schedule (row blocks in groups, the last one partial) covers every (bin, row) once."""
    ps, X = reg
    g = _gpu()
    from hitml.kernels.treeshap import _gpu_core as core
    monkeypatch.setattr(core, "bank_group", lambda rpw, rb: group)
    monkeypatch.setattr(core, "rows_per_warp", lambda n, bins, cap: 7)    # 37 row blocks for 257 rows
    Xt, _ = _data(257, ps.n_features, 21, nan=0.05)
    for variant, row in (("dp", "dp"), ("dp", "quadrature"), ("table", "quadrature")):
        monkeypatch.setattr(g.options, "shap_variant", variant)
        monkeypatch.setattr(g.options, "shap_row_kernel", row)
        _close(g.shap_values(ps, Xt), cpu.shap_values(ps, Xt))
    for variant, row in (("dp", "dp"), ("dp", "quadrature"), ("table", "quadrature")):
        monkeypatch.setattr(g.options, "inter_variant", variant)
        monkeypatch.setattr(g.options, "inter_row_kernel", row)
        _close(g.interaction_values(ps, Xt[:50]), cpu.interaction_values(ps, Xt[:50]))
    _close(g.interventional_shap_values(ps, Xt[:40], X[:9]), cpu.interventional_shap_values(ps, Xt[:40], X[:9]))


@pytest.mark.parametrize("row", ["quadrature", "dp"])
def test_quadrature_zero_cover_and_rule_sizes(row, monkeypatch):
    """SHAP values and interactions of the per-row kernels with a zero fraction of 0 (an empty child: the path is worth 0 whenever the row leaves it) and paths
    of 1..31 elements (every quadrature rule size, 1..16 nodes) against the CPU twin; a bad knob is a clear error."""
    from sklearn.tree import DecisionTreeRegressor
    g = _gpu()
    monkeypatch.setattr(g.options, "inter_variant", "dp")
    monkeypatch.setattr(g.options, "inter_row_kernel", row)
    rng = np.random.default_rng(5)
    M = 40
    X, y = _data(600, M, 8)
    trees = []
    for i, d in enumerate((2, 5, 9)):
        t = list(_sk_tree(DecisionTreeRegressor(max_depth=d, random_state=i).fit(X, y + i), 1, rng, True))
        leaves = np.flatnonzero(t[0] < 0)
        cov = t[5].copy()
        cov[rng.choice(leaves, size=max(1, leaves.size // 3), replace=False)] = 0.0
        t[5] = cov
        trees.append(tuple(t))
    trees += [_spine_tree(M, L, rng) for L in (3, 7, 12, 17, 24, 31)]
    ps = _paths_from(trees, M, 1)
    assert ps.max_length <= 32 and g.packed_paths(ps).n_long == 0
    pk = g.packed_paths(ps)
    monkeypatch.setattr(g.options, "shap_variant", "dp")
    monkeypatch.setattr(g.options, "shap_row_kernel", row)
    assert g._row_kernel(pk, "inter", "dp") == ("interactions" if row == "dp" else "inter_quad16")
    assert g._row_kernel(pk, "shap", "dp") == ("shap" if row == "dp" else "shap_quad16")
    # each rule size's paths in a launch of their own, with that rule's registers
    if row == "quadrature":
        assert ([g._row_kernel(p, "inter", "dp") for p in g._rule_packs(pk)]
                == [f"inter_quad{q}" for q in (4, 8, 12, 16)])
    assert sum(p.ps.n_paths for p in g._rule_packs(pk)) == ps.n_paths
    Xt = (rng.normal(size=(45, M)) * 0.3).astype(np.float32)
    Xt[rng.random(Xt.shape) < 0.05] = np.nan
    _close(g.shap_values(ps, Xt), cpu.shap_values(ps, Xt))
    _close(g.interaction_values(ps, Xt), cpu.interaction_values(ps, Xt))
    monkeypatch.setattr(g, "QUAD_RULE_CLASSES", False)          # one launch at the longest path's rule
    _close(g.shap_values(ps, Xt), cpu.shap_values(ps, Xt))
    _close(g.interaction_values(ps, Xt), cpu.interaction_values(ps, Xt))
    with pytest.raises(ValueError, match="inter_row_kernel"):
        g.options.inter_row_kernel = "bogus"
    with pytest.raises(ValueError, match="shap_row_kernel"):
        g.options.shap_row_kernel = "bogus"

