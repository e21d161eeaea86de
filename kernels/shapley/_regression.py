"""Kernel-weighted polynomial regression over coalitions: the linear map from v(S) values to Shapley values."""
from __future__ import annotations

import itertools
import math

import numpy as np

from ._design import coalition_design


def n_terms(d: int, order: int) -> int:
    """Basis terms (interactions of 1..order features) of an order-``order`` surrogate game."""
    return sum(math.comb(d, t) for t in range(1, order + 1))


MAX_ORDER3_TERMS = 2000  # keeps the order-3 operator's (terms + 1)^2 pseudo-inverse to about a second


def order3_weight(d: int, budget: int) -> float:
    """Weight of the order-3 fit in "auto" (the rest on order 1), from r = (budget - 2) / (d + C(d,2) + C(d,3)).

    Below r = 1.2 the order-3 fit is underdetermined (paired coalitions pin one odd-order equation per pair) and
    noisy, order 1 is biased by the interactions it cannot represent, and their average beats both (measured on
    d = 12 XGBoost games, docs/design/shapley.md): 0.6 r up to 0.6, then 1 from r = 1.2 on. 0 where order 3 has
    more than MAX_ORDER3_TERMS terms or d < 3.
    """
    if d < 3 or n_terms(d, 3) > MAX_ORDER3_TERMS:
        return 0.0
    r = (budget - 2) / n_terms(d, 3)
    if r >= 1.2:
        return 1.0
    w = min(0.6, 0.6 * r)
    return w if w >= 0.15 else 0.0


def auto_order(d: int, budget: int) -> int:
    """The order "auto" fits: 3 when it carries any weight (order3_weight > 0), else 1.

    With paired coalitions an even order adds nothing: S and its complement fix the even part of the game, so
    order 2 gives order 1's estimate (checked in the tests).
    """
    return 3 if order3_weight(d, budget) > 0 else 1


def _basis(coalitions: np.ndarray, order: int) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """Phi[S, T] = 1 when interaction T lies inside coalition S, for every T of 1..order features."""
    d = coalitions.shape[1]
    terms = [t for o in range(1, order + 1) for t in itertools.combinations(range(d), o)]
    phi = np.ones((coalitions.shape[0], len(terms)))
    for c, t in enumerate(terms):
        for i in t:
            phi[:, c] *= coalitions[:, i]
    return phi, terms


def shapley_operator(coalitions: np.ndarray, weights: np.ndarray, order: int = 1, ridge: float = 1e-9):
    """(M, e): Shapley values = (v[2:] - v[0]) @ M + (v[1] - v[0]) * e for values v in ``coalitions``' row order.

    Fits g(S) = v(empty) + sum_T a_T [T in S] by weighted least squares over the interior coalitions, constrained to
    g(full) = v(full), and reads off g's Shapley values (a_T shared equally by T's members). Because the main
    effects are in the basis, the residual is weighted-orthogonal to every efficiency-preserving linear game, so the
    estimate equals the unbiased size-stratified correction of g and is exact when every coalition is evaluated.
    ``ridge`` (relative to the largest diagonal entry) only guards against interactions the sample cannot separate.
    """
    d = coalitions.shape[1]
    inner, w = coalitions[2:], weights[2:]
    phi, terms = _basis(inner, order)
    p = phi.shape[1]
    gram = phi.T @ (phi * w[:, None])
    scale = float(np.max(np.diag(gram))) if p else 1.0
    reg = np.zeros(p)
    reg[d:] = ridge * scale  # main effects unpenalised: exactness at full enumeration rests on them
    kkt = np.zeros((p + 1, p + 1))
    kkt[:p, :p] = gram + np.diag(reg)
    kkt[:p, p] = kkt[p, :p] = 1.0
    inv = np.linalg.pinv(kkt, rcond=1e-13, hermitian=True)
    readout = np.zeros((p, d))
    for c, t in enumerate(terms):
        readout[c, list(t)] = 1.0 / len(t)
    m = (phi * w[:, None]) @ inv[:p, :p] @ readout  # (C - 2, d)
    e = inv[p, :p] @ readout  # (d,)
    return m, e


class RegressionPlan:
    """A coalition design and its Shapley operator for d features and a budget, built once per (d, budget, seed)."""

    def __init__(self, d: int, budget: int, seed=None, *, order: int | str = "auto", allocation: str = "leverage",
                 balanced: bool = True, ridge: float = 1e-9):
        if d < 1:
            raise ValueError(f"need at least one feature, got d={d}")
        if budget < min(d + 1, 2 ** d):
            raise ValueError(f"a regression estimate of {d} features needs at least d + 1 = {d + 1} evaluations "
                             f"(coalitions per row), got {budget}")
        self.order = auto_order(d, budget) if order == "auto" else int(order)
        self.order3_weight = order3_weight(d, budget) if order == "auto" else float(self.order == 3)
        if not 1 <= self.order <= max(1, d):
            raise ValueError(f"order must be 'auto' or an int in [1, {d}], got {order!r}")
        self.coalitions, self.weights, self.complete = coalition_design(d, budget, seed, allocation=allocation,
                                                                        balanced=balanced)
        self.exact = bool(self.complete.all())
        self.M, self.e = shapley_operator(self.coalitions, self.weights, self.order if d > 1 else 1, ridge)
        if order == "auto" and 0 < self.order3_weight < 1:  # a convex mix keeps efficiency and exactness
            m1, e1 = shapley_operator(self.coalitions, self.weights, 1, ridge)
            w = self.order3_weight
            self.M, self.e = w * self.M + (1 - w) * m1, w * self.e + (1 - w) * e1

    @property
    def evaluations(self) -> int:
        """Coalitions evaluated per explained row."""
        return int(self.coalitions.shape[0])

    def apply(self, values: np.ndarray) -> np.ndarray:
        """values (m, C, k) in the design's row order -> Shapley values (m, d, k); efficiency holds exactly."""
        v = np.asarray(values, dtype=np.float64)
        inner = v[:, 2:, :] - v[:, :1, :]
        total = v[:, 1, :] - v[:, 0, :]  # (m, k)
        phi = np.einsum("mck,cd->mdk", inner, self.M) + total[:, None, :] * self.e[None, :, None]
        # the operator's columns sum to the efficiency gap only up to rounding: spread that rounding evenly
        gap = total - phi.sum(axis=1)
        phi += gap[:, None, :] / phi.shape[1]
        return phi
