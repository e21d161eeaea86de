"""GPU twin (CuPy RawModule over shuffle.cu) of the bijective shuffle: same names, signatures and output as cpu.py."""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from .._cuda import get_kernel
from ..device import cupy_module
from ._keys import base_key, check_rounds, check_size, lcg_params, padded_bits, philox_round_keys

_SRC = "shuffle/shuffle.cu"
_BLOCK = 256  # threads per block (BLOCK in shuffle.cu)
_WORDS = {16: "V16", 8: "unsigned long long", 4: "unsigned int", 2: "unsigned short", 1: "unsigned char", 0: "None"}
_NULL = np.uint64(0)
_TAG_LIMIT = 1 << 20  # the status word's tag field (shuffle.cu, TAG_SHIFT)
_LOCK = threading.Lock()
_WS: dict = {}  # (device, stream[, thread]) -> [workspace, capacity in tiles, last tag]
_KEYS: OrderedDict = OrderedDict()  # (device, key bytes) -> round keys on the device


def _items(n_bits: int, word_bytes: int, rows: bool) -> int:
    """Indices per thread: 16 (4096-index tiles) for large domains, 8 when a thread holds two 8-byte words per index in
    registers (pairs); fewer for small domains, so that the tiles still spread over the SMs.

    The launch bounds give no minimum of resident blocks: asking for 1 explicitly lets ptxas take 86-104 registers
    (2 blocks per SM), which measured slower; without it the common kernels take 40-80 registers."""
    if n_bits >= 21:
        return 8 if (word_bytes > 8 and not rows) else 16
    return 4 if n_bits >= 15 else 1


def _shuffle_kernel(w1: int, w2: int, rounds: int, n_bits: int, rows: bool):
    items = _items(n_bits, w1 + w2, rows)
    idx = "unsigned int" if n_bits <= 32 else "unsigned long long"
    name = f"bij_shuffle<{_WORDS[w1]}, {_WORDS[w2]}, {rounds}, {items}, {idx}, {'true' if rows else 'false'}>"
    return get_kernel(_SRC, name, (), (name,)), items


def _word(arr) -> tuple[int, int]:
    """(word bytes, words per row) for moving the rows of a C-contiguous array as 1..16-byte units."""
    n = arr.shape[0]
    row_bytes = arr.nbytes // n if n else arr.itemsize
    for w in (16, 8, 4, 2, 1):
        if row_bytes % w == 0 and arr.data.ptr % w == 0:
            return w, row_bytes // w
    raise AssertionError("unreachable")


def _workspace(cp, tiles: int):
    """(look-back workspace, tag) for a launch on the current stream; call with _LOCK held.

    The workspace is kept per device and stream (per thread too on the per-thread default stream), so launches on it
    run one after another; every launch gets a new tag, and the status words are cleared only when the tag wraps."""
    stream = cp.cuda.get_current_stream()
    key = (cp.cuda.Device().id, stream.ptr, threading.get_ident() if stream.ptr == 2 else 0)
    ent = _WS.get(key)
    if ent is None or ent[1] < tiles:
        cap = max(tiles, 2 * ent[1] if ent else 1024)
        ent = _WS[key] = [cp.zeros(1 + cap, dtype=cp.uint64), cap, 0]
    ent[2] += 1
    if ent[2] >= _TAG_LIMIT:
        ent[0][1:].fill(0)
        ent[2] = 1
    return ent[0], ent[2]


def _device_keys(cp, keys: np.ndarray):
    """Round keys on the device, uploaded once per distinct key set (call with _LOCK held)."""
    k = (cp.cuda.Device().id, keys.tobytes())
    arr = _KEYS.get(k)
    if arr is None:
        arr = _KEYS[k] = cp.asarray(keys)
        if len(_KEYS) > 256:
            _KEYS.popitem(last=False)
    else:
        _KEYS.move_to_end(k)
    return arr


def _launch(m: int, round_keys, lcg: tuple[int, int] | None, arrays=(), want_index: bool = False):
    """Run the fused flag+scan+gather kernel (one launch, nothing else enqueued in the steady state); returns
    (index or None, [shuffled arrays]). ``round_keys`` is ignored with ``lcg`` = (a, c)."""
    cp = cupy_module()
    b = padded_bits(m)
    outs, args, words, rows = [], [], [0, 0], False
    for j, a in enumerate(arrays):
        o = cp.empty_like(a)
        w, d = _word(a)
        outs.append(o)
        args += [a, o, np.int64(d)]
        words[j] = w
        rows |= d != 1
    for _ in range(len(arrays), 2):
        args += [_NULL, _NULL, np.int64(0)]
    idx = cp.empty(m, dtype=cp.int64) if want_index else None
    if m == 0:
        return idx, outs
    rows |= words[0] + words[1] > 16
    if lcg is None:
        keys = np.ascontiguousarray(round_keys, dtype=np.uint32)
        a_, c_, rounds = 0, 0, keys.shape[0]
        tmpl = 24 if rounds == 24 else 0
    else:
        keys, (a_, c_), rounds, tmpl = None, lcg, 0, -1
    kern, items = _shuffle_kernel(words[0], words[1], tmpl, b, rows)
    tiles = ((1 << b) + _BLOCK * items - 1) // (_BLOCK * items)
    with _LOCK:
        dkeys = _NULL if keys is None else _device_keys(cp, keys)
        ws, tag = _workspace(cp, tiles)
        kern((tiles,), (_BLOCK,), (*args, idx if idx is not None else _NULL, dkeys, np.uint64(m), np.int32(b),
                                   np.int32(rounds), np.uint64(a_), np.uint64(c_), ws, np.uint64(tag)))
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
    row_bytes = max((a.nbytes // m if m else 0) for a in arrays)
    if row_bytes >= 256 or (row_bytes > 16 and padded_bits(m) < 22):
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
