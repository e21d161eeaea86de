"""``shap_ext.TreeExplainer``: shap's TreeExplainer with exact TreeSHAP computed by hitml's engine (CPU or GPU)."""
from __future__ import annotations

import types
import warnings
from typing import Any

import numpy as np
import pandas as pd
import shap

from hitml.kernels._progress import check_progress
from hitml.kernels.device import array_module, is_cupy_array, resolve_backend, to_numpy

from ._categories import categorical_splits
from ._compat import DEPRECATED_APPROX, DimensionError, ExplainerError, InvalidModelError, TreeEnsemble
from . import _outputs
from ._dask import dask_shap_values, is_dask_collection
from ._inputs import (InputReader, _exact_astype, check_native, model_n_features, native_columns, native_rows,
                      read_background, to_matrix)
from ._catboost import native_expected_value, native_margin, native_values, symmetric_trees, warn_not_additive
from ._models import build_ensemble, convert_model
from ._native import frame_margin, library_margin
from ._spark import is_spark_dataframe, spark_shap_values
from ._treelite import TreeliteModel

__all__ = ["GPUTreeExplainer", "TreeExplainer"]

_ShapTreeExplainer = shap.TreeExplainer
_DEFAULT = {"backend": None}  # set by shap_ext.enable(): the backend used when none is passed


def _engine():
    import hitml.kernels.treeshap as engine  # the engine compiles numba code; load on first use

    return engine


def _no_expected_value(*args: Any, **kwargs: Any) -> Any:
    """Stands in for the ensemble's ``predict`` while shap's own set-up runs (the engine gives the expected value)."""
    return _NoMean()


class _NoMean:
    def mean(self, *args: Any, **kwargs: Any) -> None:
        return None


class _RowsMasker(shap.maskers.Independent):
    """shap's Independent masker over the background rows as read (all of them), whose masking buffer (shap's
    copy of the rows, ``_masked_data``) is made when a masking call first reads it: TreeExplainer never does."""

    def __init__(self, rows: np.ndarray) -> None:
        super().__init__(rows[:1], max_samples=1)
        self.data = rows
        self.max_samples = len(rows)
        self.shape = rows.shape
        self.__dict__.pop("_masked_data", None)

    def __getattr__(self, name: str) -> Any:
        if name == "_masked_data":
            self._masked_data = self.data.copy()
            return self._masked_data
        raise AttributeError(name)


def engine_summary_fits(paths: Any, backend: str) -> bool:
    """Whether the background summary of ``paths`` fits the memory it may take (``SUMMARY_BYTES``, and a quarter
    of the GPU's free memory on the GPU); otherwise each call counts the background again (same values)."""
    from hitml.kernels.treeshap._summary import summary_bytes

    need = summary_bytes(paths)
    if need > SUMMARY_BYTES:
        return False
    if backend == "gpu":
        from hitml.kernels.device import free_gpu_bytes

        return need <= free_gpu_bytes(0.25)
    return True


# the most a background summary may hold (its histograms); a model needing more counts the background on each call
SUMMARY_BYTES = 2 << 30


def _check_treelite(model: TreeliteModel, data: Any, model_output: str) -> None:
    if not model.covers_known and data is None:
        raise ValueError("this treelite model stores no node covers (sum_hess or data_count), which "
                         "feature_perturbation='tree_path_dependent' needs; pass background data")
    if model_output != "raw" and model.shap_dict["tree_output"] is None:
        raise NotImplementedError(
            f"model_output={model_output!r} is not defined for this treelite model (postprocessor "
            f"{model.postprocessor!r}); only single-output 'sigmoid' models and averaged forest "
            "class fractions have a probability output here. Use model_output='raw' (the margin)."
        )


class LargeBackgroundWarning(UserWarning):
    """shap's warning for an interventional background of over 1,000 rows, with advice that holds for hitml.

    shap's TreeExplainer warns (a plain ``UserWarning``: "Passing N background samples may lead to slow runtimes")
    whenever ``feature_perturbation="interventional"`` is given with more than 1,000 background rows, and advises
    ``shap.sample(data, 100)``. hitml gives this subclass under the same condition, so code and tests that expect
    shap's warning still see it. For ``model_output="raw"`` the engine's cost is linear in rows plus background, and
    the message says to keep the whole background; for ``"probability"`` and ``"log_loss"`` the cost grows with rows
    times background rows, and the message keeps shap's advice.

    Silence it with ``warnings.simplefilter("ignore", hitml.shap_ext.LargeBackgroundWarning)``.

    See Also
    --------
    shap.TreeExplainer : gives a plain ``UserWarning`` under the same condition.

    Examples
    --------
    >>> import warnings
    >>> import numpy as np, shap, xgboost
    >>> from hitml.shap_ext import LargeBackgroundWarning, TreeExplainer
    >>> X = np.random.default_rng(0).normal(size=(1500, 3))
    >>> model = xgboost.XGBRegressor(n_estimators=3, max_depth=2).fit(X, X[:, 0])
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     explainer = TreeExplainer(model, shap.maskers.Independent(X, max_samples=1500),
    ...                               feature_perturbation="interventional", backend="cpu")
    >>> [w.category.__name__ for w in caught]
    ['LargeBackgroundWarning']
    """


def _warn_large_background(n: int, model_output: str, stacklevel: int = 3) -> None:
    if model_output in ("probability", "log_loss"):
        advice = (f"model_output={model_output!r} does not decompose over the background, so the time grows with "
                  "rows x background rows. Consider shap.sample(data, 100) to create a smaller background data set.")
    else:
        advice = ("hitml's engine costs time linear in rows plus background here, so keeping the whole background "
                  "costs little and avoids the sampling noise of shap.sample; this warning is kept because shap "
                  "gives it (silence: warnings.simplefilter('ignore', hitml.shap_ext.LargeBackgroundWarning)).")
    warnings.warn(f"Passing {n} background samples may lead to slow runtimes in shap's own TreeExplainer; {advice}",
                  LargeBackgroundWarning, stacklevel=stacklevel)


