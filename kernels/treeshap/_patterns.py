"""Interventional TreeSHAP in time linear in rows plus background: the pattern decomposition shared by the engines.

For one path (leaf) with ``d`` distinct features and a pair (explained row x, background row z), write ``a`` for the
set of path features whose condition x satisfies and ``b`` for z's. The game S -> [the leaf is reached by x_S,
z_rest] is 1 iff every path feature in S is in ``a`` and every one outside S is in ``b``, so it is 0 unless
``a | b`` is the whole path; then ``P = a & ~b`` (x-only features, which S must hold) and ``Q = ~a`` (z-only,
which S must leave out) are its only non-null players, and every value of the game (Shapley, Banzhaf, pair
interactions) depends on |P|, |Q| and which player is where. With ``s = ~b`` (the features z fails), the pair
contributes iff ``s`` is a subset of ``a``, and then ``P = s``. Averaged over the background, the value of x at
the leaf is a sum over the subsets ``s`` of ``a`` of ``g(s)``, the background weight of rows that fail exactly
``s``: the background enters through one histogram of 2^d numbers per path, the explained row through its pattern
``a``. Tables over ``a`` (2^d rows, one entry per path feature or feature pair) make each explained row cost one
lookup per path element. See docs/design/treeshap.md ("Interventional values in linear time").

This module holds the weights (exact, from integer factorials) and the path planning both engines use.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .paths import path_elements

__all__ = ["SHAPLEY", "BANZHAF", "value_weights", "interaction_weights", "PathPlan", "plan_paths",
           "Conditions", "distinct_conditions"]

SHAPLEY = 0
BANZHAF = 1
METRICS = {"shapley": SHAPLEY, "banzhaf": BANZHAF}

# the largest path (distinct features) given a table: 2^d * width entries at most this many (width d for values,
# d * d for interactions). Longer paths use the sparse pair form: the distinct background fail sets of the path,
# against each explained row (WOODELF's sparse form).
TABLE_ENTRIES = 1 << 16
# tables of one chunk of paths hold at most this many float64 entries (the engines process paths in chunks)
CHUNK_ENTRIES = 1 << 24
MAX_SPARSE_LENGTH = 62    # fail sets are int64 bit masks


def _fact(k: int) -> int:
    return math.factorial(k)


def value_weights(metric: int, D: int) -> tuple[np.ndarray, np.ndarray]:
    """(WP, WQ), (D+1, D+1) float64: a player in P, resp. Q, of the game with |P| = p, |Q| = q gets WP[p, q], resp.
    WQ[p, q], times the leaf value. Shapley: (p-1)! q! / (p+q)! and -p! (q-1)! / (p+q)!; Banzhaf: +-2^-(p+q-1)."""
    WP = np.zeros((D + 1, D + 1))
    WQ = np.zeros((D + 1, D + 1))
    for p in range(D + 1):
        for q in range(D + 1 - p):
            n = p + q
            if n == 0:
                continue
            if metric == BANZHAF:
                w = Fraction(1, 2 ** (n - 1))
                wp, wq = w, -w
            else:
                wp = Fraction(_fact(p - 1) * _fact(q), _fact(n)) if p > 0 else Fraction(0)
                wq = -Fraction(_fact(p) * _fact(q - 1), _fact(n)) if q > 0 else Fraction(0)
            WP[p, q] = float(wp) if p > 0 else 0.0
            WQ[p, q] = float(wq) if q > 0 else 0.0
    return WP, WQ


def interaction_weights(D: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(WPP, WPQ, WQQ), (D+1, D+1): shap's off-diagonal interaction value (half the Shapley interaction index
    sum_S |S|! (n-|S|-2)! / (n-1)! [v(S+ij) - v(S+i) - v(S+j) + v(S)]) of a pair of players both in P, one in P and
    one in Q, both in Q, for the game with |P| = p, |Q| = q, n = p + q."""
    WPP = np.zeros((D + 1, D + 1))
    WPQ = np.zeros((D + 1, D + 1))
    WQQ = np.zeros((D + 1, D + 1))
    for p in range(D + 1):
        for q in range(D + 1 - p):
            n = p + q
            if n < 2:
                continue
            den = 2 * _fact(n - 1)
            if p >= 2:
                WPP[p, q] = float(Fraction(_fact(p - 2) * _fact(q), den))
            if p >= 1 and q >= 1:
                WPQ[p, q] = float(-Fraction(_fact(p - 1) * _fact(q - 1), den))
            if q >= 2:
                WQQ[p, q] = float(Fraction(_fact(p) * _fact(q - 2), den))
    return WPP, WPQ, WQQ


