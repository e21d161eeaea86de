"""Numba kernels over work items on a pool of Python threads (kernels/_items.py): every item runs exactly once
whatever the threads and chunks, errors reach the caller, and the TreeSHAP results do not depend on the threads."""
from __future__ import annotations

import numba
import numpy as np
import pytest
from hitml.kernels import _items
from hitml.kernels._items import ItemKernel, borrow, items, run_items
from numba.core.errors import TypingError


@numba.njit(nogil=True)
def _count_items(out, lo, hi):
    out = borrow(out)
    for i in range(lo, hi):
        row = out[i]                 # a view of a borrowed array
        row[0] += 1.0
        row[1] += i


@items("len(out) - skip")
@numba.njit(nogil=True)
def _count_kernel(out, skip, lo, hi):
    for i in range(lo, hi):
        out[i, 0] += 1.0
        out[i, 1] += i


@numba.njit(nogil=True)
def _fails_at(out, bad, lo, hi):
    for i in range(lo, hi):
        if i == bad:
            raise ValueError("bad item")
        out[i] = 1.0


@pytest.mark.parametrize("n", [0, 1, 2, 7, 64, 1001])
@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_every_item_runs_once(n, threads):
    out = np.zeros((n, 2))
    run_items(_count_items, n, (out,), threads=threads)
    expect = np.column_stack([np.ones(n), np.arange(n, dtype=float)])
    np.testing.assert_array_equal(out, expect)


@pytest.mark.parametrize("chunks", [1, 4, 1000])
def test_chunking_does_not_change_the_items(monkeypatch, chunks):
    monkeypatch.setattr(_items, "_CHUNKS_PER_THREAD", chunks)
    out = np.zeros((333, 2))
    _count_kernel(out, 3)            # count: len(out) - skip items
    assert (out[:330, 0] == 1).all() and (out[330:, 0] == 0).all()
    np.testing.assert_array_equal(out[:330, 1], np.arange(330.0))


def test_errors_reach_the_caller():
    out = np.zeros(50)
    with pytest.raises(ValueError, match="bad item"):
        run_items(_fails_at, 50, (out, 37), threads=2)
    run_items(_fails_at, 50, (out, -1), threads=2)      # the pool still works afterwards
    assert (out == 1).all()


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_a_forked_child_gets_its_own_pool():
    import multiprocessing as mp

    out = np.zeros((100, 2))
    run_items(_count_items, 100, (out,), threads=2)      # the parent's pool exists before the fork
    ctx = mp.get_context("fork")
    with ctx.Pool(1) as pool:
        got = pool.apply_async(_run_in_child).get(timeout=120)
    assert got == 100.0


def _run_in_child() -> float:
    out = np.zeros((100, 2))
    run_items(_count_items, 100, (out,), threads=2)
    return float(out[:, 0].sum())


def test_item_kernel_checks_its_arguments():
    assert isinstance(_count_kernel, ItemKernel)
    with pytest.raises(TypeError, match="takes 2 arguments"):
        _count_kernel(np.zeros((3, 2)))
    assert _count_kernel.signatures                      # the dispatcher's attributes pass through
    with pytest.raises(TypeError, match=r"last arguments are \(lo, hi\)"):
        items("1")(numba.njit(lambda a, b: None))


def test_borrow_takes_arrays_only():
    @numba.njit
    def f(x):
        return borrow(x)

    with pytest.raises(TypingError):
        f(1.5)
    a = np.arange(6.0).reshape(2, 3)[:, ::2]             # a strided view keeps its layout
    np.testing.assert_array_equal(f(a), a)


def test_treeshap_bytes_do_not_depend_on_threads():
    from hitml.kernels.treeshap import cpu
    from hitml.kernels.treeshap.paths import _tiny_paths

    ps = _tiny_paths()
    X = np.random.default_rng(3).normal(size=(700, 3))
    X[::7, 1] = np.nan
    bg = X[:40]
    before = numba.get_num_threads()
    results = []
    try:
        for t in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
            numba.set_num_threads(t)
            results.append((cpu.shap_values(ps, X, progress=False), cpu.interaction_values(ps, X[:90], progress=False),
                            cpu.interventional_shap_values(ps, X, bg, progress=False),
                            cpu.interventional_shap_values(ps, X[:60], bg, transform="logistic", progress=False)))
    finally:
        numba.set_num_threads(before)
    for a, b in zip(results[0], results[-1], strict=True):
        assert a.tobytes() == b.tobytes()