class TreeExplainer(_ShapTreeExplainer):
    """Exact TreeSHAP for tree ensembles with shap's TreeExplainer API, computed by hitml's engine.

    shap parses the model into its ``TreeEnsemble``; the dense arrays (and categorical split sets, which shap cannot
    evaluate for XGBoost) are turned into root-to-leaf paths once, here. ``shap_values``, ``shap_interaction_values``
    and ``explainer(X)`` never short-circuit to XGBoost/LightGBM/CatBoost native contributions: the engine computes
    every value, and ``check_additivity`` compares them with the model library's own raw prediction.

    Parameters
    ----------
    model : tree model
        XGBoost, LightGBM, CatBoost, scikit-learn tree ensembles, treelite models, or a shap ``TreeEnsemble``.
    data : array-like or pandas.DataFrame, optional
        Background rows; with them ``feature_perturbation="auto"`` is interventional, as in shap.
    model_output : {"raw", "probability", "log_loss", "predict_proba"}, default "raw"
        As in shap.
    feature_perturbation : {"auto", "interventional", "tree_path_dependent"}, default "auto"
        As in shap.
    feature_names : list of str, optional
        As in shap (a DataFrame's columns otherwise).
    approximate, link, linearize_link
        As in shap (deprecated or unused there too).
    backend : {"cpu", "gpu", "auto"} or None, default None
        hitml's engine: "cpu" (Numba), "gpu" (CUDA through CuPy) or "auto" (the GPU where CuPy sees one, else the
        CPU). None means the default set by :func:`enable`, else "auto".
    progress : bool, optional
        A tqdm bar on long runs; None follows the ``HITML_PROGRESS`` environment variable.
    background_weights : array-like of shape (n_background,), optional
        One non-negative weight per background row that the masker keeps (interventional only; shap's
        TreeExplainer has none). Values are the weighted mean over the background.

    Attributes
    ----------
    backend : str
        The resolved backend, "cpu" or "gpu".
    route : str
        How the model was read ("shap-parser", "catboost-native", ...; see docs/shap_ext.md).
    expected_value : float or list of float
        As in shap.

    Raises
    ------
    hitml.kernels.GPUUnavailableError
        For ``backend="gpu"`` without a usable device.
    shap.utils._exceptions.InvalidModelError
        If shap cannot parse the trees.
    ValueError
        If ``data`` has another number of features than the model.

    See Also
    --------
    shap.TreeExplainer : the class this subclasses and replaces; ``shap.TreeExplainer(model, backend=...)`` builds
        this class once ``hitml.shap_ext`` is imported.
    GPUTreeExplainer : the same with ``backend="gpu"`` by default.

    Examples
    --------
    >>> import numpy as np, xgboost
    >>> from hitml.shap_ext import TreeExplainer
    >>> X = np.random.default_rng(0).normal(size=(300, 4))
    >>> model = xgboost.XGBRegressor(n_estimators=10, max_depth=3).fit(X, X[:, 0] * X[:, 1])
    >>> explainer = TreeExplainer(model, backend="cpu")
    >>> sv = explainer.shap_values(X[:5])
    >>> margin = model.predict(X[:5], output_margin=True)
    >>> bool(np.allclose(sv.sum(1) + explainer.expected_value, margin, atol=1e-5))
    True
    >>> explainer.shap_interaction_values(X[:5]).shape
    (5, 4, 4)
    """

    def __init__(
        self,
        model: Any,
        data: Any = None,
        model_output: str = "raw",
        feature_perturbation: str = "auto",
        feature_names: list[str] | None = None,
        approximate: Any = DEPRECATED_APPROX,
        link: Any = None,
        linearize_link: Any = None,
        *,
        backend: str | None = None,
        progress: bool | None = None,
        background_weights: Any = None,
    ) -> None:
        if backend is None:
            backend = _DEFAULT["backend"] or "auto"
        self.backend = resolve_backend(backend)  # GPUUnavailableError for "gpu" without a device
        self.requested_backend = backend
        self.progress = check_progress(progress)
        if isinstance(model, TreeEnsemble) and not hasattr(model, "children_left"):
            raise InvalidModelError("the TreeEnsemble passed as model holds no parsed trees")
        user_model = model
        model, converted, self.route = convert_model(model, data is not None)
        self._reader = InputReader(user_model)
        columns = check_native(data, self._reader, "background data")  # a polars DataFrame or pyarrow Table
        if self._reads_background_once(data, columns, feature_perturbation, converted):
            self._init_interventional(model, user_model, converted, data, columns, model_output,
                                      feature_perturbation, feature_names, approximate, link, linearize_link,
                                      background_weights)
            return
        if isinstance(data, pd.DataFrame) or columns is not None:
            if feature_names is None:
                header = data if columns is None else pd.DataFrame(columns=columns)
                order = self._reader.output_order(header)
                feature_names = list(header.columns) if order is None else list(self._reader.names)
            rows = to_matrix(data, None, np.dtype(np.float64), "background data", self._reader)[0]
            data = pd.DataFrame(self._reader.missing_rules(rows),
                                columns=feature_names if feature_names is not None else None)
        elif isinstance(data, shap.maskers.Independent) and (self._reader.missing is not None
                                                             or self._reader.reads_arrays):
            # the masker's rows (already sampled to max_samples) read as the library reads them, as for an array
            # (a `missing` value, HistGradientBoosting's category encoding, LightGBM's dtypes): shap predicts the
            # expected value on them, and the engine's tables come from them
            rows = np.asarray(data.data)
            dtype = rows.dtype if rows.dtype in (np.float32, np.float64) else np.dtype(np.float64)
            rows = self._reader.missing_rules(to_matrix(rows, None, dtype, "background data", self._reader)[0])
            names = getattr(data, "feature_names", None)  # a masker of a frame keeps its columns
            data = shap.maskers.Independent(rows, max_samples=len(rows))
            if names is not None:
                data.feature_names = names
        elif data is not None and (isinstance(data, np.ndarray) or not hasattr(data, "data")):
            data, _ = to_matrix(data, None, np.dtype(np.float64), "background data", self._reader)
            data = self._reader.missing_rules(data)
        if isinstance(converted, TreeliteModel):
            _check_treelite(converted, data, model_output)
        if data is not None and np.ndim(getattr(data, "data", data)) == 2:
            n_model, exact = model_n_features(converted if converted is not None else user_model, None)
            n_data = np.shape(getattr(data, "data", data))[1]
            if exact and n_data != n_model:
                raise ValueError(f"background data has {n_data} features, but the model was trained on {n_model}")
        # shap re-weights the node covers with the background (a pass over it per tree, about 20 s per million rows
        # for 100 trees); only tree_path_dependent uses covers, so the interventional explainer skips it
        reweight = feature_perturbation == "tree_path_dependent"
        ens = build_ensemble(model, user_model, converted, data if reweight else None, model_output)
        with warnings.catch_warnings():
            # shap's own warning advises subsampling; _warn_large_background gives a subclass of it under the same
            # condition, with advice that holds for this engine
            warnings.filterwarnings("ignore", message="Passing .* background samples may lead to slow runtimes")
            super().__init__(ens, data, model_output, feature_perturbation, feature_names, approximate, link,
                             linearize_link)
        if feature_perturbation == "interventional" and self.data is not None and self.data.shape[0] > 1_000:
            _warn_large_background(self.data.shape[0], getattr(self.model, "model_output", model_output))
        self.background_weights = None
        if background_weights is not None:
            w = np.asarray(background_weights, dtype=np.float64).reshape(-1)
            if self.data is None or len(w) != self.data.shape[0]:
                raise ValueError(f"background_weights has {len(w)} values, but the background (after the masker's "
                                 f"max_samples) has {0 if self.data is None else self.data.shape[0]} rows")
            if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
                raise ValueError("background_weights must be finite, non-negative and not all zero")
            self.background_weights = w
            if self.model.model_output != "log_loss":
                self.expected_value = np.average(self.model.predict(self.data), axis=0, weights=w)
                if np.size(self.expected_value) == 1:
                    self.expected_value = np.ravel(self.expected_value)[0]
        if self.route == "catboost-native":
            self.n_features = len(user_model.feature_names_)
            self.expected_value = native_expected_value(user_model)
            return
        if getattr(ens, "trees", None) is None or not hasattr(ens, "children_left"):
            raise InvalidModelError(
                f"hitml TreeExplainer: shap could not parse the trees of {type(user_model).__qualname__} into a "
                "TreeEnsemble (it would fall back to the library's native SHAP); the hitml backend needs the trees"
            )
        self._configure_reader(ens)
        self._setup_engine(converted if converted is not None else user_model)

    # -- the interventional explainer: the background read once, summarised once --------------------------------
    def _reads_background_once(self, data: Any, columns: Any, feature_perturbation: str, converted: Any) -> bool:
        """Whether the background goes the interventional build's way (rows read once into the model's dtype, one
        pass of the engine over them): an array, frame, polars/pyarrow table or shap Independent masker, for a model
        whose trees the engine reads."""
        if data is None or feature_perturbation not in ("auto", "interventional") or self.route == "catboost-native":
            return False
        if isinstance(converted, TreeliteModel):
            return False
        return (isinstance(data, (np.ndarray, pd.DataFrame)) or columns is not None
                or type(data) is shap.maskers.Independent or is_dask_collection(data) or is_spark_dataframe(data))

    def _configure_reader(self, ens: Any) -> None:
        """The row reader's rules that come from the parsed trees (LightGBM's zero features, category features,
        the features whose lowest split moved)."""
        if getattr(ens, "trees", None) is None or not hasattr(ens, "children_left"):
            raise InvalidModelError(
                f"hitml TreeExplainer: shap could not parse the trees of {type(self._reader.model).__qualname__} "
                "into a TreeEnsemble (it would fall back to the library's native SHAP); the hitml backend needs the "
                "trees"
            )
        self._reader.zero_features = getattr(ens, "_lgb_zero_features", None)
        self._reader.cat_features = getattr(ens, "_cat_features", None)
        self._reader.lowest_features = getattr(ens, "_lowest_features", None)
        self._reader.lowest_move = getattr(ens, "_lowest_move", (0.0, 0.0))

    def _init_interventional(self, model: Any, user_model: Any, converted: Any, data: Any, columns: Any,
                             model_output: str, feature_perturbation: str, feature_names: Any, approximate: Any,
                             link: Any, linearize_link: Any, background_weights: Any) -> None:
        """The interventional explainer's build: the background is read once, as the model's library reads it, into
        the dtype the trees compare in (no copy where it already is one); the engine counts it once
        (``background_summary``), and the expected value comes from those counts. shap's own set-up runs on a
        one-row stand-in, so that it neither predicts on nor copies the background."""
        ens = build_ensemble(model, user_model, converted, None, model_output)
        self._configure_reader(ens)
        masker_names = None
        lazy = data if is_dask_collection(data) or is_spark_dataframe(data) else None
        if lazy is None and self.backend == "gpu":   # the GPU pass's kernels compile while the build goes on
            rows0 = data.data if isinstance(data, shap.maskers.Independent) else data
            _engine().prepare_background_pass(rows0.dtype if isinstance(rows0, np.ndarray) else ens.input_dtype,
                                              ens.input_dtype, backend="gpu")
        if lazy is not None and is_spark_dataframe(data):
            # a Spark background: its partitions are counted on the executors (spark_background_summary); shap's
            # set-up and the checks below see its first row
            from ._spark import _feature_columns, spark_background

            if background_weights is not None:
                raise NotImplementedError("background_weights with a Spark background; pass a NumPy or pandas "
                                          "background (spark_background), or repeat rows in proportion to weights")
            proxy = types.SimpleNamespace(_reader=self._reader, model=ens, data_feature_names=feature_names)
            spec, how = _feature_columns(data, proxy, None)
            lazy = (data, spec, how)
            data = spark_background(data.limit(1), spec)
        elif lazy is not None:
            # a Dask background: its partitions are counted where they lie (dask_background_summary); shap's set-up
            # and the checks below see its first row
            if background_weights is not None:
                raise NotImplementedError("background_weights with a Dask background; pass a NumPy or pandas "
                                          "background, or repeat rows in proportion to their weights")
            data = data[:1].compute() if hasattr(data, "chunks") else data.head(1, npartitions=-1)
            data = to_numpy(data) if is_cupy_array(data) else data      # the first row of CuPy partitions
        if type(data) is shap.maskers.Independent:
            masker_names = getattr(data, "feature_names", None)  # a masker of a frame keeps its columns
            raw = data.data
        else:
            # shap's Explainer wraps an array or frame in maskers.Independent(data), which keeps 100 rows
            # (shap.utils.sample: the same rows of an array or of a frame)
            raw = data if columns is not None else shap.utils.sample(data, 100)
        if isinstance(raw, pd.DataFrame) or columns is not None:
            if feature_names is None:
                header = raw if columns is None else pd.DataFrame(columns=columns)
                order = self._reader.output_order(header)
                feature_names = list(header.columns) if order is None else list(self._reader.names)
        else:
            raw = np.asarray(raw)
        rows = read_background(raw, self._reader, ens.input_dtype, getattr(ens, "_row_dtype", None))
        if columns is not None:
            rows = shap.utils.sample(rows, 100)
        n_model, exact = model_n_features(converted if converted is not None else user_model, None)
        if exact and rows.shape[1] != n_model:
            raise ValueError(f"background data has {rows.shape[1]} features, but the model was trained on {n_model}")
        # the user's masker where its rows are the rows as read, else one over them that copies nothing up front
        masker = data if type(data) is shap.maskers.Independent and data.data is rows else _RowsMasker(rows)
        stand_in = shap.maskers.Independent(rows[:1], max_samples=1)
        if masker_names is not None:
            masker.feature_names = stand_in.feature_names = masker_names
        ens.predict = _no_expected_value     # shap's set-up predicts on the stand-in; the engine gives the value
        try:
            super().__init__(ens, stand_in, model_output, feature_perturbation, feature_names, approximate, link,
                             linearize_link)
        finally:
            del ens.predict
        self.masker = masker
        self.data = rows
        self.__dict__.pop("_data_missing", None)          # shap's was the stand-in's; computed again when read
        if feature_perturbation == "interventional" and rows.shape[0] > 1_000:   # as shap warns (not for "auto")
            _warn_large_background(rows.shape[0], getattr(self.model, "model_output", model_output), stacklevel=4)
        self.background_weights = None
        if background_weights is not None:
            w = np.asarray(background_weights, dtype=np.float64).reshape(-1)
            if len(w) != rows.shape[0]:
                raise ValueError(f"background_weights has {len(w)} values, but the background (after the masker's "
                                 f"max_samples) has {rows.shape[0]} rows")
            if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
                raise ValueError("background_weights must be finite, non-negative and not all zero")
            self.background_weights = w
        self._rows_read = True
        # on the GPU the background's upload runs while the paths are extracted (the pass takes the device copy)
        upload = lazy is None and self.backend == "gpu" and self.model.get_transform() == "identity"
        if upload:
            _engine().prepare_background_pass(rows.dtype, ens.input_dtype, backend="gpu", rows=rows)
        try:
            self._setup_engine(converted if converted is not None else user_model)
            if lazy is not None:
                self._summarize_lazy_background(lazy)
                return
            self._summarize_background()
        finally:
            if upload:
                _engine().release_background_pass(rows, backend="gpu")

    def _summarize_lazy_background(self, data: Any) -> None:
        """The summary of a Dask or Spark background, counted partition by partition where the rows lie (identity
        output transforms only: the others walk every pair of rows); ``data`` then keeps the collection."""
        kind = "Spark" if isinstance(data, tuple) else "Dask"
        if self.model.get_transform() != "identity":
            raise NotImplementedError(
                f"model_output={self.model.model_output!r} with a {kind} background: that output does not "
                "decompose over the background, so every background row would meet every explained row; pass a "
                "NumPy or pandas sample of the background")
        paths = self.paths
        row_dtype = getattr(self.model, "_row_dtype", None)
        if kind == "Spark":
            from ._spark import spark_background_summary

            data, spec, how = data
            width = int(self.n_features) if self._n_features_exact else None
            self.background_summary = spark_background_summary(
                paths, data, spec, how, self._reader, self.model.input_dtype, row_dtype, width,
                self.requested_backend)
        else:
            from ._dask import dask_background_summary

            self.background_summary = dask_background_summary(
                paths, data, self._reader, self.model.input_dtype, row_dtype, self.requested_backend)
        self._set_expected_value(self.background_summary.bias(self._model_paths()[0]))
        self.data = data
        self._background = None
        self.__dict__["_data_missing"] = None
        if kind == "Dask":   # the reduced summary goes to the workers now, once, as the calls will read it there
            from ._dask import _current_client, ship_explainer

            if _current_client() is not None:
                ship_explainer(self)

    def _summarize_background(self) -> None:
        """The engine's pass over the background (``background_summary``, on the explainer's backend) and the
        expected value from it: the weighted background mean of the trees' output, exact to float64 rounding.
        ``model_output`` values whose transform is not the identity ("probability" of a margin model) take the
        mean of the transformed margins from the engine's pair walk on one row; "log_loss" keeps shap's
        label-dependent expected value."""
        engine = _engine()
        self.background_summary = None
        transform = self.model.get_transform()
        paths = self.paths
        restricted, engine_tl = self._model_paths()
        if transform == "identity" and engine_summary_fits(paths, self.backend):
            self.background_summary = engine.background_summary(
                paths, self._background, backend=self.backend, weights=self.background_weights,
                progress=self.progress)
            self._set_expected_value(self.background_summary.bias(restricted))
        elif self.model.model_output == "log_loss":
            self._full_expected_value = self.expected_value
        else:   # the bias entry of one row's values: the background's (transformed) mean, counted per call
            self._set_expected_value(engine.interventional_shap_values(
                paths, self._background[:1], self._background, transform=transform, backend="cpu",
                weights=self.background_weights, tree_limit=engine_tl, progress=self.progress)[0, -1, :])

    def _model_paths(self) -> tuple[Any, int | None]:
        """(the paths of the trees the model predicts with, their engine ``tree_limit``: None for all)."""
        tl = self._tree_limit(None)
        if tl >= self.model.values.shape[0]:
            return self.paths, None
        return self.paths.restrict(tl), tl

    def _set_expected_value(self, bias: Any) -> None:
        """The expected value from the engine's bias (K,): a scalar for one output, (1 - p, p) for the
        ``predict_proba`` of a binary margin model; kept as the full model's."""
        bias = np.asarray(bias, dtype=np.float64)
        self.expected_value = bias[0] if len(bias) == 1 else bias
        if self.model.model_output == "probability_doubled":
            self.expected_value = np.array([1.0 - bias[0], bias[0]])
        self._full_expected_value = self.expected_value

    def _background_arg(self, transform: str = "identity") -> Any:
        """What the engine reads of the background: the summary (identity transform), else the rows."""
        if transform == "identity" and getattr(self, "background_summary", None) is not None:
            return self.background_summary
        return self._background

    @property
    def data_missing(self) -> Any:
        """shap's ``pd.isna(data)`` of the background, computed when first read."""
        if "_data_missing" not in self.__dict__:
            self.__dict__["_data_missing"] = None if self.data is None else pd.isna(self.data)
        return self.__dict__["_data_missing"]

    @data_missing.setter
    def data_missing(self, value: Any) -> None:
        self.__dict__["_data_missing"] = value

    # -- set-up -------------------------------------------------------------------------------------------
    def _setup_engine(self, model: Any) -> None:
        ens = self.model
        n_features, exact = model_n_features(getattr(ens, "original_model", model), ens)
        if self.data is not None:
            if self.data.ndim != 2:
                raise ValueError(f"background data must be 2-D, got shape {self.data.shape}")
            if exact and self.data.shape[1] != n_features:
                raise ValueError(
                    f"background data has {self.data.shape[1]} features, but the model was trained on {n_features}"
                )
            if self.data.shape[1] < n_features:
                raise ValueError(f"background data has {self.data.shape[1]} features, but the trees split on "
                                 f"feature index {n_features - 1}")
            n_features, exact = self.data.shape[1], True
        self.n_features = n_features
        self._n_features_exact = exact
        converted = getattr(ens, "original_model", None)
        converted = converted if hasattr(converted, "categories") else None
        library_model = getattr(ens, "_library_model", None)
        self._cats = converted.categories if converted is not None else categorical_splits(ens, library_model)
        if self._cats and ens.model_type != "lightgbm" and self.data is not None \
                and self.feature_perturbation == "tree_path_dependent":
            raise NotImplementedError(
                "XGBoost/HistGradientBoosting/treelite categorical splits with background data and "
                "feature_perturbation='tree_path_dependent' are not supported (shap re-weights the trees with its "
                "own split routing, which does not know their category sets); leave data out, or use "
                "feature_perturbation='interventional'"
            )
        self._paths_cache: dict[int, Any] = {}
        self._background = None
        if self.feature_perturbation == "tree_path_dependent" and self.model.model_output == "raw":
            # E[f] under cover weighting, from the paths in float64. shap's own value here is wrong for XGBoost
            # (its float32 node values never receive the internal-node expectations); users of plain shap see
            # the native bias instead, which this equals.
            tl = self._tree_limit(None)
            bias = self.paths.bias(None if tl >= ens.values.shape[0] else tl)
            self.expected_value = bias[0] if len(bias) == 1 else bias
        self._full_expected_value = self.expected_value
        if self.data is not None and getattr(self, "_rows_read", False):
            self._background = self.data      # read once, in the model's dtype (_init_interventional)
        elif self.data is not None:
            bg = self._reader.missing_rules(np.asarray(self.data, dtype=np.float64))
            if getattr(ens, "_row_dtype", None) is not None:
                bg = bg.astype(ens._row_dtype).astype(np.float64)
            self._background = np.ascontiguousarray(bg.astype(ens.input_dtype))

    def _paths(self, n_features: int):
        """The PathSet for inputs of ``n_features`` columns (built once; a wider X only when M was a lower bound)."""
        if n_features not in self._paths_cache:
            ens = self.model
            cl, cr = self._cats.children(ens.children_left, ens.children_right)
            if self.backend == "cpu":   # a cold Numba cache: the engine's kernels compile during the extraction
                from hitml.kernels.treeshap import cpu as cpu_engine

                cpu_engine.expect_cpu_engine()
            self._paths_cache[n_features] = _engine().extract_paths(
                cl, cr, ens.children_default, ens.features, ens.thresholds, ens.values, ens.node_sample_weight,
                ens.base_offset, n_features=n_features, input_dtype=ens.input_dtype,
                categories=self._cats.engine_arrays() if self._cats else None,
            )
        return self._paths_cache[n_features]

    @property
    def paths(self):
        """The engine's PathSet for this model (kernels.treeshap.PathSet)."""
        return self._paths(self.n_features)

    # -- helpers ----------------------------------------------------------------------------------------------
    def _tree_limit(self, tree_limit: int | None) -> int:
        if tree_limit is None:
            tree_limit = -1 if self.model.tree_limit is None else self.model.tree_limit
        n_trees = self.model.values.shape[0]
        return n_trees if tree_limit < 0 or tree_limit > n_trees else int(tree_limit)

    def _prepare(self, X: Any) -> tuple[Any, bool, str]:
        """``(X, flat, backend)``: a validated 2-D matrix in the model's input dtype, on the backend's device."""
        backend = self.backend
        if is_cupy_array(X) and backend == "cpu":
            X = to_numpy(X)
        width = self.n_features if self._n_features_exact else None
        row = getattr(self.model, "_row_dtype", None)
        dtype = np.dtype(self.model.input_dtype)
        if row is not None and self._reader.keeps_values():
            # rows rounded as the library rounds them, and nothing compares them with a float64 missing value: they
            # go to the engines in that dtype (one cast at most, none for float32 input; the engines widen exactly)
            dtype = np.dtype(row)
        arr, flat = to_matrix(X, width, dtype, "X", self._reader)
        if row is not None and arr.dtype != row:
            # rounded as the library rounds rows; CuPy rows exactly (CuPy's astype flushes float32 subnormals)
            with np.errstate(over="ignore"):       # beyond float32's range: +-inf, as the library's cast
                arr = _exact_astype(_exact_astype(arr, row), arr.dtype) if is_cupy_array(arr) else \
                    arr.astype(row).astype(arr.dtype)
        if not self._n_features_exact and arr.shape[1] < self.n_features:
            raise ValueError(f"X has {arr.shape[1]} features, but the trees split on feature index "
                             f"{self.n_features - 1}")
        return self._reader.missing_rules(arr), flat, backend

    def _model_margin(self, X: np.ndarray, tree_limit: int, user_X: Any = None) -> np.ndarray:
        """The model library's own raw prediction (shap's C predictor only where none is known): of the user's own
        frame where the library can read it (the reference then shares nothing with our reading of it), else of
        the host rows ``X``."""
        ens = self.model
        library_model = getattr(ens, "_library_model", None)
        margin = frame_margin(library_model, ens, user_X, tree_limit) if isinstance(user_X, pd.DataFrame) else None
        if margin is None:
            with warnings.catch_warnings():
                if native_columns(user_X) is not None:  # the rows read from a polars/Arrow frame with its names
                    warnings.filterwarnings("ignore", message="X does not have valid feature names")
                margin = library_margin(library_model, ens, X, tree_limit)
        return TreeEnsemble.predict(ens, X, tree_limit=tree_limit) if margin is None else margin

    def _check_additivity(self, out: Any, X: Any, flat: bool, tree_limit: int, user_X: Any = None) -> None:
        """shap's additivity check (ExplainerError) against the model's raw margin, on host copies."""
        out_h = to_numpy(out)
        if flat:
            out_h = out_h[None]
        self._assert_sums_to(out_h, np.asarray(self._model_margin(to_numpy(X), tree_limit, user_X)),
                             self.model.num_outputs > 1)

    def _assert_sums_to(self, out: np.ndarray, margin: np.ndarray, multi: bool) -> None:
        """shap's assert_additivity of values ``out`` (rows first, outputs last when ``multi``) against ``margin``."""
        if multi:
            self.assert_additivity([out[..., i] for i in range(out.shape[-1])], margin.reshape(len(out), -1))
        else:
            self.assert_additivity(out, margin.reshape(len(out)))

    def _catboost_native(self, X: Any, tree_limit: int | None, check_additivity: bool, interactions: bool) -> Any:
        """CatBoost's own ShapValues / ShapInteractionValues (categorical features), formatted as shap does."""
        if tree_limit not in (None, -1):
            raise NotImplementedError("tree_limit is not supported for CatBoost models with categorical features "
                                      "(CatBoost's own SHAP, which explains them, uses every tree)")
        model = self.model._library_model
        user_X = X
        flat = isinstance(X, pd.Series) or (isinstance(X, (list, np.ndarray)) and np.ndim(X) == 1)
        if isinstance(X, pd.Series):  # one row of mixed values, read by name as CatBoost reads a frame
            X = pd.DataFrame([X.to_numpy()], columns=X.index).infer_objects()
        elif flat:
            X = pd.DataFrame([list(X)], columns=list(model.feature_names_)).infer_objects()
        columns = check_native(X, self._reader)  # a polars DataFrame (CatBoost refuses a pyarrow Table)
        if isinstance(X, pd.DataFrame) or columns is not None:
            # CatBoost's name rules (duplicates, names)
            self._reader.catboost_names(X if columns is None else pd.DataFrame(columns=columns))
        n_rows = X.num_row() if hasattr(X, "num_row") else len(X)
        if n_rows == 0:
            M = len(model.feature_names_)
            K = int(np.size(self.expected_value))
            return np.zeros((0, M, M) + ((K,) if K > 1 else ())) if interactions else np.zeros(
                (0, M) + ((K,) if K > 1 else ()))
        phi = native_values(model, X, interactions)
        if interactions:
            out = phi[:, :-1, :-1, 0] if phi.shape[-1] == 1 else phi[:, :-1, :-1, :]
            return self._in_frame_order(out[0] if flat else out, user_X, flat, interactions=True)
        out = phi[:, :-1, 0] if phi.shape[-1] == 1 else phi[:, :-1, :]
        if check_additivity and self.model.model_output == "raw":
            margin = np.asarray(native_margin(model, X))
            if symmetric_trees(model):
                self._assert_sums_to(out, margin, phi.shape[-1] > 1)
            else:
                warn_not_additive(out, phi[:, -1, 0] if phi.shape[-1] == 1 else phi[:, -1, :], margin)
        return self._in_frame_order(out[0] if flat else out, user_X, flat, interactions=False)

    # -- the two computations -------------------------------------------------------------------------------
    def shap_values(self, X: Any, y: Any = None, tree_limit: int | None = None, approximate: bool = False,
                    check_additivity: bool = True, from_call: bool = False, *, dtype: Any = None) -> Any:
        """SHAP values as shap returns them: ``(n, M)`` for one output, ``(n, M, K)`` for K outputs.

        NumPy in, NumPy out; on the GPU backend CuPy in, CuPy out. ``approximate=True`` (Saabas) is not TreeSHAP and
        is left to shap itself. ``dtype=np.float32`` gives the float64 values rounded to float32, computed in row
        chunks and rounded chunk by chunk (on the device for the GPU backend, before the copy to the host); None or
        ``np.float64`` (the default) gives the float64 values; any other dtype raises ValueError.
        """
        if _outputs.custom_output(dtype):
            return _outputs.explain_as(self, X, y, interactions=False, tree_limit=tree_limit,
                                       check_additivity=check_additivity, approximate=approximate,
                                       from_call=from_call, dtype=dtype)
        if approximate:
            return _ShapTreeExplainer.shap_values(self, X, y, tree_limit, True, check_additivity, from_call)
        if is_spark_dataframe(X):  # a Spark DataFrame of values (shap_ext._spark); y names a label column
            return spark_shap_values(self, X, y, tree_limit=tree_limit, check_additivity=check_additivity)
        if self.route == "catboost-native":
            return self._catboost_native(X, tree_limit, check_additivity, interactions=False)
        if is_dask_collection(X):
            return dask_shap_values(self, X, y, tree_limit=tree_limit, check_additivity=check_additivity)
        Xm, flat, backend = self._prepare(X)
        tl = self._tree_limit(tree_limit)
        if Xm.shape[0] == 0:
            return self._empty(Xm, interactions=False)
        paths = self._paths(Xm.shape[1])
        engine_tl = None if tl >= self.model.values.shape[0] else tl
        if self.feature_perturbation == "tree_path_dependent":
            if not self.model.fully_defined_weighting and self.data is not None:  # covers came from `data`
                raise ExplainerError(
                    "The background dataset you provided does not cover all the leaves in the model, so "
                    "TreeExplainer cannot run with the feature_perturbation=\"tree_path_dependent\" option! Try "
                    "providing a larger background dataset, no background dataset, or using "
                    "feature_perturbation=\"interventional\"."
                )
            phi = _engine().shap_values(paths, Xm, backend=backend, tree_limit=engine_tl, progress=self.progress)
        else:
            y_arr = self._labels(y, Xm)
            transform = self.model.get_transform()
            bg = self._background_arg(transform)
            phi = _engine().interventional_shap_values(
                paths, Xm, bg, transform=transform, y=y_arr, backend=backend, tree_limit=engine_tl,
                progress=self.progress, weights=None if bg is not self._background else self.background_weights,
            )
        self._limit_expected_value(phi[0, -1, :], tl)
        out = self._format(phi, flat)
        if check_additivity and self.model.model_output == "raw":
            self._check_additivity(out, Xm, flat, tl, X)
        return self._in_frame_order(out, X, flat, interactions=False)

    def _limit_expected_value(self, bias: Any, tree_limit: int) -> None:
        """The expected value of the trees explained: with ``tree_limit`` below the model's trees, the bias of those
        trees (as shap reports it through XGBoost's ``iteration_range`` / LightGBM's ``num_iteration``)."""
        if self.model.model_output != "raw" or not hasattr(self, "_full_expected_value"):
            return
        if tree_limit >= self.model.values.shape[0]:
            self.expected_value = self._full_expected_value
            return
        bias = to_numpy(bias).reshape(-1)
        self.expected_value = bias[0] if len(bias) == 1 else [bias[i] for i in range(len(bias))]

    def _empty(self, Xm: Any, interactions: bool) -> Any:
        """Values of zero rows (shap returns an empty array for them): ``(0, M[, M])`` plus the output axis."""
        M = Xm.shape[1]
        shape: tuple[int, ...] = (0, M, M) if interactions else (0, M)
        if self.model.num_outputs > 1:
            shape += (self.model.num_outputs,)
        elif self.model.model_output == "probability_doubled" and not interactions:
            shape += (2,)
        return array_module(Xm).zeros(shape)

    def _in_frame_order(self, out: Any, X: Any, flat: bool, interactions: bool) -> Any:
        """Values in the frame's column order where the library reads a frame by name (CatBoost)."""
        columns = native_columns(X)
        order = self._reader.output_order(X if columns is None else pd.DataFrame(columns=columns))
        if order is None:
            return out
        axis = 0 if flat else 1
        out = out.take(order, axis=axis)
        return out.take(order, axis=axis + 1) if interactions else out

    def _labels(self, y: Any, Xm: Any) -> Any:
        if self.model.model_output != "log_loss":
            return None
        if y is None:
            raise ExplainerError('Both samples and labels must be provided when model_output = "log_loss" '
                                 "(i.e. `explainer.shap_values(X, y)`)!")
        y_arr = y if is_cupy_array(y) else np.asarray(y, dtype=np.float64).reshape(-1)
        if y_arr.shape[0] != Xm.shape[0]:
            raise DimensionError(f"The number of labels ({y_arr.shape[0]}) does not match the number of samples to "
                                 f"explain ({Xm.shape[0]})!")
        if is_cupy_array(Xm) and not is_cupy_array(y_arr):
            y_arr = array_module(Xm).asarray(y_arr)
        return y_arr

    def _format(self, phi: Any, flat: bool) -> Any:
        """shap's ``_get_shap_output`` for (n, M+1, K) phi, NumPy or CuPy, outputs stacked last."""
        K = self.model.num_outputs
        if self.expected_value is None and self.model.model_output != "log_loss":
            bias = to_numpy(phi[0, -1, :])
            self.expected_value = bias[0] if K == 1 else [bias[i] for i in range(K)]
        out = phi[:, :-1, 0] if K == 1 else phi[:, :-1, :]
        if flat:
            out = out[0]
        if self.model.model_output == "probability_doubled":
            out = array_module(out).stack([-out, out], axis=-1)
        return out

    def shap_interaction_values(self, X: Any, y: Any = None, tree_limit: int | None = None, *, dtype: Any = None,
                                interaction_features: Any = None) -> Any:
        """SHAP interaction values as shap returns them: ``(n, M, M)`` or ``(n, M, M, K)``.

        ``interaction_features`` (column indices, or names of a frame's columns or of ``feature_names``) keeps those
        columns: ``(n, m, m[, K])``, the full matrix sliced, computed in row chunks whose full ``(M+1)^2 K`` block
        stays under 256 MiB, so memory follows the subset. ``dtype=np.float32`` rounds the values to float32, chunk
        by chunk (on the device for the GPU backend). See docs/shap_ext.md, "Outputs that fit in memory".
        """
        if _outputs.custom_output(dtype, interaction_features):
            return _outputs.explain_as(self, X, y, interactions=True, tree_limit=tree_limit, dtype=dtype,
                                       interaction_features=interaction_features)
        if is_spark_dataframe(X):  # a Spark DataFrame of interaction values (shap_ext._spark)
            return spark_shap_values(self, X, y, interactions=True, tree_limit=tree_limit)
        if is_dask_collection(X):
            return dask_shap_values(self, X, y, interactions=True, tree_limit=tree_limit)
        if self.model.model_output != "raw":
            raise ValueError('Only model_output = "raw" is supported for SHAP interaction values right now!')
        if self.route == "catboost-native":
            return self._catboost_native(X, tree_limit, False, interactions=True)
        Xm, flat, backend = self._prepare(X)
        tl = self._tree_limit(tree_limit)
        if Xm.shape[0] == 0:
            return self._empty(Xm, interactions=True)
        engine_tl = None if tl >= self.model.values.shape[0] else tl
        if self.feature_perturbation == "tree_path_dependent":
            phi = _engine().interaction_values(self._paths(Xm.shape[1]), Xm, backend=backend, tree_limit=engine_tl,
                                               progress=self.progress)
        else:
            # interventional interactions (shap has none): shap's definition applied to the game
            # S -> E_z f(x_S, z_rest); see interventional_interaction_values
            bg = self._background_arg()
            phi = _engine().interventional_interaction_values(
                self._paths(Xm.shape[1]), Xm, bg, backend=backend,
                weights=None if bg is not self._background else self.background_weights,
                tree_limit=engine_tl, progress=self.progress)
        K = self.model.num_outputs
        if K == 1:
            if self.expected_value is None:
                self.expected_value = to_numpy(phi[0, -1, -1, 0])[()]
            out = phi[:, :-1, :-1, 0]
        else:
            bias = to_numpy(phi[0, -1, -1, :])
            self.expected_value = [bias[i] for i in range(K)]
            out = phi[:, :-1, :-1, :]
        self._limit_expected_value(phi[0, -1, -1, :], tl)
        return self._in_frame_order(out[0] if flat else out, X, flat, interactions=True)

    def global_shap_values(self, X: Any, y: Any = None, *, tree_limit: int | None = None,
                           check_additivity: bool = True, chunk_bytes: int | None = None) -> shap.Explanation:
        """Mean |SHAP value| per feature over all rows of X, in one pass that never holds the ``(n, M)`` values.

        Parameters
        ----------
        X : array-like, DataFrame, Dask collection or iterator of blocks
            The rows: a NumPy/CuPy array, a pandas/polars DataFrame or pyarrow Table, a Dask array or DataFrame
            (partial sums per partition, added in partition order), or an iterator of such blocks (consumed once).
        y : array-like, optional
            Labels, for ``model_output="log_loss"`` (an iterator of label blocks alongside an iterator X).
        tree_limit : int, optional
            As in :meth:`shap_values`.
        check_additivity : bool, default True
            As in :meth:`shap_values`, per chunk.
        chunk_bytes : int, optional
            The bound on one chunk's float64 values (default 256 MiB).

        Returns
        -------
        shap.Explanation
            ``values`` (M,) or (M, K): mean |SHAP| per feature (float64 sums, divided by the row count), with
            ``feature_names`` and ``base_values`` (the expected value); ``n_rows`` holds the row count. It is
            ``explainer(X).abs.mean(0)``, for ``shap.plots.bar``.

        See Also
        --------
        shap.Explanation.abs : ``explainer(X).abs.mean(0)`` gives the same values from the full ``(n, M)`` array.
        global_interaction_values : the mean |interaction| matrix and its top pairs.

        Examples
        --------
        >>> import numpy as np, xgboost
        >>> from hitml.shap_ext import TreeExplainer
        >>> X = np.random.default_rng(0).normal(size=(500, 4))
        >>> model = xgboost.XGBRegressor(n_estimators=10, max_depth=3).fit(X, X[:, 0] * X[:, 1])
        >>> explainer = TreeExplainer(model, backend="cpu")
        >>> imp = explainer.global_shap_values(X)
        >>> full = np.abs(explainer.shap_values(X)).mean(0)
        >>> imp.values.shape, bool(np.allclose(imp.values, full, rtol=1e-12, atol=0))
        ((4,), True)
        """
        return _outputs.global_summary(self, X, y, interactions=False, tree_limit=tree_limit,
                                       check_additivity=check_additivity, chunk_bytes=chunk_bytes)

    def global_interaction_values(self, X: Any, y: Any = None, *, tree_limit: int | None = None,
                                  top_k: int | None = 10, interaction_features: Any = None,
                                  chunk_bytes: int | None = None) -> shap.Explanation:
        """The mean |SHAP interaction value| matrix over all rows of X and its top pairs, in one pass that never
        holds the ``(n, M, M)`` values.

        Parameters
        ----------
        X : array-like, DataFrame, Dask collection or iterator of blocks
            As in :meth:`global_shap_values`.
        y : array-like, optional
            Unused (interactions explain the raw output); accepted as in :meth:`shap_interaction_values`.
        tree_limit : int, optional
            As in :meth:`shap_values`.
        top_k : int or None, default 10
            How many off-diagonal pairs ``top_interactions`` lists (None: all of them).
        interaction_features : list of int or str, optional
            Keep only these columns (indices, or names of X's columns or of ``feature_names``): an (m, m) matrix.
        chunk_bytes : int, optional
            The bound on one chunk's full float64 interaction block, ``(M+1)^2 K`` doubles a row (default 256 MiB).

        Returns
        -------
        shap.Explanation
            ``values`` (m, m) or (m, m, K): mean |interaction| (main effects on the diagonal; a pair's effect is
            split equally between [i, j] and [j, i]), with ``feature_names``. Attributes: ``top_interactions``, a
            pandas DataFrame of the pairs i < j ranked by ``values[i, j]`` (columns ``feature_i``, ``feature_j``,
            ``mean_abs_interaction``, and ``output`` for K outputs, ranked per output); ``n_rows``, the rows.

        See Also
        --------
        shap_interaction_values : the per-row values (``np.abs(...).mean(0)`` gives the same matrix).
        global_shap_values : mean |SHAP| per feature.

        Examples
        --------
        >>> import numpy as np, xgboost
        >>> from hitml.shap_ext import TreeExplainer
        >>> X = np.random.default_rng(0).normal(size=(500, 4))
        >>> model = xgboost.XGBRegressor(n_estimators=10, max_depth=3).fit(X, X[:, 0] * X[:, 1])
        >>> explainer = TreeExplainer(model, backend="cpu", feature_names=["a", "b", "c", "d"])
        >>> inter = explainer.global_interaction_values(X, top_k=1)
        >>> full = np.abs(explainer.shap_interaction_values(X)).mean(0)
        >>> inter.values.shape, bool(np.allclose(inter.values, full, rtol=1e-12, atol=0))
        ((4, 4), True)
        >>> inter.top_interactions[["feature_i", "feature_j"]].values.tolist()
        [['a', 'b']]
        """
        return _outputs.global_summary(self, X, y, interactions=True, tree_limit=tree_limit, top_k=top_k,
                                       interaction_features=interaction_features, chunk_bytes=chunk_bytes)

    def banzhaf_values(self, X: Any, tree_limit: int | None = None) -> Any:
        """Interventional Banzhaf values, shaped as :meth:`shap_values` returns SHAP values.

        The Banzhaf value of feature i averages, over all 2^(M-1) coalitions S of the other features with equal
        weight, ``v(S + i) - v(S)`` for the interventional game ``v(S) = E_z f(x_S, z_rest)`` (z over the
        background, weighted by ``background_weights``), on the raw margin. Unlike SHAP values they do not sum to
        ``f(x) - E f(z)``. Same cost as :meth:`shap_values` (time linear in rows plus background).
        """
        if self.feature_perturbation != "interventional" or (self._background is None
                                                              and getattr(self, "background_summary", None) is None):
            raise NotImplementedError("banzhaf_values needs background data (feature_perturbation='interventional')")
        if self.model.model_output != "raw":
            raise ValueError('Only model_output = "raw" is supported for Banzhaf values')
        if self.route == "catboost-native":
            raise NotImplementedError("banzhaf_values for CatBoost models read by CatBoost itself (categorical "
                                      "features)")
        if is_dask_collection(X):
            return dask_shap_values(self, X, banzhaf=True, tree_limit=tree_limit)
        Xm, flat, backend = self._prepare(X)
        tl = self._tree_limit(tree_limit)
        engine_tl = None if tl >= self.model.values.shape[0] else tl
        bg = self._background_arg()
        phi = _engine().interventional_banzhaf_values(self._paths(Xm.shape[1]), Xm, bg, backend=backend,
                                                      weights=None if bg is not self._background
                                                      else self.background_weights,
                                                      tree_limit=engine_tl, progress=self.progress)
        return self._format(phi, flat)

    def __call__(self, X: Any, y: Any = None, interactions: bool = False, check_additivity: bool = True,
                 approximate: bool = False) -> shap.Explanation:
        """``shap.Explanation`` (host arrays; CuPy rows are computed on the GPU and copied back)."""
        if is_dask_collection(X):
            raise TypeError("explainer(X) on a Dask collection is not supported; use explainer.shap_values(X), "
                            "which returns a lazy dask array")
        if is_cupy_array(X):
            X = to_numpy(X)
        columns = check_native(X, self._reader)  # a polars DataFrame or pyarrow Table the model's library takes
        out = super().__call__(X, y=y, interactions=interactions, check_additivity=check_additivity,
                               approximate=approximate)
        if columns is not None:  # shap names the columns of a pandas frame only; its rows as X holds them
            out.feature_names = columns
            out.data = native_rows(X)
        return out


