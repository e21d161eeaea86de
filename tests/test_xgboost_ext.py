"""xgboost_ext: QuantileBinner (sklearn conventions), the QuantileDMatrix hook, snap-to-edge and sklearn drop-ins."""
from __future__ import annotations

import json
import pickle
import re

import numpy as np
import pytest
import xgboost as xgb
from sklearn.utils.estimator_checks import check_estimator

from hitml.kernels.sketch import MomentSketch
from hitml.xgboost_ext import QuantileBinner, XGBClassifier, XGBRegressor, check_cuts, dmatrix, quantile_dmatrix, snap

MB = 32


@pytest.fixture(scope="module")
def Xy():
    rng = np.random.default_rng(0)
    n = 4000
    X = np.column_stack([
        rng.lognormal(size=n), rng.normal(1000, 1, n), np.round(rng.normal(size=n) * 3), np.full(n, 2.0),
        rng.pareto(1.5, n), rng.normal(size=n),
    ]).astype(np.float32)
    X[rng.random(n) < 0.05, 0] = np.nan
    X[:, 3][::7] = np.nan
    y = np.log1p(np.nan_to_num(X[:, 0])) + 0.1 * X[:, 2] + np.sin(X[:, 5]) + 0.1 * rng.normal(size=n)
    return X, y


def split_conditions(bst: xgb.Booster) -> dict[int, set[float]]:
    """Numeric split thresholds per feature, read from the model JSON."""
    m = json.loads(bst.save_raw("json"))
    out: dict[int, set[float]] = {}
    for t in m["learner"]["gradient_booster"]["model"]["trees"]:
        for i, left in enumerate(t["left_children"]):
            if left != -1:
                out.setdefault(t["split_indices"][i], set()).add(np.float32(t["split_conditions"][i]))
    return out


def assert_splits_on_cuts(bst, cuts):
    """Every numeric split is one of our cuts, or XGBoost's sentinel above the max (missing-vs-all splits)."""
    for f, conds in split_conditions(bst).items():
        allowed = set(np.float32(v) for v in cuts.values[f])
        extra = {c for c in conds - allowed if not (c > cuts.vmax[f] or c == -np.inf)}
        assert not extra, (f, sorted(extra)[:5])


# ----------------------------------------------------------------------------------------------------- binner
def test_binner_transform_follows_xgboost_rule(Xy):
    X, _ = Xy
    b = QuantileBinner(max_bin=MB).fit(X)
    codes = b.transform(X)
    assert codes.dtype == np.int32 and codes.shape == X.shape
    for j in range(X.shape[1]):
        c = b.cuts_.values[j]
        e = b.bin_edges_[j]
        assert e[0] == np.nanmin(X[:, j]) or np.isnan(e[0])
        assert b.n_bins_[j] == e.size - 1 == c.size + 1
        x = X[:, j]
        ref = np.array([(c <= v).sum() if not np.isnan(v) else -1 for v in x])  # count of cuts <= x
        np.testing.assert_array_equal(codes[:, j], ref)
    assert (codes[:, 0] == -1).sum() == np.isnan(X[:, 0]).sum()
    back = b.inverse_transform(codes)
    ok = codes >= 0
    lo = np.vstack([b.bin_edges_[j][codes[:, j].clip(0)] for j in range(X.shape[1])]).T
    hi = np.vstack([b.bin_edges_[j][codes[:, j].clip(0) + 1] for j in range(X.shape[1])]).T
    assert np.all((back[ok] >= lo[ok]) & (back[ok] <= hi[ok]))
    assert np.isnan(back[~ok]).all()


def test_binner_exact_columns_and_constant(Xy):
    X, _ = Xy
    b = QuantileBinner(max_bin=MB).fit(X)
    np.testing.assert_array_equal(b.cuts_.values[2], np.unique(X[:, 2])[1:])
    assert b.cuts_.values[3].size == 0 and b.n_bins_[3] == 1
    assert b.n_bins_[0] == MB and b.n_bins_.max() <= MB


def test_partial_fit_merges_like_fit(Xy):
    X, _ = Xy
    full = QuantileBinner(max_bin=MB, method="legendre").fit(X)
    part = QuantileBinner(max_bin=MB, method="legendre")
    for chunk in np.array_split(X, 5):
        part.partial_fit(chunk)
    sk_a, sk_b = full.sketch_, part.sketch_
    np.testing.assert_allclose(sk_a.M, sk_b.M, rtol=1e-10)
    np.testing.assert_array_equal(sk_a.n_distinct, sk_b.n_distinct)
    for a, c in zip(full.cuts_.values, part.cuts_.values):
        assert a.size == c.size and np.allclose(a, c, rtol=1e-5)
    # a serialised sketch merged elsewhere gives the same binner
    other = QuantileBinner(max_bin=MB, method="legendre").fit_sketch(MomentSketch.from_bytes(sk_b.to_bytes()))
    for a, c in zip(other.cuts_.values, part.cuts_.values):
        np.testing.assert_array_equal(a, c)


