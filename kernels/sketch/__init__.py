"""Moment-based quantile sketches: mergeable per-feature state, CPU/GPU accumulation, solvers and cut points."""
from __future__ import annotations

from ..device import engine_module, is_cupy_array, resolve_backend, to_numpy
from .cuts import Cuts, cut_points
from .sample import N_SAMPLE, RowSample
from .solvers import quantiles
from .state import MAX_MOMENTS, MomentSketch, merge_moments, update

__all__ = ["MAX_MOMENTS", "N_SAMPLE", "RowSample", "MomentSketch", "merge_moments", "update", "sketch", "quantiles",
           "cut_points", "Cuts"]


def sketch(X, sample_weight=None, *, n_moments: int = 15, max_distinct: int = 256, n_sample: int = N_SAMPLE,
           backend: str = "cpu"):
    """Sketch the columns of X (n, d) on "cpu", "gpu" or "auto"; NaN is missing, inf raises ValueError.

    Parameters
    ----------
    X : numpy.ndarray or cupy.ndarray of shape (n, d)
        Rows to sketch.
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights.
    n_moments : int, default 15
        Moments l kept per feature (2..24).
    max_distinct : int, default 256
        Distinct values kept per feature before only the moments describe it.
    n_sample : int, default N_SAMPLE
        Rows of the mergeable row sample the cut solver checks its cuts against (0: none).
    backend : {"cpu", "gpu", "auto"}, default "cpu"
        Where the sums are accumulated.

    Returns
    -------
    MomentSketch
        Mergeable with ``MomentSketch.merge``.

    Raises
    ------
    ValueError
        On ``inf`` in X or invalid parameters.

    See Also
    --------
    cut_points : XGBoost-style cuts from the sketch.
    quantiles : quantiles from the sketch.
    hitml.xgboost_ext.QuantileBinner : the scikit-learn transformer built on it.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.kernels.sketch import cut_points, sketch
    >>> X = np.random.default_rng(0).normal(size=(5000, 2))
    >>> sk = sketch(X)
    >>> cuts = cut_points(sk, max_bin=16)
    >>> [len(v) <= 15 for v in cuts.values]
    [True, True]
    """
    be = resolve_backend(backend, X)
    if be == "cpu":
        X, sample_weight = (to_numpy(a) if is_cupy_array(a) else a for a in (X, sample_weight))
    return engine_module(__name__, be).sketch(X, sample_weight, n_moments=n_moments, max_distinct=max_distinct,
                                              n_sample=n_sample)
