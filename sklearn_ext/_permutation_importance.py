"""sklearn.inspection.permutation_importance drop-in: every (column, repeat) gets its own bijective-shuffle permutation,
permuted copies are stacked and predicted in batches, and CuPy data (e.g. XGBoost with device="cuda") stays on the GPU."""
from __future__ import annotations

import numbers

import numpy as np
from sklearn.base import is_classifier, is_regressor
from sklearn.metrics import check_scoring, get_scorer_names
from sklearn.utils import Bunch, check_array, check_consistent_length

from hitml.kernels._progress import progress_bar
from hitml.kernels.device import cupy_module, is_cupy_array, resolve_backend
from hitml.kernels.shuffle import as_generator, base_key, batch_round_keys
from hitml.kernels.shuffle import cpu as _cpu

from ._compat import (HasMethods, Interval, InvalidParameterError, RealNotInt, StrOptions,
                      validate_parameter_constraints)

_FAST = ("r2", "neg_mean_squared_error", "neg_root_mean_squared_error", "neg_mean_absolute_error", "accuracy",
         "neg_log_loss")
_SMALL_D = 4096  # up to this many rows per permutation, one batched launch makes all of a batch's permutations

# scikit-learn's own constraints for sklearn.inspection.permutation_importance (its @validate_params), so that a bad
# parameter raises the same InvalidParameterError with the same message
_CONSTRAINTS = {
    "estimator": [HasMethods(["fit"])],
    "X": ["array-like"],
    "y": ["array-like", None],
    "scoring": [StrOptions(set(get_scorer_names())), callable, list, tuple, dict, None],
    "n_repeats": [Interval(numbers.Integral, 1, None, closed="left")],
    "n_jobs": [numbers.Integral, None],
    "random_state": ["random_state"],
    "sample_weight": ["array-like", None],
    "max_samples": [Interval(numbers.Integral, 1, None, closed="left"), Interval(RealNotInt, 0, 1, closed="right")],
}
_BACKENDS = ("auto", "cpu", "gpu", None)


class _Replay:
    """The estimator as sklearn's scorer sees it, answering predict / predict_proba with predictions already made:
    the scorer then checks labels and scores exactly as scikit-learn does (its exceptions, its messages)."""

    def __init__(self, estimator, pred):
        self._estimator = estimator
        self._pred = pred

    def __getattr__(self, name):
        return getattr(self._estimator, name)

    def __sklearn_tags__(self):
        return self._estimator.__sklearn_tags__()

    def predict(self, X):
        return self._pred

    def predict_proba(self, X):
        return self._pred


def _host(a):
    return a.get() if is_cupy_array(a) else a


def _sklearn_baseline(estimator, scoring, X, y, w, pred) -> float:
    """scikit-learn's score of the baseline predictions (raises what sklearn.inspection.permutation_importance
    raises on these labels and this scoring)."""
    scorer = check_scoring(estimator, scoring=scoring)
    replay = _Replay(estimator, _host(pred))
    yh = _host(y)
    return scorer(replay, X, yh, sample_weight=_host(w)) if w is not None else scorer(replay, X, yh)


def _metric(estimator, scoring) -> str | None:
    """A metric computed here on predictions (NumPy or CuPy), or None for sklearn's scorer path."""
    if scoring is None:  # sklearn then calls estimator.score: accuracy / r2 unless the class defines its own
        from sklearn.base import ClassifierMixin, RegressorMixin

        score = getattr(type(estimator), "score", None)
        if is_classifier(estimator) and score is ClassifierMixin.score:
            return "accuracy"
        return "r2" if is_regressor(estimator) and score is RegressorMixin.score else None
    return scoring if isinstance(scoring, str) and scoring in _FAST else None


