"""GPU twin (CuPy RawModule over shuffle.cu) of the bijective shuffle: same names, signatures and output as cpu.py.

The common call (a C-contiguous CuPy array, an int seed) is kept short on the host: everything that depends only on
(device, stream, m, row layout) is a cached launch plan (kernel handle, grid, scalar arguments, its own look-back
workspace), round keys live on the device per (device, seed, rounds), and a call allocates only its output(s) from the
memory pool before the one launch."""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from .._cuda import get_kernel
from ..device import cupy_module
from ._keys import check_rounds, check_size, lcg_params, padded_bits, philox_round_keys
from ._keys import base_key as _base_key

_SRC = "shuffle/shuffle.cu"
_BLOCK = 256  # threads per block (BLOCK in shuffle.cu)
# one array of 8-byte words (u64 keys, and each pass of split pairs) on padded domains of at least 2^_PIPE_BITS runs on
# bij_shuffle_ctl: persistent blocks of _BLOCK threads plus a control warp that looks back while the others evaluate the
# next tile; at most _PIPE_BLOCKS blocks per SM (at least the resident count). It pays for u64 keys, not for u32 keys
# (so they stay on bij_shuffle): docs/design/shuffle.md.
_PIPE_BITS = 21
_PIPE_BLOCKS = 7
_WORDS = {16: "V16", 8: "unsigned long long", 4: "unsigned int", 2: "unsigned short", 1: "unsigned char", 0: "None"}
_TAG_LIMIT = 1 << 20  # the status word's tag field (shuffle.cu, TAG_SHIFT)
_LOCK = threading.Lock()
_PLANS: OrderedDict = OrderedDict()  # (device, stream, thread on the per-thread stream, m, rounds, layout) -> _Plan
_KEYS: OrderedDict = OrderedDict()  # (device, seed, rounds) or (device, key bytes) -> round keys on the device
_CACHE_MAX = 256
_cp = None


def _cupy():
    global _cp
    if _cp is None:
        _cp = cupy_module()
    return _cp


def _geometry(n_bits: int, w1: int, w2: int, rows: bool) -> tuple[int, int]:
    """(indices per thread, min resident blocks per SM for the launch bounds; 0 = none), measured on an H100 at
    m = 2^23 and 2^23 + 1 (docs/shuffle.md): 8 per thread for one-word keys (32-40 registers, so 6-8 blocks fit an
    SM), 16 for an index alone, 4 for key-value pairs (two prefetched words per index), 8 for rows (at least 6 blocks
    per SM). Smaller domains take fewer, so that the tiles still spread over the SMs."""
    if n_bits < 21:
        return (4 if n_bits >= 15 else 1), 0
    if rows:
        return 8, 6
    if w1 == 0:
        return 16, 0
    if w1 + w2 <= 4:  # at most 32 registers, so 8 blocks fit an SM (34 without the bound, 6 blocks, on some builds)
        return 8, 8
    return (8 if w1 + w2 <= 8 else 4), 0


def _l2_bytes(dev: int) -> int:
    """The device's L2 cache size (bytes)."""
    cp = _cupy()
    try:
        return int(cp.cuda.Device(dev).attributes["L2CacheSize"])
    except (KeyError, AttributeError):
        return int(cp.cuda.runtime.deviceGetAttribute(38, dev))  # cudaDevAttrL2CacheSize


