"""The interventional explainer's build: the background read once and counted once (kernels.treeshap.
background_summary), the expected value from those counts, the counts kept between calls and summed over parts.

References: each library's own prediction averaged over the (weighted) background for the expected value; the
engine's values against an array background (the per-call count) for the kept summary, byte for byte; shap's C++
TreeExplainer for the values themselves (tests/test_treeshap_interventional*.py hold those)."""
from __future__ import annotations

import pickle
import tracemalloc
import warnings

import numpy as np
import pytest
import shap
import xgboost as xgb
from sklearn.ensemble import (GradientBoostingRegressor, HistGradientBoostingClassifier, RandomForestClassifier,
                              RandomForestRegressor)

from hitml import shap_ext
from hitml.kernels.treeshap import BackgroundSummary, background_summary, interventional_shap_values
from hitml.kernels.treeshap._summary import fixed_point_scale
from hitml.shap_ext import _explainer
from hitml.shap_ext._dask import ShippedExplainer

try:
    import lightgbm as lgb
except ImportError:  # the minimal environment has it; a device machine may not
    lgb = None


def _data(n=1500, m=6, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, m))
    X[rng.random(X.shape) < 0.03] = np.nan
    y = np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 1]) * np.nan_to_num(X[:, 2]) + rng.normal(size=n) * 0.1
    return X, y


