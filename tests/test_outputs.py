"""Outputs that fit in memory (issue 43, part 2): ``dtype=np.float32``, ``interaction_features=`` and the one-pass
global summaries, checked against the full float64 computation (NumPy rounding, slicing and ``np.abs(...).mean(0)``),
against XGBoost's own ``pred_interactions``, through Dask, and on the GPU against the CPU twin."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import shap
import xgboost as xgb

from hitml import shap_ext
from hitml.shap_ext import _outputs

RTOL = 1e-12        # the float64 summaries: chunk sums differ from the full computation in order only


def ours(model, *args, backend="cpu", **kw):
    return shap_ext.TreeExplainer(model, *args, backend=backend, **kw)


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
    assert a.tobytes() == b.tobytes()


def rel(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=RTOL, atol=0)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(43)
    X = rng.normal(size=(700, 6))
    X[rng.random(X.shape) < 0.05] = np.nan
    y = X[:, 0] * X[:, 1] + np.sin(X[:, 2]) + 0.3 * X[:, 3] * X[:, 4]
    return X, np.nan_to_num(y)


@pytest.fixture(scope="module")
def reg(data):
    X, y = data
    return xgb.XGBRegressor(n_estimators=20, max_depth=4, n_jobs=1).fit(X, y)


@pytest.fixture(scope="module")
def multi(data):
    X, y = data
    labels = np.digitize(y, np.quantile(y, [0.33, 0.66]))
    return xgb.XGBClassifier(n_estimators=8, max_depth=3, n_jobs=1).fit(X, labels)


@pytest.fixture(scope="module")
def housing():
    df = pd.read_csv("data/cal_housing.csv.gz").sample(2000, random_state=1)
    y = np.log(df.pop("median_house_value").to_numpy())
    return df, y


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of a few rows, so every call here runs over many of them."""
    monkeypatch.setattr(_outputs, "CHUNK_BYTES", 20_000)


def explainers(reg, multi, data, backend="cpu"):
    X, _ = data
    bg = np.nan_to_num(X[:80])
    return {"path": ours(reg, backend=backend),
            "interventional": ours(reg, bg, feature_perturbation="interventional", backend=backend),
            "multiclass": ours(multi, backend=backend)}


# ------------------------------------------------------------------------------------------------ dtype
@pytest.mark.parametrize("bad", [np.int32, np.float16, "int64", np.complex128, "nonsense", object])
def test_bad_dtype_raises(reg, data, bad):
    ex = ours(reg)
    with pytest.raises(ValueError, match="dtype must be"):
        ex.shap_values(data[0][:5], dtype=bad)
    with pytest.raises(ValueError, match="dtype must be"):
        ex.shap_interaction_values(data[0][:5], dtype=bad)


def test_float64_dtype_is_todays_output(reg, data):
    X = data[0][:50]
    ex = ours(reg)
    same(ex.shap_values(X, dtype=np.float64), ex.shap_values(X))
    same(ex.shap_values(X, dtype=None), ex.shap_values(X))
    same(ex.shap_interaction_values(X, dtype="float64"), ex.shap_interaction_values(X))


@pytest.mark.parametrize("kind", ["path", "interventional", "multiclass"])
def test_float32_is_float64_rounded(reg, multi, data, small_chunks, kind):
    X = data[0][:300]
    ex = explainers(reg, multi, data)[kind]
    full = ex.shap_values(X)
    f32 = ex.shap_values(X, dtype=np.float32)
    same(f32, full.astype(np.float32))
    inter = ex.shap_interaction_values(X[:60])
    same(ex.shap_interaction_values(X[:60], dtype=np.float32), inter.astype(np.float32))
    same(ex.shap_values(X[0], dtype=np.float32), full[0].astype(np.float32))       # one row, flat


def test_float32_of_frames_and_lightgbm(housing, small_chunks):
    lgb = pytest.importorskip("lightgbm")
    X, y = housing
    model = lgb.LGBMRegressor(n_estimators=15, num_leaves=15, verbose=-1, n_jobs=1).fit(X, y)
    ex = ours(model)
    same(ex.shap_values(X, dtype=np.float32), ex.shap_values(X).astype(np.float32))
    # the engine's own rounding of XGBoost rows read from a frame, and the library's margins per chunk
    model = xgb.XGBRegressor(n_estimators=10, max_depth=4, n_jobs=1).fit(X, y)
    ex = ours(model)
    same(ex.shap_values(X, dtype=np.float32), ex.shap_values(X).astype(np.float32))
    np.testing.assert_allclose(ex.shap_values(X, dtype=np.float32).sum(1) + ex.expected_value,
                               model.predict(X, output_margin=True), rtol=1e-4, atol=1e-4)