class _Plan:
    """What a launch of one (device, stream, m, row layout, rounds) needs besides its arrays, keys and tag."""

    __slots__ = ("kern", "grid", "block", "scalars", "ws", "tag", "take", "split", "args", "argp", "fptr", "stream")

    def __init__(self, cp, m: int, arrays, rounds: int | None, stream: int = 0):
        b = padded_bits(m)
        words, ds = [0, 0], [0, 0]
        for j, a in enumerate(arrays):
            words[j], ds[j] = _word(a.nbytes, m, a.data.ptr, a.itemsize)
        row_bytes = max((a.nbytes // m for a in arrays), default=0)
        # wide rows, or wide-ish rows of a small domain: index first, then one row gather over the whole GPU
        self.take = rounds is not None and (row_bytes >= 256 or (row_bytes > 16 and b < 22))
        # one-word key-value pairs whose two sources together overflow the L2 while each alone fits it about: two
        # single-array passes (the second evaluates the bijection again), so that each random gather reads from a
        # source the L2 mostly holds (less kernel time for u64 pairs: docs/design/shuffle.md)
        l2 = _l2_bytes(cp.cuda.runtime.getDevice()) if len(arrays) == 2 else 0
        self.split = (rounds is not None and len(arrays) == 2 and ds[0] == ds[1] == 1
                      and arrays[0].nbytes + arrays[1].nbytes > l2 and max(a.nbytes for a in arrays) <= 2 * l2)
        if self.take or self.split:
            return
        rows = any(d != 1 for d in ds[:len(arrays)]) or words[0] + words[1] > 16
        items, minb = _geometry(b, words[0], words[1], rows)
        tmpl = -1 if rounds is None else (24 if rounds == 24 else 0)
        idx = "unsigned int" if b <= 32 else "unsigned long long"
        tiles = ((1 << b) + _BLOCK * items - 1) // (_BLOCK * items)
        if not rows and b >= _PIPE_BITS and words == [8, 0]:
            name = f"bij_shuffle_ctl<{_WORDS[words[0]]}, {_WORDS[words[1]]}, {tmpl}, {items}, {idx}, 0>"
            sms = cp.cuda.Device(cp.cuda.runtime.getDevice()).attributes["MultiProcessorCount"]
            self.grid, self.block = (min(tiles, sms * _PIPE_BLOCKS),), (_BLOCK + 32,)
        else:
            name = (f"bij_shuffle<{_WORDS[words[0]]}, {_WORDS[words[1]]}, {tmpl}, {items}, {idx}, "
                    f"{'true' if rows else 'false'}, {minb}>")
            self.grid, self.block = (tiles,), (_BLOCK,)
        self.kern = get_kernel(_SRC, name, (), (name,))
        if max(ds) >= 1 << 24:
            raise ValueError(f"rows of {max(ds)} words are too wide for the fused shuffle")  # not reached: take
        # m, and n_bits | rounds << 8 | d1 << 16 | d2 << 40 (shuffle.cu)
        self.scalars = (np.uint64(m), np.uint64(b | (rounds or 0) << 8 | ds[0] << 16 | ds[1] << 40))
        self.ws = cp.zeros(1 + tiles, dtype=cp.uint64)  # tile counter + status words (shuffle.cu), this plan's own
        self.tag = 0
        # the launch through the driver with a prepacked parameter block (10 words: in1, out1, in2, out2, idx_out,
        # keys, m, shape, ws, tag; the driver copies them at launch): less host time per call than the RawKernel call
        self.args = np.zeros(10, dtype=np.uint64)
        self.args[6:9] = (m, int(self.scalars[1]), self.ws.data.ptr)
        self.argp = np.array([self.args.ctypes.data + 8 * i for i in range(10)], dtype=np.uint64)
        try:
            self.fptr = self.kern.kernel.ptr if hasattr(cp.cuda.driver, "launchKernel") else None
        except AttributeError:
            self.fptr = None
        self.stream = stream

    def launch(self, ptrs) -> None:
        """One launch with the pointers (in1, out1, in2, out2, idx_out, keys); call with _LOCK held."""
        tag = self.next_tag()
        if self.fptr is None:
            self.kern(self.grid, self.block, tuple(np.uint64(p) for p in ptrs) + self.scalars + (self.ws, tag))
            return
        a = self.args
        a[0], a[1], a[2], a[3], a[4], a[5], a[9] = *ptrs, tag
        _cupy().cuda.driver.launchKernel(self.fptr, self.grid[0], 1, 1, self.block[0], 1, 1, 0, self.stream,
                                         int(self.argp.ctypes.data), 0)

    def next_tag(self) -> np.uint64:
        """A new tag for a launch on this plan's workspace (call with _LOCK held); clears it when the tag wraps."""
        self.tag += 1
        if self.tag >= _TAG_LIMIT:
            self.ws[1:].fill(0)
            self.tag = 1
        return np.uint64(self.tag)


def _word(nbytes: int, n: int, ptr: int, itemsize: int) -> tuple[int, int]:
    """(word bytes, words per row) for moving the rows of a C-contiguous array as 1..16-byte units."""
    row_bytes = nbytes // n if n else itemsize
    for w in (16, 8, 4, 2, 1):
        if row_bytes % w == 0 and ptr % w == 0:
            return w, row_bytes // w
    raise AssertionError("unreachable")


def _plan(cp, m: int, arrays, rounds: int | None) -> _Plan:
    """The cached plan for this device, stream, length, row layout and alignment (the oldest goes past _CACHE_MAX)."""
    stream = cp.cuda.get_current_stream().ptr
    key = (cp.cuda.runtime.getDevice(), stream, threading.get_ident() if stream == 2 else 0, m, rounds,
           tuple((a.nbytes, a.itemsize, a.data.ptr & 15) for a in arrays))
    plan = _PLANS.get(key)
    if plan is None:
        plan = _Plan(cp, m, arrays, rounds, stream)
        with _LOCK:
            _PLANS[key] = plan
            if len(_PLANS) > _CACHE_MAX:
                _PLANS.popitem(last=False)
    return plan


def _device_keys(cp, seed: Any, rounds: Any):
    """VariablePhilox round keys on the device, cached per (device, seed, rounds) for int seeds."""
    if type(seed) is int and type(rounds) is int and seed >= 0:
        k = (cp.cuda.runtime.getDevice(), seed, rounds)
        arr = _KEYS.get(k)
        return arr if arr is not None else _cache_keys(cp, k, philox_round_keys(seed, rounds))
    return _keys_on_device(cp, philox_round_keys(seed, rounds))  # validates seed and rounds


def _keys_on_device(cp, keys: np.ndarray):
    """Explicit round keys on the device, cached per key set."""
    k = (cp.cuda.runtime.getDevice(), keys.tobytes())
    arr = _KEYS.get(k)
    return arr if arr is not None else _cache_keys(cp, k, keys)


def _lcg_on_device(cp, lcg: tuple[int, int]):
    """The LCG's (multiplier, increment) as two u64 words on the device, cached."""
    k = (cp.cuda.runtime.getDevice(), "lcg", int(lcg[0]), int(lcg[1]))
    arr = _KEYS.get(k)
    return arr if arr is not None else _cache_keys(cp, k, np.array(lcg, dtype=np.uint64))


def _cache_keys(cp, k, keys: np.ndarray):
    arr = cp.asarray(keys)
    with _LOCK:
        _KEYS[k] = arr
        if len(_KEYS) > _CACHE_MAX:
            _KEYS.popitem(last=False)
    return arr


def _launch(m: int, dkeys, lcg: tuple[int, int] | None, arrays=(), want_index: bool = False, rounds: int = 24,
            plan: _Plan | None = None):
    """Run the fused flag+scan+gather kernel (one launch, nothing else enqueued in the steady state); returns
    (index or None, [shuffled arrays]). ``dkeys``: round keys on the device (ignored with ``lcg`` = (a, c)).
    Arrays whose plan says take or split go through _apply."""
    cp = _cupy()
    outs = [cp.ndarray(a.shape, a.dtype) for a in arrays]
    idx = cp.ndarray((m,), np.int64) if want_index else None
    if m == 0:
        return idx, outs
    if plan is None:
        plan = _plan(cp, m, arrays, None if lcg is not None else rounds)
    if lcg is not None:
        dkeys = _lcg_on_device(cp, lcg)
    p1, q1, p2, q2 = 0, 0, 0, 0
    if arrays:
        p1, q1 = arrays[0].data.ptr, outs[0].data.ptr
        if len(arrays) > 1:
            p2, q2 = arrays[1].data.ptr, outs[1].data.ptr
    with _LOCK:
        plan.launch((p1, q1, p2, q2, 0 if idx is None else idx.data.ptr, dkeys.data.ptr))
    return idx, outs


def _rows(X):
    cp = _cupy()
    X = cp.ascontiguousarray(cp.asarray(X))
    if X.ndim == 0:
        raise ValueError("shuffle_rows needs an array with at least one dimension")
    return X


def _contiguous(cp, X):
    """X itself when it is a C-contiguous CuPy array with ndim >= 1 (the common case, no CuPy call), else _rows(X)."""
    if type(X) is cp.ndarray and X.ndim and X.flags.c_contiguous:
        return X
    return _rows(X)


def permutation_from_keys(m: int, round_keys: np.ndarray):
    """The bijective shuffle of range(m) under explicit VariablePhilox round keys (cupy int64, shape (m,))."""
    m = check_size("m", m)
    keys = np.ascontiguousarray(round_keys, dtype=np.uint32)
    rounds = check_rounds(keys.shape[0])
    return _launch(m, _keys_on_device(_cupy(), keys), None, want_index=True, rounds=rounds)[0]


def permutation(m: int, seed: Any = None, *, rounds: int = 24, bijection: str = "philox"):
    """A uniformly random order of range(m) (cupy int64), identical to cpu.permutation for the same seed."""
    m = check_size("m", m)
    if bijection == "philox":
        rounds = check_rounds(rounds)
        return _launch(m, _device_keys(_cupy(), seed, rounds), None, want_index=True, rounds=rounds)[0]
    if bijection == "lcg":
        return _launch(m, None, lcg_params(seed, padded_bits(m)), want_index=True)[0]
    raise ValueError(f'bijection must be "philox" or "lcg", got {bijection!r}')


def _apply(arrays, dkeys, rounds: int):
    """Shuffle the rows of the arrays by one permutation: fused in one pass (each row read and written once) while
    there are enough tiles to fill the GPU and rows are narrow; otherwise index first, then a row gather (the extra
    8 B per row is small next to wide rows, and the gather spreads over the whole GPU)."""
    cp = _cupy()
    m = arrays[0].shape[0]
    plan = _plan(cp, m, arrays, rounds) if m else None
    if plan is not None and plan.take:
        idx = _launch(m, dkeys, None, want_index=True, rounds=rounds)[0]
        return [cp.take(a, idx, axis=0) for a in arrays]
    if plan is not None and plan.split:
        return [_launch(m, dkeys, None, (a,), rounds=rounds)[1][0] for a in arrays]
    return _launch(m, dkeys, None, arrays, rounds=rounds, plan=plan)[1]


def shuffle_rows(X, seed: Any = None, *, rounds: int = 24):
    """Rows of X (axis 0) in the order permutation(len(X), seed); one fused pass for narrow rows."""
    cp = _cupy()
    X = _contiguous(cp, X)
    return _apply((X,), _device_keys(cp, seed, rounds), rounds)[0]


def shuffle_pairs(keys, values, seed: Any = None, *, rounds: int = 24):
    """Key-value shuffle in one fused pass: (keys[p], values[p])."""
    cp = _cupy()
    k, v = _contiguous(cp, keys), _contiguous(cp, values)
    if k.shape[0] != v.shape[0]:
        raise ValueError(f"keys and values must have the same length, got {k.shape[:1]} and {v.shape[:1]}")
    ko, vo = _apply((k, v), _device_keys(cp, seed, rounds), rounds)
    return ko, vo


def batched_permutations(k: int, d: int, seed: Any = None, *, rounds: int = 24, start: int = 0):
    """k independent permutations of range(d) (cupy int64, (k, d)), identical to cpu.batched_permutations."""
    k, d, start = check_size("k", k), check_size("d", d), check_size("start", start)
    rounds = check_rounds(rounds)
    return batched_from_base(k, d, _base_key(seed), rounds=rounds, start=start)


def batched_from_base(k: int, d: int, base: int, *, rounds: int = 24, start: int = 0):
    """Rows [start, start+k) of the batch with 64-bit stream key ``base`` (see _keys.batch_round_keys)."""
    cp = _cupy()
    out = cp.empty((k, d), dtype=cp.int64)
    if k == 0 or d == 0:
        return out
    kern = get_kernel(_SRC, "batched_perm", (), ("batched_perm",))
    kern(((k + 7) // 8,), (256,), (out, np.int64(k), np.int64(d), np.uint64(start), np.uint64(base),
                                   np.int32(rounds), np.int32(padded_bits(d))))
    return out
