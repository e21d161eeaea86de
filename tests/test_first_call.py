"""Compile once per machine: a later process loads every CPU TreeSHAP kernel from Numba's cache (no compile, no new
cache entries) for any row count and block width; the compile notice; the warm-up command; progress settings."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _trees import basic_tree
from hitml.kernels import _background, _warmup
from hitml.kernels.treeshap import cpu, extract_paths, interaction_values, shap_values

ROOT = Path(__file__).resolve().parents[1]

# One process of the cache test: the CPU TreeSHAP kernels at several row counts (blocks of 8, 32 and 128 rows) and
# thread counts; prints each kernel's cache hits, misses and compiled signatures as JSON.
_SCRIPT = r"""
import json, sys
import numba, numpy as np
from hitml.kernels import _aot, _background, _warmup
from hitml.kernels.treeshap.paths import _tiny_paths
from hitml.kernels.treeshap import cpu, _cpu_quad as q
ps = _tiny_paths()
rng = np.random.default_rng(0)
for threads in (1, 2):
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    for n in (3, 70, 300):
        X = rng.normal(size=(n, 3))
        cpu.shap_values(ps, X, progress=False)
        cpu.interaction_values(ps, X[:40], progress=False)
cpu.interventional_shap_values(ps, X[:10], X[:4], progress=False)
out = {}
from hitml.kernels.treeshap import _cpu_patterns as pt
kernels = [("shap", q.shap_quad_kernel), ("inter", q.interaction_quad_kernel), ("masks", pt.condition_masks),
           ("counts", pt.fail_counts), ("tables", pt.value_tables),
           ("rows", pt.rows_kernel)]
for name, d in kernels:
    st = d.stats
    out[name] = {"hits": sum(st.cache_hits.values()), "misses": sum(st.cache_misses.values()),
                 "signatures": len(d.signatures)}
