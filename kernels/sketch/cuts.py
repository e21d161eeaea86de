"""Cut points for max_bin bins from a sketch (exact for columns with few distinct values) or from exact quantiles."""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from ..device import array_module
from .robust import (ATOM_SCREEN, SketchFallbackWarning, _finish, finish_rows, quantile_cuts, quantile_cuts_columns,
                     sample_screen, sort_sample)
from .solvers import METHODS, quantiles
from .state import MomentSketch

SOURCES = ("exact", "moments", "data", "sample")


@dataclass
class Cuts:
    """Per-feature float32 cut points in XGBoost's convention.

    values[j]: strictly increasing float32 cuts; a value x falls in bin searchsorted(values[j], x, "right"),
    so bin 0 is [min, values[j][0]) and the last cut equals the column's maximum (its own bin). A constant or
    empty column has no cuts. vmin / vmax: float32 min and max (NaN for an all-missing column).
    exact: True where the cuts are every distinct value but the first (as XGBoost itself does for such columns).
    source: per feature where the cuts come from: "exact" (every distinct value), "moments" (the solver's, passed the
    occupancy check), "data" (quantiles of the data, point masses isolated), "sample" (the same from the row sample).

    See Also
    --------
    cut_points : builds them from a sketch.
    xgboost.DMatrix.get_quantile_cut : XGBoost's own cuts, in the same convention.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.kernels.sketch import cut_points, sketch
    >>> cuts = cut_points(sketch(np.array([[0.0], [1.0], [1.0], [5.0]])), max_bin=8)
    >>> cuts.values[0].tolist(), bool(cuts.exact[0]), int(np.searchsorted(cuts.values[0], 1.0, "right"))
    ([1.0, 5.0], True, 1)
    """

    values: list[np.ndarray]
    vmin: np.ndarray
    vmax: np.ndarray
    exact: np.ndarray
    source: np.ndarray | None = None

    @property
    def n_features(self) -> int:
        return len(self.values)

    @property
    def n_bins(self) -> np.ndarray:
        return np.array([v.size + 1 for v in self.values], np.int64)


def check_max_bin(max_bin: int) -> int:
    """``max_bin`` as an int, by XGBoost's rule: an integer (a NumPy integer too, not a bool) of at least 2.

    XGBoost refuses a float (``2.0`` included), a bool and anything below 2, and sets no upper bound (checked on
    XGBoost 3.4.1: ``xgboost.train``, ``XGBRegressor`` and ``QuantileDMatrix``); the binner and the cut points
    follow it so that a ``max_bin`` they take is one XGBoost takes.

    Raises
    ------
    ValueError
        Naming the value, for anything XGBoost would refuse.
    """
    if isinstance(max_bin, (bool, np.bool_)) or not isinstance(max_bin, (int, np.integer)) or max_bin < 2:
        raise ValueError(f"max_bin must be an integer >= 2 (as XGBoost's), got {max_bin!r}")
    return int(max_bin)


