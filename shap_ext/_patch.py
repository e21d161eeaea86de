"""The ``backend=`` hook on ``shap.TreeExplainer`` and ``shap.Explainer`` (installed by ``import hitml.shap_ext``)."""
from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import shap

from hitml.kernels.device import check_backend

from ._compat import TreeEnsemble
from ._explainer import _DEFAULT, TreeExplainer

__all__ = ["disable", "enable", "install", "uninstall"]

_ShapTree = shap.explainers.TreeExplainer
_ShapExplainer = shap.Explainer
_MARK = "_hitml_patch"

# What help(shap.TreeExplainer) adds while the hook is installed: shap's own docstring stays first and unchanged.
_HOOK_DOC = """

    hitml backend (added by ``import hitml.shap_ext``)
    ---------------------------------------------------
    backend : {"cpu", "gpu", "auto"}, optional
        Passing it builds :class:`hitml.shap_ext.TreeExplainer` (a subclass of this class), which computes exact
        TreeSHAP with hitml's engine: "cpu" (Numba), "gpu" (CUDA through CuPy; ``GPUUnavailableError`` without a
        device) or "auto" (the GPU where CuPy sees one, else the CPU with one ``RuntimeWarning``). Left out, shap's
        own explainer is built, unless :func:`hitml.shap_ext.enable` (or ``python -m hitml.shap_ext``) set a default.
    progress : bool, optional
        With ``backend``: a tqdm progress bar on long runs (None follows the ``HITML_PROGRESS`` environment
        variable; ``HITML_PROGRESS=0`` turns it off).
"""
_SHAP_DOCS: dict[str, str | None] = {}  # shap's own docstrings, put back by uninstall()


_ShapIndependent = shap.maskers.Independent
_SHAP_INDEPENDENT_INIT = _ShapIndependent.__dict__["__init__"]


def _independent_init(self, data: Any, max_samples: int = 100) -> None:
    """shap's ``maskers.Independent.__init__``, except that for a NumPy background it keeps whole (no more rows
    than ``max_samples``) the masking buffer, shap's full copy of the rows (``_masked_data``), is made when first
    read (``_masked_buffer``) instead of up front. Every masking call of shap's overwrites the whole buffer before
    reading it, so the masker gives the same values; a TreeExplainer, which never masks, then costs the background
    no second copy. Other backgrounds (frames, sampled ones) take shap's own path."""
    if type(data) is np.ndarray and data.ndim == 2 and 0 < data.shape[0] <= max_samples:
        _SHAP_INDEPENDENT_INIT(self, data[:1], max_samples=max_samples)
        self.data, self.shape = data, data.shape
        del self._masked_data
        return
    _SHAP_INDEPENDENT_INIT(self, data, max_samples=max_samples)


def _masked_buffer(self, name: str) -> Any:
    """``maskers.Independent.__getattr__``: the masking buffer of a masker built by :func:`_independent_init`, a
    copy of its rows as shap makes it, on first read."""
    if name == "_masked_data" and "data" in self.__dict__:
        self._masked_data = self.data.copy()
        return self._masked_data
    raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


def _masker_state(self) -> dict:
    """``maskers.Independent.__getstate__``: shap's state, the masking buffer included (made now where it was not),
    so that a pickled masker loads in a process without hitml as shap's own."""
    state = dict(self.__dict__)
    if "_masked_data" not in state and "data" in state:
        state["_masked_data"] = self.data.copy()
    return state


def _install_masker() -> None:
    """Put the three methods above on ``shap.maskers.Independent`` (idempotent). ``__getattr__`` and
    ``__getstate__`` stay after :func:`uninstall`: maskers built while the hook was installed still need them."""
    if _ShapIndependent.__dict__.get("__init__") is not _independent_init:
        _independent_init.__doc__ = _SHAP_INDEPENDENT_INIT.__doc__
        _ShapIndependent.__init__ = _independent_init
    _ShapIndependent.__getattr__ = _masked_buffer
    _ShapIndependent.__getstate__ = _masker_state


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
    if isinstance(model, TreeEnsemble):
        return True
    # shap's own test, as shap.Explainer makes it (unguarded; the probe catches a foreign model's parse errors
    # itself): linear models win first in its "auto" choice
    if shap.explainers.LinearExplainer.supports_model_with_masker(model, masker):
        return False
    return bool(_ShapTree.supports_model_with_masker(model, masker))


def _plain_new(owner: type) -> staticmethod:
    """A ``__new__`` for ``owner`` that only allocates, as ``object.__new__`` does, with ``owner.__init__``'s
    signature (``inspect.signature`` of a class reads its own ``__new__`` first)."""

    def __new__(cls, *args: Any, **kwargs: Any):
        return object.__new__(cls)

    __new__.__signature__ = inspect.signature(owner.__init__)
    return staticmethod(__new__)


def _hooked(cls: type) -> bool:
    """Whether ``cls.__new__`` is ours (a staticmethod keeps the marked function in ``__func__``)."""
    new = cls.__dict__.get("__new__")
    return bool(getattr(getattr(new, "__func__", new), _MARK, False))


