"""The Numba cache entries of the CPU TreeSHAP kernels that hitml ships (kernels/_aot.py): a first-ever process
seeded with them compiles none of the TreeSHAP kernels and gives XGBoost's and shap's values, the bytes of a process
that compiles them; entries of another Numba or kernel source are never seeded and Numba's own are never replaced;
with them in place the library starts no process of its own."""
from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np
import pytest
from hitml.kernels import _aot, _aot_build, _registry

ROOT = Path(__file__).resolve().parents[1]
xgb = pytest.importorskip("xgboost")
shap = pytest.importorskip("shap")


@pytest.fixture(scope="module")
def shipped(tmp_path_factory) -> str:
    """A folder holding ``numba_cache/`` entries that serve this machine: the installed ones (``scripts/env.sh``
    builds them), else built here as an install would."""
    probe = tmp_path_factory.mktemp("probe")
    r = subprocess.run([sys.executable, "-m", "hitml.kernels", "aot", "--check"], capture_output=True, text=True,
                       timeout=600, check=False, cwd=ROOT, env=dict(os.environ, NUMBA_CACHE_DIR=str(probe)))
    if r.returncode == 0:
        return _aot._DIR
    out = tmp_path_factory.mktemp("shipped")
    r = subprocess.run([sys.executable, "-m", "hitml.kernels", "aot", str(out)], capture_output=True, text=True,
                       timeout=1800, check=False, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    return str(out)


# A fresh process: every kind of CPU TreeSHAP call on a regression model and a multiclass one, the values saved, and
# each TreeSHAP kernel's cache misses (compiles) and hits (loads) printed as JSON.
_CALLS = r"""
import importlib, json, sys
import numpy as np, xgboost as xgb, shap
import hitml.shap_ext
from hitml.kernels.treeshap import cpu
rng = np.random.default_rng(int(sys.argv[2]))
X = rng.normal(size=(800, 9))
X[:, 2] = rng.integers(0, 4, 800)                     # a point mass
X[:, 3] = np.exp(3 * rng.normal(size=800))            # a heavy tail
y = X[:, 0] * 2 + X[:, 1] ** 2 + X[:, 2] * X[:, 4] + np.log1p(X[:, 3]) + rng.normal(size=800)
X[rng.random(X.shape) < 0.1] = np.nan
reg = xgb.XGBRegressor(n_estimators=30, max_depth=6, random_state=0).fit(X, y)
yc = np.digitize(y, np.quantile(y, [0.33, 0.66]))
cls = xgb.XGBClassifier(n_estimators=12, max_depth=5, random_state=0).fit(X, yc)
ps = shap.TreeExplainer(reg, backend="cpu").paths
pc = shap.TreeExplainer(cls, backend="cpu").paths
Xt, bg, w = X[:300], X[300:360], rng.random(60)
out = {"X": X, "shap": cpu.shap_values(ps, Xt, progress=False),
       "inter": cpu.interaction_values(ps, Xt[:25], progress=False),
       "interv": cpu.interventional_shap_values(ps, Xt[:80], bg, progress=False),
       "interv_w": cpu.interventional_shap_values(ps, Xt[:80], bg, weights=w, progress=False),
       "banzhaf": cpu.interventional_banzhaf_values(ps, Xt[:80], bg, progress=False),
       "interv_inter": cpu.interventional_interaction_values(ps, Xt[:15], bg[:20], progress=False),
       "logistic": cpu.interventional_shap_values(ps, Xt[:30], bg[:20], transform="logistic", progress=False),
       "multi": cpu.shap_values(pc, Xt[:200], progress=False),
       "multi_inter": cpu.interaction_values(pc, Xt[:10], progress=False)}
np.savez(sys.argv[1], **out)
reg.get_booster().save_model(sys.argv[1] + ".reg.ubj")
cls.get_booster().save_model(sys.argv[1] + ".cls.ubj")
from numba.core.dispatcher import Dispatcher
from hitml.kernels import _aot, _registry
stats = {}
for name in _registry.shipped_modules():
    for key, obj in vars(importlib.import_module(name)).items():
        d = getattr(obj, "dispatcher", obj)
        if isinstance(d, Dispatcher) and d.py_func.__module__ == name:
            stats[key] = [sum(d.stats.cache_misses.values()), sum(d.stats.cache_hits.values())]
print(json.dumps({"stats": stats, "usable": _aot.usable(), "status": _aot.status()}))
"""


def _fresh(tmp_path: Path, tag: str, **env: str) -> tuple[dict, str, Path]:
    full = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / f"cache_{tag}"), HITML_PROGRESS="1", HITML_BACKGROUND="0",
                **env)
    out = tmp_path / f"{tag}.npz"
    r = subprocess.run([sys.executable, "-c", _CALLS, str(out), "0"], env=full, capture_output=True, text=True,
                       timeout=1800, check=False, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr, out


def test_first_ever_process_loads_the_shipped_kernels_and_gives_xgboosts_values(shipped, tmp_path):
    seeded, err1, out1 = _fresh(tmp_path, "seeded", **{_aot._DIR_ENV: shipped})
    compiled, err0, out0 = _fresh(tmp_path, "compiled", **{_aot._DIR_ENV: shipped, _aot._ENV: "0"})
    assert seeded["usable"] and "compiling Numba kernels" not in err1, (seeded, err1[-2000:])
    ran = {k for k, (m, h) in seeded["stats"].items() if m + h}
    assert {"shap_quad_kernel", "interaction_quad_kernel", "rows_kernel", "condition_masks", "fail_counts",
            "value_tables", "interaction_tables", "tree_walk_kernel", "_walk"} <= ran, ran
    assert not any(m for m, _h in seeded["stats"].values()), seeded["stats"]        # nothing compiled
    assert not compiled["usable"] and "HITML_AOT=0" in compiled["status"]
    assert sum(m for m, _h in compiled["stats"].values()) > 0 and "compiling Numba kernels" in err0
    got, want = np.load(out1), np.load(out0)
    for k in want:
        assert got[k].tobytes() == want[k].tobytes(), k
    # and the independent references: XGBoost's own SHAP values and interactions, shap's C++ interventional values
    X = got["X"]
    Xt = X[:300]
    reg, cls = xgb.Booster(), xgb.Booster()
    reg.load_model(str(out1) + ".reg.ubj")
    cls.load_model(str(out1) + ".cls.ubj")
    np.testing.assert_allclose(got["shap"][:, :, 0], reg.predict(xgb.DMatrix(Xt), pred_contribs=True), atol=2e-5)
    np.testing.assert_allclose(got["inter"][..., 0], reg.predict(xgb.DMatrix(Xt[:25]), pred_interactions=True),
                               atol=5e-5)
    np.testing.assert_allclose(np.moveaxis(got["multi"], 2, 1), cls.predict(xgb.DMatrix(Xt[:200]), pred_contribs=True),
                               atol=2e-5)
    model = xgb.XGBRegressor()
    model.load_model(str(out1) + ".reg.ubj")
    ref = shap.TreeExplainer(model, X[300:360], feature_perturbation="interventional").shap_values(Xt[:80])
    # (shap's C++ holds the trees in float32)
    np.testing.assert_allclose(got["interv"][:, :-1, 0], ref, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(ref).max()))


