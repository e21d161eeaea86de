"""Exact path-based TreeSHAP: PathSet extraction plus CPU (Numba) and GPU (CuPy) engines behind one API."""
from __future__ import annotations

from .._progress import check_progress
from ..device import engine_module
from ._summary import BackgroundSummary
from .paths import PathSet, extract_paths

__all__ = ["PathSet", "extract_paths", "shap_values", "interaction_values", "interventional_shap_values",
           "interventional_interaction_values", "interventional_banzhaf_values", "iter_interventional_interactions",
           "BackgroundSummary", "background_summary", "prepare_background_pass", "release_background_pass"]


def _engine(backend: str):
    """cpu.py or gpu.py for a backend the caller resolved already ("cpu" | "gpu"; the adapter resolves "auto")."""
    return engine_module(__name__, backend)


def shap_values(paths: PathSet, X, *, backend: str = "cpu", tree_limit=None, progress=None):
    """Path-dependent SHAP values, (n, M+1, K), bias in column M. NaN in X means missing.

    Exact TreeSHAP (Lundberg et al. 2020) with the tree's covers as the feature distribution, as shap's
    ``TreeExplainer(model, feature_perturbation="tree_path_dependent")`` computes it.

    Parameters
    ----------
    paths : PathSet
        The model's root-to-leaf paths (:func:`extract_paths`).
    X : numpy.ndarray or cupy.ndarray, shape (n, M)
        Rows to explain, in the dtype the paths compare in; NaN is missing (takes each split's default side).
    backend : {"cpu", "gpu"}, default "cpu"
        The engine: Numba on the CPU, or CuPy on the GPU (same values to float64 rounding).
    tree_limit : int, optional
        Use the first ``tree_limit`` trees only (None: all).
    progress : bool, optional
        Show a tqdm progress bar (None: on for long runs, unless ``HITML_PROGRESS=0``).

    Returns
    -------
    numpy.ndarray or cupy.ndarray, shape (n, M + 1, K)
        ``phi[i, j, k]``: feature ``j``'s contribution to output ``k`` of row ``i``; column ``M`` holds the expected
        value, so each row sums to the model's raw margin.

    See Also
    --------
    shap.TreeExplainer.shap_values : shap's C++ implementation of the same values.
    xgboost.Booster.predict : ``pred_contribs=True`` gives XGBoost's own.
    interventional_shap_values : against a background set instead of the covers.

    Examples
    --------
    >>> import numpy as np, shap, xgboost
    >>> from hitml.kernels.treeshap import extract_paths, shap_values
    >>> X = np.random.default_rng(0).normal(size=(200, 3))
    >>> model = xgboost.XGBRegressor(n_estimators=4, max_depth=3).fit(X, X[:, 0] * X[:, 2])
    >>> ens = shap.TreeExplainer(model).model                     # shap's TreeEnsemble: dense node arrays
    >>> paths = extract_paths(ens.children_left, ens.children_right, ens.children_default, ens.features,
    ...                       ens.thresholds, ens.values, ens.node_sample_weight, ens.base_offset, n_features=3)
    >>> phi = shap_values(paths, X[:5])                            # (5, M + 1, K), bias in column M
    >>> ref = model.get_booster().predict(xgboost.DMatrix(X[:5]), pred_contribs=True)  # XGBoost's own TreeSHAP
    >>> phi.shape, bool(np.allclose(phi[..., 0], ref, atol=1e-5))
    ((5, 4, 1), True)
    """
    check_progress(progress)
    return _engine(backend).shap_values(paths, X, tree_limit=tree_limit, progress=progress)


