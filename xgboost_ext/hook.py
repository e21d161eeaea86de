"""Make XGBoost `hist` train on exactly our cuts: a reference matrix for QuantileDMatrix, or snap-to-edge data."""
from __future__ import annotations

import functools
from typing import Any

import numpy as np
import xgboost as xgb
from xgboost.core import XGBoostError

from hitml.kernels.device import array_module, is_cupy_array
from hitml.kernels.sketch.cuts import Cuts
from hitml.kernels.sketch.cuts import check_max_bin


def check_same_max_bin(max_bin: Any, binner_max_bin: Any) -> int:
    """The ``max_bin`` XGBoost is to use with a binner's cuts: the binner's, where ``max_bin`` (the caller's, None
    when not given) is one XGBoost takes and equals it.

    Raises
    ------
    ValueError
        If either is not one XGBoost takes (:func:`~hitml.kernels.sketch.cuts.check_max_bin`), or they differ.
    """
    ours = check_max_bin(binner_max_bin)
    if max_bin is not None and check_max_bin(max_bin) != ours:
        raise ValueError(f"max_bin={max_bin!r} differs from the binner's max_bin={ours}")
    return ours


def _cuts_of(binner_or_cuts) -> tuple[Cuts, int]:
    if isinstance(binner_or_cuts, Cuts):
        return binner_or_cuts, int(max(2, int(binner_or_cuts.n_bins.max(initial=1))))
    cuts = getattr(binner_or_cuts, "cuts_", None)
    if cuts is None:
        raise ValueError("the binner is not fitted: call binner.fit(X) (or partial_fit) first")
    return cuts, int(binner_or_cuts.max_bin)


def _is_category(cuts: Cuts) -> np.ndarray:
    src = cuts.source if cuts.source is not None else np.full(cuts.n_features, "", object)
    return np.array([s == "category" for s in src], bool)


def reference_matrix(binner_or_cuts) -> np.ndarray:
    """The (max_bin, d) float32 matrix whose column j is [min_j, cut_j1, ..., cut_jk] padded with NaN.

    XGBoost sketches a column with at most max_bin distinct values into exactly "every distinct value but the
    first" plus a sentinel above the last, so a QuantileDMatrix built with this as ``ref`` has our cuts. A category
    column holds the category codes present in the training data (XGBoost's own categorical cuts); the matrix has
    more than max_bin rows where a category column has more categories.

    Parameters
    ----------
    binner_or_cuts : QuantileBinner or hitml.kernels.sketch.Cuts
        A fitted binner, or its ``cuts_``.

    Returns
    -------
    numpy.ndarray
        float32, shape (max_bin, n_features).

    Raises
    ------
    ValueError
        If the binner is not fitted, or a feature has more cuts than ``max_bin - 1``.

    See Also
    --------
    reference_dmatrix : the same matrix as an ``xgboost.DMatrix``.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.xgboost_ext import QuantileBinner
    >>> X = np.random.default_rng(0).lognormal(size=(1000, 2))
    >>> binner = QuantileBinner(max_bin=16).fit(X)
    >>> from hitml.xgboost_ext import reference_matrix
    >>> reference_matrix(binner).shape
    (16, 2)
    """
    cuts, max_bin = _cuts_of(binner_or_cuts)
    cat = _is_category(cuts)
    rows = max([max_bin] + [cuts.values[j].size for j in np.flatnonzero(cat)])
    d = cuts.n_features
    R = np.full((rows, d), np.nan, np.float32)
    sizes = np.array([c.size for c in cuts.values], np.int64)
    num = ~cat & ~np.isnan(np.asarray(cuts.vmin, np.float32))
    over = np.flatnonzero(num & (sizes + 1 > max_bin))
    if over.size:
        j = int(over[0])
        raise ValueError(f"feature {j} has {sizes[j]} cuts; max_bin={max_bin} allows at most {max_bin - 1}")
    # one scatter of all columns: a numeric column is [vmin, cuts...] from row 0, a category column its codes
    first = np.where(num, 1, 0)
    keep = num | cat
    if keep.any():
        cols = np.flatnonzero(keep)
        n_in = sizes[cols]
        rows_of = np.arange(int(n_in.sum())) - np.repeat(np.cumsum(n_in) - n_in, n_in) + np.repeat(first[cols], n_in)
        R[rows_of, np.repeat(cols, n_in)] = np.concatenate([cuts.values[j] for j in cols.tolist()])
        R[0, num] = np.asarray(cuts.vmin, np.float32)[num]
    return R