def _explainer_of(model, bg, weights=None, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return shap_ext.TreeExplainer(model, shap.maskers.Independent(bg, max_samples=len(bg)), backend="cpu",
                                      feature_perturbation="interventional", background_weights=weights, **kw)


def _models():
    X, y = _data()
    Xf = np.nan_to_num(X)
    yc = (y > 0).astype(int)
    y3 = np.digitize(y, [-0.5, 0.5])
    return X, Xf, {
        "xgb-reg": (xgb.XGBRegressor(n_estimators=15, max_depth=4).fit(X, y), X),
        "xgb-bin": (xgb.XGBClassifier(n_estimators=15, max_depth=4).fit(X, yc), X),
        "xgb-multi": (xgb.XGBClassifier(n_estimators=8, max_depth=3).fit(X, y3), X),
        **({} if lgb is None else {
            "lgb-reg": (lgb.LGBMRegressor(n_estimators=15, num_leaves=20, verbose=-1).fit(X, y), X),
            "lgb-multi": (lgb.LGBMClassifier(n_estimators=6, num_leaves=8, verbose=-1).fit(X, y3), X)}),
        "rf-reg": (RandomForestRegressor(n_estimators=6, max_depth=8, random_state=0).fit(Xf, y), Xf),
        "rf-clf": (RandomForestClassifier(n_estimators=6, max_depth=6, random_state=0).fit(Xf, yc), Xf),
        "gbr": (GradientBoostingRegressor(n_estimators=10, max_depth=3, random_state=0).fit(Xf, y), Xf),
        "hgb": (HistGradientBoostingClassifier(max_iter=10, random_state=0).fit(X, yc), X),
    }


MODELS = None


def _get(name):
    global MODELS
    if name.startswith("lgb") and lgb is None:
        pytest.skip("lightgbm is not installed")
    if MODELS is None:
        MODELS = _models()[2]
    return MODELS[name]


def _library_mean(name, model, bg, w):
    """The library's own raw output, averaged over the weighted background."""
    if name.startswith("xgb"):
        out = model.get_booster().predict(xgb.DMatrix(bg), output_margin=True)
    elif name.startswith("lgb"):
        out = model.booster_.predict(bg, raw_score=True)
    elif name == "rf-clf":
        out = model.predict_proba(bg)
    elif name == "hgb":
        out = model.decision_function(bg)
    else:
        out = model.predict(bg)
    return np.average(np.asarray(out, dtype=np.float64), axis=0, weights=w)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("name", ["xgb-reg", "xgb-bin", "xgb-multi", "lgb-reg", "lgb-multi", "rf-reg", "rf-clf",
                                  "gbr", "hgb"])
def test_expected_value_is_the_library_mean(name, weighted):
    model, X = _get(name)
    bg = X[500:1300]
    w = np.random.default_rng(1).random(len(bg)) * 3 if weighted else None
    ex = _explainer_of(model, bg, w)
    ref = _library_mean(name, model, bg, w)
    # float32 libraries (XGBoost's sums of float32 leaves) agree to their rounding; float64 ones to ours
    rtol = 1e-6 if name.startswith("xgb") else 1e-12
    np.testing.assert_allclose(np.ravel(ex.expected_value), np.ravel(ref), rtol=rtol, atol=rtol)
    assert ex.background_summary is not None
    # and the values add up to the library's own margin with it
    sv = ex.shap_values(X[:40], check_additivity=True)
    assert np.all(np.isfinite(sv))


def test_probability_and_predict_proba_keep_their_semantics():
    model, X = _get("xgb-bin")
    bg = X[500:900]
    margin = model.get_booster().predict(xgb.DMatrix(bg), output_margin=True).astype(np.float64)
    p = 1 / (1 + np.exp(-margin))
    ex = _explainer_of(model, bg, model_output="probability")
    np.testing.assert_allclose(ex.expected_value, p.mean(), rtol=1e-6)
    ex2 = _explainer_of(model, bg, model_output="predict_proba")
    np.testing.assert_allclose(ex2.expected_value, [1 - p.mean(), p.mean()], rtol=1e-6)
    ex3 = _explainer_of(model, bg, model_output="log_loss")
    y1 = np.logaddexp(0, margin) - margin          # log loss at label 1
    np.testing.assert_allclose(ex3.expected_value(1.0), y1.mean(), rtol=1e-6)


def test_summary_is_kept_and_a_later_call_reads_no_background():
    model, X = _get("lgb-reg")
    bg = X[200:1400].astype(np.float64)
    ex = _explainer_of(model, bg)
    first = ex.shap_values(X[:50])
    assert any(isinstance(k, tuple) for k in ex.background_summary.cache)   # the tables were kept
    ex._background = None          # a call that read the rows would fail now
    ex.data = None
    again = ex.shap_values(X[:50])
    assert again.tobytes() == first.tobytes()
    inter = ex.shap_interaction_values(X[:5])
    assert inter.shape == (5, 6, 6)
    ref = _explainer_of(model, bg)
    assert ref.shap_interaction_values(X[:5]).tobytes() == inter.tobytes()
    assert ref.banzhaf_values(X[:7]).tobytes() == ex.banzhaf_values(X[:7]).tobytes()


@pytest.mark.parametrize("name", ["xgb-reg", "lgb-multi", "rf-reg"])
def test_summary_values_equal_the_per_call_count(name, monkeypatch):
    model, X = _get(name)
    bg = X[300:1200]
    w = np.random.default_rng(2).random(len(bg))
    kept = _explainer_of(model, bg, w)
    monkeypatch.setattr(_explainer, "SUMMARY_BYTES", 0)      # too large to keep: each call counts the rows
    counted = _explainer_of(model, bg, w)
    assert counted.background_summary is None and kept.background_summary is not None
    for tl in (None, 2):
        a = kept.shap_values(X[:30], tree_limit=tl, check_additivity=False)
        b = counted.shap_values(X[:30], tree_limit=tl, check_additivity=False)
        assert a.tobytes() == b.tobytes()
    assert np.array_equal(np.ravel(kept.expected_value), np.ravel(counted.expected_value))


def test_parts_merge_to_the_whole():
    model, X = _get("rf-reg")
    ex = _explainer_of(model, X[:10])
    paths = ex.paths
    rng = np.random.default_rng(3)
    bg = X[100:1500]
    w = rng.random(len(bg)) * 5
    whole = background_summary(paths, bg, weights=w)
    cuts = np.sort(rng.choice(np.arange(1, len(bg)), size=5, replace=False))
    scale = fixed_point_scale(float(w.sum()))
    parts = [background_summary(paths, b, weights=ww, weight_scale=scale)
             for b, ww in zip(np.split(bg, cuts), np.split(w, cuts))]
    merged = BackgroundSummary.merge(parts[::-1])
    assert np.array_equal(merged.hist, whole.hist)
    assert np.array_equal(merged.sparse_sets, whole.sparse_sets) and np.array_equal(merged.sparse_w, whole.sparse_w)
    assert merged.total == whole.total and merged.n_rows == len(bg)
    a = interventional_shap_values(paths, X[:20], merged)
    b = interventional_shap_values(paths, X[:20], bg, weights=w)
    assert a.tobytes() == b.tobytes()
    with pytest.raises(ValueError, match="weight scales"):
        BackgroundSummary.merge([background_summary(paths, bg[:10], weights=w[:10]), parts[0]])
    other = _explainer_of(_get("gbr")[0], X[:10]).paths
    with pytest.raises(ValueError, match="other paths"):
        interventional_shap_values(other, X[:3], whole)
    with pytest.raises(ValueError, match="needs the background rows"):
        interventional_shap_values(paths, X[:3], whole, transform="logistic")


def test_long_paths_keep_their_fail_sets():
    """Paths too long for a dense histogram (a deep tree on many features) keep their distinct fail sets; the
    values equal the per-call count's and the explainer's expected value the tree's mean prediction."""
    from sklearn.tree import DecisionTreeRegressor

    rng = np.random.default_rng(4)
    X = rng.normal(size=(900, 24))
    model = DecisionTreeRegressor(random_state=0).fit(X, rng.normal(size=900))
    ex = _explainer_of(model, X[:600])
    s = ex.background_summary
    assert len(s.sparse_paths) > 0 and np.diff(ex.paths.path_ptr).max() > 12
    np.testing.assert_allclose(ex.expected_value, model.predict(X[:600]).mean(), rtol=1e-12)
    a = ex.shap_values(X[700:720])
    b = interventional_shap_values(ex.paths, X[700:720], X[:600])
    assert a.tobytes() == np.ascontiguousarray(b[:, :-1, 0]).tobytes()
    ia = ex.shap_interaction_values(X[700:703])
    ib = shap_ext.TreeExplainer(model, X[:600], backend="cpu").shap_interaction_values(X[700:703])
    assert ia.shape == ib.shape


def test_float32_background_is_not_copied():
    """A float32 background for a float32 model (XGBoost) is read without a copy: the explainer's rows are the
    masker's own, and the build allocates little beside them."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(2000, 8)).astype(np.float32)
    model = xgb.XGBRegressor(n_estimators=10, max_depth=4).fit(X, X[:, 0])
    bg = rng.normal(size=(1_200_000, 8)).astype(np.float32)

    def build_peak(rows):
        masker = shap.maskers.Independent(rows, max_samples=len(rows))
        tracemalloc.start()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ex = shap_ext.TreeExplainer(model, masker, backend="cpu")
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return ex, masker, peak

    build_peak(bg[:1000])                       # first build: the kernels' own one-time allocations
    _, _, small = build_peak(bg[:1000])
    ex, masker, peak = build_peak(bg)
    assert ex.data is bg and ex.masker is masker
    # what the build allocates for a background beyond a small one's: slabs and masks, no copy of the rows
    assert peak - small < 0.2 * bg.nbytes, (peak, small)
    # a `missing` value that no row holds: still no copy; one that some rows hold: one copy, values right
    m2 = xgb.XGBRegressor(n_estimators=5, max_depth=3, missing=-7.0).fit(X, X[:, 0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex2 = shap_ext.TreeExplainer(m2, shap.maskers.Independent(bg, max_samples=len(bg)), backend="cpu")
        assert ex2.data is bg
        bg2 = bg.copy()
        bg2[::7, 3] = -7.0
        ex3 = shap_ext.TreeExplainer(m2, shap.maskers.Independent(bg2, max_samples=len(bg2)), backend="cpu")
    assert ex3.data is not bg2 and np.isnan(ex3.data[::7, 3]).all()
    margin = m2.get_booster().predict(xgb.DMatrix(bg2, missing=-7.0), output_margin=True).astype(np.float64)
    # XGBoost's float32 sums: each row to within float32 rounding of its size
    np.testing.assert_allclose(ex3.expected_value, margin.mean(), rtol=0, atol=1e-6 * np.abs(margin).max())


def test_shipped_explainer_leaves_the_rows_behind():
    model, X = _get("xgb-reg")
    rng = np.random.default_rng(6)
    bg = rng.normal(size=(100_000, 6))
    ex = _explainer_of(model, bg)
    blob = pickle.dumps(ShippedExplainer(ex))
    assert len(blob) < bg.nbytes / 10
    back = pickle.loads(blob).explainer
    assert back.data is None and back._background is None
    assert back.shap_values(X[:10]).tobytes() == ex.shap_values(X[:10]).tobytes()
    prob = _explainer_of(_get("xgb-bin")[0], bg[:500], model_output="probability")
    assert pickle.loads(pickle.dumps(ShippedExplainer(prob))).explainer.data is not None   # pairs need the rows


def test_dask_background_counted_where_it_lies():
    dask = pytest.importorskip("dask")
    da = pytest.importorskip("dask.array")
    dd = pytest.importorskip("dask.dataframe")
    import pandas as pd

    model, X = _get("lgb-reg")
    bg = X[:1400]
    ref = _explainer_of(model, bg)
    with dask.config.set(scheduler="threads"):
        ex = shap_ext.TreeExplainer(model, da.from_array(bg, chunks=(230, 6)), backend="cpu")
        assert ex.expected_value == ref.expected_value
        Xe = X[1400:1500]
        assert ex.shap_values(Xe).tobytes() == ref.shap_values(Xe).tobytes()
        rows = da.from_array(Xe, chunks=(30, 6))
        assert ex.shap_values(rows).compute().tobytes() == ref.shap_values(Xe).tobytes()
        assert ex.shap_interaction_values(rows[:40]).compute().tobytes() == \
            ref.shap_interaction_values(Xe[:40]).tobytes()
        assert ex.banzhaf_values(rows).compute().tobytes() == ref.banzhaf_values(Xe).tobytes()
        frame = dd.from_pandas(pd.DataFrame(bg, columns=[f"f{i}" for i in range(6)]), npartitions=5)
        ex2 = shap_ext.TreeExplainer(model, frame, backend="cpu")
        assert ex2.expected_value == ref.expected_value
        with pytest.raises(NotImplementedError, match="Dask background"):
            shap_ext.TreeExplainer(_get("xgb-bin")[0], da.from_array(bg, chunks=(500, 6)),
                                   model_output="probability", backend="cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["xgb-multi", "rf-reg"])
def test_gpu_summary_counts_the_cpu_twin_integers(name):
    cp = pytest.importorskip("cupy")
    model, X = _get(name)
    ex = _explainer_of(model, X[:10])
    paths = ex.paths
    bg = X[100:1500]
    w = np.random.default_rng(7).random(len(bg))
    for weights in (None, w):
        c = background_summary(paths, bg, weights=weights)
        g = background_summary(paths, cp.asarray(bg), weights=weights, backend="gpu")
        assert np.array_equal(c.hist, g.hist.get())
        assert np.array_equal(c.sparse_w, g.sparse_w.get()) and np.array_equal(c.sparse_sets, g.sparse_sets.get())
        assert c.total == g.total
        a = interventional_shap_values(paths, X[:30], g, backend="gpu")
        b = interventional_shap_values(paths, X[:30], bg, weights=weights, backend="gpu")
        assert cp.asnumpy(a).tobytes() == cp.asnumpy(b).tobytes()
        # the CPU engine reads a GPU summary, and the GPU one a CPU summary
        assert interventional_shap_values(paths, X[:30], g).tobytes() == \
            interventional_shap_values(paths, X[:30], c).tobytes()
        np.testing.assert_allclose(cp.asnumpy(interventional_shap_values(paths, X[:30], c, backend="gpu")),
                                   interventional_shap_values(paths, X[:30], c), rtol=1e-12, atol=1e-12)


@pytest.mark.gpu
def test_gpu_explainer_builds_on_the_gpu():
    cp = pytest.importorskip("cupy")
    model, X = _get("xgb-reg")
    bg = X[:1400].astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gpu = shap_ext.TreeExplainer(model, shap.maskers.Independent(bg, max_samples=len(bg)), backend="gpu")
    cpu = _explainer_of(model, bg)
    assert isinstance(gpu.background_summary.hist, cp.ndarray)      # counted on the device
    assert gpu.expected_value == cpu.expected_value                  # the same integers, the same sum
    for rows in (X[:50], X[60:90]):
        np.testing.assert_allclose(gpu.shap_values(rows), cpu.shap_values(rows), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gpu.shap_interaction_values(X[:5]), cpu.shap_interaction_values(X[:5]),
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gpu.banzhaf_values(X[:9]), cpu.banzhaf_values(X[:9]), rtol=1e-10, atol=1e-12)
    Xd = cp.asarray(X[:20])
    assert isinstance(gpu.shap_values(Xd), cp.ndarray)


@pytest.mark.gpu
def test_dask_cupy_background_counted_on_the_gpu():
    cp = pytest.importorskip("cupy")
    dask = pytest.importorskip("dask")
    da = pytest.importorskip("dask.array")
    model, X = _get("xgb-reg")
    bg = X[:1400].astype(np.float32)
    ref = _explainer_of(model, bg)
    with dask.config.set(scheduler="threads"):
        ex = shap_ext.TreeExplainer(model, da.from_array(bg, chunks=(300, 6)).map_blocks(cp.asarray),
                                    backend="gpu")
        assert ex.expected_value == ref.expected_value
        rows = da.from_array(X[1400:1500], chunks=(50, 6)).map_blocks(cp.asarray)
        vals = ex.shap_values(rows).compute()
    np.testing.assert_allclose(cp.asnumpy(vals), ref.shap_values(X[1400:1500]), rtol=1e-10, atol=1e-12)


@pytest.mark.gpu
@pytest.mark.parametrize("src, dst", [(np.float32, np.float32), (np.float64, np.float32), (np.float32, np.float64),
                                      (np.float64, np.float64)])
def test_upload_slabs_equals_numpy_cast(src, dst):
    """The slab upload of the GPU build gives NumPy's cast of every value (subnormals, inf, NaN, float64 beyond
    float32's range), whatever the slab boundaries."""
    cp = pytest.importorskip("cupy")
    from hitml.kernels.device import upload_slabs

    rng = np.random.default_rng(8)
    x = rng.normal(size=(1001, 7)).astype(src)
    x[::5, 1] = np.float32(1e-45)
    x[::7, 2] = np.inf
    x[::11, 3] = np.nan
    if src == np.float64:
        x[::13, 4] = 1e300
        x[::17, 5] = 1e-310
    with np.errstate(over="ignore"):
        want = x.astype(dst)
    got = upload_slabs(x, dst, slab_bytes=7 * 8 * 50)       # 21 slabs or more, the last one partial
    assert got.dtype == dst and got.flags.c_contiguous
    assert cp.asnumpy(got).tobytes() == want.tobytes()


def test_prepare_background_pass_on_the_cpu_compiles_nothing():
    """The CPU engine's kernels ship compiled: preparing its pass starts no thread and changes no value."""
    import threading

    from hitml.kernels.treeshap import prepare_background_pass

    before = {t.name for t in threading.enumerate()}
    prepare_background_pass(np.dtype(np.float32), np.dtype(np.float32), backend="cpu")
    assert {t.name for t in threading.enumerate()} == before


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 1), (31, 33), (1000, 7), (65, 1), (3, 127)])
def test_gpu_transpose_moves_every_bit(dtype, shape):
    """The build's transpose (patterns.cu rows_to_columns) equals NumPy's, bit for bit: subnormals, -0.0, NaN
    payloads and infinities are moved, never computed on."""
    cp = pytest.importorskip("cupy")
    from hitml.kernels.treeshap import _gpu_patterns

    rng = np.random.default_rng(11)
    x = rng.normal(size=shape).astype(dtype)
    flat = x.reshape(-1)
    ui = np.uint32 if dtype == np.float32 else np.uint64
    specials = np.array([1, 0x80000000, 0x7fc00123, 0xffc00001, 0x7f800000, 0xff800000, 0x00400000], np.uint32) \
        if dtype == np.float32 else np.array([1, 1 << 63, 0x7ff8000000000123, 0x7ff0000000000000,
                                              0x0008000000000000], np.uint64)
    k = min(len(specials), flat.size)
    flat[:k] = specials[:k].astype(ui).view(dtype)
    got = _gpu_patterns._columns(cp.asarray(x), np.dtype(dtype)).get()
    assert got.shape == (shape[1], shape[0])
    assert got.tobytes() == np.ascontiguousarray(x.T).tobytes()


