"""sklearn_ext shuffle / splitters / train_test_split: sklearn's invariants, sizes and errors, on NumPy, pandas, sparse."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn import model_selection as skms
from sklearn.utils import shuffle as sk_shuffle

from hitml.sklearn_ext import KFold, ShuffleSplit, StratifiedShuffleSplit, shuffle, train_test_split


def _raises_like(fn_ours, fn_sk):
    with pytest.raises(Exception) as sk_exc:
        fn_sk()
    with pytest.raises(type(sk_exc.value)) as ours:
        fn_ours()
    return str(ours.value), str(sk_exc.value)


@pytest.mark.parametrize("n, k", [(10, 3), (11, 5), (100, 7), (5, 5)])
def test_kfold_invariants(n, k):
    X = np.zeros((n, 2))
    ours = list(KFold(k, shuffle=True, random_state=0).split(X))
    ref = list(skms.KFold(k, shuffle=True, random_state=0).split(X))
    tests = np.concatenate([te for _, te in ours])
    assert np.array_equal(np.sort(tests), np.arange(n))  # disjoint folds covering every sample
    assert [len(te) for _, te in ours] == [len(te) for _, te in ref]
    for tr, te in ours:
        assert np.array_equal(np.sort(np.concatenate([tr, te])), np.arange(n))
    again = list(KFold(k, shuffle=True, random_state=0).split(X))
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(ours, again))
    assert any(not np.array_equal(te, np.sort(te)) or te[0] != 0 for _, te in ours) or n <= k
    unshuffled = list(KFold(k).split(X))
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(unshuffled, skms.KFold(k).split(X)))


def test_kfold_params_and_errors():
    assert KFold(3, shuffle=True, random_state=1).get_n_splits() == 3
    assert "backend" in repr(KFold(shuffle=True))
    _raises_like(lambda: KFold(3, random_state=1), lambda: skms.KFold(3, random_state=1))
    _raises_like(lambda: list(KFold(5).split(np.zeros((3, 1)))), lambda: list(skms.KFold(5).split(np.zeros((3, 1)))))


@pytest.mark.parametrize("test_size, train_size", [(None, None), (0.3, None), (7, None), (None, 0.5), (0.2, 0.3), (5, 6)])
def test_shuffle_split_sizes(test_size, train_size):
    X = np.zeros((37, 1))
    ours = list(ShuffleSplit(4, test_size=test_size, train_size=train_size, random_state=2).split(X))
    ref = list(skms.ShuffleSplit(4, test_size=test_size, train_size=train_size, random_state=2).split(X))
    assert len(ours) == 4
    for (tr, te), (rtr, rte) in zip(ours, ref):
        assert len(tr) == len(rtr) and len(te) == len(rte)
        assert np.intersect1d(tr, te).size == 0 and len(np.unique(tr)) == len(tr)
    assert not np.array_equal(ours[0][1], ours[1][1])


def test_shuffle_split_errors():
    X = np.zeros((10, 1))
    for kw in (dict(test_size=11), dict(test_size=0.0), dict(test_size=0.6, train_size=0.6), dict(test_size=-1)):
        try:
            split = skms.ShuffleSplit(**kw)
        except Exception:  # parameter validation at construction
            _raises_like(lambda kw=kw: ShuffleSplit(**kw), lambda kw=kw: skms.ShuffleSplit(**kw))
            continue
        _raises_like(lambda kw=kw: next(ShuffleSplit(**kw).split(X)), lambda: next(split.split(X)))


def test_stratified_shuffle_split_proportions():
    y = np.array([0] * 50 + [1] * 30 + [2] * 20)
    X = np.zeros((100, 1))
    for tr, te in StratifiedShuffleSplit(5, test_size=0.25, random_state=0).split(X, y):
        assert np.intersect1d(tr, te).size == 0
        assert np.array_equal(np.bincount(y[te]), [12, 8, 5]) or abs(np.bincount(y[te]) - [12.5, 7.5, 5]).max() <= 1
        assert len(te) == 25 and len(tr) == 75
    ref_tr, ref_te = next(skms.StratifiedShuffleSplit(1, test_size=0.2, random_state=0).split(X, y))
    tr, te = next(StratifiedShuffleSplit(1, test_size=0.2, random_state=0).split(X, y))
    assert np.array_equal(np.bincount(y[te]), np.bincount(y[ref_te]))
    assert np.array_equal(np.bincount(y[tr]), np.bincount(y[ref_tr]))


def test_stratified_errors():
    X = np.zeros((6, 1))
    y = np.array([0, 0, 0, 1, 1, 2])
    m_ours, m_sk = _raises_like(lambda: next(StratifiedShuffleSplit(1, test_size=3).split(X, y)),
                                lambda: next(skms.StratifiedShuffleSplit(1, test_size=3).split(X, y)))
    assert m_ours == m_sk
    y2 = np.array([0, 0, 0, 1, 1, 1])
    m_ours, m_sk = _raises_like(lambda: next(StratifiedShuffleSplit(1, test_size=1).split(X, y2)),
                                lambda: next(skms.StratifiedShuffleSplit(1, test_size=1).split(X, y2)))
    assert m_ours == m_sk


@pytest.mark.parametrize("kw", [dict(), dict(test_size=0.33), dict(train_size=20), dict(test_size=3, train_size=4)])
def test_train_test_split_sizes(kw):
    X, y = np.arange(94).reshape(47, 2), np.arange(47)
    ours = train_test_split(X, y, random_state=0, **kw)
    ref = skms.train_test_split(X, y, random_state=0, **kw)
    assert [a.shape for a in ours] == [a.shape for a in ref]
    Xtr, Xte, ytr, yte = ours
    assert np.array_equal(Xtr[:, 0] // 2, ytr) and np.array_equal(Xte[:, 0] // 2, yte)
    assert np.intersect1d(ytr, yte).size == 0


def test_train_test_split_modes():
    X, y = np.arange(40).reshape(20, 2), np.array([0] * 12 + [1] * 8)
    assert all(np.array_equal(a, b) for a, b in zip(train_test_split(X, y, shuffle=False),
                                                     skms.train_test_split(X, y, shuffle=False)))
    _, _, ytr, yte = train_test_split(X, y, stratify=y, test_size=5, random_state=1)
    assert sorted(np.bincount(yte)) == [2, 3] and len(ytr) == 15
    df = pd.DataFrame(X, columns=["a", "b"], index=np.arange(100, 120))
    dtr, dte = train_test_split(df, random_state=3)
    assert isinstance(dtr, pd.DataFrame) and set(dtr.index) | set(dte.index) == set(df.index)
    s_tr, s_te = train_test_split(sp.csr_matrix(X), random_state=3)
    assert sp.issparse(s_tr) and s_tr.shape[0] + s_te.shape[0] == 20
    a1 = train_test_split(X, random_state=np.random.RandomState(0))
    assert len(a1) == 2


def test_train_test_split_errors():
    X, y = np.zeros((10, 2)), np.zeros(9)
    m_ours, m_sk = _raises_like(lambda: train_test_split(X, y), lambda: skms.train_test_split(X, y))
    assert "inconsistent numbers of samples" in m_ours
    _raises_like(lambda: train_test_split(), lambda: skms.train_test_split())
    _raises_like(lambda: train_test_split(X, test_size=11), lambda: skms.train_test_split(X, test_size=11))
    _raises_like(lambda: train_test_split(X, test_size=-0.5), lambda: skms.train_test_split(X, test_size=-0.5))
    _raises_like(lambda: train_test_split(X, shuffle=False, stratify=np.zeros(10)),
                 lambda: skms.train_test_split(X, shuffle=False, stratify=np.zeros(10)))


def test_shuffle_semantics():
    X, y = np.arange(60).reshape(30, 2), np.arange(30)
    Xs, ys = shuffle(X, y, random_state=0)
    assert np.array_equal(Xs[:, 0] // 2, ys) and np.array_equal(np.sort(ys), y) and not np.array_equal(ys, y)
    assert np.array_equal(shuffle(y, random_state=0), ys)
    assert shuffle(y, random_state=0, n_samples=7).shape == (7,)
    assert shuffle() is None
    assert sp.issparse(shuffle(sp.csr_matrix(X), random_state=1))
    s = shuffle(pd.Series(y), random_state=1)
    assert isinstance(s, pd.Series) and np.array_equal(s.to_numpy(), y[s.index])
    assert isinstance(shuffle([1, 2, 3], random_state=1), list)


def test_shuffle_errors():
    y = np.arange(5)
    m_ours, m_sk = _raises_like(lambda: shuffle(y, n_samples=6), lambda: sk_shuffle(y, n_samples=6))
    assert m_ours == m_sk
    _raises_like(lambda: shuffle(y, np.arange(4)), lambda: sk_shuffle(y, np.arange(4)))
    for bad in (0, -1, 2.5):
        _raises_like(lambda bad=bad: shuffle(y, n_samples=bad), lambda bad=bad: sk_shuffle(y, n_samples=bad))
    with pytest.raises(ValueError, match="seed"):
        shuffle(y, random_state="abc")
