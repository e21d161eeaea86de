"""Distributed bijective shuffle / train_test_split for Dask collections (synchronous scheduler; no cluster needed)."""
from __future__ import annotations

import numpy as np
import pytest

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")
dd = pytest.importorskip("dask.dataframe")
import pandas as pd  # noqa: E402 - after the pytest.importorskip above
from sklearn.model_selection import train_test_split as sk_train_test_split  # noqa: E402 - after the pytest.importorskip above

from hitml.kernels.shuffle import permutation  # noqa: E402 - after the pytest.importorskip above
from hitml.sklearn_ext import shuffle, train_test_split  # noqa: E402 - after the pytest.importorskip above
from hitml.sklearn_ext._dask import dask_shuffle, dask_train_test_split  # noqa: E402 - after the pytest.importorskip above

N = 2011


@pytest.fixture(autouse=True)
def _sync():
    with dask.config.set(scheduler="sync"):
        yield


def _data(n=N):
    X = np.column_stack([np.arange(n), np.random.default_rng(1).normal(size=n)])
    return X, np.arange(n) * 10


def test_shuffle_is_the_seeded_permutation_whatever_the_partitioning():
    X, y = _data()
    results = []
    for rows in (N, 500, 97):
        xs, ys = dask_shuffle(da.from_array(X, chunks=(rows, 1)), da.from_array(y, chunks=rows * 2 // 3),
                              random_state=42, npartitions=5)
        xs_, ys_ = dask.compute(xs, ys)
        # a permutation, applied consistently to X and y
        assert np.array_equal(np.sort(xs_[:, 0]), np.arange(N))
        assert np.array_equal(ys_, xs_[:, 0].astype(np.int64) * 10)
        results.append((xs_, xs.chunks[0]))
    for xs_, chunks in results[1:]:  # independent of the input partitioning (output chunks too)
        assert np.array_equal(xs_, results[0][0]) and chunks == results[0][1]
    # the same order as the in-memory compaction of the padded domain, and as sklearn_ext.shuffle
    assert np.array_equal(results[0][0], X[permutation(N, 42)])
    assert np.array_equal(results[0][0], shuffle(X, random_state=42))
    assert len(results[0][1]) == 5 and sum(results[0][1]) == N


def test_reproducible_from_seed_and_seeds_differ():
    X, _ = _data()
    dX = da.from_array(X, chunks=(300, 2))
    a = dask_shuffle(dX, random_state=7).compute()
    b = dask_shuffle(dX, random_state=7).compute()
    c = dask_shuffle(dX, random_state=8).compute()
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    g1, g2 = np.random.default_rng(3), np.random.default_rng(3)
    assert np.array_equal(dask_shuffle(dX, random_state=g1).compute(), shuffle(X, random_state=g2))


def test_n_samples_and_dataframes():
    X, y = _data()
    df = pd.DataFrame({"a": X[:, 0], "b": X[:, 1]}, index=np.arange(N) + 1000)
    ddf = dd.from_pandas(df, npartitions=4)
    out = dask_shuffle(ddf, random_state=5, n_samples=700)
    ref = df.iloc[permutation(N, 5)[:700]]
    got = out.compute()
    pd.testing.assert_frame_equal(got, ref)  # index labels travel with their rows, as sklearn's shuffle does
    s = dask_shuffle(ddf["a"], random_state=5).compute()
    pd.testing.assert_series_equal(s, df["a"].iloc[permutation(N, 5)])


@pytest.mark.parametrize("test_size,train_size", [(0.25, None), (333, 1000), (None, 0.5)])
def test_train_test_split_matches_in_memory(test_size, train_size):
    X, y = _data()
    parts = dask_train_test_split(da.from_array(X, chunks=(400, 2)), da.from_array(y, chunks=250),
                                  test_size=test_size, train_size=train_size, random_state=11)
    ref = train_test_split(X, y, test_size=test_size, train_size=train_size, random_state=11)
    sk = sk_train_test_split(X, y, test_size=test_size, train_size=train_size, random_state=11)
    for p, r, s in zip(parts, ref, sk):
        got = p.compute()
        assert p.shape == r.shape == s.shape  # sklearn's sizes, exactly (dask's random_split is approximate)
        assert np.array_equal(got, r)
    tr, te = parts[0].compute()[:, 0], parts[1].compute()[:, 0]
    assert not set(tr) & set(te)


def test_train_test_split_dataframe_and_no_shuffle():
    X, y = _data()
    df = pd.DataFrame({"a": X[:, 0], "b": X[:, 1]})
    ddf = dd.from_pandas(df, npartitions=3)
    parts = dask_train_test_split(ddf, ddf["a"], test_size=0.2, random_state=4)
    ref = train_test_split(df, df["a"], test_size=0.2, random_state=4)
    for p, r in zip(parts, ref):
        got = p.compute()
        (pd.testing.assert_frame_equal if isinstance(r, pd.DataFrame) else pd.testing.assert_series_equal)(got, r)
    a_tr, a_te = dask_train_test_split(da.from_array(X, chunks=(700, 2)), shuffle=False, test_size=0.3)
    s_tr, s_te = sk_train_test_split(X, shuffle=False, test_size=0.3)
    assert np.array_equal(a_tr.compute(), s_tr) and np.array_equal(a_te.compute(), s_te)
    f_tr, f_te = dask_train_test_split(ddf, shuffle=False, test_size=0.3)
    pd.testing.assert_frame_equal(f_te.compute(), sk_train_test_split(df, shuffle=False, test_size=0.3)[1])


def test_bad_inputs():
    X, y = _data()
    dX = da.from_array(X, chunks=(500, 2))
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        dask_shuffle(dX, da.from_array(y[:-1], chunks=500))
    with pytest.raises(NotImplementedError, match="stratify"):
        dask_train_test_split(dX, stratify=da.from_array(y, chunks=500))
    with pytest.raises(TypeError, match="dask.array or dask.dataframe"):
        dask_shuffle(X)
    with pytest.raises(ValueError, match="Cannot sample"):
        dask_shuffle(dX, n_samples=N + 1)
    with pytest.raises(ValueError, match="npartitions"):
        dask_shuffle(dX, npartitions=0)
    assert dask_shuffle() is None


@pytest.mark.gpu
def test_cupy_partitions_match_cpu():
    import cupy as cp

    X, _ = _data()
    dX = da.from_array(X, chunks=(500, 2)).map_blocks(cp.asarray)
    out = dask_shuffle(dX, random_state=9).compute()
    assert isinstance(out, cp.ndarray)
    assert np.array_equal(out.get(), X[permutation(N, 9)])