@pytest.mark.gpu
def test_gpu_compile_ahead_error_reaches_the_caller(monkeypatch):
    """An error in the compile thread is raised in the build that waits for it, not lost in the thread."""
    pytest.importorskip("cupy")
    from hitml.kernels.treeshap import _gpu_patterns

    def broken(*args, **kwargs):
        raise RuntimeError("compile failed in the thread")
    monkeypatch.setattr(_gpu_patterns, "_fn", broken)
    monkeypatch.setattr(_gpu_patterns, "_AHEAD", {})
    monkeypatch.setattr(_gpu_patterns, "_READY", set())
    _gpu_patterns.compile_ahead(np.float32, np.float32)
    with pytest.raises(RuntimeError, match="compile failed in the thread"):
        _gpu_patterns._await_ahead(np.float32)


@pytest.mark.gpu
def test_gpu_call_module_compiles_ahead_and_its_error_reaches_the_call(monkeypatch):
    """compile_ahead also compiles the call's module in a thread of its own; the call's first kernel lookup waits
    for it (and re-raises its error once: a later lookup compiles inline)."""
    pytest.importorskip("cupy")
    import cupy as cp

    from hitml.kernels.treeshap import _gpu_patterns

    dev = cp.cuda.Device().id
    monkeypatch.setattr(_gpu_patterns, "_AHEAD", {})
    monkeypatch.setattr(_gpu_patterns, "_READY", set())
    _gpu_patterns.compile_ahead(np.float32, np.float32)
    assert {(dev, np.dtype(np.float32)), (dev, "call")} <= set(_gpu_patterns._AHEAD)
    _gpu_patterns._fn("value_tables")                   # waits for the call's thread
    assert (dev, "call") in _gpu_patterns._READY and (dev, "call") not in _gpu_patterns._AHEAD
    _gpu_patterns._await_ahead(np.float32)

    def broken(*args, **kwargs):
        raise RuntimeError("call module failed in the thread")
    monkeypatch.setattr(_gpu_patterns, "_AHEAD", {})
    monkeypatch.setattr(_gpu_patterns, "_READY", {(dev, np.dtype(np.float32))})
    monkeypatch.setattr(_gpu_patterns, "load_module", broken)
    _gpu_patterns.compile_ahead(np.float32, np.float32)
    with pytest.raises(RuntimeError, match="call module failed in the thread"):
        _gpu_patterns._fn("value_tables")
    monkeypatch.undo()
    assert _gpu_patterns._fn("value_tables") is not None     # compiled inline after the failed thread