@pytest.fixture
def fresh_state(monkeypatch, tmp_path):
    """A process state that has not seeded yet, with Numba's cache folder in ``tmp_path / "cache"``."""
    monkeypatch.setattr(_aot, "_state", {"off": False, "seeded": None, "why": "", "usable": None})
    monkeypatch.setattr(numba.core.config, "CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(_aot._ENV, raising=False)
    return tmp_path / "cache"


def _indexes(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.nbi"))


def _rewrite_version(index: Path, version: str) -> None:
    """Give a Numba cache index another Numba version (``IndexDataCacheFile._save_index``'s layout)."""
    with open(index, "rb") as f:
        pickle.load(f)
        rest = f.read()
    with open(index, "wb") as f:
        pickle.dump(version, f, protocol=-1)
        f.write(rest)


def test_seeding_copies_current_entries_once_and_never_replaces_numbas_own(shipped, tmp_path, fresh_state, monkeypatch):
    monkeypatch.setenv(_aot._DIR_ENV, shipped)
    n = len(_indexes(Path(shipped)))
    assert n >= 14 and _aot.seed_numba_cache() == n and _aot.seed_numba_cache() == n   # once per process
    there = _indexes(fresh_state)
    assert len(there) == n and _aot.usable() and "seeded" in _aot.status()
    # entries Numba wrote for the current source (here: one data file changed) stay; a stale index is replaced
    data = sorted(fresh_state.rglob("*.nbc"))[0]
    data.write_bytes(b"numba's own")
    _rewrite_version(there[-1], "0.1.0")
    monkeypatch.setattr(_aot, "_state", {"off": False, "seeded": None, "why": "", "usable": None})
    assert _aot.seed_numba_cache() == 1
    assert data.read_bytes() == b"numba's own" and _aot._index_head(str(there[-1]))[0] == numba.__version__


@pytest.mark.parametrize("change", ["source", "numba"])
def test_entries_of_other_sources_or_numba_are_never_seeded(shipped, tmp_path, fresh_state, monkeypatch, change):
    other = tmp_path / "other"
    shutil.copytree(shipped, other, ignore=shutil.ignore_patterns("_hitml_aot_*", "manifest.json"))
    if change == "source":
        (other / _aot._CACHE_SUBDIR / _aot._BUILT).write_text(json.dumps({"source": "0" * 64}))
    else:
        for index in _indexes(other):
            _rewrite_version(index, "0.1.0")
    monkeypatch.setenv(_aot._DIR_ENV, str(other))
    assert _aot.seed_numba_cache() == 0 and not _indexes(fresh_state)
    assert not _aot.usable()
    assert ("other kernel sources" if change == "source" else "another Numba") in _aot.status()


def test_switched_off_and_missing(tmp_path, fresh_state, monkeypatch):
    monkeypatch.setenv(_aot._ENV, "0")
    assert _aot.seed_numba_cache() == 0 and not _aot.usable() and "HITML_AOT=0" in _aot.status()
    monkeypatch.setattr(_aot, "_state", {"off": False, "seeded": None, "why": "", "usable": None})
    monkeypatch.delenv(_aot._ENV)
    monkeypatch.setenv(_aot._DIR_ENV, str(tmp_path / "nothing"))
    assert _aot.seed_numba_cache() == 0 and not _aot.usable() and "no shipped kernels" in _aot.status()


def test_every_cpu_kernel_module_ships_its_entries():
    groups = _aot_build.groups()   # imports the engine
    assert set(groups) >= {"treeshap-paths", "treeshap", "treeshap-interactions", "treeshap-interventional",
                           "treeshap-transforms"}
    assert set(groups) <= set(_registry.warmups())
    modules = _registry.shipped_modules()
    assert all(set(g) <= set(groups) for g in modules.values())
    # every module of the TreeSHAP family with a cached Numba kernel declared the groups that compile it (the GPU
    # packing kernels aside: the GPU engine's, not shipped)
    from numba.core.caching import FunctionCache
    from numba.core.dispatcher import Dispatcher

    cached = {name for name, mod in list(sys.modules.items()) if name.startswith("hitml.kernels.treeshap.")
              for obj in vars(mod).values() for d in [getattr(obj, "dispatcher", obj)]
              if isinstance(d, Dispatcher) and d.py_func.__module__ == name and isinstance(d._cache, FunctionCache)}
    assert cached and cached - {"hitml.kernels.treeshap._pack_jit"} <= set(modules), sorted(cached - set(modules))


def test_source_hash_follows_the_kernel_sources(tmp_path):
    root = tmp_path / "kernels"
    shutil.copytree(Path(_aot.__file__).parent, root, ignore=shutil.ignore_patterns("__pycache__", "_compiled"))
    before = _aot.source_hash(str(root))
    assert before == _aot.source_hash()
    for name in ("treeshap/_cpu_quad.py", "_items.py"):
        f = root / name
        f.write_text(f.read_text() + "\n# an edit\n")
        assert _aot.source_hash(str(root)) != before
        before = _aot.source_hash(str(root))
    f = root / "treeshap" / "_summary.py"   # no Numba function: no shipped entry depends on it
    f.write_text(f.read_text() + "\n# an edit\n")
    assert _aot.source_hash(str(root)) == before


# A process that records, and refuses, every process the library would start (a refused start is what a machine
# with no process to spare gives: the library then goes on in this process), and writes them out at its very end.
_SPAWNS = r"""
import atexit, json, os, subprocess, sys
calls = []
atexit.register(lambda: open(sys.argv[1], "w").write(json.dumps(calls)))   # registered first: runs last


def refuse(kind):
    def start(*args, **kwargs):
        calls.append(kind)
        raise OSError("refused by the test")
    return start


subprocess.Popen, os.fork, os.posix_spawn = refuse("Popen"), refuse("fork"), refuse("posix_spawn")
import numpy as np
from hitml.kernels import _aot, _background
if sys.argv[2] == "calls":   # the shipped entries serve: nothing compiles, nothing starts
    from hitml.kernels.treeshap import cpu
    from hitml.kernels.treeshap.paths import _tiny_paths
    ps = _tiny_paths()
    X = np.random.default_rng(0).normal(size=(30, 3))
    cpu.shap_values(ps, X, progress=False)
    cpu.interaction_values(ps, X[:5], progress=False)
    cpu.interventional_shap_values(ps, X, X[:5], progress=False)
    assert _aot.usable(), _aot.status()
else:                        # no shipped entries: a first cache miss starts the compiles ahead
    _background.compile_ahead()
"""


@pytest.mark.parametrize("switch", ["HITML_BACKGROUND", "HITML_COMPILE_AHEAD", None])
def test_the_background_switch_starts_no_process(shipped, tmp_path, switch):
    """``HITML_BACKGROUND=0`` (or its earlier name): the library starts no process of its own; unset, a first cache
    miss starts the compiles ahead, and with the shipped entries in place nothing starts at all."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), HITML_PROGRESS="0", **{_aot._DIR_ENV: shipped})
    for name in ("HITML_BACKGROUND", "HITML_COMPILE_AHEAD", _aot._ENV):
        env.pop(name, None)
    if switch:
        env[switch] = "0"
    for case, aot, started in (("calls", "1", []), ("ahead", "0", [] if switch else ["Popen"])):
        out = tmp_path / f"{case}.json"
        r = subprocess.run([sys.executable, "-c", _SPAWNS, str(out), case], env=dict(env, **{_aot._ENV: aot}),
                           capture_output=True, text=True, timeout=600, check=False, cwd=ROOT)
        assert r.returncode == 0, r.stderr
        assert json.loads(out.read_text()) == started, (case, switch)
