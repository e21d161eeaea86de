"""Batched coalition evaluation: masked rows (foreground x coalition x background) built on the device, v(S) reuse."""
from __future__ import annotations

from typing import Callable

import numpy as np

from kernels._progress import progress_bar

from ._kernels import rank_vectors


def permutation_coalitions(perms, xp=np):
    """Prefix coalitions of each permutation: (n, d+1, d) bool, [p, t] = the first t features of order p.

    Consecutive prefixes share v(S), so one permutation costs d + 1 evaluations and yields d marginals.
    """
    ranks = rank_vectors(xp.asarray(perms), xp)
    d = ranks.shape[1]
    return ranks[:, None, :] < xp.arange(d + 1)[None, :, None]


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

    Model evaluations per foreground row: n (d + 1) coalitions, each over all background rows.
    """
    coal = permutation_coalitions(samples, xp) if kind == "permutations" else mask_coalitions(samples, xp)
    n, c, d = coal.shape
    vals = coalition_values(predict, X, background, coal.reshape(n * c, d), batch_rows=batch_rows, xp=xp,
                            to_model=to_model, progress=progress)
    vals = vals.reshape(vals.shape[0], n, c, -1)
    est = shapley_from_permutations if kind == "permutations" else shapley_from_masks
    phi = est(vals, samples, weights, xp)
    base = xp.asarray(predict(background if to_model is None else to_model(background)), dtype=xp.float64)
    base = base.reshape(background.shape[0], -1).mean(axis=0)
    return phi, base
