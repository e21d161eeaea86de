"""GPU interventional TreeSHAP (shap's ``dense_independent`` semantics): SHAP values against background rows."""
from __future__ import annotations

import math

import numpy as np

from ..device import cupy_module, is_cupy_array
from . import _gpu_core as core
from . import _patterns as _pat
from ._gpu_patterns import pattern_values
from ._inputs import check_transform, check_tree_limit
from ._summary import BackgroundSummary
from .paths import PathSet


def _transform(xp, code: str, margin, y):
    if code == "logistic":
        return 1.0 / (1.0 + xp.exp(-margin))
    if code == "logistic_nlogloss":
        return xp.log1p(xp.exp(margin)) - y * margin
    if code == "squared_loss":
        return (margin - y) ** 2
    return margin


def _rescale_bound(code: str, pk, y: np.ndarray | None) -> float:
    """A bound on |(T(a, y) - T(b, y)) / (a - b)| over the model's margins a, b (the derivative of T between them):
    1/4 for the logistic, max|sigmoid - y| <= 1 + max|y| for the log loss, |a + b - 2y| for the squared loss."""
    ymax = float(np.abs(y).max()) if y is not None and np.size(y) else 0.0
    if code == "logistic":
        return 0.25
    if code == "logistic_nlogloss":
        return 1.0 + ymax
    if code == "squared_loss":
        margin = float(core.bound_of(pk).max()) / 2 + float(np.abs(pk.ps.base_offset).max(initial=0.0))
        return 2.0 * (margin + ymax)
    return 1.0


def _weights(max_len: int) -> np.ndarray:
    """W[s, n] = s! (n - s - 1)! / n! for 0 <= s < n <= max_len, (max_len + 2, max_len + 2)."""
    W = np.zeros((max_len + 2, max_len + 2))
    for nn in range(1, max_len + 1):
        for s in range(nn):
            W[s, nn] = math.exp(math.lgamma(s + 1) + math.lgamma(nn - s) - math.lgamma(nn + 1))
    return W


def interventional_interaction_values(paths: PathSet, X, background, *, weights=None, tree_limit=None,
                                      progress=None):
    """Interventional SHAP interaction values, (n, M+1, M+1, K), bias at [M, M] (the CPU twin's definition)."""
    return pattern_values(paths, X, background, weights=weights, metric=_pat.SHAPLEY, interactions=True,
                          tree_limit=tree_limit, progress=progress, desc="GPU interventional interactions")


def interventional_banzhaf_values(paths: PathSet, X, background, *, weights=None, tree_limit=None, progress=None):
    """Interventional Banzhaf values, (n, M+1, K), background mean margin in column M (the CPU twin's)."""
    return pattern_values(paths, X, background, weights=weights, metric=_pat.BANZHAF, interactions=False,
                          tree_limit=tree_limit, progress=progress, desc="GPU interventional Banzhaf")


def interventional_shap_values(paths: PathSet, X, background, *, transform="identity", y=None, tree_limit=None,
                               progress=None, weights=None, method="auto"):
    """Interventional SHAP values averaged over ``background`` rows, (n, M+1, K), bias in column M.

    Same semantics as the CPU twin (shap's ``dense_independent``). The identity transform runs the pattern engine
    (time linear in rows plus background, ``method`` "auto" or "patterns"); with a non-identity transform (or
    ``method="pairs"``) each (x, r) pair is rescaled by (T(f(x), y) - T(f(r), y)) / (f(x) - f(r)) (1 where the
    margins are equal); the bias is the mean of T(f(r), 0).
    """
    if method not in ("auto", "patterns", "pairs"):
        raise ValueError(f"method must be 'auto', 'patterns' or 'pairs', got {method!r}")
    if transform == "identity" and method != "pairs":
        return pattern_values(paths, X, background, weights=weights, metric=_pat.SHAPLEY, interactions=False,
                              tree_limit=tree_limit, progress=progress, desc="GPU interventional TreeSHAP")
    if method == "patterns":
        raise ValueError(f"method='patterns' needs transform='identity' (got {transform!r}): other output "
                         "transforms do not decompose over the background")
    if isinstance(background, BackgroundSummary):
        raise ValueError(f"transform={transform!r} (or method='pairs') walks every (row, background row) pair and "
                         "needs the background rows, not a summary of them")
    if weights is not None:
        raise NotImplementedError("background weights with a non-identity output transform on the GPU; use "
                                  "backend='cpu'")
    cp = cupy_module()
    M, K = paths.n_features, paths.n_outputs
    tl = check_tree_limit(tree_limit)
    pk = core.packed_paths(paths, tl)
    Xc = core.check_x(X, pk.ps)
    R = core.check_x(background, pk.ps, name="background")
    n = Xc.shape[0]
    y_host = check_transform(transform, None if y is None else (y.get() if is_cupy_array(y) else y), n)
    det = core.options.deterministic
    base = core.fixed_scale(core.bound_of(pk)) if det else None
    # the rescale multiplies every term; its bound (not the chunk's values) sets the scale, so chunks do not matter
    scale_fx = core.fixed_scale(core.bound_of(pk), _rescale_bound(transform, pk, y_host)) if det else None
    Rd = core.to_device(R, pk.xdtype)
    nR = Rd.shape[0]
    fr = core.predict(pk, Rd, M, K, base)                                     # (nR, K)
    base_col = _transform(cp, transform, fr, 0.0).mean(axis=0)                # (K,)
    Wt = cp.asarray(_weights(max(pk.max_len, 1, core._WARP)))
    wstride = np.int32(Wt.shape[1])
    yd = cp.asarray(y_host)
    identity = transform == "identity"
    null = np.uint64(0)

    def compute(pk, Xd, phi, a, b):
        nc = Xd.shape[0]
        rescale = null
        if not identity:
            fx = core.predict(pk, Xd, M, K, base)                            # (nc, K)
            yc = yd[a:b, None, None]
            num = _transform(cp, transform, fx[:, None, :], yc) - _transform(cp, transform, fr[None, :, :], yc)
            den = fx[:, None, :] - fr[None, :, :]
            same = den == 0
            rescale = cp.ascontiguousarray(cp.where(same, 1.0, num / cp.where(same, 1.0, den)))
        rpw = core.rows_per_warp(nc, pk.n_bins, 64)
        core.launch_warp(core.kernel("interventional", pk.xdtype), pk, nc, rpw,
                         (Xd, np.int64(nc), Rd, np.int64(nR), np.int32(M), np.int32(K), pk.bin_ptr,
                          np.int64(pk.n_bins), np.int32(rpw), np.int32(core.bank_group(rpw, (M + 1) * K * 8)),
                          *core.call_elems(pk, scale_fx), rescale, Wt, wstride, phi))
        if pk.n_long:
            blocks = math.ceil(int(min(nc * pk.n_long, 1 << 16)) / core._THREADS)
            scratch = cp.empty(blocks * core._THREADS * pk.long_max, dtype=cp.float64)
            core.kernel("long_interventional", pk.xdtype)(
                (blocks,), (core._THREADS,),
                (Xd, np.int64(nc), Rd, np.int64(nR), np.int32(M), np.int32(K), pk.long_start, pk.long_len,
                 pk.long_item, np.int64(pk.n_long), *core.call_elems(pk, scale_fx), rescale, Wt, wstride, phi,
                 scratch, np.int32(pk.long_max)))
        core.finish(phi, scale_fx)
        phi[:, M, :] += base_col[None, :]

    extra = 0 if identity else nR * K * 8 * 3
    return core.driver(paths, Xc, tl, progress, "GPU interventional TreeSHAP", (M + 1, K), extra, compute)
