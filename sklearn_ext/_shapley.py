"""ShapleySampler and ShapleyExplainer: sampled Shapley values (regression or permutations) as scikit-learn estimators."""
from __future__ import annotations

import numbers
from typing import Any, Callable

import numpy as np
from sklearn.base import BaseEstimator, MetaEstimatorMixin, TransformerMixin, clone, is_classifier
from sklearn.exceptions import NotFittedError
from sklearn.utils import check_random_state, get_tags
from sklearn.utils.validation import check_is_fitted, validate_data

from hitml.kernels.device import resolve_backend, to_numpy
from hitml.kernels.shapley import (MASK_METHODS, METHODS, PAIRED_METHODS, Z95, PermutationDesign, RegressionPlan,
                                   SequentialDesign, backend_module, evaluations_per_row, samples_for_budget,
                                   shapley_rows)

from ._compat import check_feature_names_in, declares_classifier

REGRESSION_METHODS = ("regression",)
ALL_METHODS = ("auto", *REGRESSION_METHODS, *METHODS)
# "auto": below this many (d + 1) evaluations per row the regression is barely determined (paired coalitions pin one
# equation per pair) and orthogonal permutations had the lower error in the benchmark; from it up, the regression.
AUTO_REGRESSION_FROM = 4
TOL_AUTO_CAP = 100  # with tol= and max_evals="auto": at most 100 (d + 1) evaluations per row


def check_progress(progress) -> None:
    """``progress`` must be None (on unless HITML_PROGRESS=0), True or False."""
    if progress is not None and not isinstance(progress, (bool, np.bool_)):
        raise ValueError(f"progress must be None, True or False, got {progress!r}")

__all__ = ["ShapleySampler", "ShapleyExplainer"]