def reference_dmatrix(binner_or_cuts, **kwargs: Any) -> xgb.DMatrix:
    """A small DMatrix to pass as ``ref=`` to ``xgboost.QuantileDMatrix`` so that XGBoost uses our cuts.

    With category columns: a DataFrame carrying the binner's pandas categories (codes as in the training frame),
    or, for code columns given by index, feature_types "c", so that XGBoost reads them as it reads the data.

    Parameters
    ----------
    binner_or_cuts : QuantileBinner or hitml.kernels.sketch.Cuts
        A fitted binner, or its ``cuts_``.
    **kwargs
        Passed to ``xgboost.DMatrix`` (``feature_names``, ``feature_types``, ...).

    Returns
    -------
    xgboost.DMatrix
        :func:`reference_matrix` as a DMatrix.

    See Also
    --------
    quantile_dmatrix : builds the QuantileDMatrix with this reference for you.
    xgboost.QuantileDMatrix : whose ``ref=`` takes it.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.xgboost_ext import QuantileBinner
    >>> X = np.random.default_rng(0).lognormal(size=(1000, 2))
    >>> binner = QuantileBinner(max_bin=16).fit(X)
    >>> import xgboost as xgb
    >>> from hitml.xgboost_ext import check_cuts, reference_dmatrix
    >>> dm = xgb.QuantileDMatrix(X, ref=reference_dmatrix(binner), max_bin=16)
    >>> check_cuts(dm, binner)
    """
    return _reference(binner_or_cuts, xgb.DMatrix, **kwargs)


def _reference(binner_or_cuts, make, **kwargs: Any):
    """reference_dmatrix's matrix built by ``make`` (``xgb.DMatrix`` or a ``QuantileDMatrix`` factory)."""
    R = reference_matrix(binner_or_cuts)
    cuts, _ = _cuts_of(binner_or_cuts)
    cat = _is_category(cuts)
    if not cat.any():
        return make(R, **kwargs)
    kwargs.setdefault("enable_categorical", True)
    dtypes = getattr(binner_or_cuts, "categories_", {}) or {}
    if dtypes:
        import pandas as pd

        names = getattr(binner_or_cuts, "feature_names_in_", None)
        names = list(names) if names is not None else [f"f{j}" for j in range(R.shape[1])]
        cols = {}
        for j in range(R.shape[1]):
            if j in dtypes:
                codes = np.where(np.isnan(R[:, j]), -1, np.nan_to_num(R[:, j])).astype(np.int64)
                cols[j] = pd.Categorical.from_codes(codes, dtype=dtypes[j])
            else:
                cols[j] = R[:, j]
        frame = pd.DataFrame(cols)
        frame.columns = names
        kwargs.pop("feature_names", None)
        return make(frame, **kwargs)
    if kwargs.get("feature_types") is None:
        kwargs["feature_types"] = ["c" if c else "q" for c in cat]
    return make(R, **kwargs)


def quantile_dmatrix(X, label=None, *, binner, **kwargs: Any) -> xgb.QuantileDMatrix:
    """``xgboost.QuantileDMatrix`` of X whose cuts are the fitted binner's, for the CPU or ``device="cuda"``.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        NumPy, pandas, scipy sparse or CuPy; NaN (and an absent sparse entry) is missing. Category columns
        (pandas ``category``, with ``enable_categorical=True``) keep XGBoost's own categorical bins.
    label : array-like, optional
        As in ``xgboost.QuantileDMatrix``.
    binner : QuantileBinner or hitml.kernels.sketch.Cuts
        Fitted on data with the same features as X.
    **kwargs
        Passed to ``xgboost.QuantileDMatrix`` (``weight``, ``feature_names``, ``nthread``, ...), except ``ref``.

    Returns
    -------
    xgboost.QuantileDMatrix
        Train ``tree_method="hist"`` on it with the binner's ``max_bin``.

    Raises
    ------
    ValueError
        If ``ref`` is passed, ``max_bin`` differs from the binner's, or X has another number of features.

    See Also
    --------
    xgboost.QuantileDMatrix : what this replaces; it sketches its own cuts.
    dmatrix : the same cuts through a plain ``xgboost.DMatrix``.
    check_cuts : verify the cuts XGBoost holds.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.xgboost_ext import QuantileBinner
    >>> X = np.random.default_rng(0).lognormal(size=(1000, 2))
    >>> binner = QuantileBinner(max_bin=16).fit(X)
    >>> import xgboost as xgb
    >>> from hitml.xgboost_ext import quantile_dmatrix
    >>> dtrain = quantile_dmatrix(X, X[:, 0], binner=binner)
    >>> booster = xgb.train({"tree_method": "hist", "max_bin": 16, "nthread": 1}, dtrain, 2)
    """
    cuts, max_bin = _cuts_of(binner)
    if "ref" in kwargs:
        raise ValueError("quantile_dmatrix builds its own ref from the binner; do not pass ref=")
    max_bin = check_same_max_bin(kwargs.pop("max_bin", None), max_bin)
    shape = getattr(X, "shape", None)
    if shape is not None and len(shape) == 2 and shape[1] != cuts.n_features:  # other shapes: XGBoost's own error
        raise XGBoostError(f"X has {shape[1]} features, the binner was fitted on {cuts.n_features}")
    ref_kw = {k: kwargs[k] for k in ("feature_names", "feature_types", "enable_categorical") if k in kwargs}
    if is_cupy_array(X):
        ref = reference_dmatrix(binner, **ref_kw)
    else:
        # host data: the reference as a one-thread QuantileDMatrix, so XGBoost sketches its few rows (exact: at most
        # max_bin values a column) once on one thread; a DMatrix reference is sketched inside the QuantileDMatrix
        # below on all its threads, which on a wide frame costs more than the sketch itself (2,000 columns: ~0.02 s
        # on one thread, ~0.16 s on two)
        ref = _reference(binner, functools.partial(xgb.QuantileDMatrix, max_bin=max_bin, nthread=1), **ref_kw)
    return xgb.QuantileDMatrix(X, label, ref=ref, max_bin=max_bin, **kwargs)


