"""Kernel-weighted polynomial regression over coalitions: the linear map from v(S) values to Shapley values."""
from __future__ import annotations

import itertools
import math

import numpy as np

from ._design import coalition_design
from ._family import KrigingFamily
from ._kriging import (HEREDITY_MAX_D, HEREDITY_MAX_PAIRS, HEREDITY_MIN_D, KRIGING_MAX_PAIRS, heredity_refit,
                       kriging_operator, odd_parts)

# heredity candidates tried after the (rho, nugget) family, per row, with the row's chosen nugget: interactions among
# the features with large pilot values (u_i = rho s_i^gamma / mean(s^gamma), s = |pilot values|)
FAMILY_HEREDITY = ((0.05, 0.5), (0.05, 1.0), (0.3, 1.0))
NOISE_MODES = ("auto", "none")
REPLICATES = 4  # the empty set, the full set and one complementary pair, evaluated twice under noise="auto"


def n_terms(d: int, order: int) -> int:
    """Basis terms (interactions of 1..order features) of an order-``order`` surrogate game.

    Parameters
    ----------
    d : int
        Features.
    order : int
        Largest interaction order.

    Returns
    -------
    int

    Examples
    --------
    >>> from hitml.kernels.shapley import n_terms
    >>> n_terms(5, 2)                       # 5 main effects and 10 pairs
    15
    """
    return sum(math.comb(d, t) for t in range(1, order + 1))


MAX_ORDER3_TERMS = 2000  # keeps the order-3 operator's (terms + 1)^2 pseudo-inverse to about a second


def wls_order(d: int, budget: int) -> int:
    """The order of the kernel-weighted fit where "auto" falls back to it (kriging out of reach): 3 once the budget
    determines it, budget - 2 >= 1.2 (d + C(d,2) + C(d,3)) with at most MAX_ORDER3_TERMS terms, else 1.

    With paired coalitions an even order adds nothing: S and its complement fix the even part of the game, so
    order 2 gives order 1's estimate (checked in the tests).

    Parameters
    ----------
    d : int
        Features.
    budget : int
        Coalitions per row.

    Returns
    -------
    int
        1 or 3.

    Examples
    --------
    >>> from hitml.kernels.shapley import wls_order
    >>> wls_order(5, 100), wls_order(5, 20)
    (3, 1)
    """
    if d < 3 or n_terms(d, 3) > MAX_ORDER3_TERMS:
        return 1
    return 3 if budget - 2 >= 1.2 * n_terms(d, 3) else 1