def _hostile_background(n: int, m: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    bg = rng.normal(size=(n, m)).astype(np.float32)
    bg[rng.random(bg.shape) < 0.05] = np.nan
    bg[::97, 0] = np.inf
    bg[::89, 1] = -np.inf
    bg[::83, 2] = np.float32(1e-40)          # float32 subnormals: a split between them must see them
    return bg


@pytest.mark.gpu
@pytest.mark.parametrize("rpt", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("weighted", [False, True])
def test_gpu_background_counts_equal_the_cpu_twin_for_any_rows_per_thread(monkeypatch, rpt, weighted):
    """bg_hist counting several rows per thread (BG_RPT) gives the CPU twin's integer histograms, with NaN, +-inf
    and subnormal rows, weights, and a row count that leaves the last rows of a thread partial."""
    cp = pytest.importorskip("cupy")
    from hitml.kernels.treeshap import _gpu_patterns

    X, y = _data(3000, 8, seed=3)
    model = xgb.XGBRegressor(n_estimators=12, max_depth=5).fit(X, y)
    paths = _explainer_of(model, X[:50].astype(np.float32)).paths
    bg = _hostile_background(7919, 8, seed=rpt)
    w = np.random.default_rng(5).integers(0, 4, size=len(bg)).astype(np.float64) if weighted else None
    monkeypatch.setattr(_gpu_patterns, "BG_ROWS_PER_THREAD", rpt)
    got = background_summary(paths, bg, backend="gpu", weights=w)
    want = background_summary(paths, bg, backend="cpu", weights=w)
    assert np.array_equal(cp.asnumpy(got.hist), np.asarray(want.hist))
    assert got.total == want.total


@pytest.mark.gpu
@pytest.mark.parametrize("model_output", ["raw", "probability"])
def test_gpu_build_uploads_the_background_ahead_and_frees_what_it_leaves(monkeypatch, model_output):
    """The GPU build starts the background's upload before the paths are extracted, and the pass takes that copy:
    the summary and the expected value equal a build without it (and the CPU twin's expected value); a build whose
    pass runs elsewhere (a non-identity output) starts none; nothing stays held after the build."""
    cp = pytest.importorskip("cupy")
    from hitml.kernels.treeshap import _gpu_patterns

    X, y = _data(3000, 8, seed=4)
    model = xgb.XGBClassifier(n_estimators=10, max_depth=4).fit(X, (y > 0).astype(int))
    bg = _hostile_background(5000, 8, seed=9)
    bg[np.isinf(bg)] = np.float32(3e38)       # XGBoost's own predict (the reference below) refuses infinities
    monkeypatch.setattr(_gpu_patterns, "_PREFETCH_MIN_BYTES", 0)
    taken = []
    inner = _gpu_patterns._take_upload

    def spy(R, kdtype):
        out = inner(R, kdtype)
        taken.append(out is not None)
        return out
    monkeypatch.setattr(_gpu_patterns, "_take_upload", spy)

    def build(prefetch):
        monkeypatch.setattr(_gpu_patterns, "PREFETCH", prefetch)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return shap_ext.TreeExplainer(model, shap.maskers.Independent(bg, max_samples=len(bg)), backend="gpu",
                                          feature_perturbation="interventional", model_output=model_output)
    on = build(True)
    assert not _gpu_patterns._UPLOADS
    assert taken == ([True] if model_output == "raw" else [])
    off = build(False)
    assert not _gpu_patterns._UPLOADS
    assert np.array_equal(np.ravel(on.expected_value), np.ravel(off.expected_value))
    cpu = _explainer_of(model, bg, model_output=model_output)
    np.testing.assert_allclose(np.ravel(on.expected_value), np.ravel(cpu.expected_value), rtol=1e-12, atol=1e-12)
    if model_output == "raw":
        assert np.array_equal(cp.asnumpy(on.background_summary.hist), cp.asnumpy(off.background_summary.hist))
        margin = model.get_booster().predict(xgb.DMatrix(bg), output_margin=True).astype(np.float64)
        np.testing.assert_allclose(np.ravel(on.expected_value)[0], margin.mean(), rtol=1e-6)


@pytest.mark.gpu
def test_gpu_build_frees_the_uploaded_background_when_the_pass_fails(monkeypatch):
    """A build that fails after the upload started leaves no device copy behind, and its error reaches the user."""
    pytest.importorskip("cupy")
    from hitml.kernels.treeshap import _gpu_patterns

    X, y = _data(2000, 6, seed=6)
    model = xgb.XGBRegressor(n_estimators=5, max_depth=3).fit(X, y)
    bg = _hostile_background(3000, 6, seed=2)
    monkeypatch.setattr(_gpu_patterns, "_PREFETCH_MIN_BYTES", 0)

    def broken(*args, **kwargs):
        raise RuntimeError("the pass failed")
    monkeypatch.setattr(_gpu_patterns, "summarize", broken)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match="the pass failed"):
            shap_ext.TreeExplainer(model, shap.maskers.Independent(bg, max_samples=len(bg)), backend="gpu",
                                   feature_perturbation="interventional")
    assert not _gpu_patterns._UPLOADS


def _small_slabs(monkeypatch, row_bytes: int) -> None:
    """Many slabs and pipeline blocks on a small host background, blocks ending inside slabs."""
    from hitml.kernels import device
    from hitml.kernels.treeshap import _gpu_patterns

    monkeypatch.setattr(device, "_SLAB_BYTES", 37 * row_bytes)
    monkeypatch.setattr(_gpu_patterns, "PIPELINE_BLOCK_BYTES", 100 * row_bytes)
    monkeypatch.setattr(_gpu_patterns, "_PREFETCH_MIN_BYTES", 0)


def _same_summary(got, want) -> None:
    cp = pytest.importorskip("cupy")
    assert np.array_equal(cp.asnumpy(got.hist), np.asarray(want.hist))
    assert np.array_equal(got.sparse_paths, want.sparse_paths)
    for f in ("sparse_ptr", "sparse_sets", "sparse_w"):
        assert np.array_equal(cp.asnumpy(getattr(got, f)), np.asarray(getattr(want, f))), f
    assert got.total == want.total


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("deep", [False, True])
def test_gpu_pass_counts_blocks_while_the_rest_uploads(monkeypatch, dtype, weighted, deep):
    """A host background is counted block by block as its slabs reach the device (80 blocks of 100 rows over slabs
    of 37): the counts equal the CPU twin's integers, weighted or not, float32 or float64 rows (cast on the way), and
    with paths too long for a histogram (their fail sets need every row: one block)."""
    pytest.importorskip("cupy")
    from hitml.kernels.treeshap import _gpu_patterns

    m = 16 if deep else 8
    X, y = _data(3000, m, seed=11)
    model = (RandomForestRegressor(n_estimators=3, random_state=0) if deep
             else xgb.XGBRegressor(n_estimators=12, max_depth=5)).fit(X, y)
    paths = _explainer_of(model, X[:50].astype(np.float32)).paths
    bg = _hostile_background(7919, m, seed=12).astype(dtype)
    w = np.random.default_rng(13).integers(0, 5, size=len(bg)).astype(np.float64) if weighted else None
    _small_slabs(monkeypatch, m * _gpu_patterns._row_type(bg.dtype, paths.input_dtype).itemsize)   # the rows as counted
    blocks = []
    inner = _gpu_patterns._columns
    monkeypatch.setattr(_gpu_patterns, "_columns", lambda Rd, kd: blocks.append(len(Rd)) or inner(Rd, kd))
    got = background_summary(paths, bg, backend="gpu", weights=w)
    want = background_summary(paths, bg, backend="cpu", weights=w)
    assert (len(want.sparse_paths) > 0) == deep
    assert blocks == ([len(bg)] if deep else [100] * 79 + [19])
    _same_summary(got, want)


@pytest.mark.gpu
def test_gpu_pass_counts_again_when_the_upload_fails_part_way(monkeypatch):
    """An upload that fails after some blocks were counted: the pass clears its counts and counts again from a copy
    of its own, so the summary still equals the CPU twin's (and the explainer's expected value XGBoost's mean)."""
    pytest.importorskip("cupy")
    from hitml.kernels.treeshap import _gpu_patterns

    X, y = _data(3000, 8, seed=14)
    model = xgb.XGBRegressor(n_estimators=12, max_depth=5).fit(X, y)
    bg = _hostile_background(5000, 8, seed=15)
    bg[np.isinf(bg)] = np.float32(3e38)       # XGBoost's own predict (the reference below) refuses infinities
    _small_slabs(monkeypatch, 8 * 4)
    inner = _gpu_patterns.upload_slabs
    calls = []

    def failing(x, dtype, slab_bytes=None, on_slab=None):
        calls.append(on_slab is not None)
        if on_slab is None:
            return inner(x, dtype, slab_bytes)

        def then_fail(out, rows, event):
            on_slab(out, rows, event)
            if rows >= 1000:
                raise MemoryError("out of memory part-way through the upload")
        return inner(x, dtype, slab_bytes, on_slab=then_fail)
    monkeypatch.setattr(_gpu_patterns, "upload_slabs", failing)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex = shap_ext.TreeExplainer(model, shap.maskers.Independent(bg, max_samples=len(bg)), backend="gpu",
                                    feature_perturbation="interventional")
    assert calls == [True, False]
    assert not _gpu_patterns._UPLOADS
    _same_summary(ex.background_summary, background_summary(ex.paths, bg, backend="cpu"))
    margin = model.get_booster().predict(xgb.DMatrix(bg), output_margin=True).astype(np.float64)
    np.testing.assert_allclose(float(ex.expected_value), margin.mean(), rtol=1e-6)
