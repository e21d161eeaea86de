"""Input validation shared by the CPU and GPU TreeSHAP engines."""
from __future__ import annotations

import numpy as np

from .paths import PathSet

TRANSFORM_NAMES = ("identity", "logistic", "logistic_nlogloss", "squared_loss")


def check_matrix(X, paths: PathSet, name: str = "X") -> None:
    """Raise unless X (with ``dtype`` and ``shape``) is a non-empty 2-D numeric matrix of width ``paths.n_features``
    (reads no values)."""
    if X.dtype == object or not (np.issubdtype(X.dtype, np.number) or X.dtype == np.bool_):
        raise TypeError(f"{name} must be numeric, got dtype {X.dtype}")
    if np.issubdtype(X.dtype, np.complexfloating):
        raise TypeError(f"{name} must be real-valued, got dtype {X.dtype}")
    if X.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_rows, n_features), got {X.ndim}-D with shape {tuple(X.shape)}")
    if X.shape[1] != paths.n_features:
        raise ValueError(f"{name} has {X.shape[1]} features, but the model expects {paths.n_features}")
    if X.shape[0] == 0:
        raise ValueError(f"{name} is empty (0 rows)")


def as_model_input(X, paths: PathSet, name: str = "X", xp=np) -> "np.ndarray":
    """Validate a 2-D numeric matrix of width ``paths.n_features``; round through ``paths.input_dtype``, then float64.

    NaN means missing; +-inf are valid values. ``xp`` is the array module (NumPy or CuPy).
    """
    if not hasattr(X, "dtype") or not hasattr(X, "shape"):
        X = np.asarray(X)
    check_matrix(X, paths, name)
    X = xp.asarray(X)
    return xp.ascontiguousarray(X.astype(paths.input_dtype, copy=False).astype(xp.float64, copy=False))


def check_transform(transform: str, y, n_rows: int):
    """Validate shap's output transform name and its labels; returns float64 y (zeros when not needed)."""
    if transform not in TRANSFORM_NAMES:
        raise ValueError(f"transform must be one of {TRANSFORM_NAMES}, got {transform!r}")
    if transform in ("logistic_nlogloss", "squared_loss"):
        if y is None:
            raise ValueError(f"transform={transform!r} needs the labels y")
    if y is None:
        return np.zeros(n_rows)
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    if y.shape[0] != n_rows:
        raise ValueError(f"y has {y.shape[0]} values, but X has {n_rows} rows")
    return y


def check_tree_limit(tree_limit) -> int | None:
    if tree_limit is None:
        return None
    if int(tree_limit) != tree_limit or tree_limit < 0:
        raise ValueError(f"tree_limit must be None or a non-negative int, got {tree_limit!r}")
    return int(tree_limit)
