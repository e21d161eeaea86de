"""Mergeable row sample kept beside the moments: the rows whose hashed key is at most a threshold (bottom-k by key).

Every row of a batch of n rows gets the key mix(salt ^ mix(i + G)) (i its index, salt a hash of n and of the
batch's first and last rows); the sample holds the rows with key <= tau, at most ``cap`` of them. Keys are distinct
within a batch (both mixes are bijections), so the sample of a batch is a uniform sample without replacement, and
merging two samples (keep the union's rows with key <= min(tau_a, tau_b), then the ``cap`` smallest) is exact:
associative and commutative, and the same whatever the order of the merges. The cut solver uses it to check the
moment cuts, to find point masses, and for fallback cuts once the data are gone. The GPU twin (sample.cu) selects
the same rows.
"""
from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np

from .._background import register_compile_notice

register_compile_notice()  # a one-line notice while Numba compiles these kernels (first use only)

N_SAMPLE = 4096  # rows kept: fallback cuts from 4096 rows hold <= ~2/max_bin per bin at max_bin 256
KEY_MAX = (1 << 64) - 1
GOLD = 0x9E3779B97F4A7C15
_C_N = 0x5851F42D4C957F2D
_C_LAST = 0xD1B54A32D192ED03
_QNAN_BITS = 0x7FF8000000000000


def mix64(z):
    """The 64-bit finaliser of sample.cu's mix64 (a bijection), on NumPy uint64 scalars or arrays."""
    z = np.asarray(z, np.uint64)
    with np.errstate(over="ignore"):
        z = z ^ (z >> np.uint64(33))
        z = z * np.uint64(0xFF51AFD7ED558CCD)
        z = z ^ (z >> np.uint64(33))
        z = z * np.uint64(0xC4CEB9FE1A85EC53)
        z = z ^ (z >> np.uint64(33))
    return z


def _row_bits(row: np.ndarray) -> np.ndarray:
    """float64 bits of a row (float32 converted exactly), every NaN as one canonical pattern."""
    b = np.asarray(row, np.float64).view(np.uint64).copy()
    b[np.isnan(np.asarray(row, np.float64))] = _QNAN_BITS
    return b


