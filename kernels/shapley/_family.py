"""The kriging fit with its prior and noise chosen per explained row by restricted likelihood, and its standard errors.

A family of Gaussian priors on the game's odd Walsh interactions (variance rho^t on each of t >= 3 features, rho from
strongly decaying orders to nearly flat ones, so high-order games are allowed) and a nugget (noise on each pair's odd
part, relative to the prior's variance: 0 for exact value functions, large for noisy ones or piecewise-constant
models). Every (rho, nugget) candidate is the universal-kriging posterior mean (flat main effects, h(full) noiseless,
so efficiency holds); per row the candidate with the highest restricted likelihood is kept, and its posterior
variance, scaled by the row's profiled prior scale, gives the standard error of every Shapley value.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.linalg

from ._kriging import _signed_poly, split_main_effects

FAMILY_RHOS = (0.02, 0.1, 0.3, 0.7)  # per-coefficient variance rho^t of an order-t odd interaction
FAMILY_NUGGETS = (0.0, 0.03, 0.3, 3.0, 30.0)  # noise variance on each pair's odd part, relative to its prior variance
FAMILY_JITTER = 1e-9  # the "noiseless" candidates' nugget: keeps the pairs' covariance positive definite
_ROWS = 4096  # rows per block of the per-row scores


def flat_prior(xs: np.ndarray, rho: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(K, C, vg) under N(0, rho^t) on every odd Walsh interaction of t >= 3 features, scaled so that each pair's
    odd part has prior variance 1: K (n1, n1) the covariance of the odd parts xs, C (n1, d) their covariance with
    the interactions' share of each Shapley value, vg (d,) that share's prior variance.

    sum_{odd T containing i, |T| = t} (2/t)^2 rho^t = C(d - 1, t - 1) (2/t)^2 rho^t summed over odd t >= 3.
    """
    d = xs.shape[1]
    odd = np.arange(3, d + 1, 2)
    agree = np.rint((xs @ xs.T + d) / 2).astype(np.int64)
    k = _signed_poly(rho, d)[:, odd].sum(axis=1)
    plus_others = (xs > 0).sum(axis=1)[:, None] - (xs > 0)
    cross = xs * (_signed_poly(rho, d - 1)[:, odd - 1] * (2.0 * rho / odd)).sum(axis=1)[plus_others]
    lg = np.array([math.lgamma(d) - math.lgamma(t) - math.lgamma(d - t + 1) for t in odd])
    vg = float(np.sum(np.exp(lg + odd * math.log(rho)) * (2.0 / odd) ** 2))
    scale = float(k[d]) or 1.0
    return k[agree] / scale, cross / scale, np.full(d, vg / scale)


class _Candidate:
    """One (rho, nugget) prior's universal-kriging operator, posterior variances and restricted-likelihood parts."""

    def __init__(self, xs: np.ndarray, k: np.ndarray, cross: np.ndarray, vg: np.ndarray, nugget: float):
        n1, d = xs.shape
        sigma = k.copy()
        idx = np.arange(n1 - 1)
        sigma[idx, idx] += max(nugget, FAMILY_JITTER)  # h(full) stays noiseless: efficiency
        self.factor = scipy.linalg.cho_factor(sigma, lower=True, check_finite=False)
        si_x = scipy.linalg.cho_solve(self.factor, xs, check_finite=False)
        si_c = scipy.linalg.cho_solve(self.factor, cross, check_finite=False)
        gx = xs.T @ si_x
        self.gx_factor = scipy.linalg.cho_factor(gx, lower=True, check_finite=False)
        lead = xs.T @ si_c - 2.0 * np.eye(d)
        mu = scipy.linalg.cho_solve(self.gx_factor, lead, check_finite=False)
        self.w = si_c - si_x @ mu  # (n1, d): Shapley values of the residual odd parts
        self.var = np.maximum(vg - np.einsum("nd,nd->d", cross, si_c) + np.einsum("ed,ed->d", lead, mu), 0.0)
        # h(full) is taken as exact (efficiency), but with a nugget v(empty) and v(full) are as noisy as any value:
        # their noise reaches each Shapley value through h(full)'s weight
        self.var += max(nugget, 0.0) * self.w[-1] ** 2
        self.xs, self.si_x = xs, si_x
        self._p_diag = None
        self.logdet = 2.0 * (np.log(np.diag(self.factor[0])).sum() + np.log(np.diag(self.gx_factor[0])).sum())

    def loo_scale(self, r: np.ndarray) -> np.ndarray:
        """Per row of r (m, n1): mean over the pairs j of (P r)_j^2 / P_jj, the leave-one-pair-out squared errors
        of the fit in units of their predicted variance (their expectation is the profiled scale q / dof when the
        prior is right); the standard errors use it in place of q / dof, so a prior rougher or smoother than the
        row's game does not widen or narrow the intervals."""
        if self._p_diag is None:
            inv_l = scipy.linalg.solve_triangular(self.factor[0], np.eye(len(self.xs)), lower=True,
                                                  check_finite=False)
            gx_inv = scipy.linalg.cho_solve(self.gx_factor, np.eye(self.xs.shape[1]), check_finite=False)
            self._p_diag = np.einsum("kj,kj->j", inv_l, inv_l) - np.einsum("jd,de,je->j", self.si_x, gx_inv,
                                                                               self.si_x)
        si_r = scipy.linalg.cho_solve(self.factor, r.T, check_finite=False)
        pr = si_r - self.si_x @ scipy.linalg.cho_solve(self.gx_factor, self.xs.T @ si_r, check_finite=False)
        pairs = slice(0, len(self.xs) - 1)
        return np.mean(pr[pairs] ** 2 / np.maximum(self._p_diag[pairs, None], 1e-300), axis=0)

    def quad(self, r: np.ndarray) -> np.ndarray:
        """r' P r per row of r (m, n1), P the restricted-likelihood projection (Sigma^-1 less the main effects')."""
        si_r = scipy.linalg.cho_solve(self.factor, r.T, check_finite=False)  # (n1, m)
        xr = self.xs.T @ si_r
        return np.einsum("nm,nm->m", r.T, si_r) - np.einsum("dm,dm->m", xr,
                                                            scipy.linalg.cho_solve(self.gx_factor, xr,
                                                                                   check_finite=False))