def auto_fit(d: int, budget: int) -> str:
    """The fit "auto" uses: "kriging" (the Bayesian fit, ``kriging_operator``) for d >= 3 when the budget leaves
    coalitions out and buys at most KRIGING_MAX_PAIRS complementary pairs; "wls" (the kernel-weighted fit of order
    ``wls_order``) otherwise, which is exact at full enumeration. Measured in docs/design/shapley.md: the kriging fit
    had a lower error than every kernel-weighted fit and order mix at every benchmark budget from 5(d + 1) up.

    Parameters
    ----------
    d : int
        Features.
    budget : int
        Coalitions per row.

    Returns
    -------
    {"kriging", "wls"}

    Examples
    --------
    >>> from hitml.kernels.shapley import auto_fit
    >>> auto_fit(5, 20), auto_fit(5, 32)    # 32 = 2^5 coalitions: enumerated, exact
    ('kriging', 'wls')
    """
    if d < 3 or budget >= 2 ** d or (budget - 2) // 2 > KRIGING_MAX_PAIRS:
        return "wls"
    return "kriging"


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

    Parameters
    ----------
    coalitions : ndarray of shape (C, d), bool
        Row 0 the empty set, row 1 the full set, then the interior coalitions (``coalition_design``).
    weights : ndarray of shape (C,)
        Kernel weights (``coalition_design``).
    order : int, default 1
        Largest interaction order of the fitted game (1: paired KernelSHAP).
    ridge : float, default 1e-9
        Relative ridge on the interactions.

    Returns
    -------
    tuple
        ``(M (C - 2, d), e (d,))``.

    See Also
    --------
    shap.KernelExplainer : shap's (unpaired, order-1) kernel-weighted fit.

    Examples
    --------
    Every coalition of 3 features evaluated: exact, the interaction shared equally by its two members.

    >>> import numpy as np
    >>> from hitml.kernels.shapley import coalition_design, shapley_operator
    >>> coalitions, weights, _ = coalition_design(3, 8, seed=0)
    >>> S = coalitions.astype(float)
    >>> v = S @ np.array([1.0, 2.0, 3.0]) + 0.5 * S[:, 0] * S[:, 1]
    >>> M, e = shapley_operator(coalitions, weights)
    >>> ((v[2:] - v[0]) @ M + (v[1] - v[0]) * e).round(6).tolist()
    [1.25, 2.25, 3.0]
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
    """A coalition design and its Shapley estimator for d features and a budget, built once per (d, budget, seed).

    ``order="auto"``: the kriging fit (``auto_fit``); an int: the kernel-weighted least-squares fit of that order.
    ``rho=None`` (the default): each row's prior (order decay rho) and noise (nugget) are chosen from a family by
    restricted likelihood (``KrigingFamily``), then, with ``heredity`` and from 10 features, heredity priors are tried
    with the row's nugget (``heredity_refit``); ``apply_se`` also returns standard errors. A float ``rho``: the one
    fixed flat prior, a linear map of the values (``kriging_operator``), no standard errors.

    Parameters
    ----------
    d : int
        Features.
    budget : int
        Coalitions per row (at least d + 1; 2^d or more enumerates every coalition, exact).
    seed : None, int or sequence of int
        Seed of the design.
    order : "auto" or int, default "auto"
        The kriging fit, or the kernel-weighted fit of that order.
    allocation : {"leverage", "kernel"}, default "leverage"
        Passed to :func:`coalition_design`.
    balanced : bool, default True
        Passed to :func:`coalition_design`.
    ridge : float, default 1e-9
        Relative ridge of the kernel-weighted fit.
    rho : float, optional
        A fixed flat prior instead of the per-row choice.
    heredity : bool, default True
        Try heredity priors (from 10 features).
    coalitions : ndarray, optional
        A given design (used by ``extend``).
    noise : {"auto", "none"}, default "auto"
        "auto" repeats four coalitions to detect noisy games (stochastic v(S)); "none" for exact values.

    See Also
    --------
    shap.KernelExplainer : shap's kernel-weighted fit, which order=1 generalises.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.kernels.shapley import RegressionPlan
    >>> plan = RegressionPlan(6, 30, seed=0, noise="none")
    >>> plan.evaluations, plan.fit
    (30, 'kriging')
    >>> v = (plan.coalitions @ np.arange(1.0, 7.0))[None, :, None]     # (rows, coalitions, outputs)
    >>> phi, se = plan.apply_se(v)                                     # an additive game: exact, zero error
    >>> phi[0, :, 0].round(6).tolist(), bool(se.max() < 1e-9)
    ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], True)
    """

    def __init__(self, d: int, budget: int, seed=None, *, order: int | str = "auto", allocation: str = "leverage",
                 balanced: bool = True, ridge: float = 1e-9, rho: float | None = None, heredity: bool = True,
                 coalitions: np.ndarray | None = None, noise: str = "auto"):
        if d < 1:
            raise ValueError(f"need at least one feature, got d={d}")
        if budget < min(d + 1, 2 ** d):
            raise ValueError(f"a regression estimate of {d} features needs at least d + 1 = {d + 1} evaluations "
                             f"(coalitions per row), got {budget}")
        if order != "auto" and not (isinstance(order, (int, np.integer)) and 1 <= order <= max(1, d)):
            raise ValueError(f"order must be 'auto' or an int in [1, {d}], got {order!r}")
        if rho is not None and not 0 < rho < 1:
            raise ValueError(f"rho must be None or in (0, 1), got {rho!r}")
        if noise not in NOISE_MODES:
            raise ValueError(f"noise must be one of {NOISE_MODES}, got {noise!r}")
        # "auto": evaluate the empty set, the full set and one complementary pair twice; a row whose repeated values
        # differ is noisy (the nugget is then chosen from the data), one whose values repeat exactly is not (no nugget)
        replicate = (noise == "auto" and coalitions is None and order == "auto" and rho is None and d >= 3
                     and budget - REPLICATES >= 2 * (d + 1) and budget < 2 ** d)
        if replicate:
            budget -= REPLICATES
        self.noise = noise
        if coalitions is None:
            self.coalitions, self.weights, self.complete = coalition_design(d, budget, seed, allocation=allocation,
                                                                            balanced=balanced)
        else:  # a grown design (``extend``): kriging only, no size weights
            self.coalitions = coalitions
            self.weights = np.zeros(len(coalitions))
            self.complete = np.zeros(d + 1, dtype=bool)
        self.n_main = len(self.coalitions)
        self.replicates = np.zeros(0, dtype=np.int64)
        if replicate:  # the repeated coalitions go last; self.replicates: the rows they repeat
            self.replicates = np.array([0, 1, 2, 2 + int(np.flatnonzero(
                (self.coalitions[2:] == ~self.coalitions[2]).all(axis=1))[0])], dtype=np.int64)
            self.coalitions = np.concatenate([self.coalitions, self.coalitions[self.replicates]])
            self.weights = np.concatenate([self.weights, np.zeros(REPLICATES)])
        self.exact = bool(self.complete.all())
        self.fit = auto_fit(d, self.evaluations) if order == "auto" and not self.exact else "wls"
        self.heredity = False
        self.family = None
        if self.fit == "kriging":
            self.order = None
            self.pairs, self.xs = odd_parts(self.coalitions[:self.n_main])
            if rho is None:
                self.M = self.e = None
                self.family = KrigingFamily(self.xs)
            else:
                self.M, self.e = kriging_operator(self.coalitions, rho)
            # the per-row prior choice needs residual degrees of freedom and more odd interactions than pairs
            n1 = self.xs.shape[0]
            self.heredity = (bool(heredity) and HEREDITY_MIN_D <= d <= HEREDITY_MAX_D and d + 1 < n1
                             and n1 - 1 <= HEREDITY_MAX_PAIRS and n1 - 1 < 2 ** (d - 1) - d)
        else:
            self.order = (wls_order(d, budget) if order == "auto" else int(order)) if d > 1 else 1
            self.M, self.e = shapley_operator(self.coalitions[:self.n_main], self.weights[:self.n_main], self.order,
                                              ridge)

    @property
    def evaluations(self) -> int:
        """Coalitions evaluated per explained row."""
        return int(self.coalitions.shape[0])

    def extend(self, budget: int, seed=None) -> "RegressionPlan":
        """A plan of about ``budget`` coalitions that keeps every coalition of this one (so their values are reused):
        this design plus the complementary pairs of a fresh design of the remaining budget that are new."""
        d = self.coalitions.shape[1]
        main = self.coalitions[:self.n_main]
        extra, _, _ = coalition_design(d, max(2, budget - self.evaluations + 2), seed)
        seen = {np.packbits(row).tobytes() for row in main}
        new = [row for row in extra[2:] if np.packbits(row).tobytes() not in seen]
        grown = np.concatenate([main, np.array(new, dtype=bool).reshape(-1, d)])
        if d < 63 and len(grown) >= 2 ** d:
            return RegressionPlan(d, 2 ** d, seed, noise="none")
        return RegressionPlan(d, len(grown), seed, coalitions=grown, noise="none")

    def noisy_rows(self, values: np.ndarray) -> np.ndarray | None:
        """(m,) bool: rows whose repeated coalitions gave different values (any output); None without repeats."""
        if not self.replicates.size:
            return None
        v = np.asarray(values, dtype=np.float64)
        again = v[:, self.n_main:, :]
        first = v[:, self.replicates, :]
        return ~((again == first) | (np.isnan(again) & np.isnan(first))).all(axis=(1, 2))

    def apply(self, values: np.ndarray) -> np.ndarray:
        """values (m, C, k) in the design's row order -> Shapley values (m, d, k); efficiency holds exactly."""
        return self.apply_se(values)[0]

    def apply_se(self, values: np.ndarray, noisy: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(Shapley values (m, d, k), their standard errors (m, d, k)) for values (m, C, k).

        Standard errors: the chosen prior's posterior standard deviation with its scale estimated from the row
        (0 where the design enumerates every coalition; NaN for the fixed-prior and kernel-weighted fits).
        ``noisy`` (m,) bool: which rows may get a nugget; default: from the repeated coalitions (noise="auto"),
        none (noise="none"). A noisy row's repeated values are averaged with their first evaluation."""
        v = np.asarray(values, dtype=np.float64)
        if noisy is None:
            noisy = self.noisy_rows(v)
            if noisy is None:
                noisy = np.full(v.shape[0], self.noise == "auto")
        noisy = np.asarray(noisy, dtype=bool)
        if self.replicates.size:
            mean = v[:, :self.n_main].copy()
            mean[:, self.replicates] = np.where(noisy[:, None, None], (v[:, self.replicates] + v[:, self.n_main:]) / 2,
                                                v[:, self.replicates])
            v = mean
        m, _, k = v.shape
        inner = v[:, 2:, :] - v[:, :1, :]
        total = v[:, 1, :] - v[:, 0, :]  # (m, k)
        se = np.full((m, self.coalitions.shape[1], k), 0.0 if self.exact else np.nan)
        if self.family is None:
            phi = np.einsum("mck,cd->mdk", inner, self.M) + total[:, None, :] * self.e[None, :, None]
        else:
            flat = inner.transpose(0, 2, 1).reshape(m * k, -1)  # rows x outputs, each one game
            h = np.concatenate([(flat[:, self.pairs[:, 0]] - flat[:, self.pairs[:, 1]]) / 2.0,
                                total.reshape(m * k, 1) / 2.0], axis=1)
            ok = np.isfinite(h).all(axis=1)
            est, var, score, chosen = self.family.fit(np.where(ok[:, None], h, 0.0), np.repeat(noisy, k))
            if self.heredity and m * k:
                est, var, score = heredity_refit(self.xs, h, np.where(ok[:, None], est, np.nan), FAMILY_HEREDITY,
                                                 nugget=self.family.nugget_of(chosen), start=(est, var, score))
            est = np.where(ok[:, None], est, np.nan)
            var = np.where(ok[:, None], var, np.nan)
            # (m, d, k) in C order: the efficiency sum below then runs the same way per row
            phi = np.ascontiguousarray(est.reshape(m, k, -1).transpose(0, 2, 1))
            se = np.ascontiguousarray(np.sqrt(var).reshape(m, k, -1).transpose(0, 2, 1))
        # the operator's columns sum to the efficiency gap only up to rounding: spread that rounding evenly
        gap = total - phi.sum(axis=1)
        phi += gap[:, None, :] / phi.shape[1]
        return phi, se
