"""Small tree models and comparisons shared by the GPU TreeSHAP tests (GPU against the CPU twin)."""
from __future__ import annotations

import numpy as np

from hitml.kernels.treeshap import extract_paths

TRANSFORMS = ["identity", "logistic", "logistic_nlogloss", "squared_loss"]


def _gpu():
    from hitml.kernels.treeshap import gpu
    return gpu


def _close(a, b, rtol=1e-6):
    a = a.get() if hasattr(a, "get") else np.asarray(a)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert np.isfinite(a).all()
    scale = max(np.abs(b).max(), 1e-12)
    err = np.abs(a - b).max()
    assert err <= rtol * scale, (err, scale)


def _dense(trees, K):
    """Pad per-tree (cl, cr, cd, feat, thr, cover, values(N, K)) into shap TreeEnsemble-style (T, N) arrays."""
    T, N = len(trees), max(len(t[0]) for t in trees)
    cl = np.full((T, N), -1, np.int64)
    cr, cd, ft = cl.copy(), cl.copy(), np.zeros((T, N), np.int64)
    th, cov, vals = np.zeros((T, N)), np.zeros((T, N)), np.zeros((T, N, K))
    for i, (a, b, c, f, t, w, v) in enumerate(trees):
        n = len(a)
        cl[i, :n], cr[i, :n], cd[i, :n], ft[i, :n], th[i, :n], cov[i, :n], vals[i, :n] = a, b, c, f, t, w, v
    return cl, cr, cd, ft, th, cov, vals


def _sk_tree(model, K, rng=None, nan_random=False):
    t = model.tree_
    f = np.maximum(t.feature, 0)
    v = t.value.reshape(t.node_count, -1)[:, :K].astype(np.float64)
    cd = t.children_left.copy()
    if nan_random:  # NaN goes to a random side per node
        flip = rng.random(t.node_count) < 0.5
        cd = np.where(flip, t.children_right, t.children_left)
    return (t.children_left, t.children_right, cd, f, t.threshold, t.weighted_n_node_samples, v)


def _paths_from(trees, M, K, *, input_dtype=np.float32, base=None, categories=None):
    cl, cr, cd, ft, th, cov, vals = _dense(trees, K)
    return extract_paths(cl, cr, cd, ft, th, vals, cov, np.zeros(K) if base is None else base, n_features=M,
                         input_dtype=input_dtype, categories=categories)


def _data(n, M, seed, nan=0.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, M)).astype(np.float32)
    y = X[:, 0] * X[:, 1] + np.sin(3 * X[:, 2 % M]) + X[:, 3 % M] + rng.normal(scale=0.1, size=n)
    if nan:
        X[rng.random(X.shape) < nan] = np.nan
    return X, y


def _regression_paths(M=6, depths=(3, 6, 8), seed=0, nan_random=True, input_dtype=np.float32, base=0.25):
    from sklearn.tree import DecisionTreeRegressor
    rng = np.random.default_rng(seed)
    X, y = _data(800, M, seed)
    trees = [_sk_tree(DecisionTreeRegressor(max_depth=d, random_state=i).fit(X, y + i), 1, rng, nan_random)
             for i, d in enumerate(depths)]
    return _paths_from(trees, M, 1, input_dtype=input_dtype, base=np.array([base])), X


def _multiclass_models(n_forest: int, n_boost: int, depth: int):
    """(random-forest paths with dense K=4 leaves, XGBoost-style paths with one nonzero group per tree) on 7 features."""
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.tree import DecisionTreeRegressor
    X, y = _data(600, 7, 3, nan=0.0)
    cls = np.digitize(y, [-0.7, 0.0, 0.8])
    rf = RandomForestClassifier(n_estimators=n_forest, max_depth=depth + 1, random_state=0).fit(X, cls)
    K = 4
    dense = _paths_from([_sk_tree(e, K) for e in rf.estimators_], 7, K)
    trees = []
    for i in range(n_boost):
        m = DecisionTreeRegressor(max_depth=depth, random_state=i).fit(X, (cls == i % K) * 1.0)
        cl, cr, cd, f, t, w, v = _sk_tree(m, 1)
        vk = np.zeros((len(v), K))
        vk[:, i % K] = v[:, 0]
        trees.append((cl, cr, cd, f, t, w, vk))
    return dense, _paths_from(trees, 7, K, base=np.arange(K) * 0.1), X


def _spine_tree(M, depth, rng):
    """A caterpillar tree: internal node j splits on a distinct feature; one side is a leaf, the other goes on."""
    feats = rng.permutation(M)[:depth]
    n_nodes = 2 * depth + 1
    cl = np.full(n_nodes, -1)
    cr = np.full(n_nodes, -1)
    f = np.zeros(n_nodes, np.int64)
    t = np.zeros(n_nodes)
    cov = np.zeros(n_nodes)
    cov[0] = 1000.0
    node = 0
    for j in range(depth):
        leaf, nxt = 2 * j + 1, 2 * j + 2
        go_left = rng.random() < 0.5
        cl[node], cr[node] = (nxt, leaf) if go_left else (leaf, nxt)
        f[node], t[node] = feats[j], rng.normal() * 0.3
        frac = rng.uniform(0.55, 0.95)
        cov[nxt], cov[leaf] = cov[node] * frac, cov[node] * (1 - frac)
        node = nxt
    v = rng.normal(size=(n_nodes, 1))
    cd = np.where(rng.random(n_nodes) < 0.5, cl, cr)
    return cl, cr, cd, f, t, cov, v
