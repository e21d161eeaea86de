"""Solvers from a moments sketch to quantiles, all features at once: maximum entropy (Chebyshev) and Legendre series."""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from numpy.polynomial import chebyshev as C
from numpy.polynomial import legendre as L

from .state import MomentSketch

METHODS = ("maxent", "legendre")


def _binom_table(n: int) -> np.ndarray:
    b = np.zeros((n + 1, n + 1))
    for k in range(n + 1):
        b[k, 0] = 1.0
        for i in range(1, k + 1):
            b[k, i] = b[k - 1, i - 1] + (b[k - 1, i] if i <= k - 1 else 0.0)
    return b


def scaled_moments(sk: MomentSketch) -> tuple[np.ndarray, np.ndarray]:
    """Power moments E[x~^k], k = 0..l, of x~ = 2 (x - min) / (max - min) - 1 in [-1, 1], from central sums.

    Uses x~ = s (x - mean) + a with s = 2 / (max - min), a = s (mean - (min + max) / 2), so
    E[x~^k] = sum_i C(k, i) s^i m_i a^(k-i) (the digest's corrected shift). Returns (mu (d, l+1), ok (d,)),
    ok False for empty or constant features.
    """
    l = sk.n_moments
    lo, hi = sk.vmin, sk.vmax
    ok = (sk.weight > 0) & np.isfinite(lo) & np.isfinite(hi) & (hi > lo)
    s = np.where(ok, 2.0 / np.where(ok, hi - lo, 1.0), 0.0)
    a = s * (sk.mean - 0.5 * (lo + hi))
    a = np.where(ok, a, 0.0)
    m = sk.central_moments()
    m = np.where(ok[:, None], m, 0.0)
    m[:, 0] = 1.0
    sp = s[:, None] ** np.arange(l + 1)
    mh = m * sp  # standardised central moments s^k m_k
    ap = a[:, None] ** np.arange(l + 1)
    B = _binom_table(l)
    mu = np.zeros((sk.n_features, l + 1))
    for k in range(l + 1):
        for i in range(k + 1):
            mu[:, k] += B[k, i] * mh[:, i] * ap[:, k - i]
    return np.clip(mu, -1.0, 1.0), ok


@lru_cache(maxsize=None)
def _basis_from_power(l: int, basis: str) -> np.ndarray:
    """(l+1, l+1) matrix t with P_j(x) = sum_k t[j, k] x^k, for the Chebyshev ("cheb") or Legendre ("leg") basis."""
    to_poly = C.cheb2poly if basis == "cheb" else L.leg2poly
    t = np.zeros((l + 1, l + 1))
    for j in range(l + 1):
        e = np.zeros(j + 1)
        e[j] = 1.0
        p = to_poly(e)
        t[j, : p.size] = p
    return t


@lru_cache(maxsize=None)
def _quadrature(q: int, l2: int):
    from scipy.special import roots_legendre

    x, w = roots_legendre(q)
    V = np.ascontiguousarray(C.chebvander(x, l2))
    return x, w, V, np.ascontiguousarray(V.T)


@lru_cache(maxsize=None)
def _grid(g: int):
    """Chebyshev-Lobatto grid on [-1, 1] (dense near the ends, where skewed data piles up)."""
    return -np.cos(np.pi * np.arange(g) / (g - 1))


@lru_cache(maxsize=None)
def _grid_vander(g: int, l: int) -> np.ndarray:
    """(l+1, g): T_k at the grid points, one row per k (contiguous for the solver's inner loops)."""
    return np.ascontiguousarray(C.chebvander(_grid(g), l).T)


def _potential(theta, c, wq, V):
    e = np.clip(theta @ V.T, -700.0, 700.0)
    return np.exp(e) @ wq - np.sum(theta * c, axis=1)


def maxent_theta(cm: np.ndarray, *, n_quad: int = 256, max_iter: int = 40, tol: float = 1e-7,
                 loose_tol: float = 1e-5):
    """Damped Newton on the max-entropy dual for Chebyshev moments cm (d, l+1); returns (theta, converged).

    Backtracking (alpha 0.3, beta 0.25, min step 1e-3, as msketch), Cholesky solves; nogil Numba per feature on the
    solver's thread pool (maxent_theta_numpy is the same iteration in batched NumPy).
    """
    from ._newton import newton_range, run_features

    cm = np.ascontiguousarray(cm, np.float64)
    d, lp1 = cm.shape
    _, wq, Vq, VqT = _quadrature(n_quad, 2 * (lp1 - 1))
    theta = np.zeros((d, lp1))
    conv = np.zeros(d, np.bool_)
    run_features(newton_range, d, cm, wq, Vq, VqT, int(max_iter), float(tol), float(loose_tol), theta, conv)
    return theta, conv