def test_empty_rows_keep_shape_and_dtype(reg, data):
    ex = ours(reg)
    out = ex.shap_values(data[0][:0], dtype=np.float32)
    assert out.shape == (0, 6) and out.dtype == np.float32
    out = ex.shap_interaction_values(data[0][:0], interaction_features=[1, 2])
    assert out.shape == (0, 2, 2)


# ------------------------------------------------------------------------------------------------ subsets
def test_subset_is_the_full_matrix_sliced(reg, multi, data, small_chunks):
    X = data[0][:250]
    for ex in explainers(reg, multi, data).values():
        full = ex.shap_interaction_values(X)
        for idx in ([4, 0, 2], [5], list(range(6))):
            got = ex.shap_interaction_values(X, interaction_features=idx)
            same(got, full[:, idx][:, :, idx])
            same(ex.shap_interaction_values(X, interaction_features=idx, dtype=np.float32),
                 full[:, idx][:, :, idx].astype(np.float32))
        same(ex.shap_interaction_values(X[3], interaction_features=[1, 3]), full[3][[1, 3]][:, [1, 3]])


def test_subset_matches_xgboost_pred_interactions(reg, data):
    """XGBoost's own interaction values (its C++ TreeSHAP), sliced to the subset."""
    X = data[0][:200]
    idx = [3, 0, 4]
    native = reg.get_booster().predict(xgb.DMatrix(X), pred_interactions=True)[:, :-1, :-1]
    got = ours(reg).shap_interaction_values(X, interaction_features=idx)
    np.testing.assert_allclose(got, native[:, idx][:, :, idx], rtol=0, atol=2e-5 * np.abs(native).max())


def test_subset_by_name(housing):
    X, y = housing
    model = xgb.XGBRegressor(n_estimators=10, max_depth=4, n_jobs=1).fit(X, y)
    ex = ours(model)
    names = ["latitude", "longitude", "median_income"]
    idx = [list(X.columns).index(n) for n in names]
    full = ex.shap_interaction_values(X[:300])
    same(ex.shap_interaction_values(X[:300], interaction_features=names), full[:, idx][:, :, idx])
    with pytest.raises(ValueError, match="needs X as a frame"):
        ex.shap_interaction_values(X[:300].to_numpy(), interaction_features=names)
    named = ours(model, feature_names=list(X.columns))  # the explainer's feature_names name NumPy columns
    same(named.shap_interaction_values(X[:300].to_numpy(), interaction_features=names), full[:, idx][:, :, idx])


@pytest.mark.parametrize("bad, err", [([6], ValueError), ([-1], ValueError), ([1, 1], ValueError), ([], ValueError),
                                      ("a", TypeError), ([1.5], TypeError), (["x"], ValueError)])
def test_bad_subsets_raise(reg, data, bad, err):
    with pytest.raises(err):
        ours(reg, feature_names=list("abcdef")).shap_interaction_values(data[0][:5], interaction_features=bad)


def test_subset_memory_is_bounded_by_chunks(reg, data, monkeypatch):
    """Each engine call sees at most chunk_bytes of full (M+1)^2 float64 output; the subset alone is kept."""
    monkeypatch.setattr(_outputs, "CHUNK_BYTES", 49 * 8 * 40)      # 40 rows of (6+1)^2 doubles
    ex = ours(reg)
    seen = []
    inner = ex.shap_interaction_values

    def spy(Xc, *a, **k):
        seen.append(len(Xc))
        return inner(Xc, *a, **k)

    ex.shap_interaction_values = spy
    X = data[0][:333]
    out = shap_ext.TreeExplainer.shap_interaction_values(ex, X, interaction_features=[0, 1])
    assert out.shape == (333, 2, 2) and max(seen) == 40 and sum(seen) == 333


# ------------------------------------------------------------------------------------------------ summaries
@pytest.mark.parametrize("kind", ["path", "interventional", "multiclass"])
def test_global_values_equal_the_full_mean(reg, multi, data, small_chunks, kind):
    X = data[0][:400]
    ex = explainers(reg, multi, data)[kind]
    g = ex.global_shap_values(X)
    rel(g.values, np.abs(ex.shap_values(X)).mean(0))
    assert g.n_rows == 400 and g.feature_names == [f"Feature {i}" for i in range(6)]
    same(ex.global_shap_values(X).values, g.values)                    # the same bytes on every call
    gi = ex.global_interaction_values(X[:150], top_k=None)
    full = np.abs(ex.shap_interaction_values(X[:150])).mean(0)
    rel(gi.values, full)
    same(ex.global_interaction_values(X[:150]).values, gi.values)
    sub = ex.global_interaction_values(X[:150], interaction_features=[5, 1, 2])
    rel(sub.values, full[[5, 1, 2]][:, [5, 1, 2]])
    assert sub.feature_names == ["Feature 5", "Feature 1", "Feature 2"]