class ShapleySampler(BaseEstimator):
    """How Shapley values are sampled: a regression over coalitions or a permutation sampler.

    Parameters
    ----------
    method : {"auto", "regression", "orthogonal", "sobol", "herding", "sbq", "antithetic", "mc", "stratified", "owen",
        "owen_halved"}
        "regression" (what "auto" picks, by the benchmark in docs/benchmarks/shapley.md): paired coalitions, sizes
        allocated evenly (leverage scores of the Shapley kernel), whole sizes enumerated when the budget covers them,
        and a Bayesian (kriging) fit of the game's odd interactions whose posterior-mean Shapley values are read off,
        with each row's prior (how interactions fade with their order; heredity priors from 10 features on) chosen
        by restricted likelihood and a standard error for every value (docs/design/shapley.md). The others
        are the seed's permutation samplers: "sbq" gives non-uniform weights (summing to 1); the Owen methods sample
        coalitions (masks) at d + 1 evaluations per sample (a permutation costs d - 1 plus two per row shared by all).
    n_permutations : int or None
        Permutation methods: samples to draw; None lets ShapleyExplainer derive it from ``max_evals`` (10 when used
        alone). With "regression", ``max_evals="auto"`` spends what this many permutations would.
    order : "auto" or int
        Regression only. "auto": the kriging fit above (a kernel-weighted fit when the budget covers all 2^d
        coalitions, then exact). An int: the kernel-weighted least-squares fit of a polynomial game of that order
        (order 1 is paired KernelSHAP; with paired coalitions order 2 equals order 1).
    kernel : {"mallows", "kendall", "spearman"}
        Kernel on permutations for herding, SBQ and the reported discrepancy.
    kernel_param : float
        Mallows lambda (4, as in the seed).
    random_state : None, int, Generator or RandomState
    backend : {"cpu", "gpu", "auto"}
        Where permutations (and ShapleyExplainer's masked rows) are built.

    See Also
    --------
    shap.PermutationExplainer : shap's permutation sampling, which the permutation methods replace.
    shap.KernelExplainer : shap's KernelSHAP, which the regression method (order 1) generalises.
    ShapleyExplainer : the estimator that uses a sampler.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.sklearn_ext import ShapleySampler
    >>> sampler = ShapleySampler("orthogonal", n_permutations=8, random_state=0).fit(np.zeros((1, 5)))
    >>> sampler.permutations_.shape, float(sampler.weights_.sum())
    ((8, 5), 1.0)
    """

    def __init__(self, method: str = "auto", n_permutations: int | None = None, order="auto", kernel: str = "mallows",
                 kernel_param: float = 4.0, random_state=None, backend: str = "cpu"):
        self.method = method
        self.n_permutations = n_permutations
        self.order = order
        self.kernel = kernel
        self.kernel_param = kernel_param
        self.random_state = random_state
        self.backend = backend

    def _check_params(self) -> None:
        if self.method not in ALL_METHODS:
            raise ValueError(f"ShapleySampler: method must be one of {ALL_METHODS}, got {self.method!r}")
        if self.order != "auto" and (not isinstance(self.order, numbers.Integral) or self.order < 1):
            raise ValueError(f"ShapleySampler: order must be 'auto' or a positive int, got {self.order!r}")
        if self.n_permutations is not None and (
                not isinstance(self.n_permutations, numbers.Integral) or self.n_permutations < 1):
            raise ValueError(f"ShapleySampler: n_permutations must be a positive int or None, got {self.n_permutations!r}")

    @property
    def method_(self) -> str:
        """The method "auto" resolves to at the default budget (10 permutations' worth): "regression"."""
        return "regression" if self.method == "auto" else self.method

    def resolved(self, n_features: int, budget: int) -> "ShapleySampler":
        """This sampler, or for "auto" a copy with the method the benchmark picks for d features and the budget."""
        self._check_params()
        if self.method != "auto":
            return self
        method = "regression" if budget >= AUTO_REGRESSION_FROM * (n_features + 1) else "orthogonal"
        return clone(self).set_params(method=method)

    @property
    def is_regression(self) -> bool:
        """True for the regression estimator (and "auto")."""
        return self.method_ in REGRESSION_METHODS

    @property
    def is_permutation_method(self) -> bool:
        """False for the Owen methods and the regression, which sample coalitions."""
        return self.method_ not in MASK_METHODS and not self.is_regression

    def plan(self, n_features: int, budget: int, random_state=None) -> RegressionPlan:
        """The regression design and Shapley operator for ``budget`` evaluations (coalitions) of ``n_features``."""
        self._check_params()
        if not self.is_regression:
            raise ValueError(f"plan() is for method='regression' (or 'auto'), not {self.method!r}")
        rs = check_random_state(self.random_state if random_state is None else random_state)
        seed = [int(x) for x in rs.randint(0, 2 ** 31 - 1, size=4)]  # RandomState -> Generator, deterministic
        # the explainer's v(S) averages a fixed background: exact values, so no repeated coalitions and no nugget
        return RegressionPlan(int(n_features), int(budget), seed, order=self.order, noise="none")

    def sample(self, n_features: int, n_samples: int | None = None, random_state=None):
        """(samples, weights) for ``n_features`` features: (n, d) orders (int8 masks for Owen) and weights summing to 1.

        Arrays live on the sampler's backend (CuPy for "gpu"). For "regression", ``n_samples`` is the budget and the
        samples are the (C, d) bool coalitions with their kernel weights (host arrays).
        """
        self._check_params()
        if self.is_regression:
            d = int(n_features)
            plan = self.plan(d, n_samples if n_samples is not None else 2 + (self.n_permutations or 10) * max(1, d - 1),
                             random_state)
            return plan.coalitions, plan.weights
        n = n_samples if n_samples is not None else (self.n_permutations or 10)
        seed = check_random_state(self.random_state if random_state is None else random_state)
        mod = backend_module(self.backend)
        return mod.sample(self.method, int(n), int(n_features), seed, kernel=self.kernel, lam=float(self.kernel_param))

    def fit(self, X, y=None):
        """Draw ``n_permutations`` samples for X's width: sets ``permutations_``, ``weights_``, ``discrepancy_``."""
        X = validate_data(self, X, reset=True, ensure_all_finite=False)
        perms, w = self.sample(X.shape[1])
        self.weights_ = to_numpy(w)
        if self.is_regression:
            self.coalitions_ = perms
            return self
        self.permutations_ = to_numpy(perms)
        if self.is_permutation_method:
            self.discrepancy_ = backend_module("cpu").discrepancy(self.permutations_, self.weights_, self.kernel,
                                                                  float(self.kernel_param))
        return self

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        tags.requires_fit = True
        return tags


