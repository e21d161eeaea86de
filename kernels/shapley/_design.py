"""Coalition designs for regression Shapley estimators: paired, size-stratified, whole sizes enumerated when affordable."""
from __future__ import annotations

import itertools
import math

import numpy as np

ALLOCATIONS = ("leverage", "kernel")


def size_mass(d: int) -> np.ndarray:
    """Shapley-kernel mass of each coalition size k = 0..d (0 at the two ends, which are constraints, not samples).

    Every coalition of size k has kernel weight (d - 1) / (C(d, k) k (d - k)), so the whole size carries
    (d - 1) / (k (d - k)).

    Parameters
    ----------
    d : int
        Features.

    Returns
    -------
    ndarray of shape (d + 1,)

    Examples
    --------
    >>> from hitml.kernels.shapley import size_mass
    >>> size_mass(4).tolist()
    [0.0, 1.0, 0.75, 1.0, 0.0]
    """
    k = np.arange(d + 1, dtype=np.float64)
    out = np.zeros(d + 1)
    out[1:d] = (d - 1) / (k[1:d] * (d - k[1:d]))
    return out


def _size_allocation(d: int, budget: int, allocation: str) -> tuple[np.ndarray, np.ndarray]:
    """(counts, enumerated): coalitions of each size k = 0..d to evaluate and whether size k is complete.

    ``budget`` counts every coalition, the empty and the full set included. Sizes k and d - k are handled as one
    pair (paired sampling), the outermost first: a pair whose share of what is left covers all its coalitions is
    enumerated and the rest is shared again (the "border" of the budget); the remaining pairs get their share,
    rounded down to whole complementary pairs, with the leftover given out by largest remainder.
    """
    if allocation not in ALLOCATIONS:
        raise ValueError(f"allocation must be one of {ALLOCATIONS}, got {allocation!r}")
    counts = np.zeros(d + 1, dtype=np.int64)
    complete = np.zeros(d + 1, dtype=bool)
    counts[0] = counts[d] = 1
    complete[0] = complete[d] = True
    left = budget - 2
    pairs = [(k, d - k) for k in range(1, d // 2 + 1)]
    size_n = {k: math.comb(d, k) for k in range(d + 1)}
    mass = size_mass(d)

    def pair_total(p):  # coalitions in the pair (one size when k = d - k)
        return size_n[p[0]] * (1 if p[0] == p[1] else 2)

    def pair_weight(p):
        if allocation == "leverage":
            return 1.0 if p[0] == p[1] else 2.0
        return mass[p[0]] * (1 if p[0] == p[1] else 2)

    open_pairs = list(pairs)
    changed = True
    while changed and open_pairs:
        changed = False
        tot = sum(pair_weight(p) for p in open_pairs)
        for p in list(open_pairs):
            if left * pair_weight(p) / tot >= pair_total(p):
                counts[list(p)] = size_n[p[0]]
                complete[list(p)] = True
                left -= pair_total(p)
                open_pairs.remove(p)
                changed = True
                break  # shares change once a pair is taken out
    if open_pairs:
        tot = sum(pair_weight(p) for p in open_pairs)
        share = np.array([left * pair_weight(p) / tot for p in open_pairs])
        whole = np.floor(share / 2).astype(np.int64) * 2  # complementary pairs cost 2
        rest = left - int(whole.sum())
        order = np.argsort(-(share - whole), kind="stable")
        for i in itertools.cycle(order):
            if rest < 2:
                break
            if whole[i] + 2 <= pair_total(open_pairs[i]):
                whole[i] += 2
                rest -= 2
            elif all(whole[j] + 2 > pair_total(open_pairs[j]) for j in order):
                break
        for p, n in zip(open_pairs, whole):
            if p[0] == p[1]:
                counts[p[0]] = n
            else:
                counts[p[0]] = counts[p[1]] = n // 2
    return counts, complete


def _all_of_size(d: int, k: int) -> np.ndarray:
    out = np.zeros((math.comb(d, k), d), dtype=bool)
    for r, idx in enumerate(itertools.combinations(range(d), k)):
        out[r, list(idx)] = True
    return out


def _key(row: np.ndarray) -> bytes:
    return np.packbits(row).tobytes()


def _sample_size(d: int, k: int, n: int, rng: np.random.Generator, balanced: bool, self_paired: bool) -> np.ndarray:
    """n distinct coalitions of size k (uniform; ``balanced``: consecutive windows of random orders so each feature
    appears as evenly as possible). ``self_paired`` (k = d/2): n/2 draws plus their complements, all distinct."""
    want = n // 2 if self_paired else n
    seen: set[bytes] = set()
    rows: list[np.ndarray] = []
    order, pos = rng.permutation(d), 0
    while len(rows) < want:
        if balanced:
            if pos + k > d:
                order, pos = rng.permutation(d), 0
            idx = order[pos:pos + k]
            pos += k
        else:
            idx = rng.choice(d, k, replace=False)
        row = np.zeros(d, dtype=bool)
        row[idx] = True
        key = _key(row)
        if key in seen or (self_paired and _key(~row) in seen):
            continue
        seen.add(key)
        rows.append(row)
    out = np.array(rows, dtype=bool).reshape(-1, d)
    return np.concatenate([out, ~out]) if self_paired else out


def coalition_design(d: int, budget: int, seed=None, *, allocation: str = "leverage", balanced: bool = True):
    """(coalitions, weights, sizes_complete) for a regression estimate with ``budget`` evaluations.

    coalitions (C, d) bool, C <= budget: row 0 the empty set, row 1 the full set, then for each size the enumerated
    or sampled coalitions, every sampled S followed in its size pair by its complement. weights (C,): the Shapley
    kernel mass of the size divided by the coalitions evaluated in it (0 for the two ends), so the weighted sum over
    one size estimates the size's kernel-weighted sum without bias, and equals it when the size is complete.

    Parameters
    ----------
    d : int
        Features.
    budget : int
        Coalitions to evaluate, the empty and the full set included (at least 2; capped at 2^d).
    seed : None, int or sequence of int
        Seed of the sampled sizes.
    allocation : {"leverage", "kernel"}, default "leverage"
        How the budget is shared between sizes: evenly (the Shapley kernel's leverage scores) or by kernel mass.
    balanced : bool, default True
        Sample each size so that every feature appears about equally often.

    Returns
    -------
    tuple
        ``(coalitions (C, d) bool, weights (C,), complete (d + 1,) bool)``.

    Examples
    --------
    >>> from hitml.kernels.shapley import coalition_design, size_mass
    >>> coalitions, weights, complete = coalition_design(4, 10, seed=0)
    >>> coalitions.shape, coalitions[:2].sum(axis=1).tolist(), complete.tolist()   # sizes 1 and 3 enumerated
    ((10, 4), [0, 4], [True, False, False, False, True])
    >>> bool(abs(weights.sum() - size_mass(4).sum()) < 1e-12)                    # each size keeps its mass
    True
    """
    if budget < 2:
        raise ValueError(f"budget must be at least 2 (the empty and the full coalition), got {budget}")
    rng = np.random.default_rng(seed)
    budget = min(int(budget), 2 ** d) if d < 63 else int(budget)
    counts, complete = _size_allocation(d, budget, allocation)
    mass = size_mass(d)
    parts = [np.zeros((1, d), bool), np.ones((1, d), bool)]
    weights = [np.zeros(1), np.zeros(1)]
    for k in range(1, d // 2 + 1):
        j = d - k
        n = int(counts[k])
        if n == 0:
            continue
        if complete[k]:
            low = _all_of_size(d, k)
            block = low if k == j else np.concatenate([low, ~low])
        else:
            low = _sample_size(d, k, n, rng, balanced, self_paired=k == j)
            block = low if k == j else np.concatenate([low, ~low])
        parts.append(block)
        sizes = block.sum(axis=1)
        weights.append(mass[sizes] / counts[sizes])
    return np.concatenate(parts), np.concatenate(weights), complete
