"""Numba kernels of the CPU TreeSHAP engine: per row, every path, float64 accumulation."""
from __future__ import annotations

import math

import numba
import numpy as np

from .. import _background, _registry
from .._items import borrow, items

# the warm-up groups that compile these kernels (their Numba cache entries ship with hitml)
_background.prepare_numba_module()      # the compile notice; the shipped cache entries before any kernel runs
_registry.register_shipped(__name__, ("treeshap-transforms",))

TRANSFORMS = {"identity": 0, "logistic": 1, "logistic_nlogloss": 2, "squared_loss": 3}


@numba.njit(inline="always")
def _satisfies(x, e, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words, cat_outside):
    """The PathSet element test (see PathSet's docstring)."""
    if x != x:  # noqa: PLR0124 - x != x is the NaN test of this numba kernel
        return missing_ok[e]
    lo = lower[e]
    if not ((lo == -np.inf or lo < x) and x <= upper[e]):
        return False
    cp = cat_ptr[e]
    if cp < 0:
        return True
    nw = cat_nwords[e]
    if x < 0.0 or x >= 32.0 * nw:
        return cat_outside[e]
    c = np.int64(x)
    return ((cat_words[cp + c // 32] >> np.uint32(c % 32)) & np.uint32(1)) != 0


@numba.njit(inline="always")
def _extend_all(w, zs, os, m, skip):
    """Permutation weights of the path (dummy root + m elements, element ``skip`` left out) into ``w[0..d]``."""
    w[0] = 1.0
    k = 0
    for t in range(m):
        if t == skip:
            continue
        k += 1
        zk = zs[t]
        inv = 1.0 / (k + 1)
        w[k] = 0.0
        if os[t] != 0.0:
            for r in range(k, 0, -1):
                w[r] = (w[r] * zk * (k - r) + w[r - 1] * r) * inv
        else:
            for r in range(k, 0, -1):
                w[r] = w[r] * zk * (k - r) * inv
        w[0] = w[0] * zk * k * inv
    return k


@numba.njit(inline="always")
def _unwound_sum(w, d, z, o):
    """Total permutation weight with one element (zero fraction z, one fraction o) unwound; d = path length."""
    total = 0.0
    if o != 0.0:
        nxt = w[d]
        for i in range(d - 1, -1, -1):
            tmp = nxt / (i + 1)
            total += tmp
            nxt = w[i] - tmp * z * (d - i)
        return total * (d + 1)
    for i in range(d - 1, -1, -1):
        total += w[i] / (d - i)
    return total * (d + 1) / z


@numba.njit(inline="always")
def _load_path(xrow, s, m, feature, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words, cat_outside,
               zero_fraction, zs, os):
    for t in range(m):
        e = s + t
        zs[t] = zero_fraction[e]
        os[t] = 1.0 if _satisfies(xrow[feature[e]], e, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words,
                                  cat_outside) else 0.0


@numba.njit(inline="always")
def _add_path_phi(xrow, s, m, feature, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words, cat_outside,
                  zero_fraction, leaf_value, p, w, zs, os, acc, step):
    """acc[feature * step, k] += path p's SHAP value of each element times leaf_value[p, k]; zs, os, w stay loaded."""
    _load_path(xrow, s, m, feature, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words, cat_outside,
               zero_fraction, zs, os)
    d = _extend_all(w, zs, os, m, -1)
    for t in range(m):
        diff = os[t] - zs[t]
        if diff == 0.0:
            continue
        scale = _unwound_sum(w, d, zs[t], os[t]) * diff
        row = feature[s + t] * step
        for k in range(leaf_value.shape[1]):
            acc[row, k] += scale * leaf_value[p, k]


@items("X.shape[0]")
@numba.njit(nogil=True, cache=True, error_model="numpy")
def shap_kernel(X, path_ptr, feature, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words, cat_outside,
                zero_fraction, leaf_value, max_len, out, lo, hi):
    """out[i, f, k] += path-dependent SHAP of row i (bias column untouched)."""
    X, path_ptr, feature, lower, upper = borrow(X), borrow(path_ptr), borrow(feature), borrow(lower), borrow(upper)
    missing_ok, cat_ptr, cat_nwords = borrow(missing_ok), borrow(cat_ptr), borrow(cat_nwords)
    cat_words, cat_outside, zero_fraction = borrow(cat_words), borrow(cat_outside), borrow(zero_fraction)
    leaf_value, out = borrow(leaf_value), borrow(out)
    P = len(path_ptr) - 1
    for i in range(lo, hi):
        xrow = X[i]
        w = np.empty(max_len + 1)
        zs = np.empty(max_len + 1)
        os = np.empty(max_len + 1)
        acc = out[i]
        for p in range(P):
            s = path_ptr[p]
            m = path_ptr[p + 1] - s
            if m == 0:
                continue
            _add_path_phi(xrow, s, m, feature, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words, cat_outside,
                          zero_fraction, leaf_value, p, w, zs, os, acc, 1)


@items("X.shape[0]")
@numba.njit(nogil=True, cache=True, error_model="numpy")
def interaction_kernel(X, path_ptr, feature, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words, cat_outside,
                       zero_fraction, leaf_value, max_len, out, lo, hi):
    """out[i, j, f, k]: conditioning on j (row) gives the interaction credited to f; diagonal holds phi_f minus them."""
    X, path_ptr, feature, lower, upper = borrow(X), borrow(path_ptr), borrow(feature), borrow(lower), borrow(upper)
    missing_ok, cat_ptr, cat_nwords = borrow(missing_ok), borrow(cat_ptr), borrow(cat_nwords)
    cat_words, cat_outside, zero_fraction = borrow(cat_words), borrow(cat_outside), borrow(zero_fraction)
    leaf_value, out = borrow(leaf_value), borrow(out)
    M1 = out.shape[1]
    P = len(path_ptr) - 1
    K = leaf_value.shape[1]
    for i in range(lo, hi):
        xrow = X[i]
        w = np.empty(max_len + 1)
        w2 = np.empty(max_len + 1)
        zs = np.empty(max_len + 1)
        os = np.empty(max_len + 1)
        diag = out[i].reshape((M1 * M1, K))  # row f * (M1 + 1) is out[i, f, f]
        for p in range(P):
            s = path_ptr[p]
            m = path_ptr[p + 1] - s
            if m == 0:
                continue
            _add_path_phi(xrow, s, m, feature, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words, cat_outside,
                          zero_fraction, leaf_value, p, w, zs, os, diag, M1 + 1)
            for c in range(m):
                dc = os[c] - zs[c]
                if dc == 0.0 or m == 1:
                    continue
                d2 = _extend_all(w2, zs, os, m, c)
                j = feature[s + c]
                for t in range(m):
                    if t == c:
                        continue
                    diff = os[t] - zs[t]
                    if diff == 0.0:
                        continue
                    val = _unwound_sum(w2, d2, zs[t], os[t]) * diff * dc * 0.5
                    f = feature[s + t]
                    for k in range(K):
                        v = val * leaf_value[p, k]
                        out[i, j, f, k] += v
                        out[i, f, f, k] -= v


@numba.njit(inline="always")
def _transform(code, margin, y):
    if code == 1:
        return 1.0 / (1.0 + math.exp(-margin))
    if code == 2:
        return math.log(1.0 + math.exp(margin)) - y * margin
    if code == 3:
        return (margin - y) * (margin - y)
    return margin


@numba.njit(cache=True)
def interventional_weights(max_len):
    """W[s, n] = s! (n - s - 1)! / n! for 0 <= s < n <= max_len."""
    W = np.zeros((max_len + 2, max_len + 2))
    for nn in range(1, max_len + 1):
        for s in range(nn):
            W[s, nn] = math.exp(math.lgamma(s + 1) + math.lgamma(nn - s) - math.lgamma(nn + 1))
    return W


@items("X.shape[0]")
@numba.njit(nogil=True, cache=True, error_model="numpy")
def interventional_kernel(X, R, y, code, path_ptr, feature, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words,
                          cat_outside, leaf_value, base_offset, W, max_len, out, lo, hi):
    """out[i] = mean over background rows r of the (rescaled) interventional SHAP of (x_i, r); bias in column M."""
    X, R, y, path_ptr, feature = borrow(X), borrow(R), borrow(y), borrow(path_ptr), borrow(feature)
    lower, upper, missing_ok, cat_ptr = borrow(lower), borrow(upper), borrow(missing_ok), borrow(cat_ptr)
    cat_nwords, cat_words, cat_outside = borrow(cat_nwords), borrow(cat_words), borrow(cat_outside)
    leaf_value, base_offset, W, out = borrow(leaf_value), borrow(base_offset), borrow(W), borrow(out)
    n, M = X.shape
    nR = R.shape[0]
    P = len(path_ptr) - 1
    K = leaf_value.shape[1]
    for i in range(lo, hi):
        xrow = X[i]
        yi = y[i]
        tmp = np.empty((M + 1, K))
        mx = np.empty(K)
        mr = np.empty(K)
        flag = np.empty(max_len + 1, np.int8)
        for j in range(nR):
            rrow = R[j]
            tmp[:] = 0.0
            for k in range(K):
                mx[k] = base_offset[k]
                mr[k] = base_offset[k]
            for p in range(P):
                s = path_ptr[p]
                m = path_ptr[p + 1] - s
                nx = 0
                nr = 0
                ok = True
                for t in range(m):
                    e = s + t
                    f = feature[e]
                    sx = _satisfies(xrow[f], e, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words,
                                    cat_outside)
                    sr = _satisfies(rrow[f], e, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words,
                                    cat_outside)
                    if sx and sr:
                        flag[t] = 0
                    elif sx:
                        flag[t] = 1
                        nx += 1
                    elif sr:
                        flag[t] = 2
                        nr += 1
                    else:
                        ok = False
                        break
                if not ok:
                    continue
                if nr == 0:
                    for k in range(K):
                        mx[k] += leaf_value[p, k]
                if nx == 0:
                    for k in range(K):
                        mr[k] += leaf_value[p, k]
                        tmp[M, k] += leaf_value[p, k]
                    if nr == 0:
                        continue
                nd = nx + nr
                wpos = W[nx - 1, nd] if nx > 0 else 0.0
                wneg = W[nx, nd] if nr > 0 else 0.0
                for t in range(m):
                    fl = flag[t]
                    if fl == 0:
                        continue
                    f = feature[s + t]
                    wt = wpos if fl == 1 else -wneg
                    for k in range(K):
                        tmp[f, k] += wt * leaf_value[p, k]
            for k in range(K):
                rescale = 1.0
                if code != 0 and mx[k] != mr[k]:
                    rescale = (_transform(code, mx[k], yi) - _transform(code, mr[k], yi)) / (mx[k] - mr[k])
                for f in range(M):
                    out[i, f, k] += tmp[f, k] * rescale
                b = base_offset[k] + tmp[M, k]
                out[i, M, k] += _transform(code, b, 0.0) if code != 0 else b
        for f in range(M + 1):
            for k in range(K):
                out[i, f, k] /= nR