def maxent_theta_numpy(cm: np.ndarray, *, n_quad: int = 256, max_iter: int = 40, tol: float = 1e-7,
                       loose_tol: float = 1e-5):
    """Batched-NumPy damped Newton (reference for maxent_theta); returns (theta, converged)."""
    d, lp1 = cm.shape
    l = lp1 - 1
    xq, wq, Vq, _ = _quadrature(n_quad, 2 * l)
    V = Vq[:, :lp1]
    theta = np.zeros((d, lp1))
    theta[:, 0] = np.log(0.5)
    active = np.ones(d, bool)
    conv = np.zeros(d, bool)
    idx = np.arange(lp1)
    ii, jj = np.meshgrid(idx, idx, indexing="ij")
    alpha, beta = 0.3, 0.25
    for _ in range(max_iter):
        if not active.any():
            break
        A = np.flatnonzero(active)
        th = theta[A]
        c = cm[A]
        f = np.exp(np.clip(th @ V.T, -700.0, 700.0))  # (a, Q)
        I = (f * wq) @ Vq  # integrals of T_j f, j = 0..2l
        g = I[:, :lp1] - c
        done = np.mean(g * g, axis=1) < tol * tol
        conv[A[done]] = True
        active[A[done]] = False
        keep = ~done
        if not keep.any():
            break
        A, th, c, g, I = A[keep], th[keep], c[keep], g[keep], I[keep]
        H = 0.5 * (I[:, ii + jj] + I[:, np.abs(ii - jj)])
        H = H + 1e-12 * np.trace(H, axis1=1, axis2=2)[:, None, None] * np.eye(lp1)
        try:
            step = np.linalg.solve(H, -g[..., None])[..., 0]
        except np.linalg.LinAlgError:
            step = np.stack([np.linalg.lstsq(h, -gg, rcond=None)[0] for h, gg in zip(H, g)])
        P0 = I[:, 0] - np.sum(th * c, axis=1)
        slope = np.sum(g * step, axis=1)
        t = np.ones(len(A))
        pending = np.ones(len(A), bool)
        for _ls in range(12):
            P1 = _potential(th + t[:, None] * step, c, wq, V)
            okk = np.isfinite(P1) & (P1 <= P0 + alpha * t * slope)
            pending &= ~okk
            if not pending.any():
                break
            t = np.where(pending, t * beta, t)
        bad = ~np.isfinite(step).all(axis=1)
        t = np.where(bad, 0.0, np.maximum(t, 1e-3))
        theta[A] = th + t[:, None] * step
        stuck = bad | (pending & (t <= 1e-3 + 1e-15) & (np.abs(slope) < 1e-18))
        active[A[stuck]] = False
    # out of iterations (or stalled) but close: the moments are matched to ~loose_tol, accept
    if active.any() or (~conv).any():
        f = np.exp(np.clip(theta @ V.T, -700.0, 700.0))
        g = (f * wq) @ V - cm
        conv |= np.isfinite(g).all(axis=1) & (np.mean(g * g, axis=1) < loose_tol**2)
    return theta, conv


def _invert_cdf(F: np.ndarray, grid: np.ndarray, phis: np.ndarray) -> np.ndarray:
    """First crossing of each phi by each row of F (d, G) (clipped to [0, 1], running max), linear between grid
    points."""
    from ._newton import invert_range, run_features

    F = np.ascontiguousarray(F, np.float64)
    xs = np.empty((F.shape[0], phis.size))
    run_features(invert_range, F.shape[0], F, grid, np.ascontiguousarray(phis, np.float64), xs)
    return xs


def ladder_levels(l: int, ladder: bool = True) -> list[int]:
    """Moment counts tried in turn where Newton fails with l: l, l-3, 8, 5, 2 (only l without the ladder)."""
    return sorted({l, max(2, l - 3), min(l, 8), min(l, 5), 2}, reverse=True) if ladder else [l]