print(json.dumps(out))
"""


def _run(cache: Path, *args: str, **extra_env: str) -> subprocess.CompletedProcess:
    # HITML_AOT=0: these processes test Numba's cache and compiles (tests/test_aot.py tests the shipped entries)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), HITML_PROGRESS="1", NUMBA_NUM_THREADS="2", HITML_AOT="0",
               PYTHONPATH=os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), ) if p), **extra_env)
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=1500, check=False,
                          cwd=ROOT)


def _files(cache: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(cache)): (p.stat().st_size, p.stat().st_mtime_ns) for p in cache.rglob("*")
            if p.is_file()}


def test_second_process_loads_every_kernel_from_the_cache(tmp_path):
    cache = tmp_path / "numba_cache"
    first = _run(cache, "-c", _SCRIPT)
    assert first.returncode == 0, first.stderr
    stats1 = json.loads(first.stdout.strip().splitlines()[-1])
    # one compiled signature serves every row count, block width and thread count; each kernel is compiled by this
    # process (the SHAP ones) or by the processes it started at its first miss, and then loaded
    for name in stats1:
        assert stats1[name]["signatures"] == 1, stats1
        assert stats1[name]["misses"] + stats1[name]["hits"] == 1, stats1
    assert stats1["shap"]["misses"] == 1, stats1
    assert _background._NOTICE in first.stderr                       # the notice, once
    assert first.stderr.count(_background._NOTICE) == 1
    before = _files(cache)

    second = _run(cache, "-c", _SCRIPT)
    assert second.returncode == 0, second.stderr
    stats2 = json.loads(second.stdout.strip().splitlines()[-1])
    for name in stats2:
        assert stats2[name]["misses"] == 0, stats2            # nothing compiled ...
        assert stats2[name]["hits"] == 1, stats2              # ... every kernel loaded from the cache
    assert _background._NOTICE not in second.stderr
    assert _files(cache) == before                            # no new or rewritten cache entries


def test_warmup_command_fills_the_cache(tmp_path):
    cache = tmp_path / "numba_cache"
    done = _run(cache, "-m", "hitml.kernels", "warmup", "treeshap", "--jobs", "1")
    assert done.returncode == 0, done.stderr
    assert "kernels ready" in done.stderr
    assert any("shap_quad_kernel" in p and p.endswith(".nbc") for p in _files(cache))
    bad = _run(cache, "-m", "hitml.kernels", "warmup", "no-such-group")
    assert bad.returncode == 1 and "unknown warm-up groups" in bad.stderr


def _paths():
    cl, cr, ft, th, val, cov = basic_tree()
    return extract_paths(cl, cr, cl, ft, th, val, cov, np.zeros(1), n_features=3)


@pytest.mark.parametrize("bad", ["yes", "False", 1, 0, 2.0, [], "tqdm"])
def test_progress_values_are_validated(bad):
    ps = _paths()
    X = np.zeros((4, 3))
    for fn in (shap_values, interaction_values, cpu.shap_values, cpu.interaction_values):
        with pytest.raises(TypeError, match="progress must be True, False or None"):
            fn(ps, X, progress=bad)


def test_progress_bar_only_on_long_calls(monkeypatch, capsys):
    monkeypatch.setenv("HITML_PROGRESS", "1")
    ps = _paths()
    X = np.random.default_rng(0).normal(size=(50, 3))
    ref = cpu.shap_values(ps, X, progress=False)
    capsys.readouterr()
    got = cpu.shap_values(ps, X)                                 # a short call: no bar
    assert "TreeSHAP" not in capsys.readouterr().err
    monkeypatch.setattr(cpu, "_QUIET_WORK", 0.0)                # every call counts as long
    got2 = cpu.shap_values(ps, X)
    err = capsys.readouterr().err
    assert "TreeSHAP" in err and "/50 " in err                  # by rows
    cpu.interaction_values(ps, X)
    assert "TreeSHAP interactions" in capsys.readouterr().err
    cpu.shap_values(ps, X, progress=False)                       # off wins
    assert "TreeSHAP" not in capsys.readouterr().err
    assert np.array_equal(ref, got) and np.array_equal(ref, got2)


def test_explainer_validates_progress():
    xgb = pytest.importorskip("xgboost")
    import hitml.shap_ext as se

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    model = xgb.XGBRegressor(n_estimators=3, max_depth=2).fit(X, X[:, 0])
    with pytest.raises(TypeError, match="progress must be True, False or None"):
        se.TreeExplainer(model, backend="cpu", progress="off")
    assert se.TreeExplainer(model, backend="cpu", progress=np.bool_(False)).progress is False



# A fresh process compiles the SHAP kernels with _numba_compile's copy propagation in place, and every call of it
# is checked against Numba's own function on the same blocks; outside hitml's compiles Numba's own is in place.
_COPY_PROPAGATE_SCRIPT = r"""
import json
from numba.core import ir_utils
from numba.parfors import parfor
from hitml.kernels import _numba_compile as nc, _warmup
fast = nc.copy_propagate
seen = {"calls": 0, "equal": 0, "copies": 0}
def checked(blocks, typemap):
    got = fast(blocks, typemap)
    ref = nc._state["original"](blocks, typemap)
    seen["calls"] += 1
    seen["equal"] += got == ref
    seen["copies"] += sum(len(v) for v in got[1].values())
    return got