def _score(xp, name: str, y, pred, w, classes=None) -> float:
    """sklearn's metric (with sample weights) on one block of predictions."""
    wsum = float(w.sum()) if w is not None else float(y.shape[0])

    def avg(v):
        return float((v * w).sum() / wsum) if w is not None else float(v.mean())

    if name == "accuracy":
        return avg((y == pred.reshape(y.shape)).astype(xp.float64))
    if name == "neg_log_loss":
        proba = pred.reshape(y.shape[0], -1).astype(xp.float64)
        if proba.shape[1] == 1:
            proba = xp.concatenate([1 - proba, proba], axis=1)
        proba = proba / proba.sum(axis=1, keepdims=True)
        # sklearn's log_loss reads column k as the k-th sorted label of y_true (not of classes_)
        labels = xp.unique(y)
        if labels.shape[0] != proba.shape[1]:
            from sklearn.metrics import log_loss

            log_loss(_host(y), _host(proba))  # raises sklearn's error for this mismatch
        idx = xp.searchsorted(labels, y)
        p = xp.clip(proba[xp.arange(y.shape[0]), idx], np.finfo(np.float64).eps, 1.0)
        return avg(xp.log(p))
    err = y.astype(xp.float64) - pred.reshape(y.shape).astype(xp.float64)
    if name == "neg_mean_absolute_error":
        return -avg(xp.abs(err))
    mse = avg(err * err)
    if name == "neg_mean_squared_error":
        return -mse
    if name == "neg_root_mean_squared_error":
        return -float(np.sqrt(mse))
    ybar = avg(y.astype(xp.float64))
    d = y.astype(xp.float64) - ybar
    ss_tot = avg(d * d)
    if ss_tot == 0:
        return 1.0 if mse == 0 else 0.0
    return 1.0 - mse / ss_tot


def _predict(estimator, name: str, X, xp):
    out = estimator.predict_proba(X) if name == "neg_log_loss" else estimator.predict(X)
    return xp.asarray(out)


def _perms(q0: int, q1: int, d: int, base: int, gpu: bool):
    """Permutations of range(d) for flat rows [q0, q1) of the batch keyed by ``base`` (same on CPU and GPU)."""
    if gpu:
        from hitml.kernels.shuffle import gpu as _gpu

        if d <= _SMALL_D:
            return _gpu.batched_from_base(q1 - q0, d, base, start=q0)
        keys = batch_round_keys(base, np.arange(q0, q1))
        return [_gpu.permutation_from_keys(d, k) for k in keys]
    keys = batch_round_keys(base, np.arange(q0, q1))
    if d <= _SMALL_D:
        return _cpu.batched_from_keys(d, keys)
    return [_cpu.permutation_from_keys(d, k) for k in keys]


def _rows(a, idx):
    if a is None:
        return None
    return a.iloc[idx] if hasattr(a, "iloc") else a[idx]


def _check_inputs(X, y, sample_weight, backend):
    gpu = is_cupy_array(X) if backend in (None, "auto") else resolve_backend(backend) == "gpu"
    if gpu:
        cp = cupy_module()
        X = cp.asarray(X)
        y = cp.asarray(y)
        sample_weight = None if sample_weight is None else cp.asarray(sample_weight, dtype=cp.float64)
        if X.ndim != 2:
            raise ValueError(f"Expected 2D array, got array with shape {X.shape}")
        for name, v in (("y", y), ("sample_weight", sample_weight)):
            if v is not None and v.shape[0] != X.shape[0]:
                raise ValueError(f"Found input variables with inconsistent numbers of samples: "
                                 f"[{X.shape[0]}, {v.shape[0]}] ({name})")
        return X, y, sample_weight, True, cp
    if is_cupy_array(X):
        X = X.get()
    if y is not None:
        y = y.get() if is_cupy_array(y) else np.asarray(y)
    if not hasattr(X, "iloc"):
        X = check_array(X, ensure_all_finite="allow-nan", dtype=None)
    if sample_weight is not None:
        sample_weight = np.asarray(sample_weight, dtype=np.float64)
    check_consistent_length(*[a for a in (X, y, sample_weight) if a is not None])
    return X, y, sample_weight, False, np