def maxent_cdf(sk: MomentSketch, grid: np.ndarray, *, n_moments: int | None = None, ladder: bool = True):
    """CDF of the max-entropy density on the scaled grid (d, G), falling back to fewer moments where Newton fails.

    ladder=False solves with all l moments only and leaves NaN where Newton fails (the seed's failure count).
    Each feature runs its whole ladder and grid CDF in one nogil Numba call on the solver's thread pool.
    """
    from ._newton import maxent_range, run_features

    mu, ok = scaled_moments(sk)
    l = sk.n_moments if n_moments is None else n_moments
    uniform = (grid + 1.0) / 2.0  # the fallback CDF
    todo = np.flatnonzero(ok)
    if not todo.size:
        return np.tile(uniform, (sk.n_features, 1)), ok
    levels = np.array(ladder_levels(l, ladder), np.int64)
    cms = np.zeros((levels.size, todo.size, l + 1))
    for i, li in enumerate(levels):
        cms[i, :, : li + 1] = mu[todo, : li + 1] @ _basis_from_power(int(li), "cheb").T
    _, wq, Vq, VqT = _quadrature(256, 2 * l)
    # every feature solvable (the usual case): the kernel writes F in place (a wide frame's F is d x 4097 doubles)
    whole = todo.size == sk.n_features
    Ft = np.empty((todo.size, grid.size))
    solved = np.zeros(todo.size, np.bool_)
    run_features(maxent_range, todo.size, cms, levels, wq, Vq, VqT, _grid_vander(grid.size, l), grid, 40, 1e-7,
                 1e-5, Ft, solved)
    F = Ft if whole else np.tile(uniform, (sk.n_features, 1))
    if not whole:
        F[todo[solved]] = Ft[solved]
    F[todo[~solved]] = uniform if ladder else np.nan
    return F, ok


def legendre_cdf(sk: MomentSketch, grid: np.ndarray):
    """CDF of the truncated Legendre series (may be non-monotone; the inversion takes the first crossing)."""
    mu, ok = scaled_moments(sk)
    l = sk.n_moments
    lm = mu @ _basis_from_power(l, "leg").T  # E[L_n(x)]
    a = (2 * np.arange(l + 1) + 1) / 2.0 * lm
    A = np.empty((grid.size, l + 1))
    for n in range(l + 1):
        e = np.zeros(n + 1)
        e[n] = 1.0
        A[:, n] = L.legval(grid, L.legint(e, lbnd=-1))
    return a @ A.T, ok


def quantiles(sk: MomentSketch, phis, method: str = "maxent", *, grid_size: int = 4097,
              ladder: bool = True) -> np.ndarray:
    """Quantiles (d, len(phis)) in data units for probabilities phis in [0, 1] (NaN where a solve failed).

    Parameters
    ----------
    sk : MomentSketch
        The sketch of d features.
    phis : array-like of float
        Probabilities in [0, 1].
    method : {"maxent", "legendre"}, default "maxent"
        Maximum-entropy density (Chebyshev basis, damped Newton) or truncated Legendre series.
    grid_size : int, default 4097
        Points of the grid the density is integrated on.
    ladder : bool, default True
        For "maxent": retry with fewer moments where the full solve fails.

    Returns
    -------
    numpy.ndarray
        float64, shape (d, len(phis)).

    See Also
    --------
    numpy.quantile : the exact quantiles of data in memory.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.kernels.sketch import quantiles, sketch
    >>> x = np.random.default_rng(0).normal(size=(20_000, 1))
    >>> q = quantiles(sketch(x), [0.1, 0.5, 0.9])
    >>> bool(np.allclose(q[0], np.quantile(x, [0.1, 0.5, 0.9]), atol=0.05))
    True
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    phis = np.asarray(phis, np.float64).reshape(-1)
    if ((phis < 0) | (phis > 1)).any() or not np.isfinite(phis).all():
        raise ValueError("phis must lie in [0, 1]")
    grid = _grid(grid_size)
    F, ok = maxent_cdf(sk, grid, ladder=ladder) if method == "maxent" else legendre_cdf(sk, grid)
    failed = ~np.isfinite(F).all(axis=1)
    F[failed] = (grid + 1.0) / 2.0
    xs = _invert_cdf(F, grid, phis)
    xs[failed] = np.nan
    lo, hi = sk.vmin, sk.vmax
    q = lo[:, None] + (xs + 1.0) * 0.5 * (hi - lo)[:, None]
    q = np.where(ok[:, None], q, lo[:, None])
    return np.where(np.isnan(q), np.nan, np.clip(q, lo[:, None], hi[:, None]))
