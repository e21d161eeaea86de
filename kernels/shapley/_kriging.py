"""Kriging (Bayesian) Shapley fits over paired coalitions: a Gaussian prior on the game's odd Walsh interactions."""
from __future__ import annotations

import math
import warnings

import numpy as np
import scipy.linalg

KRIGING_RHO = 0.02  # prior variance of one order-t Walsh interaction: rho^t (t odd, >= 3); main effects flat
KRIGING_MAX_PAIRS = 4000  # the (pairs + d)^2 system: 1.6 s to build at the cap (d = 30, 2 loaded cores)


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
    an odd ``|T|`` gives each member the Shapley value ``2/|T|`` and an even ``|T|`` gives nothing. A sampled pair (S, ~S) reveals
    the odd part h(S) = (v(S) - v(~S)) / 2 exactly, and h(full) = (v(full) - v(empty)) / 2. The main effects get a
    flat prior (so additive games are exact), each odd interaction of t >= 3 features an independent N(0, rho^t);
    the estimate is the posterior mean of the Shapley values (universal kriging, noiseless observations), a linear
    map of the values. The prior covariance of two pairs depends only on how many features they agree on,
    k(a) = sum over odd t >= 3 of rho^t K_t(a), K_t the Krawtchouk polynomial, from (1 + rho z)^a (1 - rho z)^(d - a).
    Efficiency holds because h(full) is observed without noise.

    Parameters
    ----------
    coalitions : ndarray of shape (C, d), bool
        Row 0 the empty set, row 1 the full set, then complementary pairs (``coalition_design``).
    rho : float, default KRIGING_RHO
        Prior variance of an order-t interaction: rho^t.
    jitter : float, default 1e-9
        Relative jitter on the prior covariance.

    Returns
    -------
    tuple
        ``(M (C - 2, d), e (d,))`` as :func:`shapley_operator`.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.kernels.shapley import coalition_design, kriging_operator
    >>> coalitions, _, _ = coalition_design(6, 20, seed=0)
    >>> v = coalitions @ np.arange(1.0, 7.0)                  # an additive game: exact from 20 of 64 coalitions
    >>> M, e = kriging_operator(coalitions)
    >>> ((v[2:] - v[0]) @ M + (v[1] - v[0]) * e).round(6).tolist()
    [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    """
    d = coalitions.shape[1]
    pairs, xs = odd_parts(coalitions)  # xs (n + 1, d): the pairs, then the full set
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
    c = main_effects_exact(xs, sol[:n1])  # (n + 1, d): weights on h per pair, then on h(full)
    c[:-1] -= c[:-1].mean(axis=1, keepdims=True)  # efficiency to rounding: the pairs' weights sum to 0 ...
    c[-1] += (2.0 - c[-1].sum()) / d  # ... and h(full)'s to 2
    m = np.zeros((coalitions.shape[0] - 2, d))
    m[pairs[:, 0]] = c[:-1] / 2  # h(S) = ((v(S) - v0) - (v(~S) - v0)) / 2
    m[pairs[:, 1]] = -c[:-1] / 2
    return m, c[-1] / 2


# (rho, gamma) of the candidate priors "auto" chooses from, per explained row, by restricted likelihood: the flat
# prior (every odd interaction of t >= 3 features N(0, rho^t)), and heredity priors where feature i contributes a
# factor u_i = rho * s_i^gamma / mean(s^gamma), s_i = |pilot Shapley value of i|, so that interactions among the
# features that matter are a priori larger (the "effect heredity" of experimental design)
HEREDITY_PRIORS = ((KRIGING_RHO, 0.0), (0.05, 0.5), (0.05, 1.0))
_U_MAX = 0.9  # keeps the prior's product form finite (u_i < 1)
_S_FLOOR = 0.02  # no feature's scale below 2% of the mean: keeps every candidate's covariance well conditioned
HEREDITY_MIN_D = 10  # at d = 8 (cal_housing) the choice measured neutral to worse; from d = 10 up, better
HEREDITY_MAX_D = 500  # 1.9^d stays far from overflow
HEREDITY_MAX_PAIRS = 2000  # one (pairs + 1)^2 solve per candidate and row: 0.4 s a row at 1,550 pairs
_CHUNK = 4_000_000  # rows x (pairs + 1)^2 per batch of the per-row systems


def main_effects_projector(xs: np.ndarray) -> np.ndarray:
    """P (d, n1): the least-squares main effects of the odd parts, beta = h @ P.T, by an SVD of the +-1 codes
    (well conditioned for any design that identifies the main effects, unlike the kriging systems)."""
    return np.linalg.pinv(xs)


def main_effects_exact(xs: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Weights c (n1, d) (Shapley values = h @ c) made exact on additive games by construction: the main effects
    are read off by least squares and only the residual goes through c, i.e. 2 P.T + (I - xs P).T c. The kriging
    systems reach condition numbers of 1e9, so their own reproduction of the main effects holds only to about
    1e-7; this one holds to the rounding of an SVD of a +-1 matrix."""
    p = main_effects_projector(xs)
    return 2.0 * p.T + c - p.T @ (xs.T @ c)


def split_main_effects(xs: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(beta (m, d), residual (m, n1)) of rows h (m, n1): least-squares main effects and what they leave.

    Row by row (a stack of (1, n1) products), so a row gets the same bytes alone or batched."""
    p = main_effects_projector(xs)
    beta = (h[:, None, :] @ p.T[None])[:, 0, :]
    return beta, h - (beta[:, None, :] @ xs.T[None])[:, 0, :]


def odd_parts(coalitions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pairs, xs): ``_complement_pairs`` and the +-1 codes of each pair's first coalition, then of the full set."""
    pairs = _complement_pairs(coalitions)
    xs = np.concatenate([2.0 * coalitions[2:][pairs[:, 0]] - 1.0, np.ones((1, coalitions.shape[1]))])
    return pairs, xs


def _product_prior(xs: np.ndarray, u: np.ndarray, nodes: np.ndarray, wts: np.ndarray, nugget: np.ndarray):
    """Per row r of u (m, d): the prior covariance of the pairs' odd parts under N(0, prod_{i in T} u_ri) on every
    odd Walsh interaction T of >= 3 features (m, n1, n1), and its covariance with the Shapley values (m, n1, d).

    Covariance: the odd part of prod_i (1 + u_i y_i), y = x * x', less its linear part; with a_i = atanh(u_i),
    prod_i (1 +- u_i y_i) = exp(c +- sum_i a_i y_i), c = sum_i log(1 - u_i^2) / 2. Cross-covariance with feature i's
    Shapley value: x_i u_i sum over odd t >= 3 of (2/t) e_{t-1}(u_{-i} x_{-i}) = x_i u_i (2 int_0^1 even part of
    prod_{j != i} (1 + tau u_j x_j) dtau - 2), the integral exact by Gauss-Legendre (a polynomial of degree d - 1).
    """
    a = np.arctanh(u)
    c = 0.5 * (np.log1p(u) + np.log1p(-u)).sum(axis=1)[:, None, None]
    g = (xs[None] * a[:, None, :]) @ xs.T
    cov = 0.5 * (np.exp(c + g) - np.exp(c - g)) - (xs[None] * u[:, None, :]) @ xs.T
    n1 = xs.shape[0]
    idx = np.arange(n1 - 1)
    cov[:, idx, idx] += nugget[:, None] * np.mean(np.diagonal(cov, axis1=1, axis2=2), axis=1)[:, None]  # h(full) noiseless
    z = xs[None] * u[:, None, :]
    integral = np.zeros_like(z)
    for t, w in zip(nodes, wts):
        for sign in (1.0, -1.0):
            f = 1.0 + sign * t * z  # in [0.1, 1.9]: the products below stay finite for d up to HEREDITY_MAX_D
            integral += 0.5 * w * np.prod(f, axis=2, keepdims=True) / f
    return cov, z * (2.0 * integral - 2.0)


def heredity_kriging(xs: np.ndarray, h: np.ndarray, pilot: np.ndarray, priors=HEREDITY_PRIORS,
                     jitter: float = 1e-9) -> np.ndarray:
    """Shapley values (m, d) from each row's odd parts h (m, n1) (the pairs' (v(S) - v(~S)) / 2, then
    (v(full) - v(empty)) / 2), under the candidate prior with the highest restricted likelihood for that row.

    Each candidate is the universal-kriging estimate of ``kriging_operator`` (flat main effects, noiseless
    observations, so additive games stay exact and efficiency holds) with a per-row product prior; the restricted
    likelihood has the prior's scale profiled out. Rows are independent: a row gets the same bytes alone or batched.

    Parameters
    ----------
    xs : ndarray of shape (n1, d)
        The pairs' coalitions as +-1 vectors, then the full set (``odd_parts``).
    h : ndarray of shape (m, n1)
        Each row's odd parts.
    pilot : ndarray of shape (m, d)
        Pilot Shapley values that scale each feature's prior.
    priors : sequence of (rho, gamma), default HEREDITY_PRIORS
        The candidate priors.
    jitter : float, default 1e-9
        Relative nugget.

    Returns
    -------
    ndarray of shape (m, d)

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.kernels.shapley import coalition_design, heredity_kriging
    >>> from hitml.kernels.shapley._kriging import odd_parts
    >>> coalitions, _, _ = coalition_design(6, 20, seed=0)
    >>> v = coalitions @ np.arange(1.0, 7.0)
    >>> pairs, xs = odd_parts(coalitions)
    >>> inner = v[2:]
    >>> h = np.append((inner[pairs[:, 0]] - inner[pairs[:, 1]]) / 2, (v[1] - v[0]) / 2)[None]
    >>> heredity_kriging(xs, h, pilot=np.ones((1, 6))).round(6).tolist()
    [[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]
    """
    return heredity_refit(xs, h, pilot, priors, nugget=np.full(len(h), jitter))[0]


def heredity_refit(xs: np.ndarray, h: np.ndarray, pilot: np.ndarray, priors=HEREDITY_PRIORS, *, nugget: np.ndarray,
                   start: tuple[np.ndarray, np.ndarray] | None = None):
    """(Shapley values (m, d), posterior variances (m, d), -2 log restricted likelihood (m,)) per row: the best of
    ``start`` (values, variances, scores of an earlier choice; without it the pilot, scored +inf) and the heredity
    candidates, each with the row's relative ``nugget`` (noise on the pairs' odd parts; at least 1e-9)."""
    h = np.ascontiguousarray(h, dtype=np.float64)  # C order: the sums below then run the same way for any batch
    pilot = np.ascontiguousarray(pilot, dtype=np.float64)
    m, n1 = h.shape
    d = xs.shape[1]
    s = np.abs(pilot)
    mean = s.mean(axis=1, keepdims=True)
    s = np.where(mean > 0, s / np.where(mean > 0, mean, 1.0), 1.0)
    s = np.maximum(s, _S_FLOOR)
    ok = np.isfinite(h).all(axis=1) & np.isfinite(pilot).all(axis=1)  # other rows keep the pilot (NaN in, NaN out)
    h, s = np.where(ok[:, None], h, 0.0), np.where(ok[:, None], s, 1.0)
    nugget = np.maximum(np.asarray(nugget, dtype=np.float64), 1e-9)
    # every candidate reproduces main effects exactly in exact arithmetic, but its ill-conditioned solve only to
    # ~1e-7: take the least-squares main effects off first (exact on additive games), fit what is left
    beta, h = split_main_effects(xs, h)
    nodes, wts = np.polynomial.legendre.leggauss(d // 2 + 1)
    nodes, wts = (nodes + 1.0) / 2.0, wts / 2.0
    if start is None:
        out, out_var, out_score = pilot.copy(), np.full((m, d), np.nan), np.full(m, np.inf)
    else:
        out, out_var, out_score = (np.array(a, dtype=np.float64) for a in start)
    step = max(1, _CHUNK // (n1 * n1))
    for lo in range(0, m, step):
        rows = slice(lo, min(m, lo + step))
        best_phi, best_var = np.zeros((rows.stop - rows.start, d)), np.zeros((rows.stop - rows.start, d))
        best_score = np.full(rows.stop - rows.start, np.inf)
        for rho, gamma in priors:
            sg = s[rows] ** gamma
            u = np.minimum(rho * sg / sg.mean(axis=1, keepdims=True), _U_MAX)
            try:
                phi, var, score = _candidate(xs, h[rows], u, nodes, wts, nugget[rows])
            except np.linalg.LinAlgError:  # one row's system is singular: the others alone, that one skips it
                phi, var = np.full_like(best_phi, np.nan), np.full_like(best_phi, np.nan)
                score = np.full_like(best_score, np.inf)
                for r in range(len(score)):
                    try:
                        one = _candidate(xs, h[rows][r:r + 1], u[r:r + 1], nodes, wts, nugget[rows][r:r + 1])
                    except np.linalg.LinAlgError:
                        continue
                    phi[r], var[r], score[r] = one[0][0], one[1][0], one[2][0]
            better = score < best_score
            best_phi = np.where(better[:, None], phi, best_phi)
            best_var = np.where(better[:, None], var, best_var)
            best_score = np.where(better, score, best_score)
        # a row no candidate beats keeps its start (the pilot, or the earlier choice)
        take = best_score < out_score[rows]
        out[rows] = np.where(take[:, None], 2.0 * beta[rows] + best_phi, out[rows])
        out_var[rows] = np.where(take[:, None], best_var, out_var[rows])
        out_score[rows] = np.where(take, best_score, out_score[rows])
    return np.where(ok[:, None], out, pilot), np.where(ok[:, None], out_var, np.nan), out_score


def _interaction_variance(u: np.ndarray) -> np.ndarray:
    """(r, d): prior variance of the odd interactions' share of each Shapley value under the product priors u (r, d),
    4 u_i sum over even k >= 2 of e_k(u without i) / (k + 1)^2 (elementary symmetric polynomials; dividing one
    factor out is stable because every u_j < 1)."""
    r, d = u.shape
    e = np.zeros((r, d + 1))
    e[:, 0] = 1.0
    for j in range(d):
        e[:, 1:] = e[:, 1:] + u[:, j:j + 1] * e[:, :-1]
    out = np.zeros((r, d))
    k = np.arange(d)
    wk = np.where((k % 2 == 0) & (k >= 2), 1.0 / (k + 1.0) ** 2, 0.0)
    for i in range(d):
        ei = np.zeros((r, d))
        ei[:, 0] = 1.0
        for kk in range(1, d):
            ei[:, kk] = e[:, kk] - u[:, i] * ei[:, kk - 1]
        out[:, i] = 4.0 * u[:, i] * (np.maximum(ei, 0.0) @ wk)
    return out


def _candidate(xs, h, u, nodes, wts, nugget):
    """(Shapley values of the residual odd parts (r, d), posterior variances (r, d), -2 log restricted likelihood
    (r,)) of rows h (r, n1) under the product priors u, with relative nuggets (r,) on the pairs."""
    n1, d = xs.shape
    cov, cross = _product_prior(xs, u, nodes, wts, nugget)
    cov_inv = np.linalg.inv(cov)  # its diagonal gives the leave-one-pair-out scale of the standard errors
    k_inv = cov_inv @ np.concatenate([np.broadcast_to(xs, cov.shape[:1] + xs.shape), cross, h[:, :, None]], axis=2)
    kx, kc, kh = k_inv[:, :, :d], k_inv[:, :, d:2 * d], k_inv[:, :, 2 * d]
    xkx = xs.T @ kx  # (r, d, d)
    xkh = (xs.T @ kh[:, :, None])[:, :, 0]
    beta = np.linalg.solve(xkx, xkh[:, :, None])[:, :, 0]
    lead = xs.T @ kc - 2.0 * np.eye(d)
    mu = np.linalg.solve(xkx, lead)
    phi = (cross.transpose(0, 2, 1) @ kh[:, :, None])[:, :, 0] - (mu.transpose(0, 2, 1) @ xkh[:, :, None])[:, :, 0]
    resid = (h[:, None, :] @ kh[:, :, None])[:, 0, 0] - (xkh[:, None, :] @ beta[:, :, None])[:, 0, 0]
    dof = n1 - d
    score = dof * np.log(np.maximum(resid, 1e-300) / dof) + np.linalg.slogdet(cov)[1] + np.linalg.slogdet(xkx)[1]
    scale = np.mean(np.diagonal(cov, axis1=1, axis2=2)[:, :-1], axis=1) / (1.0 + nugget)  # the prior's variance
    post = _interaction_variance(u) - np.einsum("rnd,rnd->rd", cross, kc) + np.einsum("red,red->rd", lead, mu)
    # leave-one-pair-out scale, as KrigingFamily's: P h and diag(P), P = cov^-1 less the main effects' part
    ph = kh - (kx @ beta[:, :, None])[:, :, 0]
    p_diag = np.diagonal(cov_inv, axis1=1, axis2=2) - np.einsum("rnd,rnd->rn", kx, np.linalg.solve(
        xkx, kx.transpose(0, 2, 1)).transpose(0, 2, 1))
    loo = np.mean(ph[:, :-1] ** 2 / np.maximum(p_diag[:, :-1], 1e-300), axis=1)
    w_full = kc[:, -1, :] - (kx[:, -1:, :] @ mu)[:, 0, :]  # the weight of h(full), noisy with a nugget
    # the scale: the larger of the leave-one-pair-out and the profiled (REML) estimates. Both are unbiased when the
    # prior fits the game; where it does not (a product prior on a piecewise-constant game) either can fall short
    scale_est = np.maximum(loo, np.maximum(resid, 0.0) / dof)
    var = (np.maximum(post, 0.0) + np.where(nugget > 1e-9, nugget, 0.0)[:, None] * scale[:, None] * w_full ** 2) \
        * scale_est[:, None]
    return phi, var, np.where(np.isfinite(score), score, np.inf)
