"""Exact path-based TreeSHAP: PathSet extraction plus CPU (Numba) and GPU (CuPy) engines behind one API."""
from __future__ import annotations

import importlib

from .._progress import check_progress
from ..device import resolve_backend
from .paths import PathSet, extract_paths

__all__ = ["PathSet", "extract_paths", "shap_values", "interaction_values", "interventional_shap_values"]


def _engine(backend: str):
    name = resolve_backend(backend)
    if name == "cpu":
        from . import cpu
        return cpu
    try:
        return importlib.import_module(f"{__name__}.gpu")
    except ModuleNotFoundError as exc:
        if exc.name == f"{__name__}.gpu":
            raise NotImplementedError("the GPU TreeSHAP engine (kernels.treeshap.gpu) is not available in this "
                                      "installation; use backend='cpu'") from exc
        raise


def shap_values(paths: PathSet, X, *, backend: str = "cpu", tree_limit=None, progress=None):
    """Path-dependent SHAP values, (n, M+1, K), bias in column M. NaN in X means missing."""
    check_progress(progress)
    return _engine(backend).shap_values(paths, X, tree_limit=tree_limit, progress=progress)


def interaction_values(paths: PathSet, X, *, backend: str = "cpu", tree_limit=None, progress=None):
    """SHAP interaction values, (n, M+1, M+1, K), bias at [M, M]."""
    check_progress(progress)
    return _engine(backend).interaction_values(paths, X, tree_limit=tree_limit, progress=progress)


def interventional_shap_values(paths: PathSet, X, background, *, transform: str = "identity", y=None,
                               backend: str = "cpu", tree_limit=None, progress=None):
    """Interventional SHAP values against ``background``, (n, M+1, K); transform as in shap's C++ extension."""
    check_progress(progress)
    return _engine(backend).interventional_shap_values(paths, X, background, transform=transform, y=y,
                                                       tree_limit=tree_limit, progress=progress)
