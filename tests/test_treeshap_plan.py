"""The interventional engines' path plan (``_patterns.plan_paths``) against the rule written out in plain Python
with unbounded integers: a path is short when it has elements and its table (2^len entries, times len, or len^2
for interactions) holds at most TABLE_ENTRIES; short paths, in order, fill chunks greedily (a chunk takes the next
path while its tables stay within CHUNK_ENTRIES, and always at least one); offsets run within each chunk."""
from __future__ import annotations

import numpy as np
import pytest

from hitml.kernels.treeshap import _patterns as pat


def _reference(lens, interactions):
    chunks, tab_size, hist_size, long_ = [], [], [], []
    tab_off, hist_off = [-1] * len(lens), [-1] * len(lens)
    cur, t, h = [], 0, 0
    for p, n in enumerate(int(v) for v in lens):
        e = 2 ** n * max(n * n if interactions else n, 1)
        if n == 0:
            continue
        if e > pat.TABLE_ENTRIES:
            long_.append(p)
            continue
        if cur and t + e > pat.CHUNK_ENTRIES:
            chunks.append(cur)
            tab_size.append(t)
            hist_size.append(h)
            cur, t, h = [], 0, 0
        cur.append(p)
        tab_off[p], hist_off[p] = t, h
        t, h = t + e, h + 2 ** n
    if cur:
        chunks.append(cur)
        tab_size.append(t)
        hist_size.append(h)
    return chunks, long_, tab_off, hist_off, tab_size, hist_size


@pytest.mark.parametrize("interactions", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_plan_follows_the_greedy_rule(seed, interactions):
    rng = np.random.default_rng(seed)
    cases = [rng.integers(0, hi, int(rng.integers(0, 4000))) for hi in (4, 10, 17, 30, 80) for _ in range(8)]
    cases.append(rng.integers(12, 17, 150_000))                  # many chunks (values)
    cases.append(np.array([3, 58, 62, 63, 64, 70, 200, 16, 17, 0, 1]))   # tables past int64: long, not wrapped
    for lens in cases:
        plan = pat.plan_paths(np.concatenate([[0], np.cumsum(lens)]).astype(np.int64), interactions)
        chunks, long_, tab_off, hist_off, tab_size, hist_size = _reference(lens, interactions)
        assert [c.tolist() for c in plan.chunks] == chunks
        assert all(c.dtype == np.int64 for c in plan.chunks) and plan.long.dtype == np.int64
        assert plan.long.tolist() == long_
        assert plan.tab_off.tolist() == tab_off and plan.hist_off.tolist() == hist_off
        assert plan.tab_size == tab_size and plan.hist_size == hist_size
        assert plan.max_len == int(max(lens, default=0))
