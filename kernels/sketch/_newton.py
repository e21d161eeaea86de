"""Numba max-entropy solver: the damped Newton of solvers.maxent_theta, the ladder, the grid CDF and its inversion,
one feature at a time in nogil kernels that a small thread pool runs over the features (the CPU sketch's passes run
on the same pool).

Why a thread pool and not ``prange``: Numba's OpenMP layer and XGBoost each load their own libgomp; after a parallel
region each runtime's threads spin-wait, so a Numba-parallel pass right before ``QuantileDMatrix`` (or after it)
leaves two spinning pools fighting for the same cores, and on a busy machine the spinning is CPU time taken from the
thread with work left. Pool threads block on a queue and never spin.
"""
from __future__ import annotations

import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numba as nb
import numpy as np

_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def n_threads() -> int:
    """Worker threads of the solver pool: Numba's thread count (``NUMBA_NUM_THREADS``, ``numba.set_num_threads``),
    at most the CPUs this process may run on; HITML_SOLVER_THREADS overrides both."""
    env = os.environ.get("HITML_SOLVER_THREADS")
    if env:
        return max(1, int(env))
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, nb.get_num_threads()))


_CHUNKS_PER_THREAD = 8   # feature ranges per thread: few Python calls, yet uneven Newton costs still even out
_MAX_CHUNK = 64


