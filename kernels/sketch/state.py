"""Moment sketch state per feature (weight, mean, central sums M2..Ml, min, max, bounded distinct set) and its merge."""
from __future__ import annotations

import functools
import io
from dataclasses import dataclass

import numpy as np

from ..device import cupy_module
from .sample import N_SAMPLE, RowSample

MAX_MOMENTS = 24  # the largest l the kernels are built for


def _check_n_moments(n_moments: int) -> int:
    if not isinstance(n_moments, (int, np.integer)) or not 2 <= int(n_moments) <= MAX_MOMENTS:
        raise ValueError(f"n_moments must be an integer in [2, {MAX_MOMENTS}], got {n_moments!r}")
    return int(n_moments)


def _one_weight(xp):
    """The unread one-element weight array for unweighted input (on the GPU: one per device, made once)."""
    if xp is np:
        return np.ones(1)
    return _device_one(xp.cuda.Device().id)


@functools.lru_cache(maxsize=None)
def _device_one(device_id: int):
    cp = cupy_module()  # only reached with CuPy input

    with cp.cuda.Device(device_id):
        return cp.ones(1)


def _prepare_input(X, sample_weight, xp=np):
    """Checked contiguous X (float32/float64) and weights (float64) in array module ``xp`` (NumPy or CuPy), and
    whether weights were given; without weights the weight array is a one-element dummy the kernels never read."""
    X = xp.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (n_samples, n_features), got shape {X.shape}")
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    X = xp.ascontiguousarray(X)
    if sample_weight is None:
        return X, _one_weight(xp), False
    w = xp.ascontiguousarray(xp.asarray(sample_weight, np.float64).reshape(-1))
    if w.shape[0] != X.shape[0]:
        raise ValueError(f"sample_weight has {w.shape[0]} entries, X has {X.shape[0]} rows")
    if bool(xp.any(~xp.isfinite(w) | (w < 0))):
        raise ValueError("sample_weight must be finite and non-negative")
    return X, w, True


