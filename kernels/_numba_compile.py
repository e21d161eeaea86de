"""A faster, equivalent copy propagation for Numba's front end while Numba compiles a hitml kernel.

Numba's ``ir_utils.copy_propagate`` solves a data-flow problem over the blocks of a function (which copies
``a = b`` reach each block) and takes a snapshot of its state with ``copy.deepcopy`` on every iteration: a
dict of sets of ``(name, name)`` string tuples, rebuilt tuple by tuple. The parfor passes call it several times
per kernel (``simplify``, and once per parfor and nested loop body), and hitml's kernels, with their helpers
pasted in (``inline="always"``), have thousands of copies over hundreds of blocks; the snapshots alone took
about a seventh of the first compile of the three TreeSHAP groups. The elements are immutable (strings and
tuples of strings), so a snapshot of each set (``set(v)``) compares equal exactly when the deep copy does: the
iteration, its result and hence the compiled code are the same.

The replacement is installed only while Numba compiles a function of hitml (``numba:compile`` events of hitml
dispatchers, which Numba raises under its global compiler lock, so no other thread compiles meanwhile) and only
for a Numba whose ``copy_propagate`` is the one this module was written against (its source's hash); any other
Numba keeps its own.
"""
from __future__ import annotations

import hashlib
import inspect

# SHA-256 of numba.core.ir_utils.copy_propagate's source in the Numba versions whose function this one replaces
_KNOWN = {"b607f90ff29db1cef4a6ca4f00481dd308f300e829154053daea3d3066305b62"}  # 0.68.1
_state = {"depth": 0, "original": None, "known": None}


def _source_hash(fn) -> str:
    try:
        src = inspect.getsource(fn)
    except (OSError, TypeError):
        return ""
    return hashlib.sha256(src.encode()).hexdigest()


def copy_propagate(blocks, typemap):
    """``numba.core.ir_utils.copy_propagate`` with a shallow snapshot of the state (see the module docstring)."""
    from numba.core.ir_utils import compute_cfg_from_blocks, init_copy_propagate_data

    cfg = compute_cfg_from_blocks(blocks)
    entry = cfg.entry_point()
    gen_copies, _all, kill_copies, in_copies, out_copies = init_copy_propagate_data(blocks, entry, typemap)
    old_point = None
    new_point = {label: set(c) for label, c in out_copies.items()}
    while old_point != new_point:
        for label in blocks.keys():
            if label == entry:
                continue
            predecs = [i for i, _d in cfg.predecessors(label)]
            in_copies[label] = out_copies[predecs[0]].copy()
            for p in predecs:
                in_copies[label] &= out_copies[p]
            out_copies[label] = gen_copies[label] | (in_copies[label] - kill_copies[label])
        old_point = new_point
        new_point = {label: set(c) for label, c in out_copies.items()}
    return in_copies, out_copies


def _modules():
    """The modules that call ``copy_propagate`` by a name of their own (the parfor passes import it)."""
    from numba.core import ir_utils
    from numba.parfors import parfor

    return ir_utils, parfor


def _swap(to_fast: bool) -> None:
    original = _state["original"]
    fn = copy_propagate if to_fast else original
    for mod in _modules():
        if getattr(mod, "copy_propagate", None) in (original, copy_propagate):
            mod.copy_propagate = fn


def _is_hitml(ev) -> bool:
    disp = ev.data.get("dispatcher") if isinstance(ev.data, dict) else None
    module = getattr(getattr(disp, "py_func", None), "__module__", "") or ""
    return module.startswith("hitml.")


def _known() -> bool:
    """Whether this Numba's ``copy_propagate`` is the one replaced (checked once, at the first hitml compile, so
    that a process that only loads kernels from the cache never reads Numba's source)."""
    if _state["known"] is None:
        from numba.core import ir_utils

        _state["original"] = ir_utils.copy_propagate
        _state["known"] = _source_hash(ir_utils.copy_propagate) in _KNOWN
    return _state["known"]


def install() -> None:
    """Register the ``numba:compile`` listener that swaps the replacement in for the outermost compile of a hitml
    function and Numba's own back in when it ends (also on error); a no-op for an unknown Numba. Called once per
    process, by ``_background.register_compile_notice``."""
    from numba.core import event

    class _Scope(event.Listener):
        def on_start(self, ev):
            if _is_hitml(ev) and _known():
                _state["depth"] += 1
                if _state["depth"] == 1:
                    _swap(True)

        def on_end(self, ev):
            if _is_hitml(ev) and _known():
                _state["depth"] -= 1
                if _state["depth"] == 0:
                    _swap(False)

    event.register("numba:compile", _Scope())
