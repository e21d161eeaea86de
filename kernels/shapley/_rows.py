"""The per-row loop: Shapley values and standard errors of many rows of a model, one design per set of varying
features, evaluated in blocks of rows (the same bytes for a row alone or in a block)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .._progress import progress_enabled
from ..device import to_numpy
from ._coalitions import coalition_values, estimate_shapley, evaluations_per_row
from ._regression import RegressionPlan
from ._sequential import shapley_until

ROW_BAR_DELAY = 2.0  # seconds before the rows bar shows: calls shorter than this show none


@dataclass(frozen=True)
class PermutationDesign:
    """A permutation (or Owen mask) sample for :func:`shapley_rows`: the seed's estimators, no standard errors.

    Parameters
    ----------
    samples : array of shape (n, d)
        Insertion orders (``kind="permutations"``) or int8 masks (``kind="masks"``), from :func:`sample`.
    weights : array of shape (n,)
        Sample weights summing to 1.
    kind : {"permutations", "masks"}
        What ``samples`` holds.

    Examples
    --------
    >>> from hitml.kernels.shapley import PermutationDesign, sample
    >>> design = PermutationDesign(*sample("antithetic", 4, 3, seed=0), kind="permutations")
    >>> design.samples.shape, design.kind
    ((4, 3), 'permutations')
    """

    samples: Any
    weights: Any
    kind: str = "permutations"


@dataclass(frozen=True)
class SequentialDesign:
    """The stopping rule for :func:`shapley_rows`: grow each row's regression design until every 95% interval is
    narrower than ``tol`` or ``max_evals`` coalitions are spent (:func:`shapley_until`).

    Parameters
    ----------
    tol : float
        Widest 95% interval allowed (model output units).
    max_evals : int
        Coalitions a row may spend at most.
    seed : None, int or sequence of int
        Seed of the designs (the same for every block of rows).
    noise : {"none", "auto"}, default "none"
        "none" for exact v(S) (a fixed background).

    Examples
    --------
    >>> from hitml.kernels.shapley import SequentialDesign
    >>> SequentialDesign(tol=0.01, max_evals=400, seed=0).max_evals
    400
    """

    tol: float
    max_evals: int
    seed: Any = None
    noise: str = "none"


Design = RegressionPlan | PermutationDesign | SequentialDesign


def varying_features(X: np.ndarray, background: np.ndarray) -> np.ndarray:
    """(m, d) bool: feature j of row i differs from it in some background row (NaN equals NaN); the others are
    dummies of the row's game, with Shapley value exactly 0.

    Parameters
    ----------
    X : ndarray of shape (m, d)
        Rows to explain.
    background : ndarray of shape (b, d)
        Background rows.

    Returns
    -------
    ndarray of shape (m, d), bool

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.kernels.shapley import varying_features
    >>> varying_features(np.array([[1.0, 2.0]]), np.array([[1.0, 0.0], [1.0, 3.0]])).tolist()
    [[False, True]]
    """
    X, background = np.asarray(X), np.asarray(background)
    out = [(background != x).any(axis=0) | (np.isnan(background) != np.isnan(x)).any(axis=0) for x in X]
    return np.array(out, dtype=bool).reshape(X.shape)


def _restricted(predict: Callable, to_model: Callable | None, x_full: np.ndarray, cols: np.ndarray, xp) -> Callable:
    """The model seen through the varying columns: the other columns keep x's value (equal to every background row)."""
    x_dev, cols_dev = xp.asarray(x_full), xp.asarray(cols)

    def f(Z):
        full = xp.repeat(x_dev[None, :], Z.shape[0], axis=0)
        full[:, cols_dev] = Z
        return predict(full if to_model is None else to_model(full))

    return f


def _row_bar(total: int, progress: bool | None):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="Shapley values", unit="rows", disable=not progress_enabled(progress),
                delay=ROW_BAR_DELAY, leave=False)