class GPUTreeExplainer(TreeExplainer):
    """hitml's exact TreeSHAP on the GPU; shap resolves ``shap.GPUTreeExplainer`` to it through the
    ``shap.tree_backends`` entry point ``hitml``. ``backend`` defaults to "gpu" (use "auto" to fall back).

    Parameters are those of :class:`TreeExplainer`.

    See Also
    --------
    shap.GPUTreeExplainer : the name shap gives it (no import of hitml needed).
    TreeExplainer : the same with ``backend="auto"`` by default.

    Examples
    --------
    >>> import numpy as np, shap, xgboost
    >>> X = np.random.default_rng(0).normal(size=(100, 3))
    >>> model = xgboost.XGBRegressor(n_estimators=3, max_depth=2).fit(X, X[:, 0])
    >>> explainer = shap.GPUTreeExplainer(model, backend="auto")   # "gpu" (the default) needs a device
    >>> explainer.shap_values(X[:2]).shape
    (2, 3)
    """

    def __init__(self, model: Any, data: Any = None, model_output: str = "raw", feature_perturbation: str = "auto",
                 feature_names: list[str] | None = None, approximate: Any = DEPRECATED_APPROX, link: Any = None,
                 linearize_link: Any = None, *, backend: str | None = "gpu", progress: bool | None = None,
                 background_weights: Any = None) -> None:
        super().__init__(model, data, model_output, feature_perturbation, feature_names, approximate, link,
                         linearize_link, backend=backend, progress=progress, background_weights=background_weights)

