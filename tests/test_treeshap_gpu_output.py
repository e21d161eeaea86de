"""NumPy output of the GPU engine: pinned output blocks and staged input give the same bytes as CuPy output and as
the pageable path, blocks are recycled only once no array uses them, and values match the CPU twin."""
from __future__ import annotations

import numpy as np
import pytest

from hitml.kernels.treeshap import cpu

from _treeshap_gpu import _close, _data, _gpu, _multiclass_models, _regression_paths

pytestmark = pytest.mark.gpu


def _bytes(a) -> bytes:
    return (a.get() if hasattr(a, "get") else np.asarray(a)).tobytes()


@pytest.fixture(scope="module")
def models():
    reg, _ = _regression_paths(M=12, depths=(3, 6, 8), seed=4)
    _dense, sparse, _ = _multiclass_models(5, 8, 5)
    return [(reg, _data(3000, 12, 50, nan=0.05)[0]), (sparse, _data(2500, 7, 51, nan=0.05)[0])]


def test_numpy_output_paths_give_the_same_bytes(models, monkeypatch):
    """Pinned output in pieces, pinned output in chunks, the pageable path (pinned_bytes = 0) and CuPy output: the
    same bytes for SHAP values, interactions and interventional values; equal to the CPU twin; float64 X is cast
    as the pageable path casts it; a Fortran-ordered X too."""
    import cupy as cp
    from hitml.kernels import device
    from hitml.kernels.treeshap import _gpu_core as core
    g = _gpu()
    for ps, X in models:
        R = X[:17]
        for name in ("shap", "inter", "interventional"):
            def call(A, name=name, ps=ps, R=R):
                if name == "shap":
                    return g.shap_values(ps, A)
                if name == "inter":
                    return g.interaction_values(ps, A[:60])
                return g.interventional_shap_values(ps, A[:200], R, transform="logistic")
            ref = call(X)
            assert isinstance(ref, np.ndarray) and ref.dtype == np.float64 and ref.flags.c_contiguous
            assert device.is_pinned(ref) == (ref.nbytes >= device._PINNED_MIN_BYTES), name
            twin = (cpu.shap_values(ps, X) if name == "shap" else cpu.interaction_values(ps, X[:60])
                    if name == "inter" else cpu.interventional_shap_values(ps, X[:200], R, transform="logistic"))
            _close(ref, twin)
            assert _bytes(call(cp.asarray(X))) == ref.tobytes(), name
            assert _bytes(call(X.astype(np.float64))) == ref.tobytes(), name
            assert _bytes(call(np.asfortranarray(X))) == ref.tobytes(), name
            with monkeypatch.context() as mp:
                mp.setattr(core, "_PIECE_MIN_BYTES", 4096)            # up to 8 pieces per chunk
                mp.setattr(core, "_PINNED_PIECE_MIN_BYTES", 4096)
                assert _bytes(call(X)) == ref.tobytes(), name
                mp.setattr(g.options, "memory_budget", 40_000)      # many chunks, each in pieces
                assert _bytes(call(X)) == ref.tobytes(), name
                mp.setattr(g.options, "pinned_bytes", 0)            # plain arrays, staged download
                out = call(X)
                assert not device.is_pinned(out) and out.tobytes() == ref.tobytes(), name
        g.clear_cache()


def test_pinned_blocks_are_recycled_only_when_free(models, monkeypatch):
    """Outputs alive at once have their own blocks; a block freed by its array (and its views) is reused by the next
    call, which overwrites it completely; over the cap the engine returns plain arrays with the same bytes."""
    from hitml.kernels import device
    g = _gpu()
    ps, X = models[0]
    a = g.shap_values(ps, X)
    b = g.shap_values(ps, X[::-1].copy())
    assert device.is_pinned(a) and device.is_pinned(b)
    assert a.ctypes.data != b.ctypes.data
    ref_a, ref_b = a.copy(), b.copy()
    np.testing.assert_array_equal(a, b[::-1])
    view = a[10:20]
    ptr = a.ctypes.data
    del a
    c = g.shap_values(ps, X[::-1].copy())                    # a's block is still held by ``view``
    assert c.ctypes.data != ptr
    np.testing.assert_array_equal(view, ref_a[10:20])
    del view
    b[:] = np.nan                                              # a caller may write into its output
    ptr_b = b.ctypes.data
    del b
    d = g.shap_values(ps, X)                                   # reuses a freed block (same size class) ...
    assert d.ctypes.data in (ptr, ptr_b) and d.tobytes() == ref_a.tobytes()     # ... and overwrites all of it
    np.testing.assert_array_equal(c, ref_b)
    device.release_pinned()                                    # the free block goes; c's and d's stay lent
    monkeypatch.setattr(g.options, "pinned_bytes", device._PINNED.held)      # no room for another block
    e = g.shap_values(ps, X)
    assert not device.is_pinned(e) and e.tobytes() == ref_a.tobytes()
    del c, d, e
    g.clear_cache()                                            # frees the blocks no array uses: all of them
    assert device._PINNED.held == 0


