"""Batched coalition evaluation: masked rows (foreground x coalition x background) built on the device, v(S) reuse."""
from __future__ import annotations

from typing import Callable

import numpy as np

from hitml.kernels._progress import progress_bar

from ._permutation_kernels import rank_vectors


def permutation_coalitions(perms, xp=np):
    """Prefix coalitions of each permutation: (n, d+1, d) bool, [p, t] = the first t features of order p.

    Prefix 0 is the empty set and prefix d the full set for every permutation; ``estimate_shapley`` evaluates those
    two once per row and only the d - 1 interior prefixes per permutation (``interior_coalitions``).
    """
    ranks = rank_vectors(xp.asarray(perms), xp)
    d = ranks.shape[1]
    return ranks[:, None, :] < xp.arange(d + 1)[None, :, None]


def interior_coalitions(perms, xp=np):
    """The d - 1 prefixes of each permutation strictly between the empty and the full set: (n, d-1, d) bool."""
    return permutation_coalitions(perms, xp)[:, 1:-1, :]


def evaluations_per_row(kind: str, n: int, d: int) -> int:
    """Evaluations (coalitions, each over the whole background) that ``estimate_shapley`` spends per explained row.

    Permutations: v(empty) and v(all) once per row, shared by every permutation, plus d - 1 interior prefixes per
    permutation: 2 + n (d - 1). Owen masks: a mask and its d single-feature toggles: n (d + 1).

    Parameters
    ----------
    kind : {"permutations", "masks"}
        The sample's kind.
    n : int
        Samples per row.
    d : int
        Features.

    Returns
    -------
    int

    See Also
    --------
    samples_for_budget : the inverse.

    Examples
    --------
    >>> from hitml.kernels.shapley import evaluations_per_row
    >>> evaluations_per_row("permutations", 10, 5)
    42
    """
    if kind == "permutations":
        return 2 + n * (d - 1)
    if kind == "masks":
        return n * (d + 1)
    raise ValueError(f"kind must be 'permutations' or 'masks', got {kind!r}")


def samples_for_budget(kind: str, max_evals: int, d: int) -> int:
    """The most samples whose cost ``evaluations_per_row(kind, n, d)`` fits in ``max_evals`` (0 if not even one).

    With d = 1 a permutation adds no coalition beyond the two endpoints, and one permutation is exact: 1 if
    max_evals >= 2.

    Parameters
    ----------
    kind : {"permutations", "masks"}
        The sample's kind.
    max_evals : int
        Evaluations allowed per row.
    d : int
        Features.

    Returns
    -------
    int

    See Also
    --------
    evaluations_per_row : the cost of n samples.

    Examples
    --------
    >>> from hitml.kernels.shapley import samples_for_budget
    >>> samples_for_budget("permutations", 42, 5)
    10
    """
    if kind == "permutations":
        if max_evals < d + 1:
            return 0
        return 1 if d == 1 else (max_evals - 2) // (d - 1)
    evaluations_per_row(kind, 1, d)  # validates kind
    return max_evals // (d + 1)


def mask_coalitions(masks, xp=np):
    """Owen coalitions: mask b, then b with feature j toggled, j = 0..d-1: (n, d+1, d) bool (d + 1 evaluations)."""
    b = xp.asarray(masks).astype(bool)
    d = b.shape[1]
    eye = xp.eye(d, dtype=bool)
    return xp.concatenate([b[:, None, :], b[:, None, :] ^ eye[None, :, :]], axis=1)