def interaction_values(paths: PathSet, X, *, backend: str = "cpu", tree_limit=None, progress=None):
    """SHAP interaction values, (n, M+1, M+1, K), bias at [M, M].

    Path-dependent (tree covers as the feature distribution), as shap's ``shap_interaction_values`` computes them.

    Parameters
    ----------
    paths : PathSet
        The model's root-to-leaf paths (:func:`extract_paths`).
    X : numpy.ndarray or cupy.ndarray, shape (n, M)
        Rows to explain, in the dtype the paths compare in; NaN is missing (takes each split's default side).
    backend : {"cpu", "gpu"}, default "cpu"
        The engine: Numba on the CPU, or CuPy on the GPU (same values to float64 rounding).
    tree_limit : int, optional
        Use the first ``tree_limit`` trees only (None: all).
    progress : bool, optional
        Show a tqdm progress bar (None: on for long runs, unless ``HITML_PROGRESS=0``).

    Returns
    -------
    numpy.ndarray or cupy.ndarray, shape (n, M + 1, M + 1, K)
        Main effects on the diagonal, each pair's interaction split between ``[j, l]`` and ``[l, j]``; summing
        over the last feature axis gives :func:`shap_values`.

    See Also
    --------
    shap.TreeExplainer.shap_interaction_values : shap's C++ implementation of the same values.
    xgboost.Booster.predict : ``pred_interactions=True`` gives XGBoost's own.

    Examples
    --------
    >>> import numpy as np, shap, xgboost
    >>> from hitml.kernels.treeshap import extract_paths, interaction_values
    >>> X = np.random.default_rng(0).normal(size=(200, 3))
    >>> model = xgboost.XGBRegressor(n_estimators=4, max_depth=3).fit(X, X[:, 0] * X[:, 2])
    >>> ens = shap.TreeExplainer(model).model                     # shap's TreeEnsemble: dense node arrays
    >>> paths = extract_paths(ens.children_left, ens.children_right, ens.children_default, ens.features,
    ...                       ens.thresholds, ens.values, ens.node_sample_weight, ens.base_offset, n_features=3)
    >>> phi = interaction_values(paths, X[:5])
    >>> ref = model.get_booster().predict(xgboost.DMatrix(X[:5]), pred_interactions=True)
    >>> phi.shape, bool(np.allclose(phi[..., 0], ref, atol=1e-5))
    ((5, 4, 4, 1), True)
    """
    check_progress(progress)
    return _engine(backend).interaction_values(paths, X, tree_limit=tree_limit, progress=progress)


def interventional_shap_values(paths: PathSet, X, background, *, transform: str = "identity", y=None,
                               backend: str = "cpu", tree_limit=None, progress=None, weights=None, method="auto"):
    """Interventional SHAP values against ``background``, (n, M+1, K); transform as in shap's C++ extension.

    The identity transform costs time linear in rows plus background (``method="auto"``); ``weights`` are one
    non-negative weight per background row (None: equal).

    Parameters
    ----------
    paths : PathSet
        The model's root-to-leaf paths (:func:`extract_paths`).
    X : numpy.ndarray or cupy.ndarray, shape (n, M)
        Rows to explain, in the dtype the paths compare in; NaN is missing (takes each split's default side).
    background : numpy.ndarray or cupy.ndarray, shape (m, M), or BackgroundSummary
        The reference rows the features are set to in turn (shap's ``data``), or their summary
        (:func:`background_summary`, identity transform only), which a call reads instead of the rows.
    transform : {"identity", "logistic", "logistic_nlogloss", "squared_loss"}, default "identity"
        The model output explained, as shap's ``model_output`` maps it (``y`` needed for the losses).
    y : array-like of shape (n,), optional
        Labels, for a loss transform.
    backend : {"cpu", "gpu"}, default "cpu"
        The engine: Numba on the CPU, or CuPy on the GPU (same values to float64 rounding).
    tree_limit : int, optional
        Use the first ``tree_limit`` trees only (None: all).
    progress : bool, optional
        Show a tqdm progress bar (None: on for long runs, unless ``HITML_PROGRESS=0``).
    weights : array-like of shape (m,), optional
        One non-negative weight per background row (None: equal weights).
    method : {"auto", "patterns", "pairs"}, default "auto"
        "patterns": time linear in rows plus background (identity transform only); "pairs": every (row, background
        row) pair, time their product; "auto": "patterns" for the identity, else "pairs".

    Returns
    -------
    numpy.ndarray or cupy.ndarray, shape (n, M + 1, K)
        Column ``M`` holds the expected value as shap's C++ extension computes it (for the identity, the weighted
        background mean margin), so each row sums to the row's output.

    See Also
    --------
    shap.TreeExplainer.shap_values : shap's C++ implementation, with ``feature_perturbation="interventional"``.
    interventional_interaction_values, interventional_banzhaf_values

    Examples
    --------
    >>> import numpy as np, shap, xgboost
    >>> from hitml.kernels.treeshap import extract_paths, interventional_shap_values
    >>> X = np.random.default_rng(0).normal(size=(200, 3))
    >>> model = xgboost.XGBRegressor(n_estimators=4, max_depth=3).fit(X, X[:, 0] * X[:, 2])
    >>> ens = shap.TreeExplainer(model).model                     # shap's TreeEnsemble: dense node arrays
    >>> paths = extract_paths(ens.children_left, ens.children_right, ens.children_default, ens.features,
    ...                       ens.thresholds, ens.values, ens.node_sample_weight, ens.base_offset, n_features=3)
    >>> phi = interventional_shap_values(paths, X[:5], X[100:150])
    >>> ref = shap.TreeExplainer(model, data=X[100:150], feature_perturbation="interventional")
    >>> phi.shape, bool(np.allclose(phi[:, :3, 0], ref.shap_values(X[:5]), atol=1e-6))
    ((5, 4, 1), True)
    """
    check_progress(progress)
    return _engine(backend).interventional_shap_values(paths, X, background, transform=transform, y=y,
                                                       tree_limit=tree_limit, progress=progress, weights=weights,
                                                       method=method)


