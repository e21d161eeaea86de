"""The adapters' one export mechanism: a package's public names, each loaded from its private module on first use.

Each adapter's ``__init__.py`` names what it exports and where it lives::

    __all__, __getattr__, __dir__ = lazy_exports(__name__, {"QuantileBinner": ".binner", ...})

``import hitml.<adapter>`` then loads none of the heavy modules (XGBoost's, scikit-learn's, Dask's); ``from
hitml.<adapter> import name``, ``hitml.<adapter>.name``, ``dir()``, ``help()`` and Sphinx's autodoc load what they
touch (PEP 562 module ``__getattr__`` and ``__dir__``). An adapter that must run code at import (``shap_ext``
installs its hook on shap) imports that module itself.
"""
from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[list[str], Callable[[str], object],
                                                                    Callable[[], list[str]]]:
    """``(__all__, __getattr__, __dir__)`` for ``package`` whose public name ``n`` lives in module ``exports[n]``.

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    exports : mapping of str to str
        Public name -> the module that defines it, relative to ``package`` (``".binner"``).

    Returns
    -------
    tuple
        ``__all__`` (the names, sorted), the module ``__getattr__`` (imports the defining module on first use and
        binds the name on the package, so later look-ups skip it) and ``__dir__`` (``__all__``).

    Examples
    --------
    >>> from hitml.kernels._exports import lazy_exports
    >>> names, getattr_, dir_ = lazy_exports("hitml.kernels", {"to_numpy": ".device"})
    >>> names, getattr_("to_numpy").__name__
    (['to_numpy'], 'to_numpy')
    """
    exports = dict(exports)
    names = sorted(exports)

    def __getattr__(name: str) -> object:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name], package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return list(names)

    return names, __getattr__, __dir__