def snap(X, binner_or_cuts):
    """X with every value replaced by the lower edge of its bin (NaN kept); NumPy or CuPy, float32 output.

    The snapped data has at most max_bin distinct values per feature, so any XGBoost entry point (DMatrix,
    QuantileDMatrix, dask, spark) sketches it into exactly our cuts, and since s(x) < cut <=> x < cut, the model
    trained on snapped data predicts identically on raw data.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        NumPy or CuPy (CuPy stays on the device).
    binner_or_cuts : QuantileBinner or hitml.kernels.sketch.Cuts
        A fitted binner, or its ``cuts_``.

    Returns
    -------
    numpy.ndarray or cupy.ndarray
        float32, the shape of X.

    Raises
    ------
    ValueError
        If X is not 2-D with the binner's number of features, or the binner is not fitted.

    See Also
    --------
    QuantileBinner.transform : bin codes instead of edges.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.xgboost_ext import QuantileBinner
    >>> X = np.random.default_rng(0).lognormal(size=(1000, 2))
    >>> binner = QuantileBinner(max_bin=16).fit(X)
    >>> from hitml.xgboost_ext import snap
    >>> bool((np.unique(snap(X, binner)[:, 0]).size <= 16))
    True
    """
    cuts, _ = _cuts_of(binner_or_cuts)
    cat = _is_category(cuts)
    if hasattr(X, "iloc") and cat.any():  # a frame with category columns: those stay as they are
        if X.shape[1] != cuts.n_features:
            raise ValueError(f"X must be 2-D with {cuts.n_features} features, got shape {X.shape}")
        num = np.flatnonzero(~cat)
        sub = Cuts([cuts.values[j] for j in num], cuts.vmin[num], cuts.vmax[num], cuts.exact[num])
        out = X.copy()
        snapped = snap(np.asarray(X.iloc[:, num], np.float32), sub)
        for r, j in enumerate(num):
            out[out.columns[j]] = snapped[:, r]
        return out
    if cat.any():
        raise ValueError("snap reads category columns from a DataFrame (pandas category dtype) only")
    import scipy.sparse as sp

    if sp.issparse(X):  # stored entries snapped, absent ones stay absent (missing, as XGBoost reads them)
        out = sp.csc_matrix(X, dtype=np.float32, copy=True)
        if out.shape[1] != cuts.n_features:
            raise ValueError(f"X must be 2-D with {cuts.n_features} features, got shape {out.shape}")
        out.data = out.data.copy()
        for j, c in enumerate(cuts.values):
            a, b = out.indptr[j], out.indptr[j + 1]
            col = out.data[a:b]
            lows = np.concatenate([[cuts.vmin[j]], c]).astype(np.float32)
            k = np.minimum(np.searchsorted(c, col, side="right"), lows.size - 1)
            out.data[a:b] = np.where(np.isnan(col), np.float32(np.nan), lows[k])
        return out.tocsr() if sp.isspmatrix_csr(X) or getattr(X, "format", "") == "csr" else out
    xp = array_module(X)
    if xp is np:
        X = np.asarray(X)
        if X.ndim == 1 and cuts.n_features == 1:  # a 1-D input is one column to XGBoost
            X = X[:, None]
    if X.ndim != 2 or X.shape[1] != cuts.n_features:
        raise ValueError(f"X must be 2-D with {cuts.n_features} features, got shape {X.shape}")
    X = X.astype(xp.float32, copy=False)
    if bool(xp.isinf(X).any()):
        raise XGBoostError("Input data contains `inf` or a value too large, while `missing` is not set to `inf`")
    out = xp.empty_like(X)
    for j, c in enumerate(cuts.values):
        lows = xp.asarray(np.concatenate([[cuts.vmin[j]], c]).astype(np.float32))
        col = X[:, j]
        k = xp.searchsorted(xp.asarray(c), col, side="right")
        out[:, j] = xp.where(xp.isnan(col), xp.float32(np.nan), lows[xp.minimum(k, lows.size - 1)])
    return out