def prepare_background_pass(dtype, input_dtype, *, backend: str = "cpu", rows=None) -> None:
    """Start readying the compiled kernels of :func:`background_summary` for rows of ``dtype``, so that their
    compile overlaps what the caller does before the pass (parsing the model, reading the background); given the
    background ``rows``, start their upload too.

    On ``"gpu"`` the pass's CUDA kernels compile (or load from CuPy's disk cache) in a thread, once per device and
    row type, and the kernels of the calls that read the summary in another, once per device; the pass (a call)
    waits for its thread. A large host ``rows`` array is uploaded to the device in a third thread, and
    :func:`background_summary` of that same array takes the device copy; where no pass follows, call
    :func:`release_background_pass` to free it. On ``"cpu"`` it does nothing: the CPU kernels ship compiled.
    Values do not depend on it.

    Parameters
    ----------
    dtype : numpy.dtype
        The background rows' dtype.
    input_dtype : numpy.dtype
        The dtype the paths compare in (``PathSet.input_dtype``).
    backend : {"cpu", "gpu"}, default "cpu"
        The engine that will count the background.
    rows : numpy.ndarray, optional
        The background itself, as it will be passed to :func:`background_summary` (the same array object).

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.kernels.treeshap import prepare_background_pass, release_background_pass
    >>> rows = np.zeros((1000, 4), dtype=np.float32)
    >>> prepare_background_pass(rows.dtype, np.dtype(np.float32), backend="cpu", rows=rows)  # compiled already
    >>> release_background_pass(rows, backend="cpu")
    """
    if backend == "gpu":
        from . import _gpu_patterns

        _gpu_patterns.compile_ahead(dtype, input_dtype)
        if rows is not None:
            _gpu_patterns.prefetch_rows(rows, input_dtype)


def release_background_pass(rows, *, backend: str = "cpu") -> None:
    """Free what :func:`prepare_background_pass` readied for ``rows`` (the device copy of a background that no
    :func:`background_summary` took); nothing where the pass took it.

    Parameters
    ----------
    rows : numpy.ndarray
        The array given to :func:`prepare_background_pass`.
    backend : {"cpu", "gpu"}, default "cpu"
        The backend given there.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.kernels.treeshap import prepare_background_pass, release_background_pass
    >>> rows = np.zeros((1000, 4), dtype=np.float32)
    >>> prepare_background_pass(rows.dtype, np.dtype(np.float32), backend="cpu", rows=rows)
    >>> release_background_pass(rows, backend="cpu")      # no pass followed: nothing stays held
    """
    if backend == "gpu":
        from . import _gpu_patterns

        _gpu_patterns.drop_upload(rows)