@dataclass
class MomentSketch:
    """Per-feature moments sketch, mergeable by Pébay's pairwise formula.

    weight: (d,) total sample weight of non-missing values; mean: (d,) weighted mean;
    M: (d, l-1) weighted central sums sum w (x-mean)^k for k = 2..l; vmin / vmax: (d,) (NaN when empty);
    distinct: (d, max_distinct) sorted distinct values padded with NaN, n_distinct: (d,) count, -1 once a
    feature has more than max_distinct distinct values (then only the moments describe it); sample: the mergeable
    row sample (sample.RowSample) the cut solver checks the moment cuts against, or None (not kept).

    See Also
    --------
    sketch : builds one from rows (CPU or GPU).
    cut_points : cuts from it.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.kernels.sketch import sketch
    >>> X = np.random.default_rng(0).normal(1000.0, 1.0, size=(4000, 1))
    >>> merged = sketch(X[:1500]).merge(sketch(X[1500:]))          # batches sketched apart, merged exactly
    >>> bool(np.isclose(merged.mean[0], X.mean())), bool(np.isclose(merged.M[0, 0], ((X - X.mean()) ** 2).sum()))
    (True, True)
    """

    weight: np.ndarray
    mean: np.ndarray
    M: np.ndarray
    vmin: np.ndarray
    vmax: np.ndarray
    distinct: np.ndarray
    n_distinct: np.ndarray
    sample: RowSample | None = None

    @property
    def n_features(self) -> int:
        return int(self.weight.shape[0])

    @property
    def n_moments(self) -> int:
        return int(self.M.shape[1] + 1)

    @property
    def max_distinct(self) -> int:
        return int(self.distinct.shape[1])

    @classmethod
    def empty(cls, n_features: int, n_moments: int = 15, max_distinct: int = 256,
              n_sample: int = N_SAMPLE) -> "MomentSketch":
        """A sketch of no data (the identity of merge)."""
        l = _check_n_moments(n_moments)
        d = int(n_features)
        return cls(
            weight=np.zeros(d),
            mean=np.zeros(d),
            M=np.zeros((d, l - 1)),
            vmin=np.full(d, np.nan),
            vmax=np.full(d, np.nan),
            distinct=np.full((d, int(max_distinct)), np.nan),
            n_distinct=np.zeros(d, np.int64),
            sample=RowSample.empty(d, n_sample) if n_sample else None,
        )

    def central_moments(self) -> np.ndarray:
        """(d, l+1) central moments m_k = M_k / weight, with m_0 = 1 and m_1 = 0."""
        d, l = self.n_features, self.n_moments
        out = np.zeros((d, l + 1))
        out[:, 0] = 1.0
        with np.errstate(invalid="ignore", divide="ignore"):
            out[:, 2:] = self.M / self.weight[:, None]
        return out

    def merge(self, other: "MomentSketch") -> "MomentSketch":
        """The sketch of the union of both inputs (eq. 12 of the digest, weighted)."""
        if other.n_features != self.n_features or other.n_moments != self.n_moments:
            raise ValueError(
                f"cannot merge sketches of shape (d={self.n_features}, l={self.n_moments}) and "
                f"(d={other.n_features}, l={other.n_moments})"
            )
        if other.max_distinct != self.max_distinct:
            raise ValueError(f"cannot merge sketches with max_distinct {self.max_distinct} and {other.max_distinct}")
        w, mean, M = merge_moments(self.weight, self.mean, self.M, other.weight, other.mean, other.M)
        vmin = np.fmin(self.vmin, other.vmin)
        vmax = np.fmax(self.vmax, other.vmax)
        distinct, nd = merge_distinct(self.distinct, self.n_distinct, other.distinct, other.n_distinct)
        both = self.sample is not None and other.sample is not None
        return MomentSketch(w, mean, M, vmin, vmax, distinct, nd, self.sample.merge(other.sample) if both else None)

    __add__ = merge

    # ----------------------------------------------------------------------------------------- serialisation
    def to_bytes(self) -> bytes:
        """Serialise (a NumPy .npz payload, version 2 with the row sample; overflowed distinct sets are not stored)."""
        buf = io.BytesIO()
        keep = self.n_distinct >= 0
        width = int(self.n_distinct[keep].max()) if keep.any() else 0
        np.savez(
            buf,
            version=np.int64(2),
            weight=self.weight,
            mean=self.mean,
            M=self.M,
            vmin=self.vmin,
            vmax=self.vmax,
            distinct=self.distinct[:, :width],
            n_distinct=self.n_distinct,
            max_distinct=np.int64(self.max_distinct),
            **(self.sample.arrays() if self.sample is not None else {}),
        )
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, payload: bytes) -> "MomentSketch":
        """Inverse of to_bytes (version 1 payloads, from before the row sample, load without one)."""
        with np.load(io.BytesIO(payload), allow_pickle=False) as z:
            if int(z["version"]) not in (1, 2):
                raise ValueError(f"unknown MomentSketch serialisation version {int(z['version'])}")
            d = z["weight"].shape[0]
            distinct = np.full((d, int(z["max_distinct"])), np.nan)
            distinct[:, : z["distinct"].shape[1]] = z["distinct"]
            return cls(z["weight"].copy(), z["mean"].copy(), z["M"].copy(), z["vmin"].copy(), z["vmax"].copy(),
                       distinct, z["n_distinct"].copy(), RowSample.from_arrays(z) if "sample_key" in z else None)

    def __getstate__(self):
        return {"payload": self.to_bytes()}

    def __setstate__(self, state):
        other = MomentSketch.from_bytes(state["payload"])
        self.__dict__.update(other.__dict__)


def merge_moments(wa, ma, Ma, wb, mb, Mb):
    """Pébay's pairwise merge of weighted central sums, vectorised over features.

    M_k = W_A a^k + W_B b^k + sum_{i=0}^{k-2} C(k,i) (MA_{k-i} a^i + MB_{k-i} b^i), a = -W_B d / W, b = W_A d / W,
    d = mean_B - mean_A. Returns (weight, mean, M).

    Parameters
    ----------
    wa, ma, Ma : numpy.ndarray
        Weights (d,), means (d,) and central sums (d, l-1) of the first part.
    wb, mb, Mb : numpy.ndarray
        The same for the second part.

    Returns
    -------
    tuple of numpy.ndarray
        ``(weight, mean, M)`` of the union.

    See Also
    --------
    MomentSketch.merge : merges whole sketches with it.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.kernels.sketch import merge_moments
    >>> a, b = np.array([1.0, 2.0]), np.array([3.0, 5.0])
    >>> central = lambda x: np.array([[((x - x.mean()) ** k).sum() for k in (2, 3)]])
    >>> w, m, M = merge_moments(np.array([2.0]), np.array([a.mean()]), central(a),
    ...                         np.array([2.0]), np.array([b.mean()]), central(b))
    >>> bool(np.allclose(M, central(np.r_[a, b]))), float(m[0])
    (True, 2.75)
    """
    wa = np.asarray(wa, np.float64)
    wb = np.asarray(wb, np.float64)
    w = wa + wb
    safe = np.where(w > 0, w, 1.0)
    delta = np.where((wa > 0) & (wb > 0), mb - ma, 0.0)
    mean = np.where(wa > 0, ma, mb) + np.where((wa > 0) & (wb > 0), wb / safe * delta, 0.0)
    a = -wb * delta / safe
    b = wa * delta / safe
    l = Ma.shape[-1] + 1
    full_a = np.concatenate([np.zeros(wa.shape + (2,)), Ma], axis=-1)  # index k -> M_k, M_0 = M_1 = 0 here
    full_b = np.concatenate([np.zeros(wb.shape + (2,)), Mb], axis=-1)
    pa = np.ones((l + 1,) + wa.shape)
    pb = np.ones((l + 1,) + wa.shape)
    for i in range(1, l + 1):
        pa[i] = pa[i - 1] * a
        pb[i] = pb[i - 1] * b
    out = np.empty_like(Ma)
    for k in range(2, l + 1):
        acc = wa * pa[k] + wb * pb[k]
        c = 1.0
        for i in range(0, k - 1):
            acc = acc + c * (full_a[..., k - i] * pa[i] + full_b[..., k - i] * pb[i])
            c = c * (k - i) / (i + 1)
        out[..., k - 2] = acc
    return w, mean, out