def cut_points(sk: MomentSketch, max_bin: int = 256, method: str = "maxent", *, data=None, sample_weight=None,
               feature_names=None) -> Cuts:
    """Cuts for max_bin bins from a sketch; columns with <= max_bin distinct values get exact cuts.

    The other columns get the solver's cuts where the sketch's row sample shows no point mass and no bin holding
    clearly more than 1/(max_bin - 1) of the weight. Else (or without a row sample, data given) the cuts are
    quantiles with every value above 1/max_bin of the weight in a bin of its own: of ``data`` (the sketched X, NumPy
    or CuPy, with ``sample_weight``) where given, else of the row sample. Columns whose moment cuts failed the check
    are named in a SketchFallbackWarning.

    Parameters
    ----------
    sk : MomentSketch
        The sketch.
    max_bin : int, default 256
        Largest number of bins per feature (XGBoost's ``max_bin``).
    method : {"maxent", "legendre", "exact"}, default "maxent"
        The solver.
    data : numpy.ndarray or cupy.ndarray, optional
        The sketched rows, for exact quantile fallbacks.
    sample_weight : array-like, optional
        The weights of ``data``.
    feature_names : list of str, optional
        Names used in warnings.

    Returns
    -------
    Cuts

    Warns
    -----
    SketchFallbackWarning
        Naming the columns whose moment cuts failed the check.

    See Also
    --------
    hitml.xgboost_ext.QuantileBinner : the transformer that calls it.
    xgboost.QuantileDMatrix : XGBoost's own cut selection, which these cuts replace.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.kernels.sketch import cut_points, sketch
    >>> X = np.column_stack([np.arange(1000.0) % 4, np.random.default_rng(0).normal(size=1000)])
    >>> cuts = cut_points(sketch(X), max_bin=32)
    >>> list(cuts.source), cuts.values[0].tolist()
    (['exact', 'moments'], [1.0, 2.0, 3.0])
    """
    max_bin = check_max_bin(max_bin)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    lo32 = sk.vmin.astype(np.float32)
    hi32 = sk.vmax.astype(np.float32)
    d = sk.n_features
    if data is not None and data.shape[1] != d:
        raise ValueError(f"data has {data.shape[1]} features, the sketch {d}")
    exact = (sk.n_distinct >= 0) & (sk.n_distinct <= max_bin)
    source = np.where(exact, "exact", "moments").astype(object)
    values: list[np.ndarray | None] = [None] * d
    ex = np.flatnonzero(exact)
    if ex.size:
        # the distinct values are sorted and unique; as float32 they stay so unless float64 data round together
        D = sk.distinct[ex].astype(np.float32)
        with np.errstate(invalid="ignore"):
            rising = ~(D[:, 1:] <= D[:, :-1]).any(axis=1)
        for r, j in enumerate(ex.tolist()):
            nd = int(sk.n_distinct[j])
            values[j] = D[r, 1:nd] if rising[r] else np.unique(D[r, :nd])[1:]
    approx = np.flatnonzero(~exact & (hi32 > lo32))
    for j in np.flatnonzero(~exact & ~(hi32 > lo32)):
        values[j] = np.zeros(0, np.float32)
    failed = []
    if approx.size:
        phis = np.arange(1, max_bin - 1) / (max_bin - 1)
        screen = (ATOM_SCREEN if data is not None else 1.0) / max_bin
        # point masses first: their columns take quantile cuts whatever the moments say, so they are not solved
        pre = None
        if sk.sample is not None:
            # equal weights: one sort of each column, read in place from the sample, serves both checks
            pre = sort_sample(sk.sample.x, sk.sample.w, approx)
            xa = None if pre is not None else sk.sample.x[:, approx]
            atom, _ = sample_screen(xa, sk.sample.w, None, screen, max_bin, bins=False, presorted=pre)
        else:
            atom = np.full(approx.size, data is not None)
        solve = approx[~atom]
        crowded = np.zeros(approx.size, bool)
        moment: dict[int, np.ndarray] = {}
        if solve.size:
            sub = MomentSketch(sk.weight[solve], sk.mean[solve], sk.M[solve], sk.vmin[solve], sk.vmax[solve],
                               sk.distinct[solve, :0], sk.n_distinct[solve])
            Q = quantiles(sub, phis, method)
            moment = dict(zip(solve.tolist(), finish_rows(Q, lo32[solve], hi32[solve])))
            if sk.sample is not None:  # one check of every solved column on the sample
                xs = None if pre is not None else sk.sample.x[:, solve]
                _, crowded[~atom] = sample_screen(xs, sk.sample.w, list(moment.values()), screen, max_bin,
                                                  atoms=False, presorted=pre, rows=np.flatnonzero(~atom))
        failed = [int(j) for j in approx[~atom & crowded]]
        from_data = approx[atom | crowded] if data is not None else approx[:0]
        if from_data.size and sample_weight is None and isinstance(data, np.ndarray):  # all at once, in parallel
            for j, v in zip(from_data, quantile_cuts_columns(data, from_data, max_bin, lo32[from_data],
                                                             hi32[from_data])):
                values[j] = v
                source[j] = "data"
        for r, j in enumerate(approx):
            if not (atom[r] or crowded[r]):
                values[j] = moment[int(j)]
            elif values[j] is not None:
                continue
            elif data is not None:
                values[j] = quantile_cuts(data[:, j], sample_weight, max_bin, lo32[j], hi32[j], array_module(data))
                source[j] = "data"
            else:
                xs, ws = sk.sample.column(j)
                values[j] = quantile_cuts(xs, ws, max_bin, lo32[j], hi32[j])
                source[j] = "sample"
    if failed:
        names = [str(feature_names[j]) if feature_names is not None else f"f{j}" for j in failed]
        how = "quantiles of the data" if data is not None else f"quantiles of the {sk.sample.n_rows}-row sample"
        warnings.warn(f"the moment sketch ({method}) cannot resolve {len(failed)} feature(s) {names}: a bin would hold "
                      f"clearly more than 1/{max_bin - 1} of the weight; their cuts are {how}",
                      SketchFallbackWarning, stacklevel=2)
    if sk.sample is None and approx.size and data is None:
        warnings.warn("the sketch keeps no row sample: the moment cuts are unchecked (heavy tails, sentinels or point "
                      "masses can leave bins holding most of the weight)", SketchFallbackWarning, stacklevel=2)
    return Cuts(values, lo32, hi32, exact, source)


def exact_cut_points(X, sample_weight=None, max_bin: int = 256) -> Cuts:
    """Reference cuts from exact (weighted) empirical quantiles, by sorting each column (not streaming)."""
    max_bin = check_max_bin(max_bin)
    X = np.asarray(X, np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D, got shape {X.shape}")
    if np.isinf(X).any():
        raise ValueError("X contains +/-inf; encode missing values as NaN")
    w_all = np.ones(X.shape[0]) if sample_weight is None else np.asarray(sample_weight, np.float64).reshape(-1)
    d = X.shape[1]
    values, lo32, hi32, exact = [], np.full(d, np.nan, np.float32), np.full(d, np.nan, np.float32), np.zeros(d, bool)
    phis = np.arange(1, max_bin - 1) / (max_bin - 1)
    for j in range(d):
        ok = ~np.isnan(X[:, j]) & (w_all > 0)
        x = X[ok, j].astype(np.float32)
        if x.size == 0:
            values.append(np.zeros(0, np.float32))
            continue
        lo32[j], hi32[j] = x.min(), x.max()
        u = np.unique(x)
        if u.size <= max_bin:
            values.append(u[1:])
            exact[j] = True
            continue
        order = np.argsort(x, kind="stable")
        xs, ws = x[order], w_all[ok][order]
        cw = np.cumsum(ws)
        k = np.searchsorted(cw, phis * cw[-1], side="left")
        values.append(_finish(xs[np.minimum(k, xs.size - 1)], lo32[j], hi32[j], max_bin))
    return Cuts(values, lo32, hi32, exact)
