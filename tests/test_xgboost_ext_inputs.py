"""xgboost_ext on the inputs XGBoost itself reads: category columns (numeric and string categories, codes marked by
feature_types), scipy sparse matrices (an absent entry is missing), mostly-missing columns in streaming fits and
repeated epochs. The references are XGBoost's own models, cuts and predictions, and exact quantiles."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import xgboost as xgb

from hitml.kernels.sketch import RowSample
from hitml.kernels.sketch.robust import SketchFallbackWarning
from hitml.xgboost_ext import QuantileBinner, XGBRegressor, check_cuts, dmatrix, quantile_dmatrix

KW = {"n_estimators": 25, "max_depth": 4, "enable_categorical": True, "max_bin": 64, "tree_method": "hist"}


def _cat_frame(n=3000, seed=0, continuous=False):
    rng = np.random.default_rng(seed)
    num = rng.standard_normal(n) if continuous else np.round(rng.standard_normal(n) * 5)
    cat = pd.Categorical(rng.choice([10, 20, 30, 40], n))
    s = pd.Categorical(rng.choice(["a", "b", "c", "d", "e"], n))
    y = num / 5 + np.asarray(cat.astype(float)) / 10 + (np.asarray(s) == "b") * 2 + 0.01 * rng.standard_normal(n)
    X = pd.DataFrame({"num": num, "cat": cat, "s": s})
    X.loc[rng.random(n) < 0.05, "s"] = np.nan
    return X, y


def _rmse(a, b):
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


def test_category_columns_train_exactly_like_xgboost():
    """Numeric and string categories are XGBoost's to bin: with the numeric column's cuts exact (few values), the
    model is XGBoost's own, prediction for prediction."""
    X, y = _cat_frame()
    plain = xgb.XGBRegressor(**KW).fit(X, y)
    ours = XGBRegressor(binner=QuantileBinner(max_bin=64), **KW).fit(X, y)
    np.testing.assert_array_equal(ours.predict(X), plain.predict(X))
    assert list(ours.binner_.cuts_.source) == ["exact", "category", "category"]
    # XGBoost's categorical cuts on our matrix equal its own
    mine = quantile_dmatrix(X, y, binner=ours.binner_, enable_categorical=True)
    theirs = xgb.QuantileDMatrix(X, y, max_bin=64, enable_categorical=True)
    (p1, v1), (p2, v2) = mine.get_quantile_cut(), theirs.get_quantile_cut()
    for j in (1, 2):
        np.testing.assert_array_equal(v1[p1[j]:p1[j + 1]], v2[p2[j]:p2[j + 1]])
    # a frame whose categories pandas inferred differently predicts as XGBoost re-codes it
    X2 = X.iloc[:50].copy()
    X2["s"] = pd.Categorical(X2["s"].astype(object))
    np.testing.assert_array_equal(ours.predict(X2), plain.predict(X2))


def test_category_columns_continuous_numeric_rmse_like_xgboost():
    X, y = _cat_frame(continuous=True, seed=1)
    plain = xgb.XGBRegressor(**KW).fit(X, y)
    ours = XGBRegressor(binner=QuantileBinner(max_bin=64), **KW).fit(X, y)
    r0, r1 = _rmse(plain.predict(X), y), _rmse(ours.predict(X), y)
    assert r1 < 1.1 * r0 + 1e-3, (r0, r1)  # the failure: 1.29 against 0.055
    used = ours.get_booster().get_score(importance_type="weight")
    assert "cat" in used and "s" in used


def test_category_codes_marked_by_feature_types():
    """NumPy codes with feature_types="c" (XGBoost's way without pandas) are not sketched either."""
    X, y = _cat_frame()
    A = np.column_stack([X["num"], X["cat"].cat.codes, X["s"].cat.codes.replace(-1, np.nan)]).astype(np.float64)
    kw = dict(KW, feature_types=["q", "c", "c"])
    plain = xgb.XGBRegressor(**kw).fit(A, y)
    ours = XGBRegressor(binner=QuantileBinner(max_bin=64), **kw).fit(A, y)
    np.testing.assert_array_equal(ours.predict(A), plain.predict(A))


