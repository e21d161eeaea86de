"""What each kernel family declares about its Numba kernels, for the layers above and below it to read.

The families sit between two layers that must not import them: the runtime dispatch (``_aot``: a compiled copy or
the Numba kernel) and background compiles (``_background``) below, the build and warm-up tools (``_aot_build``,
``_warmup``: ``python -m hitml.kernels aot|warmup``) above. A family calls, at import, next to its kernels:

- :func:`register_warmup` for each warm-up group: a function whose calls compile the group's kernels (tiny inputs
  with the argument types of every real call);
- :func:`register_copies` for a module whose kernels have compiled copies: the warm-up groups that compile them.

The tools import the families and read :func:`warmups` / :func:`copy_modules`; the dispatch reads
:func:`copy_groups` when a copy runs and tells the background layer through :func:`copy_ran`. This module imports
nothing of hitml.
"""
from __future__ import annotations

from collections.abc import Callable

__all__ = ["copy_groups", "copy_modules", "copy_ran", "on_copy_ran", "register_copies", "register_warmup", "warmups"]

_warmups: dict[str, Callable[[], None]] = {}
_copies: dict[str, tuple[str, ...]] = {}
_on_copy_ran: list[Callable[[tuple[str, ...]], object]] = []


def register_warmup(group: str, fn: Callable[[], None]) -> Callable[[], None]:
    """Declare ``fn`` as the warm-up of ``group``: calling it compiles (or loads from Numba's cache) the group's
    kernels. Returns ``fn`` (usable as a decorator's body)."""
    _warmups[group] = fn
    return fn


def warmups() -> dict[str, Callable[[], None]]:
    """``{group: warm-up}`` of the families imported so far, in the order they were declared."""
    return dict(_warmups)


def register_copies(module: str, groups: tuple[str, ...]) -> None:
    """Declare that the kernels of ``module`` (its ``__name__``) have compiled copies, built by running the warm-up
    ``groups``; a process that runs one of those copies compiles these groups' Numba kernels behind it."""
    _copies[module] = tuple(groups)


def copy_modules() -> dict[str, tuple[str, ...]]:
    """``{module: warm-up groups}`` of the modules with compiled copies declared so far."""
    return dict(_copies)


def copy_groups(module: str) -> tuple[str, ...]:
    """The warm-up groups that compile the Numba kernels of ``module``; for a module that declared none, every
    declared group (all the kernels that have copies)."""
    if module in _copies:
        return _copies[module]
    return tuple(dict.fromkeys(g for groups in _copies.values() for g in groups))


def on_copy_ran(callback: Callable[[tuple[str, ...]], object]) -> None:
    """Install the background layer's ``callback(groups)``, called when a compiled copy runs in place of a Numba
    kernel that is not compiled yet (it arranges for those groups to be compiled for later processes)."""
    _on_copy_ran[:] = [callback]


def copy_ran(groups: tuple[str, ...]) -> None:
    """Called by the dispatch when it ran a compiled copy of a kernel of ``groups``: passes them to the installed
    callback (none installed: nothing is compiled behind)."""
    for callback in _on_copy_ran:
        callback(groups)
