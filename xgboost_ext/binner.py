"""QuantileBinner: a scikit-learn transformer (KBinsDiscretizer conventions) whose cuts come from a moments sketch."""
from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from hitml.kernels.device import is_cupy_array, to_numpy
from hitml.kernels.sketch import MomentSketch, sketch
from hitml.kernels.sketch.cuts import Cuts, cut_points, exact_cut_points

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
        The merged sketch (None for method="exact").

    See Also
    --------
    sklearn.preprocessing.KBinsDiscretizer : the transformer whose conventions this follows (quantile strategy).
    xgboost.QuantileDMatrix : XGBoost's own sketch, which this replaces through :func:`quantile_dmatrix`.
    XGBRegressor : XGBoost's regressor trained on these cuts.

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
                 backend: str = "cpu"):
        self.max_bin = max_bin
        self.method = method
        self.n_moments = n_moments
        self.n_sample = n_sample
        self.backend = backend

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        tags.transformer_tags.preserves_dtype = []  # transform returns int32 bin codes
        return tags

    # ------------------------------------------------------------------------------------------ validation
    def _check_params(self) -> None:
        if not isinstance(self.max_bin, (int, np.integer)) or isinstance(self.max_bin, bool) or self.max_bin < 2:
            raise ValueError(f"max_bin must be an integer >= 2, got {self.max_bin!r}")
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if isinstance(self.n_sample, bool) or not isinstance(self.n_sample, (int, np.integer)) or self.n_sample < 0:
            raise ValueError(f"n_sample must be a non-negative integer, got {self.n_sample!r}")
        if self.backend not in ("cpu", "gpu", "auto"):
            raise ValueError(f"backend must be 'cpu', 'gpu' or 'auto', got {self.backend!r}")

    def _validate(self, X, reset: bool):
        if is_cupy_array(X):
            if X.ndim != 2:
                raise ValueError(f"Expected 2D array, got shape {X.shape}")
            if reset:
                self.n_features_in_ = int(X.shape[1])
            elif X.shape[1] != self.n_features_in_:
                raise ValueError(f"X has {X.shape[1]} features, but QuantileBinner is expecting "
                                 f"{self.n_features_in_} features as input.")
            return X
        X = validate_data(self, X, reset=reset, dtype=(np.float64, np.float32), ensure_all_finite="allow-nan")
        if np.isinf(X).any():
            raise ValueError("Input X contains infinity; encode missing values as NaN (inf is not a valid value)")
        return X

    @staticmethod
    def _weights(X, sample_weight):
        if sample_weight is None or is_cupy_array(sample_weight):
            return sample_weight
        sample_weight = _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)
        if not sample_weight.sum() > 0:
            raise ValueError("sample_weight: all weights are zero; at least one must be positive")
        return sample_weight

    def _sketch(self, X, sample_weight) -> MomentSketch:
        sample_weight = self._weights(X, sample_weight)
        return sketch(X, sample_weight, n_moments=self.n_moments, max_distinct=int(self.max_bin),
                      n_sample=self.n_sample, backend=self.backend)

    # ---------------------------------------------------------------------------------------------- fitting
    def fit(self, X, y=None, sample_weight=None):
        """Sketch X and compute the cuts."""
        self._check_params()
        X = self._validate(X, reset=True)
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
        X = self._validate(X, reset=first)
        sk = self._sketch(X, sample_weight)
        return self.fit_sketch(sk if first else self.sketch_.merge(sk))

    def fit_sketch(self, sk: MomentSketch):
        """Fit from a ready sketch (e.g. merged from partitions or deserialised)."""
        return self._fit_sketch(sk)

    def _fit_sketch(self, sk: MomentSketch, data=None, sample_weight=None):
        """Fit from a sketch; ``data`` (the sketched X) serves columns the moments cannot resolve."""
        self._check_params()
        if self.method == "exact":
            raise ValueError('fit_sketch needs method "maxent" or "legendre"')
        if not hasattr(self, "n_features_in_"):
            self.n_features_in_ = sk.n_features
        elif sk.n_features != self.n_features_in_:
            raise ValueError(f"sketch has {sk.n_features} features, the binner expects {self.n_features_in_}")
        if sk.n_moments != self.n_moments:
            raise ValueError(f"sketch has {sk.n_moments} moments, the binner has n_moments={self.n_moments}")
        self.sketch_ = sk
        names = getattr(self, "feature_names_in_", None)
        return self._set_cuts(cut_points(sk, int(self.max_bin), self.method, data=data, sample_weight=sample_weight,
                                         feature_names=names))

    def _set_cuts(self, cuts: Cuts):
        self.cuts_ = cuts
        edges = np.empty(cuts.n_features, dtype=object)
        for j, c in enumerate(cuts.values):
            edges[j] = np.concatenate([[cuts.vmin[j]], c, [cuts.vmax[j]]]).astype(np.float64)
        self.bin_edges_ = edges
        self.n_bins_ = cuts.n_bins
        return self

    # -------------------------------------------------------------------------------------------- transform
    def transform(self, X):
        """Integer bin codes (int32): bin j holds cut_{j} <= x < cut_{j+1} (XGBoost's rule); NaN gives -1."""
        check_is_fitted(self, "cuts_")
        X = to_numpy(self._validate(X, reset=False))
        out = np.empty(X.shape, np.int32)
        for j, c in enumerate(self.cuts_.values):
            x = X[:, j].astype(np.float32)
            code = np.searchsorted(c, x, side="right").astype(np.int32)
            out[:, j] = np.where(np.isnan(x), -1, code)
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
        from sklearn.utils.validation import _check_feature_names_in

        return _check_feature_names_in(self, input_features)
