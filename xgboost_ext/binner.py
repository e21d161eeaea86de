"""QuantileBinner: a scikit-learn transformer (KBinsDiscretizer conventions) whose cuts come from a moments sketch."""
from __future__ import annotations

import warnings

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils import check_array
from sklearn.utils.validation import check_is_fitted, validate_data

from xgboost.core import XGBoostError

from hitml.kernels.device import check_backend, is_cupy_array, to_numpy
from hitml.kernels.sketch import MomentSketch, sketch
from hitml.kernels.sketch.cuts import Cuts, check_max_bin, cut_points, exact_cut_points
from hitml.kernels.sketch.robust import SketchFallbackWarning

from ._compat import check_feature_names, check_feature_names_in, check_n_features, check_sample_weight

METHODS = ("maxent", "legendre", "exact")


class QuantileBinner(TransformerMixin, BaseEstimator):
    """Bin each feature into at most ``max_bin`` quantile bins, with cuts XGBoost's ``hist`` can train on exactly.

    Parameters
    ----------
    max_bin : int, default=256
        Largest number of bins per feature (XGBoost's ``max_bin``). A feature with at most ``max_bin`` distinct
        values gets one bin per value (exact cuts), as XGBoost does itself.
    method : {"maxent", "legendre", "exact"}, default="maxent"
        "maxent": maximum-entropy density fitted to the sketch's moments (Chebyshev basis, damped Newton);
        "legendre": truncated Legendre series; "exact": exact weighted quantiles by sorting (no streaming).
    n_moments : int, default=15
        Number of moments l kept per feature (2..24).
    n_sample : int, default=4096
        Rows of the sketch's mergeable row sample. The solved cuts are checked against it for point masses and bins
        holding clearly more than their share; such columns get quantile cuts (of the data in ``fit``, else of the
        sample) with a ``SketchFallbackWarning`` naming them. 0 keeps no sample (unchecked moment cuts).
    backend : {"cpu", "gpu", "auto"}, default="cpu"
        Where the sketch is accumulated.
    categorical_features : "from_dtype", array-like of bool or int, or None, default="from_dtype"
        Category columns, which never go through the sketch: XGBoost bins a category column by its category codes
        itself, so its "cuts" are the codes present in the data. "from_dtype": the pandas ``category`` columns
        of a DataFrame (numeric or string categories); a bool mask or column indices: columns holding category codes
        (non-negative integers, NaN missing) as XGBoost's ``feature_types="c"`` reads them; None: no category
        columns. transform gives a category column's codes, re-coded by label against the categories seen in fit
        (an unseen or missing category gives -1), as XGBoost re-codes a frame against its model.

    Attributes
    ----------
    bin_edges_ : ndarray of ndarray, shape (n_features,)
        Per feature ``[min, cut_1, ..., cut_k, max]`` (float64 holding float32 values). The last cut equals the
        maximum, so the last bin ``[max, max]`` holds the maximum alone.
    n_bins_ : ndarray of int, shape (n_features,)
        ``len(bin_edges_[j]) - 1``.
    cuts_ : kernels.sketch.cuts.Cuts
        The cuts in XGBoost's form (float32, lower bound and sentinel excluded).
    sketch_ : kernels.sketch.MomentSketch or None
        The merged sketch of the numeric columns (None for method="exact").
    categorical_ : ndarray of bool, shape (n_features,)
        Which columns are category columns.

    See Also
    --------
    sklearn.preprocessing.KBinsDiscretizer : the transformer whose conventions this follows (quantile strategy).
    xgboost.QuantileDMatrix : XGBoost's own sketch, which this replaces through :func:`quantile_dmatrix`.
    XGBRegressor : XGBoost's regressor trained on these cuts.

    Notes
    -----
    scipy sparse input (CSR, CSC, COO) is read as XGBoost reads it: an absent entry is missing (NaN), a stored zero
    is the value 0.0. The sketch works on a dense copy (n x d float32), so memory grows with n x d.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.xgboost_ext import QuantileBinner
    >>> X = np.random.default_rng(0).standard_exponential(size=(10_000, 2))
    >>> binner = QuantileBinner(max_bin=8).fit(X)
    >>> codes = binner.transform(X)
    >>> bool(np.bincount(codes[:, 0]).max() / len(X) < 2 / 8)   # no bin holds much more than its share
    True
    >>> binner.partial_fit(X[:5000]).partial_fit(X[5000:]).n_bins_.tolist()   # streaming: merged sketches
    [8, 8]
    """

    def __init__(self, max_bin: int = 256, method: str = "maxent", n_moments: int = 15, n_sample: int = 4096,
                 backend: str = "cpu", categorical_features="from_dtype"):
        self.max_bin = max_bin
        self.method = method
        self.n_moments = n_moments
        self.n_sample = n_sample
        self.backend = backend
        self.categorical_features = categorical_features

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        tags.input_tags.sparse = True  # read as XGBoost reads it: an absent entry is missing
        tags.transformer_tags.preserves_dtype = []  # transform returns int32 bin codes
        return tags

    # ------------------------------------------------------------------------------------------ validation
    def _check_params(self) -> None:
        check_max_bin(self.max_bin)
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if isinstance(self.n_sample, bool) or not isinstance(self.n_sample, (int, np.integer)) or self.n_sample < 0:
            raise ValueError(f"n_sample must be a non-negative integer, got {self.n_sample!r}")
        check_backend(self.backend)

    def _validate(self, X, reset: bool):
        """The numeric columns as a float array (NumPy or CuPy) and the category columns' codes (n, n_cat) as float
        (NaN missing, unseen categories missing after fit); sets n_features_in_, feature names, categorical_."""
        if is_cupy_array(X):
            if X.ndim != 2:
                raise ValueError(f"Expected 2D array, got shape {X.shape}")
            if reset:
                self.n_features_in_ = int(X.shape[1])
                self.categorical_ = self._categorical_mask(None, X.shape[1])
            elif X.shape[1] != self.n_features_in_:
                raise ValueError(f"X has {X.shape[1]} features, but QuantileBinner is expecting "
                                 f"{self.n_features_in_} features as input.")
            if self.categorical_.any():
                raise ValueError("category columns need host (NumPy or pandas) input; CuPy input has none")
            return X, None
        if _issparse(X):
            X = _sparse_to_dense(X)
        if getattr(X, "ndim", 2) == 1 and hasattr(X, "to_frame"):  # a pandas Series: one column, as XGBoost reads it
            X = X.to_frame()
        dtypes = getattr(X, "dtypes", None)
        is_cat = None
        if dtypes is not None and hasattr(X, "iloc") and getattr(X, "ndim", 2) == 2:
            import pandas as pd

            is_cat = np.array([isinstance(dt, pd.CategoricalDtype) for dt in dtypes], bool)
        shape = getattr(X, "shape", None)
        width = int(shape[1]) if shape is not None and len(shape) == 2 else None
        mask = self._categorical_mask(is_cat, width) if reset else self.categorical_
        if mask is None or not mask.any():
            # inf is checked below with XGBoost's error; 0 rows are refused by fit only (sklearn's convention)
            X = validate_data(self, X, reset=reset, dtype=(np.float64, np.float32), ensure_all_finite=False,
                              ensure_min_samples=1 if reset else 0)
            if reset:
                self.categorical_ = np.zeros(X.shape[1], bool)
            self._check_inf(X)
            return X, None
        return self._validate_mixed(X, mask, is_cat, reset)

    def _categorical_mask(self, is_cat, d):
        """The bool mask of category columns from categorical_features (None: decide once the width is known)."""
        cf = self.categorical_features
        if cf is None:
            return None if d is None else np.zeros(d, bool)
        if isinstance(cf, str):
            if cf != "from_dtype":
                raise ValueError(f'categorical_features must be "from_dtype", None, a bool mask or column indices, '
                                 f"got {cf!r}")
            if is_cat is not None:
                return is_cat
            return None if d is None else np.zeros(d, bool)
        arr = np.asarray(cf)
        width = d if d is not None else (is_cat.size if is_cat is not None else None)
        if arr.dtype == bool:
            if width is not None and arr.size != width:
                raise ValueError(f"categorical_features has {arr.size} entries, X has {width} columns")
            return arr.reshape(-1).copy()
        if width is None:
            return None
        if arr.size and (arr.dtype.kind not in "iu" or arr.min() < -width or arr.max() >= width):
            raise ValueError(f"categorical_features must index the {width} columns of X, got {cf!r}")
        out = np.zeros(width, bool)
        out[arr.reshape(-1)] = True
        return out

    def _validate_mixed(self, X, mask, is_cat, reset):
        import pandas as pd

        frame = hasattr(X, "iloc")
        if frame:
            check_feature_names(self, X, reset=reset)
            check_n_features(self, X, reset=reset)
            cols = list(X.columns)
        else:
            X = check_array(X, dtype=(np.float64, np.float32), ensure_all_finite=False, ensure_min_samples=int(reset))
            check_n_features(self, X, reset=reset)
        if mask is None:  # integer indices given before the width was known
            mask = self._categorical_mask(is_cat, X.shape[1])
        if mask.size != X.shape[1]:
            raise ValueError(f"categorical_features has {mask.size} entries, X has {X.shape[1]} columns")
        if reset:
            self.categorical_ = mask
            self.categories_ = {}
        num = np.flatnonzero(~mask)
        if frame:
            Xn = check_array(X.iloc[:, num], dtype=(np.float64, np.float32), ensure_all_finite=False,
                             ensure_min_features=0, ensure_min_samples=int(reset)) if num.size \
                else np.zeros((X.shape[0], 0), np.float32)
        else:
            Xn = X[:, num]
        self._check_inf(Xn)
        codes = np.empty((X.shape[0], int(mask.sum())), np.float64)
        for k, j in enumerate(np.flatnonzero(mask)):
            if frame and is_cat is not None and j < is_cat.size and is_cat[j]:
                col = X.iloc[:, j]
                if reset:
                    self.categories_[int(j)] = col.dtype
                    c = col.cat.codes.to_numpy()
                else:
                    dt = self.categories_.get(int(j))
                    if dt is None:
                        raise ValueError(f"column {cols[j]!r} is a category column now but was numeric in fit")
                    c = pd.Categorical(col, dtype=dt).codes  # re-coded by label; unseen labels -> -1
                codes[:, k] = np.where(c < 0, np.nan, c)
            else:
                v = np.asarray(X.iloc[:, j] if frame else X[:, j], np.float64)
                ok = ~np.isnan(v)
                if (v[ok] < 0).any() or (v[ok] != np.floor(v[ok])).any() or np.isinf(v[ok]).any():
                    raise ValueError(f"category column {j} must hold non-negative integer codes (NaN missing)")
                if not reset and int(j) in self.categories_:
                    raise ValueError(f"column {cols[j]!r} was a pandas category column in fit")
                codes[:, k] = v
        return Xn, codes

    @staticmethod
    def _check_inf(X):
        if np.isinf(X).any():
            raise XGBoostError("Input data contains `inf` or a value too large, while `missing` is not set to `inf` "
                               "(XGBoost refuses it; encode missing values as NaN)")

    @staticmethod
    def _weights(X, sample_weight):
        if sample_weight is None or is_cupy_array(sample_weight):
            return sample_weight
        sample_weight = check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)
        if not sample_weight.sum() > 0:
            raise ValueError("sample_weight: all weights are zero; at least one must be positive")
        return sample_weight

    def _sketch(self, X, sample_weight) -> MomentSketch:
        sample_weight = self._weights(X, sample_weight)
        return sketch(X, sample_weight, n_moments=self.n_moments, max_distinct=int(self.max_bin),
                      n_sample=self.n_sample, backend=self.backend)

    # ---------------------------------------------------------------------------------------------- fitting
    def fit(self, X, y=None, sample_weight=None):
        """Sketch the numeric columns of X and compute the cuts (category columns: the codes present)."""
        self._check_params()
        for a in ("sketch_", "_codes_seen"):
            self.__dict__.pop(a, None)
        X, codes = self._validate(X, reset=True)
        self._note_codes(codes, sample_weight)
        if self.method == "exact":
            self.sketch_ = None
            w = self._weights(X, None if sample_weight is None else to_numpy(sample_weight))
            return self._set_cuts(exact_cut_points(to_numpy(X), w, int(self.max_bin)))
        sample_weight = self._weights(X, sample_weight)
        return self._fit_sketch(self._sketch(X, sample_weight), X, sample_weight)

    def partial_fit(self, X, y=None, sample_weight=None):
        """Sketch a batch, merge it into the running sketch, and recompute the cuts (a streaming fit)."""
        self._check_params()
        if self.method == "exact":
            raise ValueError('partial_fit needs a sketch: method="exact" sorts all data at once; use fit')
        first = not hasattr(self, "sketch_") or self.sketch_ is None
        X, codes = self._validate(X, reset=first)
        self._note_codes(codes, sample_weight, reset=first)
        sk = self._sketch(X, sample_weight)
        return self.fit_sketch(sk if first else self.sketch_.merge(sk))

    def _note_codes(self, codes, sample_weight, reset: bool = True):
        """Keep the sorted category codes present (positive weight) per category column, unioned over batches."""
        if reset or not hasattr(self, "_codes_seen"):
            self._codes_seen = [np.zeros(0) for _ in range(0 if codes is None else codes.shape[1])]
        if codes is None:
            return
        w = None if sample_weight is None else np.asarray(to_numpy(sample_weight), np.float64).reshape(-1)
        for k in range(codes.shape[1]):
            c = codes[:, k]
            ok = ~np.isnan(c) if w is None else ~np.isnan(c) & (w > 0)
            self._codes_seen[k] = np.union1d(self._codes_seen[k], c[ok])

    def fit_sketch(self, sk: MomentSketch):
        """Fit from a ready sketch (e.g. merged from partitions or deserialised) of the numeric columns."""
        return self._fit_sketch(sk)

    def _fit_sketch(self, sk: MomentSketch, data=None, sample_weight=None):
        """Fit from a sketch; ``data`` (the sketched X) serves columns the moments cannot resolve."""
        self._check_params()
        if self.method == "exact":
            raise ValueError('fit_sketch needs method "maxent" or "legendre"')
        mask = getattr(self, "categorical_", None)
        n_num = sk.n_features if mask is None else int((~mask).sum())
        if not hasattr(self, "n_features_in_"):
            self.n_features_in_ = sk.n_features
            self.categorical_ = np.zeros(sk.n_features, bool)
        elif sk.n_features != n_num:
            raise ValueError(f"sketch has {sk.n_features} features, the binner expects {n_num} numeric features")
        if sk.n_moments != self.n_moments:
            raise ValueError(f"sketch has {sk.n_moments} moments, the binner has n_moments={self.n_moments}")
        self.sketch_ = sk
        names = getattr(self, "feature_names_in_", None)
        if names is not None:
            names = np.asarray(names)[~self.categorical_]
        cuts = cut_points(sk, int(self.max_bin), self.method, data=data, sample_weight=sample_weight,
                          feature_names=names)
        if data is None and sk.sample is not None:
            self._warn_thin_sample(sk, cuts, names)
        return self._set_cuts(cuts)

    def _warn_thin_sample(self, sk: MomentSketch, cuts: Cuts, names) -> None:
        """Streaming fits keep only the row sample: name the columns whose cuts rest on fewer sampled values than
        max_bin (from the sample directly, or moment cuts checked against too few values to catch a crowded bin)."""
        mb = int(self.max_bin)
        thin = []
        for j in range(sk.n_features):
            if cuts.source is None or cuts.source[j] not in ("sample", "moments"):
                continue
            k = int(sk.sample.column(j)[0].size)
            if k < mb:
                thin.append(f"{names[j] if names is not None else f'f{j}'} ({k} values, {cuts.source[j]})")
        if thin:
            warnings.warn(f"the row sample holds fewer than max_bin={mb} values of {len(thin)} feature(s), so their "
                          f"cuts rest on too few values to be checked or placed well (mostly missing columns): "
                          f"{thin[:20]}; fit on all data, or raise n_sample", SketchFallbackWarning, stacklevel=3)

    def _set_cuts(self, cuts: Cuts):
        mask = getattr(self, "categorical_", None)
        if mask is not None and mask.any():
            cuts = self._with_categories(cuts, mask)
        self.cuts_ = cuts
        d = cuts.n_features
        edges = np.empty(d, dtype=object)
        sizes = np.array([c.size for c in cuts.values], np.int64)
        n_bins = sizes + 1
        # every numeric column's [vmin, cuts..., vmax] in one float64 buffer, one view per column
        ends = np.cumsum(sizes + 2)
        flat = np.empty(int(ends[-1]) if d else 0, np.float64)
        starts = ends - sizes - 2
        flat[starts] = cuts.vmin
        flat[ends - 1] = cuts.vmax
        inner = np.ones(flat.size, bool)
        inner[starts] = False
        inner[ends - 1] = False
        if d:
            flat[inner] = np.concatenate(cuts.values)
        for j, (a, b) in enumerate(zip(starts.tolist(), ends.tolist())):
            edges[j] = flat[a:b]
        if mask is not None and mask.any():
            cat_k = np.cumsum(mask) - 1
            for j in np.flatnonzero(mask):
                n_cat = self._n_categories(j, cat_k[j])
                edges[j] = np.arange(n_cat + 1, dtype=np.float64) - 0.5  # bin k holds code k: centre k
                n_bins[j] = n_cat
        self.bin_edges_ = edges
        self.n_bins_ = n_bins
        return self

    def _n_categories(self, j: int, k: int) -> int:
        dt = getattr(self, "categories_", {}).get(int(j))
        if dt is not None:
            return len(dt.categories)
        seen = self._codes_seen[k]
        return int(seen.max()) + 1 if seen.size else 0

    def _with_categories(self, cuts: Cuts, mask: np.ndarray) -> Cuts:
        """Numeric cuts spread back to their columns; category columns get the codes present, source "category"."""
        d = mask.size
        num = np.flatnonzero(~mask)
        values: list = [None] * d
        vmin = np.full(d, np.nan, np.float32)
        vmax = np.full(d, np.nan, np.float32)
        exact = np.ones(d, bool)
        source = np.full(d, "category", object)
        for r, j in enumerate(num):
            values[j] = cuts.values[r]
            vmin[j], vmax[j], exact[j] = cuts.vmin[r], cuts.vmax[r], cuts.exact[r]
            if cuts.source is not None:
                source[j] = cuts.source[r]
        for k, j in enumerate(np.flatnonzero(mask)):
            seen = self._codes_seen[k].astype(np.float32)
            values[j] = seen
            if seen.size:
                vmin[j], vmax[j] = seen[0], seen[-1]
        return Cuts(values, vmin, vmax, exact, source)

    # -------------------------------------------------------------------------------------------- transform
    def transform(self, X):
        """Integer bin codes (int32): bin j holds cut_{j} <= x < cut_{j+1} (XGBoost's rule); NaN gives -1. A category
        column gives its category code (re-coded by label against fit's categories; unseen or missing: -1)."""
        check_is_fitted(self, "cuts_")
        Xn, codes = self._validate(X, reset=False)
        Xn = to_numpy(Xn)
        mask = self.categorical_
        out = np.empty((Xn.shape[0], mask.size), np.int32)
        num = np.flatnonzero(~mask)
        for r, j in enumerate(num):
            c = self.cuts_.values[j]
            x = Xn[:, r].astype(np.float32)
            code = np.searchsorted(c, x, side="right").astype(np.int32)
            out[:, j] = np.where(np.isnan(x), -1, code)
        for k, j in enumerate(np.flatnonzero(mask)):
            c = codes[:, k]
            out[:, j] = np.where(np.isnan(c), -1, np.nan_to_num(c)).astype(np.int32)
        return out

    def inverse_transform(self, X):
        """Bin centres for codes (NaN for -1), as KBinsDiscretizer.inverse_transform does."""
        check_is_fitted(self, "cuts_")
        codes = np.asarray(X)
        if codes.ndim != 2 or codes.shape[1] != self.n_features_in_:
            raise ValueError(f"Incorrect number of features. Expecting {self.n_features_in_}, received "
                             f"{codes.shape[1] if codes.ndim == 2 else codes.shape}.")
        out = np.empty(codes.shape, np.float64)
        for j, e in enumerate(self.bin_edges_):
            centres = np.append((e[1:] + e[:-1]) * 0.5, np.nan)
            k = codes[:, j].astype(np.int64)
            if ((k < -1) | (k >= e.size - 1)).any():
                raise ValueError(f"codes of feature {j} must lie in [-1, {e.size - 2}]")
            out[:, j] = centres[k]
        return out

    def get_feature_names_out(self, input_features=None):
        return check_feature_names_in(self, input_features)


def _issparse(X) -> bool:
    try:
        import scipy.sparse as sp
    except ImportError:  # pragma: no cover - scipy is a dependency of scikit-learn
        return False
    return sp.issparse(X)


def _sparse_to_dense(X) -> np.ndarray:
    """A scipy sparse matrix as XGBoost reads it: stored entries are values (a stored 0.0 is 0.0), absent ones NaN."""
    import scipy.sparse as sp

    coo = sp.coo_matrix(X)
    dtype = np.float32 if coo.dtype == np.float32 else np.float64
    out = np.full(coo.shape, np.nan, dtype)
    out[coo.row, coo.col] = coo.data
    return out