def test_exact_method_matches_numpy_sort():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(3001, 2))
    b = QuantileBinner(max_bin=5, method="exact").fit(X)
    for j in range(2):
        xs = np.sort(X[:, j]).astype(np.float32)
        expect = xs[np.ceil(np.arange(1, 4) / 4 * 3001).astype(int) - 1]
        np.testing.assert_array_equal(b.cuts_.values[j], np.append(expect, xs[-1]))
    with pytest.raises(ValueError, match="partial_fit"):
        b.partial_fit(X)


def test_binner_bad_input(Xy):
    X, _ = Xy
    with pytest.raises(ValueError, match="`inf`"):
        QuantileBinner().fit(np.array([[1.0], [np.inf], [2.0]]))
    with pytest.raises(ValueError, match="max_bin"):
        QuantileBinner(max_bin=1).fit(X)
    with pytest.raises(ValueError, match="method"):
        QuantileBinner(method="kll").fit(X)
    b = QuantileBinner(max_bin=MB).fit(X)
    with pytest.raises(ValueError, match="features"):
        b.transform(X[:, :3])
    with pytest.raises(ValueError, match="codes"):
        b.inverse_transform(np.full((2, X.shape[1]), 999))
    with pytest.raises(ValueError, match="not fitted"):
        quantile_dmatrix(X, binner=QuantileBinner())


def test_check_estimator():
    # sample-weight equivalence and the like hold; the one skip: transform's outputs are codes for the
    # fitted data, so checks needing a float dtype round trip do not apply (none fail at present).
    check_estimator(QuantileBinner(max_bin=8, n_moments=6))


# ------------------------------------------------------------------------------------------------------ hook
@pytest.mark.parametrize("method", ["maxent", "legendre", "exact"])
def test_quantile_dmatrix_has_our_cuts_and_raw_predictions(Xy, method):
    X, y = Xy
    b = QuantileBinner(max_bin=MB, method=method).fit(X)
    dm = quantile_dmatrix(X, y, binner=b)
    check_cuts(dm, b)  # get_quantile_cut() == ours, bit for bit
    params = {"max_bin": MB, "max_depth": 5, "tree_method": "hist", "seed": 0}
    bst = xgb.train(params, dm, 25)
    # every numeric split is one of our cuts (or XGBoost's sentinel above the max / -inf)
    assert_splits_on_cuts(bst, b.cuts_)
    # an independent route: XGBoost's own sketch on pre-binned (snapped) data, a plain DMatrix
    bst2 = xgb.train(params, dmatrix(X, y, binner=b), 25)
    raw = bst.predict(xgb.DMatrix(X))
    np.testing.assert_array_equal(raw, bst2.predict(xgb.DMatrix(X)))
    np.testing.assert_array_equal(raw, bst.predict(xgb.DMatrix(snap(X, b))))
    np.testing.assert_array_equal(raw, bst.inplace_predict(X))


def test_snap_has_at_most_max_bin_values(Xy):
    X, _ = Xy
    b = QuantileBinner(max_bin=MB).fit(X)
    S = snap(X, b)
    for j in range(X.shape[1]):
        u = np.unique(S[~np.isnan(S[:, j]), j])
        assert u.size <= MB
        np.testing.assert_array_equal(np.isnan(S[:, j]), np.isnan(X[:, j]))
    np.testing.assert_array_equal(b.transform(S), b.transform(X))


def test_weighted_binner_reaches_xgboost(Xy):
    X, y = Xy
    w = np.random.default_rng(3).integers(0, 3, X.shape[0]).astype(float)
    b = QuantileBinner(max_bin=MB).fit(X, sample_weight=w)
    rep = QuantileBinner(max_bin=MB).fit(np.repeat(X, w.astype(int), axis=0))
    for a, c in zip(b.cuts_.values, rep.cuts_.values):
        assert a.size == c.size and np.allclose(a, c, rtol=1e-5)
    dm = quantile_dmatrix(X, y, binner=b, weight=w)
    check_cuts(dm, b)


# ----------------------------------------------------------------------------------------- sklearn drop-ins
def test_regressor_dropin_equals_train_on_our_matrix(Xy):
    X, y = Xy
    m = XGBRegressor(binner=QuantileBinner(max_bin=MB), n_estimators=20, max_depth=4, random_state=0)
    m.fit(X, y, eval_set=[(X[:500], y[:500])], verbose=False)
    assert m.get_params()["binner"].max_bin == MB
    bst = xgb.train({"max_bin": MB, "max_depth": 4, "seed": 0, "objective": "reg:squarederror"},
                    quantile_dmatrix(X, y, binner=m.binner_), 20)
    np.testing.assert_allclose(m.predict(X), bst.predict(xgb.DMatrix(X)), rtol=0, atol=0)
    m2 = pickle.loads(pickle.dumps(m))
    np.testing.assert_array_equal(m2.predict(X), m.predict(X))


def test_classifier_dropin(Xy):
    X, y = Xy
    yc = (y > np.median(y)).astype(int)
    m = XGBClassifier(binner=QuantileBinner(max_bin=MB, method="legendre"), n_estimators=10, max_depth=3)
    m.fit(X, yc)
    p = m.predict_proba(X)
    assert p.shape == (X.shape[0], 2) and ((m.predict(X) == yc).mean() > 0.7)
    assert_splits_on_cuts(m.get_booster(), m.binner_.cuts_)


