"""Input sweep over the public functions of xgboost_ext and sklearn_ext (shuffle, splitters, permutation_importance):
every function gets the same hostile inputs as the host library function it replaces (NaN, inf, 0 rows, 1-D, pandas
Series and frames, scipy sparse, string labels, wrong shapes) and must accept what the host accepts and refuse what
it refuses, with the same exception type. (ShapleyExplainer / SelectFromShapley are swept with their own module;
reference_dmatrix, check_cuts and xgb_cuts take a binner or a DMatrix, not user data; the dask entry points take
dask collections and are covered by tests/test_xgboost_ext_dask.py and tests/test_dask_*.py.)"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import sklearn.inspection
import sklearn.model_selection as skms
import sklearn.utils
import xgboost as xgb
from sklearn.tree import DecisionTreeRegressor

from hitml import sklearn_ext as ours
from hitml.xgboost_ext import QuantileBinner, XGBClassifier, XGBRegressor, dmatrix, quantile_dmatrix, snap

N, D = 60, 3


def _inputs():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((N, D))
    X[:, 2] = np.round(X[:, 2])
    y = X @ np.array([1.0, -1.0, 0.5]) + 0.1 * rng.standard_normal(N)
    yc = (X[:, 0] > 0).astype(int)
    Xn = X.copy()
    Xn[::5, 0] = np.nan
    Xi = X.copy()
    Xi[3, 1] = np.inf
    Xs = X.copy()
    Xs[np.abs(Xs) < 0.5] = 0.0
    yn = y.copy()
    yn[4] = np.nan
    return {
        "clean": (X, y, yc),
        "nan": (Xn, y, yc),
        "inf": (Xi, y, yc),
        "zero_rows": (X[:0], y[:0], yc[:0]),
        "one_d": (X[:, 0], y, yc),
        "frame_series": (pd.DataFrame(X, columns=["a", "b", "c"]), pd.Series(y), pd.Series(yc)),
        "series_X": (pd.Series(X[:, 0]), y, yc),
        "csr": (sp.csr_matrix(Xs), y, yc),
        "csc": (sp.csc_matrix(Xs), y, yc),
        "string_labels": (X, y, np.array(["neg", "pos"])[yc]),
        "y_short": (X, y[:-1], yc[:-1]),
        "three_d": (X.reshape(N, D, 1), y, yc),
        "y_nan": (X, yn, yc),
        "one_row": (X[:1], y[:1], yc[:1]),
    }


INPUTS = _inputs()
CLEAN_X, CLEAN_Y, CLEAN_YC = INPUTS["clean"]
XGB = {"n_estimators": 3, "max_depth": 2, "max_bin": 16}


def _fitted_binner():
    return QuantileBinner(max_bin=16).fit(CLEAN_X)


def _tree():
    return DecisionTreeRegressor(max_depth=3, random_state=0).fit(CLEAN_X, CLEAN_Y)


def _xgb_pair(cls_ours, cls_host, yname):
    yfit = CLEAN_Y if yname == "y" else CLEAN_YC
    return (cls_ours(binner=QuantileBinner(max_bin=16), **XGB).fit(CLEAN_X, yfit),
            cls_host(**XGB).fit(CLEAN_X, yfit))


_REG = _xgb_pair(XGBRegressor, xgb.XGBRegressor, "y")

# name -> (ours(X, y, yc), host(X, y, yc))
FUNCTIONS = {
    "shuffle": (lambda X, y, yc: ours.shuffle(X, y, random_state=0),
                lambda X, y, yc: sklearn.utils.shuffle(X, y, random_state=0)),
    "train_test_split": (lambda X, y, yc: ours.train_test_split(X, y, random_state=0),
                         lambda X, y, yc: skms.train_test_split(X, y, random_state=0)),
    "train_test_split_stratified": (
        lambda X, y, yc: ours.train_test_split(X, yc, stratify=yc, test_size=0.3, random_state=0),
        lambda X, y, yc: skms.train_test_split(X, yc, stratify=yc, test_size=0.3, random_state=0)),
    "KFold": (lambda X, y, yc: list(ours.KFold(3, shuffle=True, random_state=0).split(X, y)),
              lambda X, y, yc: list(skms.KFold(3, shuffle=True, random_state=0).split(X, y))),
    "ShuffleSplit": (lambda X, y, yc: list(ours.ShuffleSplit(3, test_size=0.25, random_state=0).split(X, y)),
                     lambda X, y, yc: list(skms.ShuffleSplit(3, test_size=0.25, random_state=0).split(X, y))),
    "StratifiedShuffleSplit": (
        lambda X, y, yc: list(ours.StratifiedShuffleSplit(3, test_size=0.3, random_state=0).split(X, yc)),
        lambda X, y, yc: list(skms.StratifiedShuffleSplit(3, test_size=0.3, random_state=0).split(X, yc))),
    "permutation_importance": (
        lambda X, y, yc: ours.permutation_importance(_tree(), X, y, n_repeats=2, random_state=0, progress=False),
        lambda X, y, yc: sklearn.inspection.permutation_importance(_tree(), X, y, n_repeats=2, random_state=0)),
    "XGBRegressor.fit": (lambda X, y, yc: XGBRegressor(binner=QuantileBinner(max_bin=16), **XGB).fit(X, y),
                         lambda X, y, yc: xgb.XGBRegressor(**XGB).fit(X, y)),
    "XGBClassifier.fit": (lambda X, y, yc: XGBClassifier(binner=QuantileBinner(max_bin=16), **XGB).fit(X, yc),
                          lambda X, y, yc: xgb.XGBClassifier(**XGB).fit(X, yc)),
    "XGBRegressor.predict": (lambda X, y, yc: _REG[0].predict(X), lambda X, y, yc: _REG[1].predict(X)),
    "QuantileBinner.fit+quantile_dmatrix": (
        lambda X, y, yc: quantile_dmatrix(X, y, binner=QuantileBinner(max_bin=16).fit(X)),
        lambda X, y, yc: xgb.QuantileDMatrix(X, y, max_bin=16)),
    "quantile_dmatrix(fitted)": (lambda X, y, yc: quantile_dmatrix(X, y, binner=_fitted_binner()),
                                 lambda X, y, yc: xgb.QuantileDMatrix(X, y, max_bin=16,
                                                                      ref=xgb.QuantileDMatrix(CLEAN_X, max_bin=16))),
    "dmatrix": (lambda X, y, yc: dmatrix(X, y, binner=_fitted_binner()), lambda X, y, yc: xgb.DMatrix(X, y)),
    "snap": (lambda X, y, yc: xgb.DMatrix(snap(X, _fitted_binner())), lambda X, y, yc: xgb.DMatrix(X)),
    "QuantileBinner.transform": (lambda X, y, yc: _fitted_binner().transform(X),
                                 lambda X, y, yc: xgb.QuantileDMatrix(X, max_bin=16,
                                                                      ref=xgb.QuantileDMatrix(CLEAN_X, max_bin=16))),
}

# (function, input) pairs where we knowingly differ from the host, and why
_WIDTH = ("with a fitted binner the function checks X's width against the cuts; the host DMatrix has no width to "
          "check (a model trained on it raises later)")
DIFFERENCES = {
    ("QuantileBinner.fit+quantile_dmatrix", "zero_rows"):
        "QuantileBinner is a scikit-learn transformer: fit refuses 0 rows (check_estimator's "
        "check_estimators_empty_data); XGBRegressor/XGBClassifier(binner=...) train on 0 rows as XGBoost does",
    ("QuantileBinner.transform", "series_X"):
        "a width mismatch raises scikit-learn's ValueError and message (check_estimator); XGBoost raises "
        "XGBoostError, itself a ValueError",
    ("dmatrix", "series_X"): _WIDTH,
    ("snap", "series_X"): _WIDTH,
}


def _outcome(fn, args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            fn(*args)
        except Exception as e:
            return type(e)
    return None


@pytest.mark.parametrize("inp", sorted(INPUTS))
@pytest.mark.parametrize("fname", sorted(FUNCTIONS))
def test_same_acceptance_as_host(fname, inp):
    if (fname, inp) in DIFFERENCES:
        pytest.skip(DIFFERENCES[(fname, inp)])
    f_ours, f_host = FUNCTIONS[fname]
    args = INPUTS[inp]
    host = _outcome(f_host, args)
    mine = _outcome(f_ours, args)
    assert mine == host, f"{fname} on {inp}: ours {mine}, host {host}"