nc.copy_propagate = checked
_warmup.warmup_tasks()["treeshap"]()
seen["restored"] = ir_utils.copy_propagate is nc._state["original"] and parfor.copy_propagate is ir_utils.copy_propagate
seen["known"] = nc._state["known"]
print(json.dumps(seen))
"""


def test_copy_propagation_matches_numbas(tmp_path):
    done = _run(tmp_path / "numba_cache", "-c", _COPY_PROPAGATE_SCRIPT, HITML_BACKGROUND="0")
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    if not seen["known"]:
        pytest.skip("this Numba's copy_propagate is not the one _numba_compile replaces (Numba's own is used)")
    assert seen["calls"] >= 5 and seen["copies"] > 1000, seen       # the parfor passes' calls, on real kernels
    assert seen["equal"] == seen["calls"], seen
    assert seen["restored"], seen


_SHAP_ONLY = r"""
import json, numpy as np
from hitml.kernels import _aot, _background, _warmup
from hitml.kernels.treeshap.paths import _tiny_paths
from hitml.kernels.treeshap import cpu
ps = _tiny_paths()
cpu.shap_values(ps, np.random.default_rng(0).normal(size=(50, 3)), progress=False)
print(json.dumps(sorted(_background._ahead["children"])))
"""

_OTHERS = r"""
import json, numpy as np
from hitml.kernels import _aot, _background, _warmup
from hitml.kernels.treeshap.paths import _tiny_paths
from hitml.kernels.treeshap import cpu, _cpu_quad as q, _cpu_patterns as pt
ps = _tiny_paths()
X = np.random.default_rng(0).normal(size=(30, 3))
a = cpu.interaction_values(ps, X, progress=False)
b = cpu.interventional_shap_values(ps, X, X[:7], progress=False)
c = cpu.interventional_interaction_values(ps, X, X[:7], progress=False)
kernels = (q.interaction_quad_kernel, pt.rows_kernel, pt.condition_masks, pt.fail_counts, pt.interaction_tables)
print(json.dumps({"misses": sum(sum(d.stats.cache_misses.values()) for d in kernels),
                  "sums": [float(a.sum()), float(b.sum()), float(c.sum())]}))