def batch_salt(first_row: np.ndarray, last_row: np.ndarray, n: int) -> int:
    """Salt of a batch: a hash of its size and its first and last rows (equal batches repeat their sample)."""
    j = np.arange(1, first_row.size + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        g = j * np.uint64(GOLD)
        a = mix64(_row_bits(first_row) + g)
        b = mix64((_row_bits(last_row) ^ np.uint64(_C_LAST)) + g)
    s = int(mix64(np.uint64(n) ^ np.uint64(_C_N)))
    return s ^ int(np.bitwise_xor.reduce(a ^ b)) if j.size else s


def threshold(n: int, k: int) -> int:
    """Key threshold that keeps k of n rows in expectation (all rows when n <= k)."""
    return KEY_MAX if n <= k else (int(k) << 64) // int(n)


def buffer_rows(n: int, k: int) -> int:
    """Room for the rows under the threshold: k + 8 sd + 64 (an overflow is detected and redone exactly)."""
    return int(min(n, k + 8 * int(np.sqrt(k)) + 64))


@nb.njit(cache=True)
def _select(n, salt, T):
    idx = np.empty(64, np.int64)
    keys = np.empty(64, np.uint64)
    m = 0
    g = np.uint64(GOLD)
    for i in range(n):
        z = np.uint64(i) + g
        z ^= z >> np.uint64(33)
        z *= np.uint64(0xFF51AFD7ED558CCD)
        z ^= z >> np.uint64(33)
        z *= np.uint64(0xC4CEB9FE1A85EC53)
        z ^= z >> np.uint64(33)
        z = z ^ salt
        z ^= z >> np.uint64(33)
        z *= np.uint64(0xFF51AFD7ED558CCD)
        z ^= z >> np.uint64(33)
        z *= np.uint64(0xC4CEB9FE1A85EC53)
        z ^= z >> np.uint64(33)
        if z <= T:
            if m == idx.size:
                idx = np.concatenate((idx, np.empty(m, np.int64)))
                keys = np.concatenate((keys, np.empty(m, np.uint64)))
            idx[m] = i
            keys[m] = z
            m += 1
    return idx[:m], keys[:m]


def select_rows(n: int, salt: int, k: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(row indices, keys, tau) of the sample of a batch of n rows: ascending keys, at most k rows."""
    T = threshold(n, k)
    idx, keys = _select(int(n), np.uint64(salt), np.uint64(T))
    return finish_selection(idx, keys, T, k)


def finish_selection(idx: np.ndarray, keys: np.ndarray, T: int, k: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Sort the rows under threshold T by key and keep the k smallest (tau drops to the k-th key if more)."""
    order = np.argsort(keys, kind="stable")
    idx, keys = idx[order], keys[order]
    if keys.size > k:
        idx, keys = idx[:k], keys[:k]
        T = int(keys[-1])
    return idx, keys, int(T)


@dataclass
class RowSample:
    """Rows of the sketched data with key <= tau (ascending keys, at most cap rows): x (m, d) float32 (the precision
    of the cuts) with NaN for missing values, w (m,) their sample weights (ones when unweighted).

    Each row's key hashes its index and its batch, and the sample keeps the smallest keys, so merging the samples of
    two batches gives the sample of their union exactly (``merge``).

    See Also
    --------
    MomentSketch : holds one as ``sample``.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.kernels.sketch import sketch
    >>> X = np.random.default_rng(0).normal(size=(10_000, 2))
    >>> s = sketch(X, n_sample=512).sample
    >>> s.x.shape
    (512, 2)
    """

    key: np.ndarray
    x: np.ndarray
    w: np.ndarray
    tau: int
    cap: int = N_SAMPLE

    @classmethod
    def empty(cls, d: int, cap: int = N_SAMPLE) -> "RowSample":
        return cls(np.zeros(0, np.uint64), np.zeros((0, d), np.float32), np.zeros(0), KEY_MAX, int(cap))

    @classmethod
    def of_rows(cls, X: np.ndarray, w: np.ndarray | None, cap: int = N_SAMPLE) -> "RowSample":
        """The sample of one batch X (n, d) on the host (the CPU twin of sample.cu)."""
        n, d = X.shape
        if n == 0:
            return cls.empty(d, cap)
        salt = batch_salt(X[0], X[n - 1], n)
        idx, keys, tau = select_rows(n, salt, int(cap))
        ww = np.ones(idx.size) if w is None else np.asarray(w, np.float64)[idx]
        return cls(keys, np.asarray(X[idx], np.float32), ww, tau, int(cap))  # one copy when X is float32

    @property
    def n_rows(self) -> int:
        return int(self.key.size)

    def merge(self, other: "RowSample") -> "RowSample":
        """The sample of the union of both batches' rows (exact: the rows of either with key <= the new tau)."""
        if other.x.shape[1] != self.x.shape[1]:
            raise ValueError(f"cannot merge row samples of {self.x.shape[1]} and {other.x.shape[1]} features")
        cap = min(self.cap, other.cap)
        tau = min(self.tau, other.tau)
        key = np.concatenate([self.key, other.key])
        x = np.concatenate([self.x, other.x])
        w = np.concatenate([self.w, other.w])
        keep = key <= np.uint64(tau)
        # equal keys come from batches with the same salt: the order of equal keys follows the rows' bytes, so merge
        # commutes; a row equal in key, bytes and weight is the same row of the same batch seen again (another epoch
        # over the same chunks) and is kept once, so the sample is a set and repeated epochs do not shrink it
        order = np.lexsort((w[keep], *x[keep].T[::-1], key[keep])) if x.shape[1] else np.argsort(key[keep])
        key, x, w = key[keep][order], x[keep][order], w[keep][order]
        if key.size > 1:
            xb = x.view(np.uint32)
            same = (key[1:] == key[:-1]) & (w[1:] == w[:-1])
            same[same] &= (xb[1:][same] == xb[:-1][same]).all(axis=1)
            if same.any():
                first = np.concatenate([[True], ~same])
                key, x, w = key[first], x[first], w[first]
        if key.size > cap:
            key, x, w = key[:cap], x[:cap], w[:cap]
            tau = int(key[-1])
        return RowSample(key, x, w, int(tau), cap)

    def column(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """Feature j's sampled values (NaN and zero-weight rows dropped) and their weights."""
        v = self.x[:, j]
        ok = ~np.isnan(v) & (self.w > 0)
        return v[ok], self.w[ok]

    def arrays(self) -> dict:
        """The fields for serialisation (weights only where some differ from 1)."""
        out = {"sample_key": self.key, "sample_x": self.x, "sample_meta": np.array([self.tau, self.cap], np.uint64)}
        if (self.w != 1.0).any():
            out["sample_w"] = self.w
        return out

    @classmethod
    def from_arrays(cls, z) -> "RowSample":
        meta = z["sample_meta"]
        key = z["sample_key"].copy()
        w = z["sample_w"].copy() if "sample_w" in z else np.ones(key.size)
        return cls(key, z["sample_x"].copy(), w, int(meta[0]), int(meta[1]))


def check_n_sample(n_sample) -> int:
    """n_sample as an int (0 keeps no sample)."""
    if isinstance(n_sample, bool) or not isinstance(n_sample, (int, np.integer)) or n_sample < 0:
        raise ValueError(f"n_sample must be a non-negative integer, got {n_sample!r}")
    return int(n_sample)