@dataclass
class PathPlan:
    """Which paths go through tables (short) and which through the sparse pair form (long), in chunks.

    ``chunks``: list of int64 arrays of path indices whose tables fit CHUNK_ENTRIES together; ``long``: int64 path
    indices longer than a table allows; ``tab_off``/``hist_off`` (P,): offsets of each short path's table and
    histogram inside its chunk (-1 for long paths); ``width`` 1 for values, 2 for interactions.
    """

    chunks: list
    long: np.ndarray
    tab_off: np.ndarray
    hist_off: np.ndarray
    tab_size: list
    hist_size: list
    max_len: int


def plan_paths(path_ptr: np.ndarray, interactions: bool) -> PathPlan:
    """The plan of the paths of ``path_ptr``: the short paths, in order, cut into chunks greedily (a chunk takes the
    next path while its tables stay within CHUNK_ENTRIES, and at least one path), each path's table and histogram
    offsets within its chunk; the long paths apart. Each chunk's end is found by a search in the running sum of
    the table sizes, so a call pays one search per chunk, not a Python step per path."""
    lens = np.diff(path_ptr).astype(np.int64)
    P = len(lens)
    width = lens * lens if interactions else lens
    # 2^40 x 40^2 stays within int64 and far above TABLE_ENTRIES: longer paths are long without overflow
    entries = (np.int64(1) << np.minimum(lens, 40)) * np.maximum(width, 1)
    short = (entries <= TABLE_ENTRIES) & (lens > 0)
    long_ = np.nonzero((~short) & (lens > 0))[0].astype(np.int64)
    tab_off = np.full(P, -1, np.int64)
    hist_off = np.full(P, -1, np.int64)
    sp = np.nonzero(short)[0].astype(np.int64)
    e = entries[sp]
    h = np.int64(1) << lens[sp]
    e_end, h_end = np.cumsum(e), np.cumsum(h)
    chunks, tab_size, hist_size = [], [], []
    i, n = 0, len(sp)
    while i < n:
        e0 = int(e_end[i - 1]) if i else 0
        h0 = int(h_end[i - 1]) if i else 0
        j = max(i + 1, int(np.searchsorted(e_end, e0 + CHUNK_ENTRIES, side="right")))
        chunks.append(sp[i:j])
        tab_off[sp[i:j]] = e_end[i:j] - e[i:j] - e0
        hist_off[sp[i:j]] = h_end[i:j] - h[i:j] - h0
        tab_size.append(int(e_end[j - 1]) - e0)
        hist_size.append(int(h_end[j - 1]) - h0)
        i = j
    return PathPlan(chunks, long_, tab_off, hist_off, tab_size, hist_size, int(lens.max(initial=0)))


@dataclass
class Conditions:
    """The distinct element tests of a set of paths, so that a background row is tested once per distinct test.

    Elements of one feature with equal bounds and NaN rule are one condition; a numeric ``(t, inf]`` element is the
    complement of the condition ``(-inf, t]`` with the opposite NaN rule (``neg``), so a split's two children share
    one. Categorical elements are conditions of their own. ``uid``/``neg`` (E,): each element's condition (-1 for
    elements of paths not asked for); per condition u: ``feature``, the numeric bounds ``(lower, upper]`` and NaN
    rule ``nan_ok``, and ``element`` (a categorical element to test as is, else -1).
    """

    uid: np.ndarray
    neg: np.ndarray
    feature: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    nan_ok: np.ndarray
    element: np.ndarray


def distinct_conditions(path_ptr, feature, lower, upper, missing_ok, cat_ptr, pidx) -> Conditions:
    """The distinct conditions (see ``Conditions``) of the elements of paths ``pidx``."""
    E = len(feature)
    e = path_elements(path_ptr, pidx)
    f = feature[e].astype(np.int64)
    lo = lower[e].astype(np.float64)
    hi = upper[e].astype(np.float64)
    ok = missing_ok[e].astype(bool)
    cat = cat_ptr[e] >= 0
    neg = ~cat & (hi == np.inf) & (lo != -np.inf)
    klo = np.where(neg, -np.inf, lo)
    khi = np.where(neg, lo, hi)
    kok = ok ^ neg
    kcat = np.where(cat, e, -1)
    order = np.lexsort((kcat, kok, khi, klo, f))
    fs, los, his, oks, cs = f[order], klo[order], khi[order], kok[order], kcat[order]
    new = np.ones(len(e), bool)
    new[1:] = (fs[1:] != fs[:-1]) | (los[1:] != los[:-1]) | (his[1:] != his[:-1]) | (oks[1:] != oks[:-1]) \
        | (cs[1:] != cs[:-1])
    group = np.cumsum(new) - 1
    uid = np.full(E, -1, np.int64)
    uid[e[order]] = group
    neg_all = np.zeros(E, np.bool_)
    neg_all[e] = neg
    first = order[new]
    return Conditions(uid=uid, neg=neg_all, feature=f[first], lower=klo[first], upper=khi[first], nan_ok=kok[first],
                      element=kcat[first])