def dmatrix(X, label=None, *, binner, **kwargs: Any) -> xgb.DMatrix:
    """A plain ``xgboost.DMatrix`` of :func:`snap` (X) on which ``tree_method="hist"`` trains with our cuts.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        NumPy or CuPy.
    label : array-like, optional
        As in ``xgboost.DMatrix``.
    binner : QuantileBinner or hitml.kernels.sketch.Cuts
        A fitted binner, or its ``cuts_``.
    **kwargs
        Passed to ``xgboost.DMatrix``.

    Returns
    -------
    xgboost.DMatrix

    See Also
    --------
    xgboost.DMatrix : what this replaces.
    quantile_dmatrix : the same cuts without copying X to float32 edges.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.xgboost_ext import QuantileBinner
    >>> X = np.random.default_rng(0).lognormal(size=(1000, 2))
    >>> binner = QuantileBinner(max_bin=16).fit(X)
    >>> from hitml.xgboost_ext import dmatrix
    >>> dmatrix(X, X[:, 0], binner=binner).num_row()
    1000
    """
    return xgb.DMatrix(snap(X, binner), label, **kwargs)


def xgb_cuts(dm: xgb.DMatrix) -> list[np.ndarray]:
    """XGBoost's cuts per feature from ``get_quantile_cut()``, lower bound and sentinel removed.

    Parameters
    ----------
    dm : xgboost.DMatrix
        A matrix XGBoost has sketched (a ``QuantileDMatrix``, or a ``DMatrix`` after training on it).

    Returns
    -------
    list of numpy.ndarray
        One float32 array of cut points per feature.

    See Also
    --------
    check_cuts : compare them with a binner's.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.xgboost_ext import QuantileBinner
    >>> X = np.random.default_rng(0).lognormal(size=(1000, 2))
    >>> binner = QuantileBinner(max_bin=16).fit(X)
    >>> from hitml.xgboost_ext import quantile_dmatrix, xgb_cuts
    >>> len(xgb_cuts(quantile_dmatrix(X, binner=binner)))
    2
    """
    ptr, vals = dm.get_quantile_cut()
    ptr = np.asarray(ptr)
    vals = np.asarray(vals if not is_cupy_array(vals) else vals.get())
    return [vals[ptr[j] + 1 : ptr[j + 1] - 1] for j in range(ptr.size - 1)]


def check_cuts(dm: xgb.DMatrix, binner_or_cuts) -> None:
    """Raise AssertionError unless XGBoost's cuts on dm equal our cuts bit for bit.

    Parameters
    ----------
    dm : xgboost.DMatrix
        A matrix XGBoost has sketched.
    binner_or_cuts : QuantileBinner or hitml.kernels.sketch.Cuts
        The cuts it should hold.

    Raises
    ------
    AssertionError
        Naming the first feature whose cuts differ.

    See Also
    --------
    xgb_cuts : XGBoost's cuts themselves.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.xgboost_ext import QuantileBinner
    >>> X = np.random.default_rng(0).lognormal(size=(1000, 2))
    >>> binner = QuantileBinner(max_bin=16).fit(X)
    >>> import xgboost as xgb
    >>> from hitml.xgboost_ext import check_cuts
    >>> check_cuts(xgb.QuantileDMatrix(X, max_bin=16), binner)
    Traceback (most recent call last):
    AssertionError: feature 0: ...
    """
    cuts, _ = _cuts_of(binner_or_cuts)
    got = xgb_cuts(dm)
    if len(got) != cuts.n_features:
        raise AssertionError(f"XGBoost has {len(got)} features, ours {cuts.n_features}")
    for j, (g, c) in enumerate(zip(got, cuts.values)):
        if g.shape != c.shape or not np.array_equal(g.astype(np.float32), c):
            raise AssertionError(f"feature {j}: XGBoost cuts {g[:5]}... ({g.size}) differ from ours {c[:5]}... "
                                 f"({c.size})")