def coalition_values(predict: Callable, X, background, coalitions, *, batch_rows: int, xp=np,
                     to_model: Callable | None = None, progress: bool | None = None):
    """v(S) = mean_b f(x_S, b_{not S}) for every foreground row and coalition.

    X (m, d), background (nb, d), coalitions (C, d) bool shared by all rows. Returns (m, C, k) float64. The model
    sees at most ``batch_rows`` rows per call (rounded to whole coalitions); ``to_model`` converts the device array
    to what the model takes (e.g. to host) and the output is brought back to ``xp``.
    """
    X, background, coalitions = xp.asarray(X), xp.asarray(background), xp.asarray(coalitions)
    m, d = X.shape
    nb = background.shape[0]
    C = coalitions.shape[0]
    per_call = max(1, batch_rows // nb)  # (row, coalition) pairs per model call
    total = m * C
    out = None
    with progress_bar(total, "coalitions", progress, unit="coalitions", min_total=200_000) as bar:
        for start in range(0, total, per_call):
            stop = min(total, start + per_call)
            pair = xp.arange(start, stop)
            rows, coal = pair // C, pair % C
            masked = xp.where(coalitions[coal][:, None, :], X[rows][:, None, :], background[None, :, :])
            flat = masked.reshape(-1, d)
            pred = predict(flat if to_model is None else to_model(flat))
            pred = xp.asarray(pred, dtype=xp.float64)
            if pred.ndim == 1:
                pred = pred[:, None]
            if pred.shape[0] != flat.shape[0]:
                raise ValueError(f"the model returned {pred.shape[0]} predictions for {flat.shape[0]} rows")
            v = pred.reshape(stop - start, nb, -1).mean(axis=1)
            if out is None:
                out = xp.empty((total, v.shape[1]))
            out[start:stop] = v
            bar.update(stop - start)
    return out.reshape(m, C, -1)


def shapley_from_permutations(values, perms, weights, xp=np):
    """phi_j = sum_p w_p (v(prefix before j plus j) - v(prefix before j)); values (m, n, d+1, k) -> (m, d, k)."""
    ranks = rank_vectors(xp.asarray(perms), xp)  # (n, d)
    diffs = values[:, :, 1:, :] - values[:, :, :-1, :]  # (m, n, d, k): marginal at step t
    at_feature = xp.take_along_axis(diffs, xp.broadcast_to(ranks[None, :, :, None], diffs.shape), axis=2)
    w = xp.asarray(weights, dtype=xp.float64)
    return xp.einsum("p,mpjk->mjk", w, at_feature)


def shapley_from_masks(values, masks, weights, xp=np):
    """Owen estimator: marginal of j at mask b is v(b + j) - v(b - j); values (m, n, d+1, k) -> (m, d, k)."""
    b = xp.asarray(masks).astype(bool)  # (n, d)
    v0 = values[:, :, :1, :]
    vj = values[:, :, 1:, :]
    marg = xp.where(b[None, :, :, None], v0 - vj, vj - v0)
    w = xp.asarray(weights, dtype=xp.float64)
    return xp.einsum("p,mpjk->mjk", w, marg)


def estimate_shapley(predict: Callable, X, background, samples, weights, *, kind: str = "permutations",
                     batch_rows: int = 1 << 18, xp=np, to_model: Callable | None = None,
                     progress: bool | None = None):
    """Shapley values (m, d, k) and the base value v({}) (k,) from a permutation (or Owen mask) sample.

    Evaluations per foreground row (``evaluations_per_row``), each a coalition over all background rows:
    permutations 2 + n (d - 1) (v(empty) and v(all) are shared by all permutations of a row), Owen masks n (d + 1).
    For permutations the base value is that row-independent v(empty) (no extra model call).

    Parameters
    ----------
    predict : callable
        Maps rows (n, d) to predictions (n,) or (n, k).
    X : array-like of shape (m, d)
        Rows to explain.
    background : array-like of shape (b, d)
        Background rows: a coalition's value is the mean prediction over them with the coalition's features from X.
    samples, weights : arrays
        From :func:`sample`.
    kind : {"permutations", "masks"}, default "permutations"
        What ``samples`` holds.
    batch_rows : int, default 2**18
        Rows per ``predict`` call.
    xp : module, default numpy
        ``numpy`` or ``cupy``.
    to_model : callable, optional
        Converts a batch before ``predict`` (e.g. to a DataFrame).
    progress : bool, optional
        A tqdm bar (None follows ``HITML_PROGRESS``).

    Returns
    -------
    tuple
        ``(values (m, d, k), base_value (k,))``.

    See Also
    --------
    shap.PermutationExplainer : shap's permutation estimator.
    hitml.sklearn_ext.ShapleyExplainer : the estimator built on it.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.kernels.shapley import estimate_shapley, sample
    >>> X, bg = np.ones((1, 3)), np.zeros((4, 3))
    >>> perms, w = sample("mc", 6, 3, seed=0)
    >>> phi, base = estimate_shapley(lambda Z: Z @ np.array([1.0, 2.0, 3.0]), X, bg, perms, w)
    >>> phi[0, :, 0].round(6).tolist(), base.tolist()        # a linear model: exact from any permutation
    ([1.0, 2.0, 3.0], [0.0])
    """
    samples = xp.asarray(samples)
    n, d = samples.shape
    if kind == "permutations":
        ends = xp.stack([xp.zeros(d, dtype=bool), xp.ones(d, dtype=bool)])  # (2, d): empty set, full set
        coal = xp.concatenate([ends, interior_coalitions(samples, xp).reshape(n * (d - 1), d)])
        vals = coalition_values(predict, X, background, coal, batch_rows=batch_rows, xp=xp, to_model=to_model,
                                progress=progress)  # (m, 2 + n (d - 1), k)
        m, k = vals.shape[0], vals.shape[2]
        inner = vals[:, 2:, :].reshape(m, n, d - 1, k)
        full = xp.concatenate([xp.broadcast_to(vals[:, None, 0:1, :], (m, n, 1, k)), inner,
                               xp.broadcast_to(vals[:, None, 1:2, :], (m, n, 1, k))], axis=2)  # (m, n, d+1, k)
        return shapley_from_permutations(full, samples, weights, xp), vals[0, 0, :]
    coal = mask_coalitions(samples, xp)
    c = coal.shape[1]
    vals = coalition_values(predict, X, background, coal.reshape(n * c, d), batch_rows=batch_rows, xp=xp,
                            to_model=to_model, progress=progress)
    phi = shapley_from_masks(vals.reshape(vals.shape[0], n, c, -1), samples, weights, xp)
    base = xp.asarray(predict(background if to_model is None else to_model(background)), dtype=xp.float64)
    return phi, base.reshape(background.shape[0], -1).mean(axis=0)
