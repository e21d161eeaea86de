"""Permutation samplers (MC, antithetic, stratified, Owen, herding, SBQ, orthogonal, Sobol), generic over NumPy/CuPy.

Every random draw is made on the host from ``np.random.default_rng(seed)`` (or the shuffle kernel, identical on CPU
and GPU), so the CPU and GPU twins return the same samples; the GPU does the heavy parts (kernel matrices, QR, argsort).
Permutation samplers return insertion orders (n, d) int64: row i, step t = the feature that joins at step t.
"""
from __future__ import annotations

import warnings

import numpy as np
from scipy import special
from scipy.linalg import helmert

from .._rng import as_generator
from ._permutation_kernels import _check_kernel, feature_map, kernel_expectation, kernel_from_inner, rank_vectors

PERMUTATION_METHODS = ("mc", "antithetic", "stratified", "herding", "sbq", "orthogonal", "sobol")
MASK_METHODS = ("owen", "owen_halved")
METHODS = PERMUTATION_METHODS + MASK_METHODS
# samplers built from antithetic pairs (a sample and its reverse / complement): a budget buys whole pairs, since an
# unpaired last sample adds its full single-sample variance (ShapleyExplainer rounds n down to even, as shap does)
PAIRED_METHODS = ("antithetic", "orthogonal", "owen_halved")


def _child_seed(rng: np.random.Generator) -> int:
    return int(rng.integers(0, 2**62))


def _check_nd(n: int, d: int) -> None:
    if int(n) != n or n < 1:
        raise ValueError(f"n (the number of samples) must be a positive integer, got {n!r}")
    if int(d) != d or d < 1:
        raise ValueError(f"d (the number of features) must be a positive integer, got {d!r}")


def _uniform(k: int, d: int, rng, xp, backend: str):
    from hitml.kernels.shuffle import batched_permutations  # the bijective shuffle kernel

    return xp.asarray(batched_permutations(k, d, _child_seed(rng), backend=backend)).astype(xp.int64)


def monte_carlo(n, d, seed=None, *, xp=np, backend="cpu"):
    """n i.i.d. uniform permutations."""
    _check_nd(n, d)
    return _uniform(n, d, as_generator(seed), xp, backend)


