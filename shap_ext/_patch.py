"""The ``backend=`` hook on ``shap.TreeExplainer`` and ``shap.Explainer`` (installed by ``import shap_ext``)."""
from __future__ import annotations

from typing import Any

import shap

from hitml.kernels.device import BACKENDS

from ._explainer import _DEFAULT, TreeExplainer

__all__ = ["disable", "enable", "install", "uninstall"]

_ShapTree = shap.explainers.TreeExplainer
_ShapExplainer = shap.Explainer
_MARK = "_hitml_patch"


def _wants_ours(kwargs: dict[str, Any]) -> bool:
    return "backend" in kwargs or _DEFAULT["backend"] is not None


def _tree_new(cls, *args: Any, **kwargs: Any):
    """``shap.TreeExplainer(..., backend=...)`` builds a ``shap_ext.TreeExplainer``; Python then runs its __init__."""
    if cls is _ShapTree and _wants_ours(kwargs):
        return object.__new__(TreeExplainer)
    return object.__new__(cls)


class _ViaExplainer(TreeExplainer):
    """Takes ``shap.Explainer``'s arguments and hands them to ``shap_ext.TreeExplainer``."""

    def __init__(self, model: Any, masker: Any = None, link: Any = None, algorithm: str = "auto",
                 output_names: Any = None, feature_names: Any = None, linearize_link: Any = True, seed: Any = None,
                 backend: str | None = None, **kwargs: Any) -> None:
        self.__class__ = TreeExplainer
        TreeExplainer.__init__(self, model, masker, feature_names=feature_names, backend=backend, **kwargs)


def _explainer_new(cls, *args: Any, **kwargs: Any):
    """``shap.Explainer(model, algorithm="tree"|"auto", backend=...)`` on a tree model builds ours."""
    if cls is _ShapExplainer and _wants_ours(kwargs):
        algorithm = kwargs.get("algorithm", args[3] if len(args) > 3 else "auto")
        model = kwargs.get("model", args[0] if args else None)
        masker = kwargs.get("masker", args[1] if len(args) > 1 else None)
        if algorithm == "tree" or (algorithm == "auto" and _is_tree_model(model, masker)):
            return object.__new__(_ViaExplainer)
    return object.__new__(cls)


def _is_tree_model(model: Any, masker: Any) -> bool:
    if isinstance(model, shap.explainers._tree.TreeEnsemble):
        return True
    try:  # shap's own test: linear models win first in shap.Explainer's "auto" choice
        if shap.explainers.LinearExplainer.supports_model_with_masker(model, masker):
            return False
    except Exception:  # noqa: BLE001 - a probe of a foreign model may raise anything; shap decides below
        pass
    return bool(_ShapTree.supports_model_with_masker(model, masker))


def install() -> None:
    """Install the hook (idempotent). With no ``backend`` passed and no :func:`enable`, shap is unchanged."""
    if not getattr(_ShapTree.__dict__.get("__new__"), _MARK, False):
        fn = staticmethod(_tree_new)
        setattr(_tree_new, _MARK, True)
        _ShapTree.__new__ = fn
    if not getattr(_ShapExplainer.__dict__.get("__new__"), _MARK, False):
        setattr(_explainer_new, _MARK, True)
        _ShapExplainer.__new__ = staticmethod(_explainer_new)


def uninstall() -> None:
    """Remove the hook: ``shap.TreeExplainer`` and ``shap.Explainer`` go back to ``object.__new__``."""
    for cls in (_ShapTree, _ShapExplainer):
        if getattr(cls.__dict__.get("__new__"), _MARK, False):
            del cls.__new__
    _DEFAULT["backend"] = None


def enable(backend: str = "auto") -> None:
    """Make every ``shap.TreeExplainer(...)`` (and ``shap.Explainer`` on a tree model) use hitml with ``backend``,
    even where the caller passes no ``backend`` (what ``python -m shap_ext`` does)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    install()
    _DEFAULT["backend"] = backend


def disable() -> None:
    """Undo :func:`enable`: only calls passing ``backend=`` use hitml again."""
    _DEFAULT["backend"] = None