def _ranked(full, names, top_k):
    """Off-diagonal pairs ranked by the full matrix, computed here without the module's helper."""
    pairs = sorted(((full[i, j], i, j) for i in range(len(names)) for j in range(i + 1, len(names))),
                   key=lambda t: (-t[0], t[1], t[2]))
    return [(names[i], names[j]) for _, i, j in pairs[:top_k]]


def test_top_pairs_and_plots(housing):
    """cal_housing: the top pairs are the full matrix's largest off-diagonal entries; shap's bar and heatmap plots
    take the summaries."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    X, y = housing
    model = xgb.XGBRegressor(n_estimators=30, max_depth=5, n_jobs=1).fit(X, y)
    ex = ours(model)
    gi = ex.global_interaction_values(X, top_k=5)
    full = np.abs(ex.shap_interaction_values(X)).mean(0)
    rel(gi.values, full)
    top = gi.top_interactions
    assert list(top.columns) == ["feature_i", "feature_j", "mean_abs_interaction"] and len(top) == 5
    assert list(zip(top.feature_i, top.feature_j)) == _ranked(full, list(X.columns), 5)
    np.testing.assert_allclose(top.mean_abs_interaction, sorted(full[np.triu_indices(8, 1)])[::-1][:5], rtol=RTOL)
    g = ex.global_shap_values(X)
    rel(g.values, ex(X).abs.mean(0).values)
    assert g.feature_names == list(X.columns)
    shap.plots.bar(g, show=False)
    shap.plots.heatmap(gi, show=False)
    plt.close("all")


def test_multioutput_top_pairs_rank_each_output(multi, data):
    ex = ours(multi)
    X = data[0][:200]
    gi = ex.global_interaction_values(X, top_k=3)
    full = np.abs(ex.shap_interaction_values(X)).mean(0)
    assert gi.values.shape == (6, 6, 3)
    top = gi.top_interactions
    assert list(top.columns) == ["output", "feature_i", "feature_j", "mean_abs_interaction"] and len(top) == 9
    for k in range(3):
        rows = top[top.output == k]
        assert list(zip(rows.feature_i, rows.feature_j)) == _ranked(full[..., k], [f"Feature {i}" for i in range(6)], 3)


def test_iterator_of_blocks_and_frames(housing, small_chunks):
    X, y = housing
    model = xgb.XGBRegressor(n_estimators=10, max_depth=4, n_jobs=1).fit(X, y)
    ex = ours(model)
    blocks = (X.iloc[a:a + 300] for a in range(0, len(X), 300))
    g = ex.global_interaction_values(blocks, interaction_features=["median_income", "latitude"])
    full = np.abs(ex.shap_interaction_values(X)).mean(0)
    i, j = list(X.columns).index("median_income"), list(X.columns).index("latitude")
    rel(g.values, full[[i, j]][:, [i, j]])
    assert g.n_rows == len(X) and g.feature_names == ["median_income", "latitude"]
    g = ex.global_shap_values(iter([X.to_numpy()[:700], X.to_numpy()[700:]]))
    rel(g.values, np.abs(ex.shap_values(X)).mean(0))


def test_summary_errors(reg, data):
    ex = ours(reg)
    with pytest.raises(ValueError, match="no rows"):
        ex.global_shap_values(data[0][:0])
    with pytest.raises(ValueError, match="top_k"):
        ex.global_interaction_values(data[0][:10], top_k=-1)
    with pytest.raises(TypeError, match="global summaries take"):
        ex.global_shap_values(iter([[1.0] * 6]))
    prob = ours(xgb.XGBClassifier(n_estimators=3, max_depth=2).fit(data[0], data[1] > 0), data[0][:50],
                model_output="probability")
    with pytest.raises(ValueError, match="model_output"):
        prob.global_interaction_values(data[0][:10])


def test_progress_bar_over_chunks(reg, data, monkeypatch, capsys):
    monkeypatch.setattr(_outputs, "CHUNK_BYTES", 7 * 8 * 50)          # 50 rows of (6+1) doubles
    ex = ours(reg, progress=True)
    ex.global_shap_values(data[0][:300])
    assert "hitml global SHAP" in capsys.readouterr().err
    ours(reg, progress=False).global_shap_values(data[0][:300])
    assert "hitml global SHAP" not in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ Dask
def test_dask_outputs_and_summaries(reg, multi, data):
    da = pytest.importorskip("dask.array")
    import dask

    X = data[0][:500]
    dX = da.from_array(X, chunks=(130, 6))
    with dask.config.set(scheduler="synchronous"):
        for ex in explainers(reg, multi, data).values():
            same(ex.shap_values(dX, dtype=np.float32).compute(), ex.shap_values(X).astype(np.float32))
            got = ex.shap_interaction_values(dX[:200], interaction_features=[2, 0])
            assert got.shape[1:3] == (2, 2)
            same(got.compute(), ex.shap_interaction_values(X[:200])[:, [2, 0]][:, :, [2, 0]])
            rel(ex.global_shap_values(dX).values, np.abs(ex.shap_values(X)).mean(0))
            gi = ex.global_interaction_values(dX[:200])
            rel(gi.values, np.abs(ex.shap_interaction_values(X[:200])).mean(0))
            same(ex.global_interaction_values(dX[:200]).values, gi.values)


def test_dask_dataframe_names(housing):
    dd = pytest.importorskip("dask.dataframe")
    import dask

    X, y = housing
    model = xgb.XGBRegressor(n_estimators=10, max_depth=4, n_jobs=1).fit(X, y)
    ex = ours(model)
    ddf = dd.from_pandas(X, npartitions=3)
    with dask.config.set(scheduler="synchronous"):
        gi = ex.global_interaction_values(ddf, interaction_features=["latitude", "longitude"])
    idx = [list(X.columns).index("latitude"), list(X.columns).index("longitude")]
    rel(gi.values, np.abs(ex.shap_interaction_values(X)).mean(0)[idx][:, idx])
    assert gi.feature_names == ["latitude", "longitude"] and gi.n_rows == len(X)


# ------------------------------------------------------------------------------------------------ GPU
@pytest.mark.gpu
def test_gpu_exact_cast_keeps_subnormals():
    from hitml.kernels.device import cupy_module

    cp = cupy_module()
    tiny = np.float64(np.finfo(np.float32).tiny)
    v = np.array([0.0, -0.0, tiny / 3, -tiny / 7, tiny * 0.999, 1e-45, 7e-46, 1.0 + 2 ** -30, 3.4e38, 1e39, np.nan,
                  -np.inf, 1 / 3], dtype=np.float64)
    got = _outputs._cast(cp.asarray(v), np.dtype(np.float32)).get()
    with np.errstate(over="ignore"):
        same(got, v.astype(np.float32))


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["path", "interventional", "multiclass"])
def test_gpu_outputs_match_cpu_twin(reg, multi, data, small_chunks, kind):
    from hitml.kernels.device import cupy_module, is_pinned

    cp = cupy_module()
    X = data[0][:300]
    cpu = explainers(reg, multi, data)[kind]
    gpu = explainers(reg, multi, data, backend="gpu")[kind]
    full = gpu.shap_values(X)
    same(gpu.shap_values(X, dtype=np.float32), full.astype(np.float32))             # host rows, pinned pipeline
    got = gpu.shap_values(cp.asarray(X), dtype=np.float32)
    assert isinstance(got, cp.ndarray)
    same(got.get(), full.astype(np.float32))
    np.testing.assert_allclose(full, cpu.shap_values(X), rtol=1e-9, atol=1e-9)
    big = np.tile(X, (12, 1))                 # output past the pinned minimum: the overlapped copy pipeline
    got = gpu.shap_values(big, dtype=np.float32)
    assert is_pinned(got)
    same(got, gpu.shap_values(big).astype(np.float32))
    inter = gpu.shap_interaction_values(X[:100])
    sub = gpu.shap_interaction_values(X[:100], interaction_features=[4, 1], dtype=np.float32)
    same(sub, inter[:, [4, 1]][:, :, [4, 1]].astype(np.float32))
    np.testing.assert_allclose(gpu.shap_interaction_values(X[:100], interaction_features=[4, 1]),
                               cpu.shap_interaction_values(X[:100], interaction_features=[4, 1]), rtol=1e-9, atol=1e-9)
    g = gpu.global_interaction_values(X[:200])
    rel(g.values, np.abs(gpu.shap_interaction_values(X[:200])).mean(0))
    np.testing.assert_allclose(g.values, cpu.global_interaction_values(X[:200]).values, rtol=1e-9, atol=1e-12)
    same(gpu.global_interaction_values(X[:200]).values, g.values)
    gc = gpu.global_shap_values(cp.asarray(X))
    rel(gc.values, np.abs(full).mean(0))
    same(gpu.global_shap_values(cp.asarray(X)).values, gc.values)