def shapley_rows(predict: Callable, X: np.ndarray, background: np.ndarray, design_for: Callable[[int], Design], *,
                 n_outputs: int = 1, batch_rows: int = 1 << 18, xp=np, to_model: Callable | None = None,
                 progress: bool | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Shapley values of every row of X, their standard errors and the evaluations each row spent.

    v(S) = mean over background rows b of f(x_S, b_{not S}) (shap's interventional convention). Only a row's varying
    features (:func:`varying_features`) take part in its game; rows with the same varying set share one design,
    ``design_for(width)``: a :class:`RegressionPlan` (fixed coalitions, the kriging or kernel-weighted fit), a
    :class:`PermutationDesign` (the seed's samplers) or a :class:`SequentialDesign` (``tol=``). Rows are evaluated
    in blocks, each row's bytes independent of its block.

    Parameters
    ----------
    predict : callable
        Model rows (n, d) -> predictions (n,) or (n, k).
    X : ndarray of shape (m, d)
        Rows to explain (float64, host).
    background : ndarray of shape (b, d)
        Background rows (float64, host).
    design_for : callable
        ``design_for(width)`` -> the design for a game of ``width`` varying features.
    n_outputs : int, default 1
        k, the model's outputs.
    batch_rows : int, default 2**18
        Model rows per ``predict`` call.
    xp : module, default numpy
        Where masked rows are built (``numpy`` or ``cupy``); the estimators run on the host in float64, so CPU and
        GPU give the same bytes for the same v(S).
    to_model : callable, optional
        Converts a batch before ``predict`` (e.g. to the host).
    progress : bool, optional
        A tqdm bar by rows done on calls over 2 seconds (None follows ``HITML_PROGRESS``).

    Returns
    -------
    tuple of ndarrays
        ``(values (m, d, k), standard errors (m, d, k), evaluations (m,))``: errors are 0 for dummies and exact
        designs, NaN for permutation designs.

    See Also
    --------
    shap.KernelExplainer, shap.PermutationExplainer : shap's per-row estimators.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.kernels.shapley import RegressionPlan, shapley_rows
    >>> X, bg = np.array([[1.0, 1.0, 1.0]]), np.zeros((4, 3))
    >>> phi, se, spent = shapley_rows(lambda Z: Z @ np.array([1.0, 2.0, 3.0]), X, bg,
    ...                               lambda width: RegressionPlan(width, 8, seed=0, noise="none"))
    >>> phi[0, :, 0].round(6).tolist(), float(se.max()), spent.tolist()   # 2^3 coalitions: exact
    ([1.0, 2.0, 3.0], 0.0, [8])
    """
    X = np.asarray(X, dtype=np.float64)
    background = np.asarray(background, dtype=np.float64)
    m, d = X.shape
    patterns, group = np.unique(varying_features(X, background), axis=0, return_inverse=True)
    group = group.ravel()
    phi = np.zeros((m, d, n_outputs))
    se = np.zeros((m, d, n_outputs))
    spent = np.zeros(m, dtype=np.int64)
    with _row_bar(m, progress) as bar:
        for g, pattern in enumerate(patterns):
            rows_g = np.flatnonzero(group == g)
            cols = np.flatnonzero(pattern)
            if cols.size == 0:
                bar.update(rows_g.size)
                continue
            width = cols.size
            design = design_for(width)
            # rows in blocks, so the bar moves by rows done (a row gets the same bytes alone or in a block)
            block = max(64, -(-rows_g.size // 20))
            for lo in range(0, rows_g.size, block):
                rows = rows_g[lo:lo + block]
                f = _restricted(predict, to_model, X[rows[0]], cols, xp) if width < d else predict
                inner_to_model = None if width < d else to_model

                def values(coalitions, which, rows=rows, f=f, cols=cols, inner_to_model=inner_to_model):
                    return to_numpy(coalition_values(f, X[np.ix_(rows[which], cols)], background[:, cols],
                                                     coalitions, batch_rows=batch_rows, xp=xp,
                                                     to_model=inner_to_model, progress=False))

                at = np.ix_(rows, cols)
                if isinstance(design, SequentialDesign):
                    phi[at], se[at], spent[rows] = shapley_until(values, width, rows.size, tol=float(design.tol),
                                                                 max_evals=design.max_evals, seed=design.seed,
                                                                 noise=design.noise)
                elif isinstance(design, RegressionPlan):
                    est, err = design.apply_se(values(design.coalitions, np.arange(rows.size)))
                    phi[at], se[at], spent[rows] = est, err, design.evaluations
                else:
                    part, _ = estimate_shapley(f, X[at], background[:, cols], design.samples, design.weights,
                                               kind=design.kind, batch_rows=batch_rows, xp=xp,
                                               to_model=inner_to_model)
                    phi[at] = to_numpy(part)
                    se[at] = np.nan
                    spent[rows] = evaluations_per_row(design.kind, int(design.samples.shape[0]), width)
                bar.update(rows.size)
    return phi, se, spent