def test_dropin_bad_params(Xy):
    X, y = Xy
    with pytest.raises(ValueError, match="tree_method"):
        XGBRegressor(tree_method="approx", n_estimators=2).fit(X, y)
    with pytest.raises(ValueError, match="max_bin"):
        XGBRegressor(binner=QuantileBinner(max_bin=16), max_bin=64, n_estimators=2).fit(X, y)


# max_bin values at XGBoost's edges: below 2, 2, its default 256, above it, floats, bools, NumPy and str integers
MAX_BINS = [0, 1, 2, 256, 257, -3, 2.0, 16.0, 2.5, True, False, np.int64(16), np.int32(2), "16"]


def _xgboost_takes(max_bin) -> bool:
    """XGBoost's own answer (the reference): does its scikit-learn estimator train with this max_bin?"""
    X = np.random.default_rng(0).normal(size=(50, 2))
    try:
        xgb.XGBRegressor(max_bin=max_bin, n_estimators=1, n_jobs=1).fit(X, X[:, 0])
    except (xgb.core.XGBoostError, TypeError, ValueError):
        return False
    return True


@pytest.mark.parametrize("max_bin", MAX_BINS, ids=repr)
def test_max_bin_follows_xgboost_rule(Xy, max_bin):
    """Every entry point takes exactly the max_bin values XGBoost takes, and names a refused one in one message."""
    from hitml.kernels.sketch import cut_points, sketch

    X, y = Xy[0][:500], Xy[1][:500]
    takes = _xgboost_takes(max_bin)
    assert takes == (isinstance(max_bin, (int, np.integer)) and not isinstance(max_bin, bool) and max_bin >= 2)
    refused = pytest.raises(ValueError, match=r"max_bin must be an integer >= 2 \(as XGBoost's\), got ")
    entry_points = [
        lambda: QuantileBinner(max_bin=max_bin).fit(X),
        lambda: cut_points(sketch(X), max_bin=max_bin),
        lambda: XGBRegressor(max_bin=max_bin, n_estimators=1, n_jobs=1).fit(X, y),
        lambda: XGBRegressor(binner=QuantileBinner(max_bin=16), max_bin=max_bin, n_estimators=1).fit(X, y),
        lambda: quantile_dmatrix(X, binner=QuantileBinner(max_bin=16).fit(X), max_bin=max_bin),
    ]
    for i, call in enumerate(entry_points):
        if not takes:
            with refused:
                call()
        elif i >= 3 and max_bin != 16:  # a max_bin XGBoost takes, other than the binner's
            with pytest.raises(ValueError, match=re.escape(f"max_bin={max_bin!r} differs from the binner's max_bin=16")):
                call()
        else:
            call()
    if takes:  # the bins XGBoost sees stay within max_bin
        b = QuantileBinner(max_bin=max_bin).fit(X)
        assert int(b.cuts_.n_bins.max()) <= max_bin
        reg = XGBRegressor(max_bin=max_bin, n_estimators=1, n_jobs=1).fit(X, y)
        assert reg.get_xgb_params()["max_bin"] == int(max_bin)


def test_max_bin_not_given_is_the_binners():
    from hitml.xgboost_ext.hook import check_same_max_bin

    assert check_same_max_bin(None, 64) == 64 and check_same_max_bin(np.int64(64), 64) == 64
    with pytest.raises(ValueError, match="max_bin=65 differs from the binner's max_bin=64"):
        check_same_max_bin(65, 64)
    with pytest.raises(ValueError, match=r"max_bin must be an integer >= 2 \(as XGBoost's\), got 64.0"):
        check_same_max_bin(64.0, 64)  # equal in value, but XGBoost refuses a float


@pytest.mark.gpu
def test_device_hook_cuda(Xy):
    """device="cuda": the QuantileDMatrix built from CuPy data with our ref has our cuts; predictions match CPU."""
    import cupy as cp

    X, y = Xy
    b = QuantileBinner(max_bin=MB, backend="gpu").fit(cp.asarray(X))
    dm = quantile_dmatrix(cp.asarray(X), cp.asarray(y), binner=b)
    check_cuts(dm, b)
    params = {"max_bin": MB, "max_depth": 4, "device": "cuda", "seed": 0}
    bst = xgb.train(params, dm, 10)
    bst2 = xgb.train(params, xgb.QuantileDMatrix(snap(cp.asarray(X), b), cp.asarray(y), max_bin=MB), 10)
    np.testing.assert_allclose(bst.inplace_predict(cp.asarray(X)).get(),
                               bst2.inplace_predict(cp.asarray(X)).get(), rtol=1e-6, atol=1e-6)
    cpu_binner = QuantileBinner(max_bin=MB, backend="cpu").fit(X)
    for a, c in zip(b.cuts_.values, cpu_binner.cuts_.values):
        assert a.size == c.size and np.allclose(a, c, rtol=1e-5)