def _is_fitted(est: Any) -> bool:
    try:
        check_is_fitted(est)
    except NotFittedError:
        return False
    except TypeError:  # not an sklearn-style estimator: treat as ready
        return True
    return True


def _response(est: Any, response_method: str) -> Callable:
    if response_method != "auto":
        if not hasattr(est, response_method):
            raise TypeError(f"{type(est).__name__} has no {response_method!r} method")
        return getattr(est, response_method)
    try:
        clf = is_classifier(est)
    except (AttributeError, TypeError):  # a plain callable, or a model outside sklearn's tag system
        clf = declares_classifier(est)
    order = ("predict_proba", "decision_function", "predict") if clf else ("predict",)
    for name in order:
        if hasattr(est, name):
            return getattr(est, name)
    if callable(est):
        return est
    raise TypeError(f"ShapleyExplainer needs a fitted estimator with predict/predict_proba/decision_function or a "
                    f"prediction callable, got {type(est).__name__}")


class ShapleyExplainer(MetaEstimatorMixin, TransformerMixin, BaseEstimator):
    """Shapley values by coalition regression or permutation sampling for any fitted model or prediction callable.

    v(S) = mean over background rows b of f(x_S, b_{not S}) (shap's interventional convention). An *evaluation* is
    one coalition S for one explained row, i.e. ``len(background)`` model rows (shap's ``max_evals`` unit). v(empty)
    and v(all) are the same for every permutation of a row, so a row costs 2 + n (d - 1) evaluations for n
    permutations (Owen masks: n (d + 1)).

    Parameters
    ----------
    estimator : fitted estimator, unfitted estimator (fitted on ``fit(X, y)``), or a callable X -> predictions.
    sampler : ShapleySampler, default ShapleySampler() ("auto": the regression estimator).
    max_evals : "auto" or int
        Evaluations per explained row. Regression: the int is the number of coalitions (empty and full set
        included; at least d + 1; 2^d or more is exact), "auto" what 10 permutations cost, 2 + 10 (d - 1).
        Permutation methods: "auto" is ``sampler.n_permutations`` (default 10) permutations. An int buys
        the most permutations n with 2 + n (d - 1) <= max_evals (Owen: n (d + 1) <= max_evals), rounded down to
        whole pairs for the paired samplers (antithetic, orthogonal, owen_halved), capped by
        ``sampler.n_permutations`` when set. At least d + 1 (one permutation).
    batch_size : "auto" or int
        Model rows per model call.
    response_method : "auto", "predict", "predict_proba", "decision_function"
        "auto": predict_proba (else decision_function, else predict) for classifiers, predict otherwise.
    background_size : int
        Rows of ``fit``'s X kept as background (a random subset when larger; shap's maskers keep 100).
    model_input : {"auto", "numpy", "device"}
        With a GPU backend, what the model receives: "device" passes CuPy arrays (XGBoost takes them), "numpy" copies
        each batch to the host. "auto": device for XGBoost models, numpy otherwise.
    tol : float or None
        Regression only (the default sampler). Spend evaluations until every Shapley value's 95% interval
        (value ± 1.96 standard errors) of the row is narrower than ``tol`` (in the model's output units): the first
        stage evaluates 10 (d + 1) coalitions per row, then the design doubles, keeping every coalition evaluated,
        until the row is done or ``max_evals`` is reached (``"auto"``: 100 (d + 1)). Rows stop independently.
    progress : None, True or False
        A progress bar by rows done on calls that take over 2 seconds; None: on unless ``HITML_PROGRESS=0``.

    See Also
    --------
    shap.KernelExplainer, shap.PermutationExplainer : shap's model-agnostic explainers this replaces.
    SelectFromShapley : feature selection on these values.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import LinearRegression
    >>> from hitml.sklearn_ext import ShapleyExplainer, ShapleySampler
    >>> X = np.random.default_rng(0).normal(size=(100, 3))
    >>> model = LinearRegression().fit(X, X @ np.array([1.0, 2.0, 0.0]))
    >>> explainer = ShapleyExplainer(model, ShapleySampler(random_state=0), max_evals=8, background_size=20).fit(X)
    >>> phi = explainer.transform(X[:2])                      # 8 = 2^3 coalitions: exact
    >>> bool(np.allclose(phi.sum(1) + explainer.expected_value_, model.predict(X[:2])))
    True
    """

    def __init__(self, estimator=None, sampler: ShapleySampler | None = None, max_evals="auto", batch_size="auto",
                 response_method: str = "auto", background_size: int = 100, model_input: str = "auto",
                 tol: float | None = None, progress: bool | None = None):
        self.estimator = estimator
        self.tol = tol
        self.progress = progress
        self.sampler = sampler
        self.max_evals = max_evals
        self.batch_size = batch_size
        self.response_method = response_method
        self.background_size = background_size
        self.model_input = model_input

    # ------------------------------------------------------------------ set-up
    def _sampler(self) -> ShapleySampler:
        return ShapleySampler() if self.sampler is None else self.sampler

    def fit(self, X, y=None):
        """Store the background (X, subsampled to ``background_size`` rows); fit a clone of an unfitted estimator on
        (X, y). Checks that the model predicts on X's width."""
        if self.estimator is None:
            raise ValueError("ShapleyExplainer needs an estimator (a fitted model or a prediction callable)")
        check_progress(self.progress)
        if self.tol is not None:
            self._check_tol(ShapleySampler("regression"))
        est = self.estimator
        is_estimator = hasattr(est, "fit") or hasattr(est, "predict")
        if is_estimator and not _is_fitted(est):
            if y is None:
                raise NotFittedError(f"{type(est).__name__} is not fitted: fit it first, pass y to "
                                     "ShapleyExplainer.fit, or wrap it in sklearn.frozen.FrozenEstimator to keep it "
                                     "fitted through clone()")
            est = clone(est).fit(X, y)
        self.estimator_ = est
        Xv = validate_data(self, X, reset=True, ensure_all_finite=not self._allow_nan(), dtype=[np.float64, np.float32])
        d = Xv.shape[1]
        fitted_width = getattr(est, "n_features_in_", None)
        if fitted_width is not None and fitted_width != d:
            raise ValueError(f"the background has {d} columns but {type(est).__name__} was fitted on {fitted_width}")
        if not isinstance(self.background_size, numbers.Integral) or self.background_size < 1:
            raise ValueError(f"background_size must be a positive int, got {self.background_size!r}")
        rng = check_random_state(self._sampler().random_state)
        if Xv.shape[0] > self.background_size:
            Xv = Xv[np.sort(rng.choice(Xv.shape[0], self.background_size, replace=False))]
        self.background_ = Xv
        self._predict_fn = _response(est, self.response_method) if is_estimator else _response(est, "auto")
        try:
            base = np.asarray(self._call_model_host(self.background_), dtype=np.float64)
        except Exception as exc:
            raise ValueError(f"the model cannot predict on the background ({type(exc).__name__}: {exc})") from exc
        if base.shape[0] != Xv.shape[0] or base.ndim > 2:
            raise ValueError(f"the model returned shape {base.shape} for {Xv.shape[0]} rows; expected (n,) or (n, k)")
        self.n_outputs_ = 1 if base.ndim == 1 else base.shape[1]
        self._multi_output = base.ndim == 2
        self.expected_value_ = base.mean(axis=0) if base.ndim == 2 else float(base.mean())
        return self

    def _allow_nan(self) -> bool:
        est = self.estimator
        if hasattr(est, "__sklearn_tags__"):
            try:
                return bool(get_tags(est).input_tags.allow_nan)
            except Exception:  # noqa: BLE001 - a third-party estimator's tags may fail to build; treat as no NaN
                return False
        return True

    def _frame(self, X):
        names = getattr(self, "feature_names_in_", None)
        if names is not None and hasattr(self.estimator_, "feature_names_in_"):
            import pandas as pd

            return pd.DataFrame(X, columns=names)
        return X

    def _call_model_host(self, X):
        return self._predict_fn(self._frame(X))

    def _budget(self, d: int) -> int:
        """Evaluations per row for d varying features: max_evals, or for "auto" what n_permutations (default 10)
        permutations cost, 2 + n (d - 1)."""
        if self.max_evals == "auto":
            return 2 + (self._sampler().n_permutations or 10) * max(1, d - 1)
        if not isinstance(self.max_evals, numbers.Integral) or isinstance(self.max_evals, bool):
            raise ValueError(f"max_evals must be 'auto' or an int, got {self.max_evals!r}")
        return int(self.max_evals)

    def _regression_budget(self, d: int) -> int:
        """The budget capped at the 2^d coalitions there are; at least d + 1 (else ValueError)."""
        budget = self._budget(d)
        if budget < min(d + 1, 2 ** d):
            raise ValueError(f"max_evals={budget} is too small for a regression over the {d} varying features: it "
                             f"needs d + 1 = {d + 1} evaluations (coalitions per row)")
        return min(budget, 2 ** d) if d < 63 else budget

    def _n_samples(self, d: int, sampler: ShapleySampler) -> int:
        if sampler.is_regression:
            return self._regression_budget(d)
        n_perm = sampler.n_permutations
        if self.max_evals == "auto":
            return n_perm or 10
        if not isinstance(self.max_evals, numbers.Integral):
            raise ValueError(f"max_evals must be 'auto' or an int, got {self.max_evals!r}")
        kind = "permutations" if sampler.is_permutation_method else "masks"
        n = samples_for_budget(kind, int(self.max_evals), d)
        if n < 1:
            what = ("2 + (d - 1)" if kind == "permutations" else "d + 1") + f" = {evaluations_per_row(kind, 1, d)}"
            raise ValueError(f"max_evals={self.max_evals} is too small for one permutation of the {d} varying "
                             f"features: it needs {what} evaluations (coalitions per row)")
        if sampler.method in PAIRED_METHODS and n >= 2:
            n -= n % 2  # whole antithetic pairs: an unpaired last sample adds more variance than it removes
        return n if n_perm is None else min(n, n_perm)

    def _batch_rows(self, d: int, gpu: bool) -> int:
        if self.batch_size != "auto":
            if not isinstance(self.batch_size, numbers.Integral) or self.batch_size < 1:
                raise ValueError(f"batch_size must be 'auto' or a positive int, got {self.batch_size!r}")
            return int(self.batch_size)
        if gpu:
            from hitml.kernels.device import free_gpu_bytes

            return int(max(self.background_.shape[0], min(1 << 22, free_gpu_bytes(0.25) // (8 * d + 64))))
        return int(max(self.background_.shape[0], (64 << 20) // (8 * d + 64)))

    # ------------------------------------------------------------------ outputs
    def _budget_cap(self, d: int) -> int:
        """With ``tol``: the evaluations a row may spend at most (max_evals, or TOL_AUTO_CAP (d + 1) for "auto")."""
        if self.max_evals == "auto":
            return TOL_AUTO_CAP * (d + 1)
        return self._budget(d)

    def _check_tol(self, sampler: ShapleySampler) -> None:
        if self.tol is None:
            return
        if isinstance(self.tol, bool) or not isinstance(self.tol, numbers.Real) or not self.tol > 0:
            raise ValueError(f"tol must be None or a positive number, got {self.tol!r}")
        if not sampler.is_regression:
            raise ValueError(f"tol= needs the regression estimator's standard errors; the {sampler.method!r} "
                             "sampler has none (use method='auto' or 'regression')")

    def _designs(self, sampler: ShapleySampler):
        """The design for a game of ``width`` varying features, from the parameters (``shapley_rows``' design_for)."""
        plans: dict = {}  # an int seed gives every pattern of one width the same plan: build it once

        def design_for(width: int):
            if self.tol is not None:
                rs = check_random_state(sampler.random_state)
                seed = [int(x) for x in rs.randint(0, 2 ** 31 - 1, size=4)]
                return SequentialDesign(float(self.tol), self._budget_cap(width), seed, noise="none")
            chosen = sampler.resolved(width, self._budget(width))
            if chosen.is_regression:  # one design per group, whatever its blocks
                key = (width, self._regression_budget(width))
                plan = plans.get(key) or chosen.plan(*key)
                if isinstance(chosen.random_state, numbers.Integral):
                    plans[key] = plan
                return plan
            samples, weights = chosen.sample(width, self._n_samples(width, chosen))
            return PermutationDesign(samples, weights, "permutations" if chosen.is_permutation_method else "masks")

        return design_for

    def shapley_values(self, X, *, return_error_std: bool = False):
        """(phi, base): phi (n, d) or (n, d, k) as NumPy, base value (scalar or (k,)).

        Like shap's PermutationExplainer, only the *varying* features of a row are permuted: a feature whose value
        equals that of every background row is a dummy (its Shapley value is exactly 0), so the budget buys
        ``(max_evals - 2) // (d_varying - 1)`` permutations. Rows with the same varying set share one sample.

        With ``return_error_std=True``: (phi, base, error_std, evaluations), error_std the standard error of every
        value (phi's shape; 0 for dummies and where every coalition was evaluated, NaN for the permutation samplers)
        and evaluations (n,) the coalitions evaluated per row (with ``tol``, what each row spent).
        """
        check_is_fitted(self, "background_")
        check_progress(self.progress)
        X = validate_data(self, X, reset=False, ensure_all_finite=not self._allow_nan(), dtype=[np.float64, np.float32])
        X = X.astype(np.float64)
        bg = self.background_.astype(np.float64)
        d = X.shape[1]
        sampler = self._sampler()
        gpu = resolve_backend(sampler.backend) == "gpu"
        xp = np
        to_model = None
        predict = self._call_model_host
        if gpu:
            from hitml.kernels.device import cupy_module

            xp = cupy_module()
            device_in = self.model_input == "device" or (
                self.model_input == "auto" and type(self.estimator_).__module__.startswith("xgboost"))
            predict = self._predict_fn if device_in else self._call_model_host
            to_model = None if device_in else to_numpy
        if self.tol is not None:
            sampler = sampler if sampler.method != "auto" else clone(sampler).set_params(method="regression")
            self._check_tol(sampler)
        else:
            self._n_samples(d, sampler.resolved(d, self._budget(d)))  # validates max_evals for the full width
        phi, se, spent = shapley_rows(predict, X, bg, self._designs(sampler), n_outputs=self.n_outputs_,
                                      batch_rows=self._batch_rows(d, gpu), xp=xp, to_model=to_model,
                                      progress=self.progress)
        out = phi if self._multi_output else phi[:, :, 0]
        if return_error_std:
            return out, self.expected_value_, (se if self._multi_output else se[:, :, 0]), spent
        return out, self.expected_value_

    def transform(self, X):
        """Shapley values: (n, d), or (n, d, k) for multi-output models (e.g. predict_proba)."""
        return self.shapley_values(X)[0]

    def explain(self, X):
        """A shap.Explanation with values, base_values, data and feature names; ``error_std`` holds the standard
        error of every value and ``lower_bounds`` / ``upper_bounds`` its 95% interval (value ± 1.96 error_std)."""
        import shap

        values, base, err, _ = self.shapley_values(X, return_error_std=True)
        n = values.shape[0]
        base_values = np.tile(np.asarray(base, dtype=np.float64), (n, 1)) if self._multi_output else np.full(n, base)
        names = getattr(self, "feature_names_in_", None)
        names = list(names) if names is not None else [f"Feature {i}" for i in range(values.shape[1])]
        return shap.Explanation(values=values, base_values=base_values, data=np.asarray(to_numpy(X)),
                                feature_names=names, error_std=err, lower_bounds=values - Z95 * err,
                                upper_bounds=values + Z95 * err)

    def __call__(self, X):
        """shap-style call: ``explainer(X)`` is ``explain(X)``."""
        return self.explain(X)

    def get_feature_names_out(self, input_features=None):
        """One output column per input feature (its Shapley value), named like the input."""
        check_is_fitted(self, "background_")
        return check_feature_names_in(self, input_features)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = self._allow_nan()
        tags.non_deterministic = self._sampler().random_state is None
        return tags