def permutation_importance(estimator, X, y, *, scoring=None, n_repeats=5, n_jobs=None, random_state=None,
                           sample_weight=None, max_samples=1.0, backend="auto", max_batch_elements=1 << 25,
                           progress=None):
    """Permutation importance with sklearn's signature and Bunch result (importances_mean, importances_std, importances).

    importances[j, r] = baseline score on all of X - score with column j permuted (repeat r), on a subsample of
    max_samples rows per column if asked (as sklearn). Unlike sklearn, which reuses one sequence of shuffles for every
    column, each column gets its own independent permutations. Built-in scorers (None, "r2", "accuracy",
    "neg_mean_squared_error", "neg_root_mean_squared_error", "neg_mean_absolute_error", "neg_log_loss") score stacked
    batches of up to ``max_batch_elements`` permuted values per predict call, on NumPy or CuPy; any other scoring goes
    through sklearn's scorer once per (column, repeat). ``n_jobs`` is accepted for compatibility and not used.

    Parameters
    ----------
    estimator : object
        A fitted estimator (scikit-learn API; XGBoost with ``device="cuda"`` takes CuPy rows).
    X : array-like of shape (n_samples, n_features)
        NumPy, pandas or CuPy.
    y : array-like of shape (n_samples,)
        Targets.
    scoring : str, callable, list, tuple, dict or None
        As in scikit-learn; several metrics give a dict of Bunches.
    n_repeats : int, default 5
        Permutations per column.
    n_jobs : int or None
        Ignored (kept for the signature).
    random_state : None, int, numpy.random.Generator or numpy.random.RandomState
        Seed of the permutations.
    sample_weight : array-like of shape (n_samples,), optional
        Weights of the score.
    max_samples : int or float, default 1.0
        Rows drawn per repeat, as in scikit-learn.
    backend : {"auto", "cpu", "gpu"}, default "auto"
        Where the permutations are computed; "auto" follows the data.
    max_batch_elements : int, default 2**25
        Largest number of permuted values predicted in one call.
    progress : bool, optional
        A tqdm bar over the columns (None follows ``HITML_PROGRESS``).

    Returns
    -------
    sklearn.utils.Bunch or dict of Bunch
        ``importances_mean``, ``importances_std`` and ``importances`` (n_features, n_repeats).

    Raises
    ------
    ValueError
        On invalid ``n_repeats``, ``max_samples`` or inconsistent lengths, as scikit-learn.

    See Also
    --------
    sklearn.inspection.permutation_importance : the function this replaces.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import LinearRegression
    >>> from hitml.sklearn_ext import permutation_importance
    >>> X = np.random.default_rng(0).normal(size=(200, 3))
    >>> y = 2 * X[:, 0] + 0.1 * X[:, 1]
    >>> r = permutation_importance(LinearRegression().fit(X, y), X, y, n_repeats=3, random_state=0)
    >>> r.importances.shape, int(np.argmax(r.importances_mean))
    ((3, 3), 0)
    """
    validate_parameter_constraints(
        _CONSTRAINTS, {"estimator": estimator, "X": X, "y": y, "scoring": scoring, "n_repeats": n_repeats,
                       "n_jobs": n_jobs, "random_state": random_state, "sample_weight": sample_weight,
                       "max_samples": max_samples}, caller_name="permutation_importance")
    if backend not in _BACKENDS:
        raise InvalidParameterError(f"The 'backend' parameter of permutation_importance must be a str among "
                                    f"{{'auto', 'cpu', 'gpu'}} or None. Got {backend!r} instead.")
    if isinstance(max_batch_elements, bool) or not isinstance(max_batch_elements, numbers.Integral) \
            or max_batch_elements < 1:
        raise InvalidParameterError(f"The 'max_batch_elements' parameter of permutation_importance must be an int in "
                                    f"the range [1, inf). Got {max_batch_elements!r} instead.")
    X, y, w, gpu, xp = _check_inputs(X, y, sample_weight, backend)
    n, p = X.shape
    if not isinstance(max_samples, numbers.Integral):
        ns = int(max_samples * n)
    elif max_samples > n:
        raise ValueError("max_samples must be <= n_samples")
    else:
        ns = int(max_samples)
    name = _metric(estimator, scoring)
    if name is not None and (y is None or y.ndim != 1):
        name = None
    classes = getattr(estimator, "classes_", None)
    if name is not None:
        pred0 = _predict(estimator, name, X, xp)
        checked = _sklearn_baseline(estimator, name, X, y, w, pred0)
        baseline = _score(xp, name, y, pred0, w, classes)
        # sklearn scores float32 targets and predictions in float32 (array-API dtype matching), we in float64
        single = any(getattr(a, "dtype", None) == np.float32 for a in (y, pred0))
        if not np.isclose(baseline, checked, rtol=1e-5 if single else 1e-9, atol=1e-12):
            name = None  # not sklearn's number: score as sklearn does
    if name is None:
        scorer = check_scoring(estimator, scoring=scoring)

        def score_full(Xb, yb, wb):
            # sklearn's metrics take host arrays (a CuPy array refuses implicit conversion)
            Xb, yb, wb = _host(Xb), _host(yb), _host(wb)
            return scorer(estimator, Xb, yb, sample_weight=wb) if wb is not None else scorer(estimator, Xb, yb)
        baseline = score_full(X, y, w)

    gen = as_generator(random_state)
    base = base_key(gen)
    total = p * n_repeats
    is_df = hasattr(X, "iloc")
    batch = 1 if (name is None or is_df) else max(1, min(total, max_batch_elements // max(1, ns * p)))
    scores: list = [None] * total
    cache: dict = {}

    def column_data(c):
        if c not in cache:
            cache.clear()
            if ns < n:
                sub = _perms(total + c, total + c + 1, n, base, gpu)[0][:ns]
                sub = sub if not is_df else (sub.get() if is_cupy_array(sub) else sub)
                cache[c] = (_rows(X, sub), _rows(y, sub), _rows(w, sub))
            else:
                cache[c] = (X, y, w)
        return cache[c]

    with progress_bar(total, "permutation importance", progress, unit="columns") as bar:
        for q0 in range(0, total, batch):
            q1 = min(total, q0 + batch)
            perms = _perms(q0, q1, ns, base, gpu)
            blocks = []
            for b, q in enumerate(range(q0, q1)):
                c = q // n_repeats
                Xc, yc, wc = column_data(c)
                perm = perms[b]
                if is_df:
                    Xp = Xc.copy()
                    col = Xc.iloc[perm, c]
                    col.index = Xp.index
                    Xp[Xp.columns[c]] = col
                else:
                    Xp = Xc.copy()
                    Xp[:, c] = Xc[perm, c]
                blocks.append((Xp, yc, wc))
            if name is None:
                for b, (Xp, yc, wc) in enumerate(blocks):
                    scores[q0 + b] = score_full(Xp, yc, wc)
            else:
                stacked = blocks[0][0] if len(blocks) == 1 else xp.concatenate([blk[0] for blk in blocks])
                pred = _predict(estimator, name, stacked, xp)
                for b, (_, yc, wc) in enumerate(blocks):
                    scores[q0 + b] = _score(xp, name, yc, pred[b * ns:(b + 1) * ns], wc, classes)
            bar.update(q1 - q0)

    if isinstance(baseline, dict):
        return {k: _bunch(baseline[k], np.array([s[k] for s in scores]).reshape(p, n_repeats)) for k in baseline}
    return _bunch(baseline, np.array(scores, dtype=np.float64).reshape(p, n_repeats))


def _bunch(baseline: float, permuted: np.ndarray) -> Bunch:
    imp = baseline - permuted
    return Bunch(importances_mean=np.mean(imp, axis=1), importances_std=np.std(imp, axis=1), importances=imp)