def background_summary(paths: PathSet, background, *, backend: str = "cpu", weights=None, weight_scale=None,
                       progress=None) -> BackgroundSummary:
    """The background's part of interventional values, computed once: per path, the weight of the background rows
    that fail each set of its conditions.

    Pass the result as ``background`` to :func:`interventional_shap_values` (identity transform),
    :func:`interventional_interaction_values` or :func:`interventional_banzhaf_values`: a call then reads only its
    own rows (and builds its tables from the histograms once; the summary keeps them for later calls). The counts
    are integers, so summaries of parts of a background add up exactly to the whole one's
    (:meth:`BackgroundSummary.merge`), and the CPU and GPU engines count the same integers.

    Parameters
    ----------
    paths : PathSet
        The model's paths, all trees (a call's ``tree_limit`` reads a prefix of the summary).
    background : numpy.ndarray or cupy.ndarray, shape (m, M)
        The background rows, in the dtype the paths compare in.
    backend : {"cpu", "gpu"}, default "cpu"
        Where to count: the GPU's summary keeps its histograms on the device.
    weights : array-like of shape (m,), optional
        One non-negative weight per background row (None: equal weights), kept in fixed point.
    weight_scale : int, optional
        The fixed-point exponent of the whole background's weights (:func:`fixed_point_scale` of their total), where
        ``background`` is a part of it whose summary will be merged with the others'; None: from these weights.
    progress : bool, optional
        Show a tqdm progress bar (None: on for long runs, unless ``HITML_PROGRESS=0``).

    Returns
    -------
    BackgroundSummary
        ``bias(paths)`` is the weighted background mean of the model's raw output (the expected value); ``nbytes``
        what it holds (about ``8 * sum over paths of 2^d`` bytes, d the path's distinct features, for paths up to
        12; longer paths keep their distinct fail sets).

    Examples
    --------
    >>> import numpy as np, shap, xgboost
    >>> from hitml.kernels.treeshap import (BackgroundSummary, background_summary, extract_paths,
    ...                                    interventional_shap_values)
    >>> X = np.random.default_rng(0).normal(size=(400, 3))
    >>> model = xgboost.XGBRegressor(n_estimators=4, max_depth=3).fit(X, X[:, 0] * X[:, 2])
    >>> ens = shap.TreeExplainer(model).model
    >>> paths = extract_paths(ens.children_left, ens.children_right, ens.children_default, ens.features,
    ...                       ens.thresholds, ens.values, ens.node_sample_weight, ens.base_offset, n_features=3)
    >>> bg = X[100:400].astype(np.float32)
    >>> parts = [background_summary(paths, bg[:120]), background_summary(paths, bg[120:])]
    >>> whole = BackgroundSummary.merge(parts)
    >>> a = interventional_shap_values(paths, X[:5], whole)
    >>> bool((a == interventional_shap_values(paths, X[:5], bg)).all())
    True
    >>> margin = model.predict(bg, output_margin=True)
    >>> bool(np.isclose(whole.bias(paths)[0], margin.mean(), rtol=1e-6))
    True
    """
    check_progress(progress)
    return _engine(backend).summarize_background(paths, background, weights=weights, weight_scale=weight_scale,
                                                 progress=progress)


def interventional_interaction_values(paths: PathSet, X, background, *, backend: str = "cpu", weights=None,
                                      tree_limit=None, progress=None):
    """Interventional SHAP interaction values against ``background``, (n, M+1, M+1, K), bias at [M, M].

    Parameters
    ----------
    paths : PathSet
        The model's root-to-leaf paths (:func:`extract_paths`).
    X : numpy.ndarray or cupy.ndarray, shape (n, M)
        Rows to explain, in the dtype the paths compare in; NaN is missing (takes each split's default side).
    background : numpy.ndarray or cupy.ndarray, shape (m, M)
        The reference rows the features are set to in turn (shap's ``data``).
    backend : {"cpu", "gpu"}, default "cpu"
        The engine: Numba on the CPU, or CuPy on the GPU (same values to float64 rounding).
    weights : array-like of shape (m,), optional
        One non-negative weight per background row (None: equal weights).
    tree_limit : int, optional
        Use the first ``tree_limit`` trees only (None: all).
    progress : bool, optional
        Show a tqdm progress bar (None: on for long runs, unless ``HITML_PROGRESS=0``).

    Returns
    -------
    numpy.ndarray or cupy.ndarray, shape (n, M + 1, M + 1, K)
        Summing over the last feature axis gives :func:`interventional_shap_values` (identity output).

    See Also
    --------
    shap.TreeExplainer.shap_interaction_values : shap's, path-dependent only (shap has no interventional
        interactions).
    iter_interventional_interactions : the same in row chunks, for wide models.

    Examples
    --------
    >>> import numpy as np, shap, xgboost
    >>> from hitml.kernels.treeshap import extract_paths, interventional_interaction_values
    >>> X = np.random.default_rng(0).normal(size=(200, 3))
    >>> model = xgboost.XGBRegressor(n_estimators=4, max_depth=3).fit(X, X[:, 0] * X[:, 2])
    >>> ens = shap.TreeExplainer(model).model                     # shap's TreeEnsemble: dense node arrays
    >>> paths = extract_paths(ens.children_left, ens.children_right, ens.children_default, ens.features,
    ...                       ens.thresholds, ens.values, ens.node_sample_weight, ens.base_offset, n_features=3)
    >>> phi = interventional_interaction_values(paths, X[:5], X[100:150])
    >>> ref = shap.TreeExplainer(model, data=X[100:150], feature_perturbation="interventional")
    >>> phi.shape, bool(np.allclose(phi.sum(2)[:, :3, 0], ref.shap_values(X[:5]), atol=1e-6))
    ((5, 4, 4, 1), True)
    """
    check_progress(progress)
    return _engine(backend).interventional_interaction_values(paths, X, background, weights=weights,
                                                              tree_limit=tree_limit, progress=progress)