def run_features(fn, d: int, *args) -> None:
    """Call fn(*args, j0, j1) over [0, d) on the solver pool (inline for one thread).

    The threads take ranges of about d / (8 threads) features (at most 64) from a shared counter, the calling
    thread among them: a feature's cost varies (Newton steps, point masses), so ranges are handed out as threads
    come free, while one Python call per range instead of per feature keeps the pool's overhead (about 0.1 ms a
    task) off 2,000-column frames. Each feature is computed by the same kernel whichever thread and range take it.
    """
    global _POOL
    t = min(n_threads(), d)
    if t <= 1:
        fn(*args, 0, d)
        return
    with _POOL_LOCK:
        if _POOL is None or _POOL._max_workers < t:
            _POOL = ThreadPoolExecutor(max_workers=n_threads(), thread_name_prefix="hitml-solver")
        pool = _POOL
    size = max(1, min(_MAX_CHUNK, d // (_CHUNKS_PER_THREAD * t)))
    counter = itertools.count()   # next() is atomic under the GIL
    failed = []

    def work() -> None:
        while not failed:
            j0 = next(counter) * size
            if j0 >= d:
                return
            try:
                fn(*args, j0, min(d, j0 + size))
            except BaseException as exc:  # re-raised in the caller; the other threads stop taking ranges
                failed.append(exc)
                raise

    futs = [pool.submit(work) for _ in range(t - 1)]
    try:
        work()
    finally:
        for f in futs:
            f.exception()
    if failed:
        raise failed[0]


@nb.njit(cache=True, nogil=True, inline="always")
def _cholesky_solve(H, b, out):
    """Solve H x = b for symmetric positive definite H (n x n); False if not SPD."""
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


@nb.njit(cache=True, nogil=True, inline="always")
def _series(theta, lp1, VT, out):
    """out[q] = sum_{k < lp1} theta[k] VT[k, q]; k outer so the q loop runs over contiguous rows of VT (the same
    summation order per q as a dot product)."""
    for q in range(VT.shape[1]):
        out[q] = 0.0
    for k in range(lp1):
        t = theta[k]
        for q in range(VT.shape[1]):
            out[q] += t * VT[k, q]


@nb.njit(cache=True, nogil=True, inline="always")
def _density(theta, lp1, VqT, f):
    """f[q] = exp(sum_k theta[k] T_k(x_q)), clipped."""
    _series(theta, lp1, VqT, f)
    for q in range(VqT.shape[1]):
        f[q] = np.exp(min(max(f[q], -700.0), 700.0))


@nb.njit(cache=True, nogil=True)
def newton_one(c, wq, Vq, VqT, max_iter, tol, loose_tol, th):
    """Damped Newton for one feature's Chebyshev moments c (l+1); theta into th (l+1); returns converged.

    Vq (Q, >= 2l+1) holds T_j at the quadrature nodes, VqT its transpose (contiguous). Backtracking alpha 0.3,
    beta 0.25, min step 1e-3 (msketch).
    """
    lp1 = c.shape[0]
    m2 = 2 * lp1 - 1
    Q = wq.shape[0]
    alpha, beta = 0.3, 0.25
    for a in range(lp1):
        th[a] = 0.0
    th[0] = np.log(0.5)
    f = np.empty(Q)
    I = np.empty(m2)
    g = np.empty(lp1)
    H = np.empty((lp1, lp1))
    step = np.empty(lp1)
    trial = np.empty(lp1)
    ok = False
    fresh = False  # f holds the density at th (the accepted line-search trial), so it need not be recomputed
    for _ in range(max_iter):
        if not fresh:
            _density(th, lp1, VqT, f)
        for m in range(m2):
            I[m] = 0.0
        for q in range(Q):  # q outer, m inner: contiguous rows of Vq, the same summation order per m
            wf = wq[q] * f[q]
            for m in range(m2):
                I[m] += wf * Vq[q, m]
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
        fresh = False
        for _ls in range(12):
            for a in range(lp1):
                trial[a] = th[a] + t * step[a]
            _density(trial, lp1, VqT, f)
            P1 = 0.0
            for q in range(Q):
                P1 += wq[q] * f[q]
            for a in range(lp1):
                P1 -= trial[a] * c[a]
            if np.isfinite(P1) and P1 <= P0 + alpha * t * slope:
                fresh = t >= 1e-3  # the step taken below is this trial's: th becomes trial, f is its density
                break
            t *= beta
        t = max(t, 1e-3)
        for a in range(lp1):
            th[a] += t * step[a]
    if not ok:  # out of iterations but close: accept at the loose tolerance
        _density(th, lp1, VqT, f)
        gg = 0.0
        for a in range(lp1):
            s = 0.0
            for q in range(Q):
                s += wq[q] * f[q] * Vq[q, a]
            gg += (s - c[a]) ** 2
        ok = np.isfinite(gg) and gg / lp1 < loose_tol * loose_tol
    return ok


@nb.njit(cache=True, nogil=True)
def newton_range(cm, wq, Vq, VqT, max_iter, tol, loose_tol, theta, conv, j0, j1):
    """newton_one for features j0..j1-1 of cm (d, l+1) into theta (d, l+1) / conv (d,)."""
    for j in range(j0, j1):
        conv[j] = newton_one(cm[j], wq, Vq, VqT, max_iter, tol, loose_tol, theta[j])


@nb.njit(cache=True, nogil=True, inline="always")
def _cdf_row(th, lp1, VgT, grid, out):
    """Cumulative trapezoid of exp(th . T(grid)) into out (G), unnormalised; VgT (>= l+1, G) holds T_k(grid)."""
    G = grid.shape[0]
    _series(th, lp1, VgT, out)
    prev = 0.0
    acc = 0.0
    for q in range(G):
        fq = np.exp(min(max(out[q], -700.0), 700.0))
        if q > 0:
            acc += 0.5 * (fq + prev) * (grid[q] - grid[q - 1])
        out[q] = acc
        prev = fq


@nb.njit(cache=True, nogil=True)
def maxent_range(cms, levels, wq, Vq, VqT, VgT, grid, max_iter, tol, loose_tol, F, solved, j0, j1):
    """The whole max-entropy CDF for features j0..j1-1: Newton at each ladder level in turn until one converges and
    the grid resolves its density (mass within 1e-3 of 1), then the normalised grid CDF into F[j] (G).

    cms (n_levels, d, lmax+1): Chebyshev moments per level (first levels[i]+1 used); solved[j] = False if none did.
    """
    lmax1 = cms.shape[2]
    th = np.empty(lmax1)
    cum = np.empty(grid.shape[0])
    for j in range(j0, j1):
        solved[j] = False
        for li in range(levels.shape[0]):
            lp1 = levels[li] + 1
            if not newton_one(cms[li, j, :lp1], wq, Vq, VqT, max_iter, tol, loose_tol, th[:lp1]):
                continue
            _cdf_row(th, lp1, VgT, grid, cum)
            if not abs(cum[-1] - 1.0) < 1e-3:
                continue
            for q in range(grid.shape[0]):
                F[j, q] = cum[q] / cum[-1]
            solved[j] = True
            break


@nb.njit(cache=True, nogil=True)
def invert_range(F, grid, phis, xs, j0, j1):
    """First crossing of each phi by F[j] (clipped to [0, 1], running max), linear between grid points."""
    G = grid.shape[0]
    mono = np.empty(G)
    for j in range(j0, j1):
        run = 0.0
        for q in range(G):
            v = min(max(F[j, q], 0.0), 1.0)
            if q == 0 or v > run:
                run = v
            mono[q] = run
        for p in range(phis.shape[0]):
            phi = phis[p]
            lo = 0
            hi = G
            while lo < hi:  # searchsorted(mono, phi, "left")
                mid = (lo + hi) >> 1
                if mono[mid] < phi:
                    lo = mid + 1
                else:
                    hi = mid
            k = min(max(lo, 1), G - 1)
            f0 = mono[k - 1]
            f1 = mono[k]
            frac = (phi - f0) / (f1 - f0) if f1 > f0 else 0.0
            xs[j, p] = grid[k - 1] + min(max(frac, 0.0), 1.0) * (grid[k] - grid[k - 1])