def _document() -> None:
    """Make ``help(shap.TreeExplainer)`` and ``inspect.signature`` name ``backend=`` and ``progress=``."""
    if "class" in _SHAP_DOCS:
        return
    init = _ShapTree.__dict__["__init__"]
    _SHAP_DOCS["class"], _SHAP_DOCS["init"] = _ShapTree.__doc__, init.__doc__
    ours = inspect.signature(TreeExplainer.__init__)  # shap's parameters, then keyword-only backend and progress
    _tree_new.__signature__ = ours  # a class's signature comes from its own __new__ when it defines one
    init.__signature__ = ours
    _ShapTree.__doc__ = (_SHAP_DOCS["class"] or "") + _HOOK_DOC
    init.__doc__ = (_SHAP_DOCS["init"] or "") + _HOOK_DOC


def _undocument() -> None:
    if "class" not in _SHAP_DOCS:
        return
    init = _ShapTree.__dict__["__init__"]
    _ShapTree.__doc__, init.__doc__ = _SHAP_DOCS.pop("class"), _SHAP_DOCS.pop("init")
    del init.__signature__


def install() -> None:
    """Install the ``backend=`` hook on ``shap.TreeExplainer`` and ``shap.Explainer`` (idempotent).

    ``import hitml.shap_ext`` calls it. With no ``backend`` passed and no :func:`enable`, shap behaves as before;
    ``help(shap.TreeExplainer)`` names the two extra keywords while the hook is installed. It also makes
    ``shap.maskers.Independent`` keep a NumPy background it keeps whole without copying it up front: shap's
    masking buffer (a copy of the rows that every masking call overwrites before reading) is made when first read,
    so shap's explainers give the same values and a TreeExplainer's background is held once.

    See Also
    --------
    uninstall : remove the hook.
    enable : use hitml even where no ``backend`` is passed.

    Examples
    --------
    >>> import inspect, shap
    >>> from hitml import shap_ext
    >>> shap_ext.install()
    >>> "backend" in inspect.signature(shap.TreeExplainer).parameters
    True
    """
    if not _hooked(_ShapTree):
        setattr(_tree_new, _MARK, True)
        _ShapTree.__new__ = staticmethod(_tree_new)
    if not _hooked(_ShapExplainer):
        setattr(_explainer_new, _MARK, True)
        _ShapExplainer.__new__ = staticmethod(_explainer_new)
    _install_masker()
    _document()


def uninstall() -> None:
    """Remove the hook: ``shap.TreeExplainer`` and ``shap.Explainer`` are shap's own again.

    Their ``__new__`` only allocates again (as ``object.__new__``), their docstrings and signatures to shap's, and the default
    set by :func:`enable` is cleared. ``shap.maskers.Independent`` copies its background up front again (maskers
    built before still make their buffer on first read). ``shap.TreeExplainer(model, backend=...)`` then raises shap's ``TypeError``;
    :class:`hitml.shap_ext.TreeExplainer` itself keeps working.

    See Also
    --------
    install : put the hook back.

    Examples
    --------
    >>> import inspect, shap
    >>> from hitml import shap_ext
    >>> shap_ext.uninstall()
    >>> "backend" in inspect.signature(shap.TreeExplainer).parameters
    False
    >>> shap_ext.install()
    """
    _undocument()
    _ShapIndependent.__init__ = _SHAP_INDEPENDENT_INIT
    for cls in (_ShapTree, _ShapExplainer):
        if _hooked(cls):  # `del cls.__new__` would leave CPython's slot refusing the constructor's arguments
            cls.__new__ = _plain_new(cls)
    _DEFAULT["backend"] = None


def enable(backend: str = "auto") -> None:
    """Make every ``shap.TreeExplainer(...)`` use hitml, even where the caller passes no ``backend``.

    ``shap.Explainer`` on a tree model too. This is what ``python -m hitml.shap_ext script.py`` does before it runs
    the script.

    Parameters
    ----------
    backend : {"auto", "cpu", "gpu"}, default "auto"
        The backend used where a call passes none.

    Raises
    ------
    ValueError
        If ``backend`` is not one of "auto", "cpu", "gpu".

    See Also
    --------
    disable : undo this.
    shap.TreeExplainer : the class whose calls are routed.

    Examples
    --------
    >>> import shap
    >>> from hitml import shap_ext
    >>> shap_ext.enable("cpu")
    >>> shap_ext.disable()
    """
    backend = check_backend(backend)
    install()
    _DEFAULT["backend"] = backend


def disable() -> None:
    """Undo :func:`enable`: only calls passing ``backend=`` use hitml again.

    See Also
    --------
    enable : set a default backend for every ``shap.TreeExplainer``.

    Examples
    --------
    >>> from hitml import shap_ext
    >>> shap_ext.enable("cpu")
    >>> shap_ext.disable()
    """
    _DEFAULT["backend"] = None