"""


def test_first_miss_compiles_the_other_groups_ahead(tmp_path):
    """A process that only computes SHAP values compiles the interactions and interventional kernels in processes
    of its own (the interventional interactions after the interventional values, in the same one), and waits for
    them before it exits: the next process compiles nothing for those calls."""
    cache = tmp_path / "numba_cache"
    first = _run(cache, "-c", _SHAP_ONLY)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout.strip().splitlines()[-1]) == [
        "treeshap-interactions", "treeshap-interventional", "treeshap-interventional-interactions"]
    files = _files(cache)
    assert any("interaction_quad_kernel" in p for p in files) and any("rows_kernel" in p for p in files)
    assert any("interaction_tables" in p for p in files)
    second = _run(cache, "-c", _OTHERS)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout.strip().splitlines()[-1])["misses"] == 0
    assert _background._NOTICE not in second.stderr


def test_compile_ahead_can_be_switched_off(tmp_path):
    cache = tmp_path / "numba_cache"
    done = _run(cache, "-c", _SHAP_ONLY, HITML_BACKGROUND="0")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
    files = _files(cache)
    assert not any("interaction_quad_kernel" in p for p in files)
    assert any("shap_quad_kernel-" in p for p in files)   # and the SHAP call compiled its kernel here


def test_compile_ahead_starts_only_a_python_interpreter(monkeypatch):
    """In an application that embeds Python (a WSGI server), sys.executable is the application: nothing starts."""
    started = []
    monkeypatch.setattr(_background.subprocess, "Popen", lambda *a, **k: started.append(a))
    monkeypatch.setattr(_background, "_ahead", {"entered": set(), "children": {}, "all": [], "launched": False,
                                            "eager": False})
    monkeypatch.delenv(_background._AHEAD_ENV, raising=False)
    monkeypatch.delenv(_background._ENV, raising=False)
    monkeypatch.setattr(sys, "executable", "/usr/bin/uwsgi")
    _background.compile_ahead()
    assert started == [] and _background._ahead["children"] == {}
    assert _background._is_python("/opt/venv/bin/python3.12") and not _background._is_python("")


_PARTS_THEN_ALL = r"""
import json
from hitml.kernels import _aot, _background, _warmup
from hitml.kernels.treeshap.paths import _tiny_paths
from hitml.kernels.treeshap import _cpu_patterns as pt
_warmup.warmup_tasks()["treeshap-interventional"]()
module, parts = _background._PARTS["treeshap-interventional"]
print(json.dumps({k: sum(getattr(pt, k).stats.cache_misses.values()) for names in parts for k in names}))
"""


def _compiled(cache: Path) -> set[str]:
    """The kernels with machine code in ``cache`` (their cache data files)."""
    return {Path(p).name.split(".")[1].split("-")[0] for p in _files(cache) if p.endswith(".nbc")}


def test_parts_of_a_group_compile_their_own_kernels_and_all_of_the_group(tmp_path):
    """Each part of the interventional group compiles exactly its kernels (the others' run as no-ops, and none is
    compiled twice); the parts, in processes of their own, leave nothing of the group for a later process to
    compile."""
    cache = tmp_path / "numba_cache"
    _, parts = _background._PARTS["treeshap-interventional"]
    seen = set()
    for i, names in enumerate(parts):
        done = _run(cache, "-m", "hitml.kernels", "warmup", f"treeshap-interventional@{i}", "--jobs", "1",
                    HITML_BACKGROUND="0")
        assert done.returncode == 0, done.stderr
        now = _compiled(cache)
        assert now - seen == set(names), (i, sorted(now - seen))
        seen = now
    after = _run(cache, "-c", _PARTS_THEN_ALL, HITML_BACKGROUND="0")
    assert after.returncode == 0, after.stderr
    misses = json.loads(after.stdout.strip().splitlines()[-1])
    assert set(misses) == {k for names in parts for k in names} and not any(misses.values()), misses


def test_parts_and_runs():
    assert _background._runs(["treeshap", "treeshap-interventional", "treeshap-interventional-interactions"]) == [
        ("treeshap",), ("treeshap-interventional@0", "treeshap-interventional-interactions"),
        ("treeshap-interventional@1",)]
    assert _background._group("treeshap-interventional@1") == "treeshap-interventional"
    with pytest.raises(ValueError, match="unknown warm-up groups"):
        _warmup.warmup(["treeshap-interventional@7"], verbose=False)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the forking warm-up runs on Linux only")
def test_forking_warmup_reports_each_group_once_and_fills_the_cache(tmp_path):
    cache = tmp_path / "numba_cache"
    done = _run(cache, "-m", "hitml.kernels", "warmup", "--fork", "treeshap-interventional@0,treeshap-transforms",
                "treeshap-interventional@1", HITML_BACKGROUND="0")
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()) == ["treeshap-interventional@0", "treeshap-interventional@1",
                                           "treeshap-transforms"]
    assert {"rows_kernel", "fail_counts", "value_tables", "tree_walk_kernel"} <= _compiled(cache)
    # a group that fails is reported (so that no one waits for it) and fails the process
    bad = _run(cache, "-m", "hitml.kernels", "warmup", "--fork", "no-such-group", HITML_BACKGROUND="0")
    assert bad.returncode == 1 and bad.stdout.split() == ["no-such-group"], (bad.stdout, bad.stderr)


_SHAP_ONLY_NO_FORK = _SHAP_ONLY.replace("from hitml.kernels.treeshap import cpu",
                                        "from hitml.kernels.treeshap import cpu\n_background._can_fork = lambda: False")


def test_compile_ahead_without_fork_starts_a_process_per_run(tmp_path):
    """Where processes cannot fork, each run of groups compiles in a process of its own: the same groups end up
    in the cache."""
    cache = tmp_path / "numba_cache"
    first = _run(cache, "-c", _SHAP_ONLY_NO_FORK)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout.strip().splitlines()[-1]) == [
        "treeshap-interactions", "treeshap-interventional", "treeshap-interventional-interactions"]
    assert {"interaction_quad_kernel", "rows_kernel", "fail_counts", "interaction_tables"} <= _compiled(cache)
