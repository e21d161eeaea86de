"""GPU twin (CuPy RawModule over shuffle.cu) of the bijective shuffle: same names, signatures and output as cpu.py."""
from __future__ import annotations

from typing import Any

import numpy as np

from .._cuda import get_kernel
from ..device import cupy_module
from ._keys import base_key, check_rounds, check_size, lcg_params, padded_bits, philox_round_keys

_SRC = "shuffle/shuffle.cu"
_TILE = 256 * 16
_WORDS = {16: "V16", 8: "unsigned long long", 4: "unsigned int", 2: "unsigned short", 1: "unsigned char"}
_NULL = np.uint64(0)


def _shuffle_kernel(w1: int, w2: int, rounds: int):
    name = f"bij_shuffle<{_WORDS[w1]}, {_WORDS[w2]}, {rounds}>"
    return get_kernel(_SRC, name, (), (name,))


def _word(arr) -> tuple[int, int]:
    """(word bytes, words per row) for moving the rows of a C-contiguous array as 1..16-byte units."""
    n = arr.shape[0]
    row_bytes = arr.nbytes // n if n else arr.itemsize
    for w in (16, 8, 4, 2, 1):
        if row_bytes % w == 0 and arr.data.ptr % w == 0:
            return w, row_bytes // w
    raise AssertionError("unreachable")


def _launch(m: int, round_keys, lcg: tuple[int, int] | None, arrays=(), want_index: bool = False):
    """Run the fused flag+scan+gather kernel; returns (index or None, [shuffled arrays])."""
    cp = cupy_module()
    b = padded_bits(m)
    n = 1 << b
    outs, args, words = [], [], []
    for a in arrays:
        o = cp.empty_like(a)
        w, d = _word(a)
        outs.append(o)
        args += [a, o, np.int64(d)]
        words.append(w)
    while len(words) < 2:
        args += [_NULL, _NULL, np.int64(0)]
        words.append(1)
    idx = cp.empty(m, dtype=cp.int64) if want_index else None
    if m == 0:
        return idx, outs
    tiles = (n + _TILE - 1) // _TILE
    if lcg is None:
        keys = np.ascontiguousarray(round_keys, dtype=np.uint32)
        a_, c_, use_lcg, rounds = 0, 0, 0, keys.shape[0]
    else:
        keys = np.zeros(2, dtype=np.uint32)
        (a_, c_), use_lcg, rounds = lcg, 1, 0
    # one workspace: [tile counter | tiles look-back words | round keys]; zeroed and filled asynchronously
    ws = cp.empty(1 + tiles + (keys.shape[0] + 1) // 2, dtype=cp.uint64)
    stream = cp.cuda.get_current_stream()
    cp.cuda.runtime.memsetAsync(ws.data.ptr, 0, (1 + tiles) * 8, stream.ptr)
    (ws.data + (1 + tiles) * 8).copy_from_host_async(keys.ctypes.data, keys.nbytes, stream)
    kern = _shuffle_kernel(words[0], words[1], 24 if rounds == 24 and not use_lcg else 0)
    kern((tiles,), (256,), (*args, idx if idx is not None else _NULL, np.uint64(m), np.uint64(n), np.uint64(a_),
                            np.uint64(c_), np.int32(b // 2), np.int32(b - b // 2), np.int32(rounds),
                            np.int32(use_lcg), ws))
    return idx, outs


def _rows(X):
    cp = cupy_module()
    X = cp.ascontiguousarray(cp.asarray(X))
    if X.ndim == 0:
        raise ValueError("shuffle_rows needs an array with at least one dimension")
    return X


def permutation_from_keys(m: int, round_keys: np.ndarray):
    """The bijective shuffle of range(m) under explicit VariablePhilox round keys (cupy int64, shape (m,))."""
    m = check_size("m", m)
    return _launch(m, round_keys, None, want_index=True)[0]


def permutation(m: int, seed: Any = None, *, rounds: int = 24, bijection: str = "philox"):
    """A uniformly random order of range(m) (cupy int64), identical to cpu.permutation for the same seed."""
    m = check_size("m", m)
    if bijection == "philox":
        return permutation_from_keys(m, philox_round_keys(seed, rounds))
    if bijection == "lcg":
        return _launch(m, None, lcg_params(seed, padded_bits(m)), want_index=True)[0]
    raise ValueError(f'bijection must be "philox" or "lcg", got {bijection!r}')


def _apply(arrays, round_keys):
    """Shuffle the rows of the arrays by one permutation: fused in one pass (each row read and written once) while
    there are enough tiles to fill the GPU and rows are narrow; otherwise index first, then a row gather (the extra
    8 B per row is small next to wide rows, and the gather spreads over the whole GPU)."""
    cp = cupy_module()
    m = arrays[0].shape[0]
    tiles = ((1 << padded_bits(m)) + _TILE - 1) // _TILE
    row_bytes = max((a.nbytes // m if m else 0) for a in arrays)
    if row_bytes >= 256 or (row_bytes > 16 and tiles < 1024):
        idx = _launch(m, round_keys, None, want_index=True)[0]
        return [cp.take(a, idx, axis=0) for a in arrays]
    return _launch(m, round_keys, None, tuple(arrays))[1]


def shuffle_rows(X, seed: Any = None, *, rounds: int = 24):
    """Rows of X (axis 0) in the order permutation(len(X), seed); one fused pass for narrow rows."""
    X = _rows(X)
    return _apply([X], philox_round_keys(seed, rounds))[0]


def shuffle_pairs(keys, values, seed: Any = None, *, rounds: int = 24):
    """Key-value shuffle in one fused pass: (keys[p], values[p])."""
    k, v = _rows(keys), _rows(values)
    if k.shape[:1] != v.shape[:1]:
        raise ValueError(f"keys and values must have the same length, got {k.shape[:1]} and {v.shape[:1]}")
    ko, vo = _apply([k, v], philox_round_keys(seed, rounds))
    return ko, vo


def gather_rows_by_keys(X, round_keys):
    """Rows of a cupy array in the order permutation_from_keys(len(X), round_keys) (fused)."""
    return _apply([_rows(X)], round_keys)[0]


def batched_permutations(k: int, d: int, seed: Any = None, *, rounds: int = 24, start: int = 0):
    """k independent permutations of range(d) (cupy int64, (k, d)), identical to cpu.batched_permutations."""
    k, d, start = check_size("k", k), check_size("d", d), check_size("start", start)
    rounds = check_rounds(rounds)
    return batched_from_base(k, d, base_key(seed), rounds=rounds, start=start)


def batched_from_base(k: int, d: int, base: int, *, rounds: int = 24, start: int = 0):
    """Rows [start, start+k) of the batch with 64-bit stream key ``base`` (see _keys.batch_round_keys)."""
    cp = cupy_module()
    out = cp.empty((k, d), dtype=cp.int64)
    if k == 0 or d == 0:
        return out
    kern = get_kernel(_SRC, "batched_perm", (), ("batched_perm",))
    kern(((k + 7) // 8,), (256,), (out, np.int64(k), np.int64(d), np.uint64(start), np.uint64(base),
                                   np.int32(rounds), np.int32(padded_bits(d))))
    return out
