"""``shap_ext.TreeExplainer``: shap's TreeExplainer with exact TreeSHAP computed by hitml's engine (CPU or GPU)."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import shap
from shap.explainers._tree import DEPRECATED_APPROX, TreeEnsemble
from shap.utils._exceptions import DimensionError, ExplainerError, InvalidModelError

from hitml.kernels._progress import check_progress
from hitml.kernels.device import is_cupy_array, resolve_backend, to_numpy

from ._categories import categorical_splits
from ._dask import dask_shap_values, is_dask_collection
from ._inputs import encode_frame, model_n_features, to_matrix
from ._catboost import native_expected_value, native_margin, native_values
from ._models import build_ensemble, convert_model
from ._native import library_margin
from ._treelite import TreeliteModel

__all__ = ["GPUTreeExplainer", "TreeExplainer"]

_ShapTreeExplainer = shap.TreeExplainer
_DEFAULT = {"backend": None}  # set by shap_ext.enable(): the backend used when none is passed


def _engine():
    import hitml.kernels.treeshap as engine  # noqa: PLC0415 - the engine compiles numba code; load on first use

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


class TreeExplainer(_ShapTreeExplainer):
    """Exact TreeSHAP for tree ensembles with shap's TreeExplainer API, computed by hitml's engine.

    Arguments are shap's (``model``, ``data``, ``model_output``, ``feature_perturbation``, ``feature_names``, ...) plus
    ``backend`` ("cpu", "gpu" or "auto"; None means the default set by :func:`shap_ext.enable`, else "auto") and
    ``progress`` (a tqdm bar for long runs; None follows ``HITML_PROGRESS``). shap parses the model into its
    ``TreeEnsemble``; the dense arrays (and categorical split sets, which shap cannot evaluate for XGBoost) are
    turned into root-to-leaf paths once, here. ``shap_values``, ``shap_interaction_values`` and ``explainer(X)``
    never short-circuit to XGBoost/LightGBM/CatBoost native contributions: the engine computes every value.
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
        if isinstance(data, pd.DataFrame):
            if feature_names is None:
                feature_names = list(data.columns)
            data = encode_frame(data, "background data")
        elif data is not None and not isinstance(data, (shap.maskers.Independent,)) and not hasattr(data, "data"):
            data, _ = to_matrix(data, None, np.dtype(np.float64), "background data")
        if isinstance(converted, TreeliteModel):
            _check_treelite(converted, data, model_output)
        if data is not None and np.ndim(getattr(data, "data", data)) == 2:
            n_model, exact = model_n_features(converted if converted is not None else user_model, None)
            n_data = np.shape(getattr(data, "data", data))[1]
            if exact and n_data != n_model:
                raise ValueError(f"background data has {n_data} features, but the model was trained on {n_model}")
        ens = build_ensemble(model, user_model, converted, data, model_output)
        super().__init__(ens, data, model_output, feature_perturbation, feature_names, approximate, link,
                         linearize_link)
        if self.route == "catboost-native":
            self.n_features = len(user_model.feature_names_)
            self.expected_value = native_expected_value(user_model)
            return
        if getattr(ens, "trees", None) is None or not hasattr(ens, "children_left"):
            raise InvalidModelError(
                f"hitml TreeExplainer: shap could not parse the trees of {type(user_model).__qualname__} into a "
                "TreeEnsemble (it would fall back to the library's native SHAP); the hitml backend needs the trees"
            )
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
        if self.data is not None:
            bg = np.asarray(self.data, dtype=np.float64)
            if getattr(ens, "_row_dtype", None) is not None:
                bg = bg.astype(ens._row_dtype).astype(np.float64)
            self._background = np.ascontiguousarray(bg.astype(ens.input_dtype))

    def _paths(self, n_features: int):
        """The PathSet for inputs of ``n_features`` columns (built once; a wider X only when M was a lower bound)."""
        if n_features not in self._paths_cache:
            ens = self.model
            cl, cr = self._cats.children(ens.children_left, ens.children_right)
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
        arr, flat = to_matrix(X, width, np.dtype(self.model.input_dtype))
        if getattr(self.model, "_row_dtype", None) is not None and arr.dtype != self.model._row_dtype:
            arr = arr.astype(self.model._row_dtype).astype(arr.dtype)  # rounded as the library rounds rows
        if not self._n_features_exact and arr.shape[1] < self.n_features:
            raise ValueError(f"X has {arr.shape[1]} features, but the trees split on feature index "
                             f"{self.n_features - 1}")
        missing = getattr(self.model, "_xgb_dmatrix_props", {}).get("missing")
        if missing is not None and not np.isnan(missing):
            arr = arr.copy()
            arr[arr == missing] = np.nan  # XGBoost treats its `missing` value as NaN
        return arr, flat, backend

    def _model_margin(self, X: np.ndarray, tree_limit: int) -> np.ndarray:
        """The model library's own raw prediction on host rows (shap's C predictor only where none is known)."""
        ens = self.model
        margin = library_margin(getattr(ens, "_library_model", None), ens, X, tree_limit)
        return TreeEnsemble.predict(ens, X, tree_limit=tree_limit) if margin is None else margin

    def _check_additivity(self, out: Any, X: Any, flat: bool, tree_limit: int) -> None:
        """shap's additivity check (ExplainerError) against the model's raw margin, on host copies."""
        out_h = to_numpy(out)
        if flat:
            out_h = out_h[None]
        self._assert_sums_to(out_h, np.asarray(self._model_margin(to_numpy(X), tree_limit)),
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
        flat = isinstance(X, pd.Series) or (isinstance(X, (list, np.ndarray)) and np.ndim(X) == 1)
        if flat:
            X = pd.DataFrame([list(X)], columns=list(model.feature_names_))
        phi = native_values(model, X, interactions)
        if interactions:
            out = phi[:, :-1, :-1, 0] if phi.shape[-1] == 1 else phi[:, :-1, :-1, :]
            return out[0] if flat else out
        out = phi[:, :-1, 0] if phi.shape[-1] == 1 else phi[:, :-1, :]
        if check_additivity and self.model.model_output == "raw":
            self._assert_sums_to(out, np.asarray(native_margin(model, X)), phi.shape[-1] > 1)
        return out[0] if flat else out

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
                tree_limit=engine_tl, progress=self.progress,
            )
        out = self._format(phi, flat)
        if check_additivity and self.model.model_output == "raw":
            self._check_additivity(out, Xm, flat, tl)
        return out

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
            import cupy  # noqa: PLC0415

            y_arr = cupy.asarray(y_arr)
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
            xp = np if not is_cupy_array(out) else __import__("cupy")
            out = xp.stack([-out, out], axis=-1)
        return out

    def shap_interaction_values(self, X: Any, y: Any = None, tree_limit: int | None = None) -> Any:
        """SHAP interaction values as shap returns them: ``(n, M, M)`` or ``(n, M, M, K)``."""
        if is_dask_collection(X):
            return dask_shap_values(self, X, y, interactions=True, tree_limit=tree_limit)
        if self.model.model_output != "raw":
            raise ValueError('Only model_output = "raw" is supported for SHAP interaction values right now!')
        if self.route == "catboost-native":
            return self._catboost_native(X, tree_limit, False, interactions=True)
        if self.feature_perturbation != "tree_path_dependent":
            raise NotImplementedError(
                "SHAP interaction values are computed with feature_perturbation='tree_path_dependent' only "
                "(create the explainer without background data)"
            )
        Xm, flat, backend = self._prepare(X)
        tl = self._tree_limit(tree_limit)
        engine_tl = None if tl >= self.model.values.shape[0] else tl
        phi = _engine().interaction_values(self._paths(Xm.shape[1]), Xm, backend=backend, tree_limit=engine_tl,
                                           progress=self.progress)
        K = self.model.num_outputs
        if K == 1:
            if self.expected_value is None:
                self.expected_value = to_numpy(phi[0, -1, -1, 0])[()]
            out = phi[:, :-1, :-1, 0]
        else:
            bias = to_numpy(phi[0, -1, -1, :])
            self.expected_value = [bias[i] for i in range(K)]
            out = phi[:, :-1, :-1, :]
        return out[0] if flat else out

    def __call__(self, X: Any, y: Any = None, interactions: bool = False, check_additivity: bool = True,
                 approximate: bool = False) -> shap.Explanation:
        """``shap.Explanation`` (host arrays; CuPy rows are computed on the GPU and copied back)."""
        if is_dask_collection(X):
            raise TypeError("explainer(X) on a Dask collection is not supported; use explainer.shap_values(X), "
                            "which returns a lazy dask array")
        if is_cupy_array(X):
            X = to_numpy(X)
        return super().__call__(X, y=y, interactions=interactions, check_additivity=check_additivity,
                                approximate=approximate)


class GPUTreeExplainer(TreeExplainer):
    """hitml's exact TreeSHAP on the GPU; shap resolves ``shap.GPUTreeExplainer`` to it through the
    ``shap.tree_backends`` entry point ``hitml``. ``backend`` defaults to "gpu" (use "auto" to fall back)."""

    def __init__(self, model: Any, data: Any = None, model_output: str = "raw", feature_perturbation: str = "auto",
                 feature_names: list[str] | None = None, approximate: Any = DEPRECATED_APPROX, link: Any = None,
                 linearize_link: Any = None, *, backend: str | None = "gpu", progress: bool | None = None) -> None:
        super().__init__(model, data, model_output, feature_perturbation, feature_names, approximate, link,
                         linearize_link, backend=backend, progress=progress)

