"""Exact path-based TreeSHAP: PathSet extraction plus CPU (Numba) and GPU (CuPy) engines behind one API."""
from __future__ import annotations

from .._progress import check_progress
from ..device import engine_module
from .paths import PathSet, extract_paths

__all__ = ["PathSet", "extract_paths", "shap_values", "interaction_values", "interventional_shap_values",
           "interventional_interaction_values", "interventional_banzhaf_values", "iter_interventional_interactions"]


def _engine(backend: str):
    """cpu.py or gpu.py for a backend the caller resolved already ("cpu" | "gpu"; the adapter resolves "auto")."""
    return engine_module(__name__, backend)


def shap_values(paths: PathSet, X, *, backend: str = "cpu", tree_limit=None, progress=None):
    """Path-dependent SHAP values, (n, M+1, K), bias in column M. NaN in X means missing."""
    check_progress(progress)
    return _engine(backend).shap_values(paths, X, tree_limit=tree_limit, progress=progress)


def interaction_values(paths: PathSet, X, *, backend: str = "cpu", tree_limit=None, progress=None):
    """SHAP interaction values, (n, M+1, M+1, K), bias at [M, M]."""
    check_progress(progress)
    return _engine(backend).interaction_values(paths, X, tree_limit=tree_limit, progress=progress)


def interventional_shap_values(paths: PathSet, X, background, *, transform: str = "identity", y=None,
                               backend: str = "cpu", tree_limit=None, progress=None, weights=None, method="auto"):
    """Interventional SHAP values against ``background``, (n, M+1, K); transform as in shap's C++ extension.

    The identity transform costs time linear in rows plus background (``method="auto"``); ``weights`` are one
    non-negative weight per background row (None: equal)."""
    check_progress(progress)
    return _engine(backend).interventional_shap_values(paths, X, background, transform=transform, y=y,
                                                       tree_limit=tree_limit, progress=progress, weights=weights,
                                                       method=method)


def interventional_interaction_values(paths: PathSet, X, background, *, backend: str = "cpu", weights=None,
                                      tree_limit=None, progress=None):
    """Interventional SHAP interaction values against ``background``, (n, M+1, M+1, K), bias at [M, M]."""
    check_progress(progress)
    return _engine(backend).interventional_interaction_values(paths, X, background, weights=weights,
                                                              tree_limit=tree_limit, progress=progress)


def interventional_banzhaf_values(paths: PathSet, X, background, *, backend: str = "cpu", weights=None,
                                  tree_limit=None, progress=None):
    """Interventional Banzhaf values against ``background``, (n, M+1, K), background mean margin in column M."""
    check_progress(progress)
    return _engine(backend).interventional_banzhaf_values(paths, X, background, weights=weights,
                                                          tree_limit=tree_limit, progress=progress)


def iter_interventional_interactions(paths: PathSet, X, background, *, chunk_rows: int = 4096, backend: str = "cpu",
                                     weights=None, tree_limit=None, progress=False):
    """Interventional interaction values of a wide model in row chunks: yields ``(start, stop, values)`` with values
    ``(stop - start, M+1, M+1, K)`` for ``X[start:stop]``, so only one chunk's output (``chunk_rows (M+1)^2 K``
    doubles) is held at a time. Each chunk recomputes the background histograms (time linear in the background per
    chunk): take chunks of many rows where the background is large.

    Examples
    --------
    >>> import numpy as np, shap, xgboost
    >>> from hitml.kernels.treeshap import extract_paths, iter_interventional_interactions
    >>> X = np.random.default_rng(0).normal(size=(200, 3))
    >>> model = xgboost.XGBRegressor(n_estimators=4, max_depth=3).fit(X, X[:, 0] * X[:, 2])
    >>> ens = shap.TreeExplainer(model).model
    >>> paths = extract_paths(ens.children_left, ens.children_right, ens.children_default, ens.features,
    ...                       ens.thresholds, ens.values, ens.node_sample_weight, ens.base_offset, n_features=3)
    >>> chunks = list(iter_interventional_interactions(paths, X[:10], X[100:150], chunk_rows=4))
    >>> [(a, b, v.shape) for a, b, v in chunks]
    [(0, 4, (4, 4, 4, 1)), (4, 8, (4, 4, 4, 1)), (8, 10, (2, 4, 4, 1))]
    """
    if int(chunk_rows) < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows!r}")
    n = X.shape[0]
    for a in range(0, n, int(chunk_rows)):
        b = min(n, a + int(chunk_rows))
        yield a, b, interventional_interaction_values(paths, X[a:b], background, backend=backend, weights=weights,
                                                      tree_limit=tree_limit, progress=progress)
