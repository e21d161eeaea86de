"""Kernel-weighted polynomial regression over coalitions: the linear map from v(S) values to Shapley values."""
from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import scipy.linalg

from ._design import coalition_design


def n_terms(d: int, order: int) -> int:
    """Basis terms (interactions of 1..order features) of an order-``order`` surrogate game."""
    return sum(math.comb(d, t) for t in range(1, order + 1))


MAX_ORDER3_TERMS = 2000  # keeps the order-3 operator's (terms + 1)^2 pseudo-inverse to about a second


def wls_order(d: int, budget: int) -> int:
    """The order of the kernel-weighted fit where "auto" falls back to it (kriging out of reach): 3 once the budget
    determines it, budget - 2 >= 1.2 (d + C(d,2) + C(d,3)) with at most MAX_ORDER3_TERMS terms, else 1.

    With paired coalitions an even order adds nothing: S and its complement fix the even part of the game, so
    order 2 gives order 1's estimate (checked in the tests).
    """
    if d < 3 or n_terms(d, 3) > MAX_ORDER3_TERMS:
        return 1
    return 3 if budget - 2 >= 1.2 * n_terms(d, 3) else 1


def auto_fit(d: int, budget: int) -> str:
    """The fit "auto" uses: "kriging" (the Bayesian fit, ``kriging_operator``) for d >= 3 when the budget leaves
    coalitions out and buys at most KRIGING_MAX_PAIRS complementary pairs; "wls" (the kernel-weighted fit of order
    ``wls_order``) otherwise, which is exact at full enumeration. Measured in docs/design/shapley.md: the kriging fit
    had the lower error than every kernel-weighted fit and order mix at every benchmark budget from 5(d + 1) up.
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


# ----------------------------------------------------------------------------------------------- kriging fit
KRIGING_RHO = 0.02  # prior variance of one order-t Walsh interaction: rho^t (t odd, >= 3); main effects flat
KRIGING_MAX_PAIRS = 6000  # the (pairs + d)^2 system: about 2 s to solve and 300 MB at the cap


def _complement_pairs(coalitions: np.ndarray) -> np.ndarray:
    """(n, 2) row indices into coalitions[2:]: each interior coalition with its complement, the lower index first."""
    inner = coalitions[2:]
    index = {np.packbits(row).tobytes(): j for j, row in enumerate(inner)}
    pairs = []
    for j, row in enumerate(inner):
        jc = index.get(np.packbits(~row).tobytes())
        if jc is None:
            raise ValueError("the kriging fit needs every sampled coalition together with its complement")
        if j < jc:
            pairs.append((j, jc))
    return np.array(pairs, dtype=np.int64).reshape(-1, 2)


def _signed_poly(rho: float, n: int) -> np.ndarray:
    """P[p, s] = coefficient of z^s in (1 + rho z)^p (1 - rho z)^(n - p), for p = 0..n (bounded by (1 + rho)^n)."""
    s = np.arange(n + 1)
    lgam = np.array([math.lgamma(k + 1) for k in range(n + 1)])
    out = np.zeros((n + 1, n + 1))
    for p in range(n + 1):
        kp, km = s[:p + 1], s[:n - p + 1]
        plus = np.exp(lgam[p] - lgam[kp] - lgam[p - kp] + kp * math.log(rho))
        minus = np.exp(lgam[n - p] - lgam[km] - lgam[n - p - km] + km * math.log(rho)) * (-1.0) ** km
        out[p] = np.convolve(plus, minus)
    return out


def kriging_operator(coalitions: np.ndarray, rho: float = KRIGING_RHO, jitter: float = 1e-9):
    """(M, e) like ``shapley_operator``, from a Gaussian prior on the game's odd part instead of a kernel-weighted fit.

    With x_i(S) = +1 for i in S and -1 otherwise, the Walsh functions chi_T(S) = prod_{i in T} x_i(S) span all games;
    an odd |T| gives each member the Shapley value 2/|T| and an even |T| gives nothing. A sampled pair (S, ~S) reveals
    the odd part h(S) = (v(S) - v(~S)) / 2 exactly, and h(full) = (v(full) - v(empty)) / 2. The main effects get a
    flat prior (so additive games are exact), each odd interaction of t >= 3 features an independent N(0, rho^t);
    the estimate is the posterior mean of the Shapley values (universal kriging, noiseless observations), a linear
    map of the values. The prior covariance of two pairs depends only on how many features they agree on,
    k(a) = sum over odd t >= 3 of rho^t K_t(a), K_t the Krawtchouk polynomial, from (1 + rho z)^a (1 - rho z)^(d - a).
    Efficiency holds because h(full) is observed without noise.
    """
    d = coalitions.shape[1]
    pairs = _complement_pairs(coalitions)
    xs = np.concatenate([2.0 * coalitions[2:][pairs[:, 0]] - 1.0, np.ones((1, d))])  # (n + 1, d): the pairs, full
    n1 = xs.shape[0]
    odd = np.arange(3, d + 1, 2)
    agree = np.rint((xs @ xs.T + d) / 2).astype(np.int64)
    cov = _signed_poly(rho, d)[:, odd].sum(axis=1)[agree]
    # prior covariance of feature i's Shapley value with h(S): x_i(S) sum_t rho^t (2/t) e_{t-1}(x_{-i}(S))
    plus_others = (xs > 0).sum(axis=1)[:, None] - (xs > 0)
    cross = xs * (_signed_poly(rho, d - 1)[:, odd - 1] * (2.0 * rho / odd)).sum(axis=1)[plus_others]
    scale = float(np.mean(np.diag(cov))) or 1.0
    system = np.zeros((n1 + d, n1 + d))
    system[:n1, :n1] = cov
    system[np.arange(n1 - 1), np.arange(n1 - 1)] += jitter * scale  # h(full) stays noiseless: efficiency
    system[:n1, n1:] = xs
    system[n1:, :n1] = xs.T
    rhs = np.concatenate([cross, 2.0 * np.eye(d)])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", scipy.linalg.LinAlgWarning)
            sol = scipy.linalg.solve(system, rhs, assume_a="sym")
    except (np.linalg.LinAlgError, scipy.linalg.LinAlgWarning):
        sol = np.linalg.lstsq(system, rhs, rcond=None)[0]
    c = sol[:n1]  # (n + 1, d): weights on h per pair, then on h(full)
    c[:-1] -= c[:-1].mean(axis=1, keepdims=True)  # efficiency to rounding: the pairs' weights sum to 0 ...
    c[-1] += (2.0 - c[-1].sum()) / d  # ... and h(full)'s to 2
    m = np.zeros((coalitions.shape[0] - 2, d))
    m[pairs[:, 0]] = c[:-1] / 2  # h(S) = ((v(S) - v0) - (v(~S) - v0)) / 2
    m[pairs[:, 1]] = -c[:-1] / 2
    return m, c[-1] / 2


class RegressionPlan:
    """A coalition design and its Shapley operator for d features and a budget, built once per (d, budget, seed).

    ``order="auto"``: the kriging fit (``auto_fit``); an int: the kernel-weighted least-squares fit of that order.
    """

    def __init__(self, d: int, budget: int, seed=None, *, order: int | str = "auto", allocation: str = "leverage",
                 balanced: bool = True, ridge: float = 1e-9, rho: float = KRIGING_RHO):
        if d < 1:
            raise ValueError(f"need at least one feature, got d={d}")
        if budget < min(d + 1, 2 ** d):
            raise ValueError(f"a regression estimate of {d} features needs at least d + 1 = {d + 1} evaluations "
                             f"(coalitions per row), got {budget}")
        if order != "auto" and not (isinstance(order, (int, np.integer)) and 1 <= order <= max(1, d)):
            raise ValueError(f"order must be 'auto' or an int in [1, {d}], got {order!r}")
        if not 0 < rho < 1:
            raise ValueError(f"rho must be in (0, 1), got {rho!r}")
        self.coalitions, self.weights, self.complete = coalition_design(d, budget, seed, allocation=allocation,
                                                                        balanced=balanced)
        self.exact = bool(self.complete.all())
        self.fit = auto_fit(d, self.evaluations) if order == "auto" and not self.exact else "wls"
        if self.fit == "kriging":
            self.order = None
            self.M, self.e = kriging_operator(self.coalitions, rho)
        else:
            self.order = (wls_order(d, budget) if order == "auto" else int(order)) if d > 1 else 1
            self.M, self.e = shapley_operator(self.coalitions, self.weights, self.order, ridge)
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