class KrigingFamily:
    """The candidates of one design (odd-part codes xs, the pairs then the full set), built once, applied per row.

    ``fit(h)`` -> (Shapley values (m, d), posterior variances (m, d), -2 log restricted likelihood (m,), index of the
    chosen candidate (m,)), for rows h (m, n1) of odd parts. The least-squares main effects are taken off first, so
    additive games are exact to rounding whatever the conditioning of the kriging systems.
    """

    def __init__(self, xs: np.ndarray, rhos=FAMILY_RHOS, nuggets=FAMILY_NUGGETS, loo: bool = True):
        self.xs, self.loo = xs, loo
        n1, d = xs.shape
        self.dof = n1 - d
        # candidates are factorised on first use (rows known to be exact use only the noiseless ones)
        self.specs = [(float(rho), float(nugget)) for rho in rhos for nugget in nuggets]
        self._built: dict[int, _Candidate | None] = {}
        self._priors: dict[float, tuple] = {}

    def candidate(self, j: int) -> _Candidate | None:
        """The j-th (rho, nugget) candidate, or None where its covariance is not positive definite."""
        if j not in self._built:
            rho, nugget = self.specs[j]
            if rho not in self._priors:
                self._priors[rho] = flat_prior(self.xs, rho)
            try:
                self._built[j] = _Candidate(self.xs, *self._priors[rho], nugget)
            except (np.linalg.LinAlgError, ValueError):
                self._built[j] = None
        return self._built[j]

    @property
    def candidates(self) -> list[tuple[float, float, _Candidate]]:
        """Every candidate that factorises, as (rho, nugget, candidate)."""
        return [(*self.specs[j], c) for j in range(len(self.specs)) if (c := self.candidate(j)) is not None]

    def fit(self, h: np.ndarray, noisy: np.ndarray | None = None):
        """``noisy`` (m,) bool: rows that may take a candidate with a nugget (default all); the others only the
        noiseless ones."""
        h = np.ascontiguousarray(h, dtype=np.float64)
        noisy = np.ones(len(h), dtype=bool) if noisy is None else np.asarray(noisy, dtype=bool)
        m, d = h.shape[0], self.xs.shape[1]
        beta, res = split_main_effects(self.xs, h)
        phi = np.zeros((m, d))
        var = np.zeros((m, d))
        score = np.full(m, np.inf)
        chosen = np.zeros(m, dtype=np.int64)
        dof = max(self.dof, 1)
        for lo in range(0, m, _ROWS):
            rows = slice(lo, min(m, lo + _ROWS))
            r = res[rows]
            for j, (_, nugget) in enumerate(self.specs):
                allowed = noisy[rows] | (nugget <= FAMILY_JITTER)
                if not allowed.any():
                    continue
                cand = self.candidate(j)
                if cand is None:
                    continue
                q = np.maximum(cand.quad(r), 0.0)
                s = dof * np.log(np.maximum(q, 1e-300) / dof) + cand.logdet
                better = (s < score[rows]) & allowed
                if not better.any():
                    continue
                est = (r[:, None, :] @ cand.w[None])[:, 0, :]  # row by row: the same bytes alone or batched
                phi[rows] = np.where(better[:, None], est, phi[rows])
                var[rows] = np.where(better[:, None], (q / dof)[:, None] * cand.var[None, :], var[rows])
                score[rows] = np.where(better, s, score[rows])
                chosen[rows] = np.where(better, j, chosen[rows])
        if not np.isfinite(score).all():
            raise np.linalg.LinAlgError("no kriging candidate could be factorised")
        if self.loo:
            for j in np.unique(chosen):
                these = np.flatnonzero(chosen == j)
                cand = self.candidate(int(j))
                var[these] = cand.loo_scale(res[these])[:, None] * cand.var[None, :]
        return 2.0 * beta + phi, var, score, chosen

    def nugget_of(self, chosen: np.ndarray) -> np.ndarray:
        """The relative nugget of each row's chosen candidate."""
        return np.array([self.specs[j][1] for j in chosen], dtype=np.float64)