def test_binner_transform_recodes_categories_by_label():
    X, _ = _cat_frame(n=500)
    b = QuantileBinner(max_bin=16).fit(X)
    assert b.categorical_.tolist() == [False, True, True]
    X2 = X.iloc[:40].copy()
    X2["s"] = pd.Categorical(X2["s"].astype(object).where(X2.index % 7 != 0, "zz"))  # an unseen label
    got = b.transform(X2)[:, 2]
    ref = pd.Categorical(X2["s"], categories=X["s"].cat.categories).codes
    np.testing.assert_array_equal(got, ref)
    assert (got[X2.index % 7 == 0] == -1).all()
    back = b.inverse_transform(b.transform(X))
    ok = X["s"].cat.codes.to_numpy() >= 0
    np.testing.assert_array_equal(back[ok, 2], X["s"].cat.codes.to_numpy()[ok])
    with pytest.raises(ValueError, match="could not convert|category"):
        QuantileBinner(categorical_features=None).fit(X)  # strings cannot be sketched


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_sparse_absent_entries_are_missing(fmt):
    rng = np.random.default_rng(3)
    n, d = 3000, 4
    S = sp.random(n, d, density=0.3, format=fmt, random_state=3, dtype=np.float64)
    S = S.tocsr()
    S.data = rng.lognormal(size=S.data.size)
    S.data[::50] = 0.0  # stored zeros are values 0.0, as XGBoost reads them
    S = S.asformat(fmt)
    dense = np.full((n, d), np.nan)
    C = S.tocoo()
    dense[C.row, C.col] = C.data
    b_sp = QuantileBinner(max_bin=32).fit(S)
    b_dn = QuantileBinner(max_bin=32).fit(dense)
    for a, c in zip(b_sp.cuts_.values, b_dn.cuts_.values):
        np.testing.assert_array_equal(a, c)
    assert (b_sp.cuts_.vmin == 0.0).all()  # the stored zeros; absent entries are not zeros
    np.testing.assert_array_equal(b_sp.transform(S), b_dn.transform(dense))
    y = np.nan_to_num(dense).sum(axis=1)
    check_cuts(quantile_dmatrix(S, y, binner=b_sp), b_sp)
    check_cuts(xgb.QuantileDMatrix(dmatrix(S, binner=b_sp).get_data(), y, max_bin=32), b_sp)
    m_sp = XGBRegressor(binner=QuantileBinner(max_bin=32), n_estimators=10, max_bin=32).fit(S, y)
    m_dn = XGBRegressor(binner=QuantileBinner(max_bin=32), n_estimators=10, max_bin=32).fit(dense, y)
    np.testing.assert_array_equal(m_sp.predict(S), m_dn.predict(dense))


@pytest.mark.parametrize("frac", [0.95, 0.98, 0.99])
def test_streaming_mostly_missing_column_warns(frac):
    rng = np.random.default_rng(4)
    n = 100_000
    X = np.column_stack([rng.lognormal(size=n), rng.standard_cauchy(n), rng.normal(size=n)]).astype(np.float32)
    X[rng.random(n) < frac, :2] = np.nan
    b = QuantileBinner(max_bin=256)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        for c in np.array_split(X, 10):
            b.partial_fit(c)
    last = [str(r.message) for r in rec if issubclass(r.category, SketchFallbackWarning)
            and "fewer than max_bin" in str(r.message)][-1]
    assert "f0" in last and "f1" in last and "f2" not in last
    # fit with the data at hand places the cuts on the data: no bin above 1.2x its fair share
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SketchFallbackWarning)
        full = QuantileBinner(max_bin=256).fit(X)
    for j in (0, 1):
        x = X[~np.isnan(X[:, j]), j]
        cnt = np.bincount(np.searchsorted(full.cuts_.values[j], x, side="right"))
        assert cnt.max() <= 1.2 * x.size / 255 + 1


def test_repeated_epochs_do_not_shrink_the_row_sample():
    rng = np.random.default_rng(5)
    X = rng.lognormal(size=(40_000, 3)).astype(np.float32)
    chunks = np.array_split(X, 8)
    b = QuantileBinner(max_bin=64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SketchFallbackWarning)
        for c in chunks:
            b.partial_fit(c)
        one = b.sketch_.sample
        for _ in range(3):
            for c in chunks:
                b.partial_fit(c)
    many = b.sketch_.sample
    assert one.n_rows == many.n_rows == 4096
    assert np.unique(many.x, axis=0).shape[0] == 4096
    np.testing.assert_array_equal(one.key, many.key)
    np.testing.assert_array_equal(one.x, many.x)
    # the set merge is still commutative and associative
    a, c, e = (RowSample.of_rows(ch, None, 512) for ch in chunks[:3])
    for u, v in [(a.merge(c).merge(e), e.merge(a.merge(c))), (a.merge(a).merge(c), c.merge(a))]:
        np.testing.assert_array_equal(u.key, v.key)
        np.testing.assert_array_equal(u.x, v.x)


def test_category_columns_stream_and_classify():
    """partial_fit unions the category codes over batches; XGBClassifier with a binner on a category frame predicts
    as xgboost.XGBClassifier."""
    X, y = _cat_frame(n=2000, seed=6)
    b = QuantileBinner(max_bin=64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SketchFallbackWarning)
        for part in np.array_split(np.arange(len(X)), 4):
            b.partial_fit(X.iloc[part])
    full = QuantileBinner(max_bin=64).fit(X)
    for j in (1, 2):
        np.testing.assert_array_equal(b.cuts_.values[j], full.cuts_.values[j])
        np.testing.assert_array_equal(full.cuts_.values[j], np.unique(X.iloc[:, j].cat.codes[X.iloc[:, j].notna()]))
    yc = (y > np.median(y)).astype(int)
    from hitml.xgboost_ext import XGBClassifier

    plain = xgb.XGBClassifier(**KW).fit(X, yc)
    ours = XGBClassifier(binner=QuantileBinner(max_bin=64), **KW).fit(X, yc)
    np.testing.assert_array_equal(ours.predict_proba(X), plain.predict_proba(X))
