"""What each kernel family declares about its Numba kernels, for the layers above and below it to read.

The families sit between two layers that must not import them: the shipped cache entries (``_aot``) and background
compiles (``_background``) below, the build and warm-up tools (``_aot_build``, ``_warmup``: ``python -m
hitml.kernels aot|warmup``) above. A family calls, at import, next to its kernels:

- :func:`register_warmup` for each warm-up group: a function whose calls compile the group's kernels (tiny inputs
  with the argument types of every real call);
- :func:`register_shipped` for a module whose kernels' Numba cache entries ship with hitml: the warm-up groups that
  compile them.

The tools import the families and read :func:`warmups` / :func:`shipped_modules`. This module imports nothing of
hitml.
"""
from __future__ import annotations

from collections.abc import Callable

__all__ = ["register_shipped", "register_warmup", "shipped_modules", "warmups"]

_warmups: dict[str, Callable[[], None]] = {}
_shipped: dict[str, tuple[str, ...]] = {}


def register_warmup(group: str, fn: Callable[[], None]) -> Callable[[], None]:
    """Declare ``fn`` as the warm-up of ``group``: calling it compiles (or loads from Numba's cache) the group's
    kernels. Returns ``fn`` (usable as a decorator's body)."""
    _warmups[group] = fn
    return fn


def warmups() -> dict[str, Callable[[], None]]:
    """``{group: warm-up}`` of the families imported so far, in the order they were declared."""
    return dict(_warmups)


def register_shipped(module: str, groups: tuple[str, ...]) -> None:
    """Declare that the Numba cache entries of the kernels of ``module`` (its ``__name__``) ship with hitml, built
    by running the warm-up ``groups``."""
    _shipped[module] = tuple(groups)


def shipped_modules() -> dict[str, tuple[str, ...]]:
    """``{module: warm-up groups}`` of the modules with shipped entries declared so far."""
    return dict(_shipped)
