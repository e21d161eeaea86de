"""``hitml-warmup``'s group "gpu": the CUDA kernels compiled into CuPy's on-disk cache ahead of use.

The check is CuPy's own cache directory: after the warm-up, a fresh process that explains a model of another shape
(more features, deeper trees, other row counts) with every GPU engine adds no file to it, i.e. it compiles nothing.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

_CALLS = textwrap.dedent("""
    import numpy as np
    from sklearn.ensemble import RandomForestRegressor
    from hitml.kernels import treeshap
    from hitml.kernels.treeshap import extract_paths

    rng = np.random.default_rng(3)
    X = rng.normal(size=(2000, 10)).astype(np.float32)
    y = X[:, 0] * X[:, 1] + np.sin(X[:, 2]) + rng.normal(scale=0.1, size=2000)
    rf = RandomForestRegressor(n_estimators=6, max_depth=9, random_state=0).fit(X, y)
    trees = [e.tree_ for e in rf.estimators_]
    N = max(t.node_count for t in trees)

    def dense(get, fill, dtype):
        out = np.full((len(trees), N), fill, dtype)
        for i, t in enumerate(trees):
            out[i, : t.node_count] = get(t)
        return out

    cl = dense(lambda t: t.children_left, -1, np.int64)
    ps = extract_paths(cl, dense(lambda t: t.children_right, -1, np.int64), cl,
                       dense(lambda t: t.feature, -2, np.int64), dense(lambda t: t.threshold, 0.0, np.float64),
                       dense(lambda t: t.value[:, 0, 0] / len(trees), 0.0, np.float64)[:, :, None],
                       dense(lambda t: t.weighted_n_node_samples, 0.0, np.float64), np.zeros(1), n_features=10)
    for Xc in (X[:700], X[:700].astype(np.float64)):
        treeshap.shap_values(ps, Xc, backend="gpu", progress=False)
        treeshap.interaction_values(ps, Xc[:30], backend="gpu", progress=False)
        treeshap.interventional_shap_values(ps, Xc[:50], Xc[:300], backend="gpu", progress=False)
        treeshap.interventional_interaction_values(ps, Xc[:20], Xc[:100], backend="gpu", progress=False)
    print("ok")
""")


@pytest.mark.gpu
def test_the_gpu_warmup_leaves_nothing_for_a_later_process_to_compile(tmp_path):
    from hitml.kernels import gpu_available

    if not gpu_available():
        pytest.skip("CuPy sees no GPU")
    env = {**os.environ, "CUPY_CACHE_DIR": str(tmp_path / "cupy"), "HITML_PROGRESS": "0"}
    done = subprocess.run([sys.executable, "-m", "hitml.kernels", "warmup", "gpu", "--jobs", "1"], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    before = sorted(os.listdir(tmp_path / "cupy"))
    assert before, "the warm-up compiled nothing into CuPy's cache"
    later = subprocess.run([sys.executable, "-c", _CALLS], env=env, capture_output=True, text=True, timeout=900)
    assert later.returncode == 0 and "ok" in later.stdout, later.stderr[-3000:]
    assert sorted(os.listdir(tmp_path / "cupy")) == before


def test_the_gpu_warmup_is_a_group_and_does_nothing_without_a_gpu(monkeypatch):
    from hitml.kernels import _warmup, device

    assert _warmup.warmup_tasks()["gpu"] is _warmup.warm_gpu
    monkeypatch.setattr(device, "gpu_available", lambda: False)
    monkeypatch.setitem(sys.modules, "cupy", None)          # any import of CuPy would now fail
    _warmup.warm_gpu()
