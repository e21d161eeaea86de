"""``shap_ext.TreeExplainer``: shap's TreeExplainer with exact TreeSHAP computed by hitml's engine (CPU or GPU)."""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd
import shap

from hitml.kernels._progress import check_progress
from hitml.kernels.device import array_module, is_cupy_array, resolve_backend, to_numpy

from ._categories import categorical_splits
from ._compat import DEPRECATED_APPROX, DimensionError, ExplainerError, InvalidModelError, TreeEnsemble
from ._dask import dask_shap_values, is_dask_collection
from ._inputs import (InputReader, _exact_astype, check_native, model_n_features, native_columns, native_rows,
                      to_matrix)
from ._catboost import native_expected_value, native_margin, native_values, symmetric_trees, warn_not_additive
from ._models import build_ensemble, convert_model
from ._native import frame_margin, library_margin
from ._treelite import TreeliteModel

__all__ = ["GPUTreeExplainer", "TreeExplainer"]

_ShapTreeExplainer = shap.TreeExplainer
_DEFAULT = {"backend": None}  # set by shap_ext.enable(): the backend used when none is passed


def _engine():
    import hitml.kernels.treeshap as engine  # the engine compiles numba code; load on first use

    return engine


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


def _warn_large_background(n: int, model_output: str) -> None:
    if model_output in ("probability", "log_loss"):
        advice = (f"model_output={model_output!r} does not decompose over the background, so the time grows with "
                  "rows x background rows. Consider shap.sample(data, 100) to create a smaller background data set.")
    else:
        advice = ("hitml's engine costs time linear in rows plus background here, so keeping the whole background "
                  "costs little and avoids the sampling noise of shap.sample; this warning is kept because shap "
                  "gives it (silence: warnings.simplefilter('ignore', hitml.shap_ext.LargeBackgroundWarning)).")
    warnings.warn(f"Passing {n} background samples may lead to slow runtimes in shap's own TreeExplainer; {advice}",
                  LargeBackgroundWarning, stacklevel=3)


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
        self._reader.zero_features = getattr(ens, "_lgb_zero_features", None)
        self._reader.cat_features = getattr(ens, "_cat_features", None)
        self._reader.lowest_features = getattr(ens, "_lowest_features", None)
        self._reader.lowest_move = getattr(ens, "_lowest_move", (0.0, 0.0))
        self._setup_engine(converted if converted is not None else user_model)

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
        if self.data is not None:
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
                    check_additivity: bool = True, from_call: bool = False) -> Any:
        """SHAP values as shap returns them: ``(n, M)`` for one output, ``(n, M, K)`` for K outputs.

        NumPy in, NumPy out; on the GPU backend CuPy in, CuPy out. ``approximate=True`` (Saabas) is not TreeSHAP and
        is left to shap itself.
        """
        if approximate:
            return _ShapTreeExplainer.shap_values(self, X, y, tree_limit, True, check_additivity, from_call)
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
            phi = _engine().interventional_shap_values(
                paths, Xm, self._background, transform=self.model.get_transform(), y=y_arr, backend=backend,
                tree_limit=engine_tl, progress=self.progress, weights=self.background_weights,
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

    def shap_interaction_values(self, X: Any, y: Any = None, tree_limit: int | None = None) -> Any:
        """SHAP interaction values as shap returns them: ``(n, M, M)`` or ``(n, M, M, K)``."""
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
            phi = _engine().interventional_interaction_values(
                self._paths(Xm.shape[1]), Xm, self._background, backend=backend, weights=self.background_weights,
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

    def banzhaf_values(self, X: Any, tree_limit: int | None = None) -> Any:
        """Interventional Banzhaf values, shaped as :meth:`shap_values` returns SHAP values.

        The Banzhaf value of feature i averages, over all 2^(M-1) coalitions S of the other features with equal
        weight, ``v(S + i) - v(S)`` for the interventional game ``v(S) = E_z f(x_S, z_rest)`` (z over the
        background, weighted by ``background_weights``), on the raw margin. Unlike SHAP values they do not sum to
        ``f(x) - E f(z)``. Same cost as :meth:`shap_values` (time linear in rows plus background).
        """
        if self.feature_perturbation != "interventional" or self._background is None:
            raise NotImplementedError("banzhaf_values needs background data (feature_perturbation='interventional')")
        if self.model.model_output != "raw":
            raise ValueError('Only model_output = "raw" is supported for Banzhaf values')
        if self.route == "catboost-native" or is_dask_collection(X):
            raise NotImplementedError("banzhaf_values for CatBoost categorical models or Dask collections")
        Xm, flat, backend = self._prepare(X)
        tl = self._tree_limit(tree_limit)
        engine_tl = None if tl >= self.model.values.shape[0] else tl
        phi = _engine().interventional_banzhaf_values(self._paths(Xm.shape[1]), Xm, self._background,
                                                      backend=backend, weights=self.background_weights,
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

