"""Numba max-entropy Newton: the damped Newton of solvers.maxent_theta, all features in one parallel call."""
from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(cache=True, inline="always")
def _cholesky_solve(H, b, out):
    """Solve H x = b for symmetric positive definite H (n x n) in place of a copy; False if not SPD."""
    n = H.shape[0]
    Lm = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1):
            s = H[i, j]
            for k in range(j):
                s -= Lm[i, k] * Lm[j, k]
            if i == j:
                if not s > 0.0:
                    return False
                Lm[i, i] = np.sqrt(s)
            else:
                Lm[i, j] = s / Lm[j, j]
    y = np.empty(n)
    for i in range(n):
        s = b[i]
        for k in range(i):
            s -= Lm[i, k] * y[k]
        y[i] = s / Lm[i, i]
    for i in range(n - 1, -1, -1):
        s = y[i]
        for k in range(i + 1, n):
            s -= Lm[k, i] * out[k]
        out[i] = s / Lm[i, i]
    return True


@nb.njit(cache=True, inline="always")
def _density(theta, Vq, f):
    Q, lp1 = Vq.shape[0], theta.shape[0]
    for q in range(Q):
        e = 0.0
        for k in range(lp1):
            e += theta[k] * Vq[q, k]
        f[q] = np.exp(min(max(e, -700.0), 700.0))


@nb.njit(cache=True, parallel=True)
def newton_all(cm, wq, Vq, max_iter, tol, loose_tol):
    """theta (d, l+1) and converged (d,) for Chebyshev moments cm; Vq (Q, 2l+1) holds T_j at the nodes."""
    d, lp1 = cm.shape
    Q = wq.shape[0]
    m2 = Vq.shape[1]
    theta_all = np.zeros((d, lp1))
    conv = np.zeros(d, np.bool_)
    alpha, beta = 0.3, 0.25
    for j in nb.prange(d):
        th = np.zeros(lp1)
        th[0] = np.log(0.5)
        c = cm[j]
        f = np.empty(Q)
        I = np.empty(m2)
        g = np.empty(lp1)
        H = np.empty((lp1, lp1))
        step = np.empty(lp1)
        trial = np.empty(lp1)
        ok = False
        for _ in range(max_iter):
            _density(th, Vq, f)
            for m in range(m2):
                s = 0.0
                for q in range(Q):
                    s += wq[q] * f[q] * Vq[q, m]
                I[m] = s
            gg = 0.0
            for a in range(lp1):
                g[a] = I[a] - c[a]
                gg += g[a] * g[a]
            if not np.isfinite(gg):
                break
            if gg / lp1 < tol * tol:
                ok = True
                break
            tr = 0.0
            for a in range(lp1):
                for b in range(lp1):
                    H[a, b] = 0.5 * (I[a + b] + I[abs(a - b)])
                tr += H[a, a]
            for a in range(lp1):
                H[a, a] += 1e-12 * tr
                g[a] = -g[a]
            if not _cholesky_solve(H, g, step):
                break
            P0 = I[0]
            slope = 0.0
            for a in range(lp1):
                P0 -= th[a] * c[a]
                slope -= g[a] * step[a]  # g holds -gradient here
            t = 1.0
            for _ls in range(12):
                for a in range(lp1):
                    trial[a] = th[a] + t * step[a]
                _density(trial, Vq, f)
                P1 = 0.0
                for q in range(Q):
                    P1 += wq[q] * f[q]
                for a in range(lp1):
                    P1 -= trial[a] * c[a]
                if np.isfinite(P1) and P1 <= P0 + alpha * t * slope:
                    break
                t *= beta
            t = max(t, 1e-3)
            for a in range(lp1):
                th[a] += t * step[a]
        if not ok:  # out of iterations but close: accept at the loose tolerance
            _density(th, Vq, f)
            gg = 0.0
            for a in range(lp1):
                s = 0.0
                for q in range(Q):
                    s += wq[q] * f[q] * Vq[q, a]
                gg += (s - c[a]) ** 2
            ok = np.isfinite(gg) and gg / lp1 < loose_tol * loose_tol
        theta_all[j] = th
        conv[j] = ok
    return theta_all, conv


@nb.njit(cache=True, parallel=True)
def grid_cdf(theta, Vg, grid):
    """Cumulative trapezoid of exp(theta . T(grid)) per feature, unnormalised (d, G)."""
    d, lp1 = theta.shape
    G = grid.shape[0]
    out = np.empty((d, G))
    for j in nb.prange(d):
        prev = 0.0
        acc = 0.0
        for q in range(G):
            e = 0.0
            for k in range(lp1):
                e += theta[j, k] * Vg[q, k]
            fq = np.exp(min(max(e, -700.0), 700.0))
            if q > 0:
                acc += 0.5 * (fq + prev) * (grid[q] - grid[q - 1])
            out[j, q] = acc
            prev = fq
    return out
