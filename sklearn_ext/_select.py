"""SelectFromShapley: keep features by mean |Shapley value|, like SelectFromModel."""
from __future__ import annotations

import numbers

import numpy as np
from sklearn.base import BaseEstimator, MetaEstimatorMixin, clone
from sklearn.feature_selection import SelectorMixin
from sklearn.utils import check_random_state, get_tags
from sklearn.utils.validation import check_is_fitted, validate_data

from ._shapley import ShapleyExplainer, ShapleySampler, check_progress

__all__ = ["SelectFromShapley"]


def _threshold(importances: np.ndarray, threshold) -> float:
    if threshold is None:
        threshold = "mean"
    if isinstance(threshold, str):
        scale, _, ref = threshold.rpartition("*")
        ref = ref.strip()
        if ref not in ("mean", "median"):
            raise ValueError(f"threshold string must be 'mean', 'median' or 'k*mean' / 'k*median', got {threshold!r}")
        value = float(np.mean(importances) if ref == "mean" else np.median(importances))
        return value * (float(scale) if scale else 1.0)
    if isinstance(threshold, numbers.Real):
        return float(threshold)
    raise ValueError(f"threshold must be None, a float or a string, got {threshold!r}")


class SelectFromShapley(SelectorMixin, MetaEstimatorMixin, BaseEstimator):
    """Select features whose mean ``|Shapley value|`` (over up to ``max_rows`` rows of X) reaches a threshold.

    Parameters
    ----------
    estimator : estimator (fitted ones are used as they are; unfitted ones are cloned and fitted on (X, y)).
    sampler : ShapleySampler or None.
    max_evals : "auto" or int, evaluations per explained row (see ShapleyExplainer).
    threshold : None ("mean"), float, or "mean" / "median" / "1.5*mean".
    max_features : int or None, keep at most this many (the largest importances).
    max_rows : int, rows of X explained to estimate the importances (a random subset when larger).
    background_size : int, background rows (see ShapleyExplainer).
    response_method : see ShapleyExplainer.
    progress : None, True or False
        A progress bar by rows explained on calls over 2 seconds (see ShapleyExplainer).

    See Also
    --------
    sklearn.feature_selection.SelectFromModel : the selector this mirrors, on ``feature_importances_`` / ``coef_``.
    ShapleyExplainer : the Shapley values it averages.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import LinearRegression
    >>> from hitml.sklearn_ext import SelectFromShapley, ShapleySampler
    >>> X = np.random.default_rng(0).normal(size=(200, 4))
    >>> y = 3 * X[:, 0] + X[:, 2]
    >>> selector = SelectFromShapley(LinearRegression(), ShapleySampler(random_state=0), threshold=0.1)
    >>> selector.fit(X, y).get_support().tolist()
    [True, False, True, False]
    """

    def __init__(self, estimator=None, sampler: ShapleySampler | None = None, max_evals="auto", threshold=None,
                 max_features: int | None = None, max_rows: int = 100, background_size: int = 100,
                 response_method: str = "auto", progress: bool | None = None):
        self.estimator = estimator
        self.sampler = sampler
        self.max_evals = max_evals
        self.threshold = threshold
        self.max_features = max_features
        self.max_rows = max_rows
        self.background_size = background_size
        self.response_method = response_method
        self.progress = progress

    def fit(self, X, y=None):
        """Fit the estimator if needed, explain up to ``max_rows`` rows and store ``shapley_importances_``."""
        explainer = ShapleyExplainer(self.estimator, sampler=clone(self.sampler) if self.sampler is not None else None,
                                     max_evals=self.max_evals, response_method=self.response_method,
                                     background_size=self.background_size, progress=self.progress)
        check_progress(self.progress)
        explainer.fit(X, y)
        Xv = validate_data(self, X, reset=True, ensure_all_finite=not explainer._allow_nan(),
                           dtype=[np.float64, np.float32])
        rng = check_random_state(explainer._sampler().random_state)
        rows = Xv if Xv.shape[0] <= self.max_rows else Xv[np.sort(rng.choice(Xv.shape[0], self.max_rows, False))]
        phi = np.abs(explainer.transform(explainer._frame(rows)))
        imp = phi.mean(axis=0)
        if imp.ndim == 2:  # multi-output: average over outputs
            imp = imp.mean(axis=1)
        self.explainer_ = explainer
        self.estimator_ = explainer.estimator_
        self.shapley_importances_ = imp
        self.threshold_ = _threshold(imp, self.threshold)
        if self.max_features is not None and (not isinstance(self.max_features, numbers.Integral)
                                              or not 0 <= self.max_features <= Xv.shape[1]):
            raise ValueError(f"max_features must be an int in [0, {Xv.shape[1]}], got {self.max_features!r}")
        return self

    def _get_support_mask(self):
        check_is_fitted(self, "shapley_importances_")
        mask = self.shapley_importances_ >= self.threshold_
        if self.max_features is not None:
            keep = np.zeros_like(mask)
            keep[np.argsort(-self.shapley_importances_, kind="stable")[:self.max_features]] = True
            mask &= keep
        return mask

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        est = self.estimator
        tags.input_tags.allow_nan = bool(get_tags(est).input_tags.allow_nan) if hasattr(est, "__sklearn_tags__") \
            else True
        return tags