def antithetic(n, d, seed=None, *, xp=np, backend="cpu"):
    """Uniform permutations each followed by its reverse (the antipode on rank vectors)."""
    _check_nd(n, d)
    base = _uniform((n + 1) // 2, d, as_generator(seed), xp, backend)
    out = xp.empty((2 * base.shape[0], d), dtype=xp.int64)
    out[0::2] = base
    out[1::2] = base[:, ::-1]
    return out[:n]


def stratified(n, d, seed=None, *, xp=np, backend="cpu"):
    """Blocks of d permutations forming a random Latin square: in a block every feature takes every position once.

    Block rank vectors are r_k(i) = rho((tau(i) + k) mod d) for uniform rho, tau, so the number of predecessors of
    each feature is stratified over 0..d-1 (the Maleki/Castro strata) and each row is marginally uniform.
    """
    _check_nd(n, d)
    rng = as_generator(seed)
    nblocks = -(-n // d)
    tau = _uniform(nblocks, d, rng, xp, backend)
    rho = _uniform(nblocks, d, rng, xp, backend)
    k = xp.arange(d)
    pos = (tau[:, None, :] + k[None, :, None]) % d  # (block, k, feature)
    ranks = xp.take_along_axis(rho[:, None, :], pos, axis=2).reshape(-1, d)[:n]
    return xp.argsort(ranks, axis=1).astype(xp.int64)


def owen_masks(n, d, seed=None, *, halved=False, xp=np, backend="cpu"):
    """Owen multilinear-extension coalitions: (n, d) int8 masks, mask k ~ Bernoulli(q_k)^d on a shifted q grid.

    q_k = (k + u) / n with one u ~ U(0, 1) (a randomised trapezoid grid, so q is marginally uniform and the estimator
    unbiased). Halved (Okhrati & Lipani): q in [0, 1/2) and every mask is followed by its complement (an odd n
    ends with one mask at q ~ U(0, 1)).
    """
    _check_nd(n, d)
    rng = as_generator(seed)
    m = n // 2 if halved else n
    q = (np.arange(m) + rng.random()) / max(m, 1)
    if halved:
        q = q / 2.0
    masks = (rng.random((m, d)) < q[:, None]).astype(np.int8)
    if halved:
        both = np.empty((n, d), np.int8)
        both[0:2 * m:2], both[1:2 * m:2] = masks, 1 - masks
        if n % 2:  # an unpaired last mask gets its own q ~ U(0, 1), so every pair / single stays unbiased
            both[-1] = rng.random(d) < rng.random()
        masks = both
    return xp.asarray(masks)


def _helmert(d: int, xp):
    return xp.asarray(helmert(d))  # (d-1, d): orthonormal rows orthogonal to the all-ones vector


def _sphere_to_perms(points, d: int, xp):
    """Algorithm 2: argsort(U^T x) for points x on S^{d-2} (rows)."""
    return xp.argsort(xp.asarray(points) @ _helmert(d, xp), axis=1).astype(xp.int64)


def orthogonal(n, d, seed=None, *, xp=np, backend="cpu"):
    """Orthogonal spherical codes: per block a Haar-random orthonormal basis of R^{d-1} and its antipodes.

    Block rows are v_1, -v_1, v_2, -v_2, ... (2(d-1) permutations); the last block is truncated.
    """
    _check_nd(n, d)
    if d == 1:
        return xp.zeros((n, 1), xp.int64)
    rng = as_generator(seed)
    k = d - 1
    blocks = []
    for _ in range(-(-n // (2 * k))):
        g = xp.asarray(rng.standard_normal((k, k)))
        q, r = xp.linalg.qr(g)
        q = q * xp.sign(xp.diag(r))[None, :]  # Haar: fix column signs by diag(R)
        perms = _sphere_to_perms(q.T, d, xp)
        block = xp.empty((2 * k, d), xp.int64)
        block[0::2], block[1::2] = perms, perms[:, ::-1]
        blocks.append(block)
    return xp.concatenate(blocks)[:n]


def sobol_sphere_points(n: int, d: int, rng) -> np.ndarray:
    """Randomised (scrambled) Sobol points on S^{d-2} in R^{d-1} via inverse-CDF polar angles (host, float64)."""
    from scipy.stats import qmc

    m = d - 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # balance warning for n not a power of two
        try:
            u = qmc.Sobol(m, scramble=True, rng=rng).random(n)
        except TypeError:  # older scipy
            u = qmc.Sobol(m, scramble=True, seed=rng).random(n)
    phi = np.empty((n, m))
    phi[:, m - 1] = 2.0 * np.pi * u[:, 0]  # the last angle is uniform on [0, 2 pi)
    for k in range(1, m):  # angle m-1-k has density proportional to sin^k on [0, pi]
        a = (k + 1) / 2.0
        phi[:, m - 1 - k] = np.arccos(np.clip(1.0 - 2.0 * special.betaincinv(a, a, u[:, k]), -1.0, 1.0))
    sines = np.concatenate([np.ones((n, 1)), np.cumprod(np.sin(phi), axis=1)], axis=1)  # prod_{j<i} sin phi_j
    x = sines.copy()
    x[:, :m] *= np.cos(phi)  # every coordinate but the last gets a cos factor (i <= d-2)
    return x


def sobol(n, d, seed=None, *, xp=np, backend="cpu"):
    """Randomised Sobol points on the sphere S^{d-2} mapped to permutations (Algorithm 4, corrected)."""
    _check_nd(n, d)
    rng = as_generator(seed)
    if d == 1:
        return xp.zeros((n, 1), xp.int64)
    if d == 2:  # S^0 = {-1, +1}: alternate the two permutations from a random start
        start = int(rng.integers(2))
        rows = (np.arange(n)[:, None] + start + np.arange(2)[None, :]) % 2
        return xp.asarray(rows.astype(np.int64))
    return _sphere_to_perms(xp.asarray(sobol_sphere_points(n, d, rng)), d, xp)


def _features(perms, kernel, xp):
    return feature_map(rank_vectors(perms, xp), kernel, xp)


def herding(n, d, seed=None, *, kernel="mallows", lam=4.0, n_candidates=25, block=16, xp=np, backend="cpu"):
    """Kernel herding: each step keeps the best of ``n_candidates`` uniform permutations, argmin sum_i K(., sigma_i).

    Kernel sums against earlier blocks are one matmul per block of steps; only the in-block part is sequential.
    Candidate features are built per block, so memory is O((n + block * n_candidates) d^2).
    """
    _check_nd(n, d)
    _check_kernel(kernel, lam)
    rng = as_generator(seed)
    cands = _uniform(n * n_candidates, d, rng, xp, backend)
    out = xp.empty((n, d), xp.int64)
    chosen = None  # features of the selected permutations, (n, P)
    for b0 in range(0, n, block):
        b1 = min(n, b0 + block)
        cb = cands[b0 * n_candidates:b1 * n_candidates]
        fc = _features(cb, kernel, xp)
        if chosen is None:
            chosen = xp.empty((n, fc.shape[1]), fc.dtype)
        if b0:
            sums = kernel_from_inner(fc @ chosen[:b0].T, d, kernel, lam, xp).sum(axis=1).reshape(b1 - b0, n_candidates)
        else:
            sums = xp.zeros((b1 - b0, n_candidates))
        for t in range(b0, b1):
            lo = (t - b0) * n_candidates
            s = sums[t - b0]
            if t > b0:
                s = s + kernel_from_inner(fc[lo:lo + n_candidates] @ chosen[b0:t].T, d, kernel, lam, xp).sum(axis=1)
            j = lo + int(xp.argmin(xp.round(s, 9)))  # rounding keeps exact ties tied on CPU and GPU
            chosen[t] = fc[j]
            out[t] = cb[j]
    return out


def sbq(n, d, seed=None, *, kernel="mallows", lam=4.0, n_candidates=25, jitter=1e-8, xp=np, backend="cpu"):
    """Sequential Bayesian quadrature: greedily maximise 1^T K^-1 1 over candidates; weights K^-1 1, normalised.

    Returns (perms (n, d), weights (n,) summing to 1). The inverse is grown by bordering (Schur complement), O(t^2) per
    candidate per step, over the distinct points only: a candidate already in the span (a repeat, e.g. n > d!) adds
    nothing to 1^T K^-1 1 and is chosen only when every candidate is one; repeats share their weight.
    """
    _check_nd(n, d)
    _check_kernel(kernel, lam)
    rng = as_generator(seed)
    cands = _uniform(n * n_candidates, d, rng, xp, backend)
    f0 = _features(cands[:1], kernel, xp)
    chosen = xp.empty((n, f0.shape[1]), f0.dtype)
    chosen[0] = f0[0]
    sel, basis = [0], [0]
    scale = float(kernel_from_inner((f0 * f0).sum(axis=1), d, kernel, lam, xp)[0])
    kinv = xp.full((1, 1), 1.0 / (scale + jitter))
    for t in range(1, n):
        fc = _features(cands[t * n_candidates:(t + 1) * n_candidates], kernel, xp)
        kc = kernel_from_inner(fc @ chosen[xp.asarray(basis)].T, d, kernel, lam, xp)  # (nc, |basis|)
        kcc = kernel_from_inner((fc * fc).sum(axis=1), d, kernel, lam, xp) + jitter
        u = kc @ kinv
        q = kcc - (u * kc).sum(axis=1)
        fresh = q > 1e-6 * scale
        gain = xp.where(fresh, (1.0 - kc @ kinv.sum(axis=1)) ** 2 / xp.maximum(q, 1e-300), -1.0)
        top = float(gain.max())
        j = int(xp.argmax(xp.round(gain / top, 9))) if top > 0 else 0  # rounding: ties break alike on CPU and GPU
        if bool(fresh[j]):
            b = len(basis)
            uj, qj = u[j], float(q[j])
            new = xp.empty((b + 1, b + 1))
            new[:b, :b] = kinv + xp.outer(uj, uj) / qj
            new[:b, b] = -uj / qj
            new[b, :b] = -uj / qj
            new[b, b] = 1.0 / qj
            kinv = new
            basis.append(t)
        chosen[t] = fc[j]
        sel.append(t * n_candidates + j)
    gram = kernel_from_inner(chosen @ chosen.T, d, kernel, lam, xp) + jitter * scale * xp.eye(n)
    w = xp.linalg.solve(gram, xp.ones(n))
    if kernel_expectation(d, kernel, lam) == 0.0 and abs(float(w.sum())) < 1e-12:
        w = xp.ones(n)
    return cands[xp.asarray(sel)], w / w.sum()