def merge_distinct(va, na, vb, nb):
    """Union of two bounded distinct-value sets per feature; a count of -1 marks an overflowed set."""
    cap = va.shape[1]
    d = va.shape[0]
    out = np.full((d, cap), np.nan)
    nd = np.empty(d, np.int64)
    for j in range(d):
        if na[j] < 0 or nb[j] < 0:
            nd[j] = -1
            continue
        u = np.union1d(va[j, : na[j]], vb[j, : nb[j]])
        if u.size > cap:
            nd[j] = -1
        else:
            out[j, : u.size] = u
            nd[j] = u.size
    return out, nd


def update(sketch: MomentSketch, x: np.ndarray, w: float = 1.0) -> MomentSketch:
    """Add one row x (d,) with weight w (Pébay's incremental update, eq. 13, weighted); NaN entries are skipped.

    Parameters
    ----------
    sketch : MomentSketch
        The sketch so far.
    x : numpy.ndarray of shape (d,)
        One row.
    w : float, default 1.0
        Its weight.

    Returns
    -------
    MomentSketch
        The updated sketch.

    See Also
    --------
    merge_moments : the batch form.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.kernels.sketch import sketch, update
    >>> X = np.random.default_rng(0).normal(size=(100, 2))
    >>> one_more = update(sketch(X[:99]), X[99])
    >>> bool(np.allclose(one_more.mean, X.mean(0)))
    True
    """
    x = np.asarray(x, np.float64).reshape(-1)
    if x.shape[0] != sketch.n_features:
        raise ValueError(f"row has {x.shape[0]} values, the sketch has {sketch.n_features} features")
    if np.isinf(x).any():
        raise ValueError("row contains +/-inf; the moments sketch accepts finite values and NaN (missing) only")
    ok = ~np.isnan(x)
    wb = np.where(ok, float(w), 0.0)
    wa, ma, Ma = sketch.weight, sketch.mean, sketch.M
    wn = wa + wb
    safe = np.where(wn > 0, wn, 1.0)
    delta = np.where(ok & (wa > 0), x - ma, 0.0)
    mean = np.where(wa > 0, ma + wb / safe * delta, np.where(ok, x, ma))
    l = sketch.n_moments
    full = np.concatenate([np.zeros((x.shape[0], 2)), Ma], axis=1)
    r = -wb * delta / safe  # shift of the old points: mean_A - mean
    s = wa * delta / safe   # shift of the new point: x - mean
    M = np.empty_like(Ma)
    for k in range(2, l + 1):
        acc = wa * r**k + wb * s**k
        c = 1.0
        for i in range(0, k - 1):
            acc = acc + c * full[:, k - i] * r**i
            c = c * (k - i) / (i + 1)
        M[:, k - 2] = acc
    vmin = np.where(ok, np.fmin(sketch.vmin, x), sketch.vmin)
    vmax = np.where(ok, np.fmax(sketch.vmax, x), sketch.vmax)
    one = np.full((x.shape[0], sketch.max_distinct), np.nan)
    one[ok, 0] = x[ok]
    distinct, nd = merge_distinct(sketch.distinct, sketch.n_distinct, one, ok.astype(np.int64))
    sample = None
    if sketch.sample is not None:
        sample = sketch.sample.merge(RowSample.of_rows(x[None, :], np.array([float(w)]), sketch.sample.cap))
    return MomentSketch(wn, mean, M, vmin, vmax, distinct, nd, sample)