def test_pinned_empty_upload_and_options():
    import cupy as cp
    from hitml.kernels import device
    g = _gpu()
    assert device.pinned_empty((10,), np.float64, 1 << 30) is None             # small: plain arrays
    assert device.pinned_empty((1 << 20,), np.float64, 1 << 10) is None        # over the cap
    p = device.pinned_empty((1000, 300), np.float32, 1 << 30)
    assert p.shape == (1000, 300) and p.dtype == np.float32 and device.is_pinned(p[5:, 3])
    assert device._size_class(1_000_001) >= 1_000_001 and device._size_class(1_000_001) <= 1_000_001 * 9 // 8
    rng = np.random.default_rng(3)
    X = rng.normal(size=(5000, 300))
    X[::7, 5] = np.nan
    for src in (X, np.asfortranarray(X), X[:, ::2], X.astype(np.float32)):
        keep = []
        Xd = device.upload(src, np.float32, 1 << 30, keep)
        cp.cuda.get_current_stream().synchronize()
        assert Xd.dtype == np.float32 and Xd.flags.c_contiguous
        assert Xd.get().tobytes() == np.ascontiguousarray(src, dtype=np.float32).tobytes()
        assert len(keep) == 1 and device.is_pinned(keep[0])
    del p, keep
    assert device._PINNED.held > 0                              # free blocks, kept for the next call
    assert device.pinned_empty((1 << 20,), np.float64, 0) is None
    assert device._PINNED.held == 0                             # a lowered cap frees them
    with pytest.raises(ValueError, match="pinned_bytes"):
        g.options.pinned_bytes = -1


def test_float32_rows_of_a_float64_model_widen_on_the_device(monkeypatch):
    """A float64 PathSet (shap declares XGBoost models so) given float32 rows: they are uploaded as float32 and
    widened on the device; the same bytes as the float64 rows (NumPy and CuPy, one piece or many, pinned or not,
    SHAP values, interactions and interventional values), equal to the CPU twin. A small call skips the free-memory
    query; a set memory_budget still chunks it."""
    import cupy as cp
    from hitml.kernels.treeshap import _gpu_core as core
    g = _gpu()
    ps, _ = _regression_paths(M=9, depths=(3, 6), seed=7, input_dtype=np.float64)
    X32 = _data(1500, 9, 61, nan=0.05)[0]
    assert X32.dtype == np.float32
    X64 = X32.astype(np.float64)
    R = X32[:23]
    calls = {"shap": lambda A: g.shap_values(ps, A), "inter": lambda A: g.interaction_values(ps, A[:50]),
             "interventional": lambda A: g.interventional_shap_values(ps, A[:300], R)}
    twins = {"shap": cpu.shap_values(ps, X64), "inter": cpu.interaction_values(ps, X64[:50]),
             "interventional": cpu.interventional_shap_values(ps, X64[:300], R.astype(np.float64))}
    for name, call in calls.items():
        ref = call(X64)
        _close(ref, twins[name])
        assert _bytes(call(X32)) == ref.tobytes(), name
        assert _bytes(call(cp.asarray(X32))) == ref.tobytes(), name
        with monkeypatch.context() as mp:
            mp.setattr(core, "_PINNED_PIECE_MIN_BYTES", 4096)
            mp.setattr(g.options, "memory_budget", 30_000)
            assert _bytes(call(X32)) == ref.tobytes(), name
            mp.setattr(g.options, "pinned_bytes", 0)
            assert _bytes(call(X32)) == ref.tobytes(), name
    asked = []
    monkeypatch.setattr(core, "free_gpu_bytes", lambda f=0.5: asked.append(f) or 1 << 40)
    g.shap_values(ps, X32[:100])
    assert not asked
    monkeypatch.setattr(g.options, "memory_budget", 20_000)
    assert _bytes(g.shap_values(ps, X32)) == calls["shap"](X64).tobytes()