def interventional_banzhaf_values(paths: PathSet, X, background, *, backend: str = "cpu", weights=None,
                                  tree_limit=None, progress=None):
    """Interventional Banzhaf values against ``background``, (n, M+1, K), background mean margin in column M.

    Feature ``j``'s Banzhaf value is its marginal contribution averaged with equal weight over every subset of the
    other features (Shapley values weight subsets by size), each subset's features taken from the row and the rest
    from the background.

    Parameters
    ----------
    paths : PathSet
        The model's root-to-leaf paths (:func:`extract_paths`).
    X : numpy.ndarray or cupy.ndarray, shape (n, M)
        Rows to explain, in the dtype the paths compare in; NaN is missing (takes each split's default side).
    background : numpy.ndarray or cupy.ndarray, shape (m, M)
        The reference rows the features are set to in turn (shap's ``data``).
    backend : {"cpu", "gpu"}, default "cpu"
        The engine: Numba on the CPU, or CuPy on the GPU (same values to float64 rounding).
    weights : array-like of shape (m,), optional
        One non-negative weight per background row (None: equal weights).
    tree_limit : int, optional
        Use the first ``tree_limit`` trees only (None: all).
    progress : bool, optional
        Show a tqdm progress bar (None: on for long runs, unless ``HITML_PROGRESS=0``).

    Returns
    -------
    numpy.ndarray or cupy.ndarray, shape (n, M + 1, K)
        Column ``M`` holds the background mean margin; unlike Shapley values, a row need not sum to its margin.

    See Also
    --------
    interventional_shap_values : the Shapley weighting of the same subsets.

    Examples
    --------
    >>> import numpy as np, shap, xgboost
    >>> from hitml.kernels.treeshap import extract_paths, interventional_banzhaf_values
    >>> X = np.random.default_rng(0).normal(size=(200, 3))
    >>> model = xgboost.XGBRegressor(n_estimators=4, max_depth=3).fit(X, X[:, 0] * X[:, 2])
    >>> ens = shap.TreeExplainer(model).model                     # shap's TreeEnsemble: dense node arrays
    >>> paths = extract_paths(ens.children_left, ens.children_right, ens.children_default, ens.features,
    ...                       ens.thresholds, ens.values, ens.node_sample_weight, ens.base_offset, n_features=3)
    >>> from itertools import combinations
    >>> bg, x = X[100:150], X[0]
    >>> def v(S):                                       # mean margin with features S from x, the rest from bg
    ...     Z = bg.copy(); Z[:, list(S)] = x[list(S)]
    ...     return model.predict(Z, output_margin=True).mean()
    >>> brute = [np.mean([v(S + (j,)) - v(S) for r in range(3) for S in combinations([k for k in range(3) if k != j], r)])
    ...          for j in range(3)]
    >>> phi = interventional_banzhaf_values(paths, X[:1], bg)
    >>> phi.shape, bool(np.allclose(phi[0, :3, 0], brute, atol=1e-5))
    ((1, 4, 1), True)
    """
    check_progress(progress)
    return _engine(backend).interventional_banzhaf_values(paths, X, background, weights=weights,
                                                          tree_limit=tree_limit, progress=progress)


def iter_interventional_interactions(paths: PathSet, X, background, *, chunk_rows: int = 4096, backend: str = "cpu",
                                     weights=None, tree_limit=None, progress=False):
    """Interventional interaction values of a wide model in row chunks: yields ``(start, stop, values)`` with values
    ``(stop - start, M+1, M+1, K)`` for ``X[start:stop]``, so only one chunk's output (``chunk_rows (M+1)^2 K``
    doubles) is held at a time. The background is counted once (:func:`background_summary`, unless a summary is
    passed) and every chunk reads those counts, so a chunk costs its rows only.

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
    if not isinstance(background, BackgroundSummary):
        background = background_summary(paths, background, backend=backend, weights=weights, progress=progress)
        weights = None          # in the summary now
    for a in range(0, n, int(chunk_rows)):
        b = min(n, a + int(chunk_rows))
        yield a, b, interventional_interaction_values(paths, X[a:b], background, backend=backend, weights=weights,
                                                      tree_limit=tree_limit, progress=progress)
