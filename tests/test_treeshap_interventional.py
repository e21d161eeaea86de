"""Interventional TreeSHAP (tree walk and path scan) against brute force with categorical splits, NaN and transforms."""
import dataclasses
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hitml.kernels.treeshap import extract_paths, interventional_shap_values
from _shapley import exact_shapley

_GRID = [-1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 2.7, 3.0, 5.0, 40.0, np.inf, -np.inf, np.nan]


def _random_tree(draw, M, max_depth):
    """Dense arrays of a random tree with numeric and categorical splits (LEFT sets over 1 or 2 words)."""
    nodes = []  # (feature, threshold, left, right, default, cover, value, cat_words or None)

    def build(depth):
        idx = len(nodes)
        nodes.append(None)
        if depth >= max_depth or draw(st.integers(0, 3)) == 0:
            nodes[idx] = (-1, 0.0, -1, -1, -1, float(draw(st.integers(1, 5))), draw(st.floats(-3, 3)), None)
            return idx
        f = draw(st.integers(0, M - 1))
        cats = None
        if draw(st.booleans()):
            nw = draw(st.integers(1, 2))
            cats = [sum(1 << b for b in draw(st.sets(st.sampled_from([0, 1, 2, 3, 5, 8]), max_size=4)))
                    for _ in range(nw)]
            if nw == 2 and draw(st.booleans()):
                cats[1] |= 1 << (40 - 32)
        t = draw(st.sampled_from([-1.0, -0.5, 0.0, 0.5, 1.0, 2.5]))
        left, right = build(depth + 1), build(depth + 1)
        default = draw(st.sampled_from([left, right, left, right, 0]))  # 0: neither child
        nodes[idx] = (f, t, left, right, default, nodes[left][5] + nodes[right][5], 0.0, cats)
        return idx

    build(0)
    n = len(nodes)
    col = lambda j, dt: np.array([[nd[j] for nd in nodes]], dtype=dt)  # noqa: E731 - a one-line helper local to this test
    words, ptr, nwords = [], np.zeros((1, n), np.int64), np.zeros((1, n), np.int32)
    for i, nd in enumerate(nodes):
        if nd[7] is not None:
            ptr[0, i], nwords[0, i] = len(words), len(nd[7])
            words += nd[7]
    is_cat = np.array([[nd[7] is not None for nd in nodes]])
    arrays = (col(2, np.int64), col(3, np.int64), col(4, np.int64), col(0, np.int64), col(1, float),
              col(6, float)[:, :, None], col(5, float))
    return arrays, (is_cat, ptr, nwords, np.array(words, dtype=np.uint32)), nodes


def _predict(nodes, x, node=0):
    """The leaf value x reaches (None: NaN at a node whose default is neither child)."""
    f, t, left, right, default, _, value, cats = nodes[node]
    if left < 0:
        return value
    v = x[f]
    if np.isnan(v):
        nxt = default if default in (left, right) else None
    elif cats is not None:
        c = int(v) if 0 <= v < 32 * len(cats) else -1
        nxt = left if c >= 0 and (cats[c // 32] >> (c % 32)) & 1 else right
    else:
        nxt = left if v <= t else right
    return None if nxt is None else _predict(nodes, x, nxt)


def _brute_pair(nodes, x, r, M):
    """Shapley values of S -> f(x_S, r_rest) over M players (a missing leaf counts 0), and f(x), f(r)."""
    def v(S):
        z = np.array([x[j] if j in S else r[j] for j in range(M)])
        out = _predict(nodes, z)
        return 0.0 if out is None else out

    return exact_shapley(v, M), v(set(range(M))), v(set())


_TRANSFORMS = {
    "identity": lambda m, y: m,
    "logistic": lambda m, y: 1 / (1 + math.exp(-m)),
    "logistic_nlogloss": lambda m, y: math.log(1 + math.exp(m)) - y * m,
    "squared_loss": lambda m, y: (m - y) ** 2,
}


@st.composite
def _case(draw):
    M = draw(st.integers(1, 4))
    arrays, cats, nodes = _random_tree(draw, M, draw(st.integers(0, 4)))
    rows = lambda k: np.array([[draw(st.sampled_from(_GRID)) for _ in range(M)] for _ in range(k)])  # noqa: E731 - a one-line helper local to this test
    X, R = rows(draw(st.integers(1, 3))), rows(draw(st.integers(1, 5)))
    return M, arrays, cats, nodes, X, R, draw(st.sampled_from(sorted(_TRANSFORMS)))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_case())
def test_interventional_tree_walk_and_path_scan_match_brute_force(case):
    M, arrays, cats, nodes, X, R, transform = case
    base = 0.2
    ps = extract_paths(*arrays, base, n_features=M, categories=cats)
    assert ps.trees is not None
    y = np.linspace(0, 1, len(X))
    T = _TRANSFORMS[transform]
    ref = np.zeros((len(X), M + 1))
    for i, x in enumerate(X):
        for r in R:
            phi, fx, fr = _brute_pair(nodes, x, r, M)
            fx, fr = fx + base, fr + base
            scale = 1.0 if fx == fr else (T(fx, y[i]) - T(fr, y[i])) / (fx - fr)
            ref[i, :M] += phi * scale / len(R)
            ref[i, M] += T(fr, 0.0) / len(R)
    walked = interventional_shap_values(ps, X, R, transform=transform, y=y, progress=False)[..., 0]
    scanned = interventional_shap_values(dataclasses.replace(ps, trees=None), X, R, transform=transform, y=y,
                                         progress=False)[..., 0]
    np.testing.assert_allclose(walked, ref, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(scanned, ref, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("transform", ["identity", "logistic"])
def test_interventional_one_row_many_background_and_tree_limit(transform):
    """One row (background split across threads) and tree_limit, against a per-pair brute force on two stumps."""
    cl = np.array([[1, -1, -1], [1, -1, -1]])
    cr = np.array([[2, -1, -1], [2, -1, -1]])
    ft = np.array([[0, -1, -1], [1, -1, -1]])
    th = np.array([[0.0, 0, 0], [0.5, 0, 0]])
    val = np.array([[0, -1.0, 2.0], [0, 0.5, -0.25]])[:, :, None]
    cov = np.ones((2, 3))
    ps = extract_paths(cl, cr, cl, ft, th, val, cov, 0.1, n_features=2)
    rng = np.random.default_rng(3)
    x = np.array([[0.3, 0.1]])
    R = rng.normal(size=(37, 2))
    T = _TRANSFORMS[transform]
    for limit in (None, 1):
        trees = 2 if limit is None else limit
        f = lambda z: 0.1 + sum(val[t, 1 if z[ft[t, 0]] <= th[t, 0] else 2, 0] for t in range(trees))  # noqa: E731 - a one-line helper local to this test
        ref = np.zeros(3)
        for r in R:
            phi = np.zeros(2)
            for t in range(trees):  # one split per stump: the split feature gets the whole leaf difference
                j = ft[t, 0]
                phi[j] += val[t, 1 if x[0, j] <= th[t, 0] else 2, 0] - val[t, 1 if r[j] <= th[t, 0] else 2, 0]
            fx, fr = f(x[0]), f(r)
            scale = 1.0 if fx == fr else (T(fx, 0.0) - T(fr, 0.0)) / (fx - fr)
            ref[:2] += phi * scale / len(R)
            ref[2] += T(fr, 0.0) / len(R)
        got = interventional_shap_values(ps, x, R, transform=transform, tree_limit=limit, progress=False)[0, :, 0]
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
