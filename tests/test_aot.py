"""The compiled copies of the CPU TreeSHAP kernels (kernels/_aot.py): where they run, they give the Numba kernels'
bytes, and both agree with XGBoost's and shap's own numbers; stale or foreign copies are never run; a first-ever
process on an empty Numba cache runs them without compiling."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hitml.kernels import _aot, _aot_build, _background, _registry
from hitml.kernels.treeshap import cpu
from hitml.kernels.treeshap.paths import _hand_paths

ROOT = Path(__file__).resolve().parents[1]
xgb = pytest.importorskip("xgboost")
shap = pytest.importorskip("shap")
import hitml.shap_ext  # noqa: E402,F401 - registers backend="cpu"


@pytest.fixture(scope="module")
def copies(tmp_path_factory) -> str:
    """The folder of valid compiled copies: the installed ones (scripts/env.sh builds them), else built here."""
    _aot._state["table"] = None
    if _aot.available():
        return _aot.folder()
    out = tmp_path_factory.mktemp("aot")
    r = subprocess.run([sys.executable, "-m", "hitml.kernels", "aot", str(out)], capture_output=True, text=True,
                       timeout=1800, check=False, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    os.environ[_aot._DIR_ENV] = str(out)
    _aot._state["table"] = None
    assert _aot.available(), _aot.status()
    return str(out)


def _run_copies(monkeypatch, fn, behind: list | None = None):
    """``fn()`` with the compiled copies as a first-ever process gets them (no Numba code in the cache), and
    the kernels that ran as copies; ``behind`` collects the groups the background compile was asked for."""
    behind = [] if behind is None else behind
    monkeypatch.setattr(_aot, "_decided", {})
    monkeypatch.setattr(_aot, "loaded", lambda d, a: False)
    monkeypatch.setattr(_background, "compile_full_tier", lambda groups=_background._FULL_GROUPS: behind.extend(groups) or 1)
    monkeypatch.delenv(_aot._ENV, raising=False)
    monkeypatch.delenv(_background._TIER_ENV, raising=False)
    out = fn()
    ran = {key[0].py_func.__name__ for key, (f, _t) in _aot._decided.items() if f is not key[0]}
    monkeypatch.undo()
    return out, ran


def _run_numba(monkeypatch, fn):
    monkeypatch.setenv(_aot._ENV, "0")
    out = fn()
    monkeypatch.undo()
    return out


def _data(seed: int, n: int = 800, m: int = 9):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, m))
    X[:, 2] = rng.integers(0, 4, n)                     # a point mass
    X[:, 3] = np.exp(3 * rng.normal(size=n))            # a heavy tail
    y = X[:, 0] * 2 + X[:, 1] ** 2 + X[:, 2] * X[:, 4] + np.log1p(X[:, 3]) + rng.normal(size=n)
    X[rng.random(X.shape) < 0.1] = np.nan
    return X, y


@pytest.mark.parametrize("seed", [0, 1])
def test_copies_give_numbas_bytes_and_xgboosts_values(copies, monkeypatch, seed):
    X, y = _data(seed)
    model = xgb.XGBRegressor(n_estimators=30, max_depth=4 + 3 * seed, random_state=seed).fit(X, y)
    ex = shap.TreeExplainer(model, backend="cpu")
    ps = ex.paths
    Xt, bg, w = X[:300], X[300:360], np.random.default_rng(seed).random(60)

    def calls():
        return {"shap": cpu.shap_values(ps, Xt, progress=False),
                "inter": cpu.interaction_values(ps, Xt[:25], progress=False),
                "interv": cpu.interventional_shap_values(ps, Xt[:80], bg, progress=False),
                "interv_w": cpu.interventional_shap_values(ps, Xt[:80], bg, weights=w, progress=False),
                "banzhaf": cpu.interventional_banzhaf_values(ps, Xt[:80], bg, progress=False),
                "interv_inter": cpu.interventional_interaction_values(ps, Xt[:15], bg[:20], progress=False),
                "logistic": cpu.interventional_shap_values(ps, Xt[:30], bg[:20], transform="logistic",
                                                           progress=False)}

    got, ran = _run_copies(monkeypatch, calls)
    want = _run_numba(monkeypatch, calls)
    assert {"shap_quad_kernel_items", "interaction_quad_kernel_items", "rows_kernel", "condition_masks",
            "fail_counts", "value_tables", "interaction_tables", "tree_walk_kernel"} <= ran, ran
    for k in want:
        assert got[k].tobytes() == want[k].tobytes(), k
    # and the independent references: XGBoost's own SHAP values and interactions, shap's C++ interventional
    dm = xgb.DMatrix(Xt)
    booster = model.get_booster()
    np.testing.assert_allclose(got["shap"][:, :, 0], booster.predict(dm, pred_contribs=True), atol=2e-5)
    np.testing.assert_allclose(got["inter"][..., 0].sum(axis=2)[:, :-1],
                               booster.predict(xgb.DMatrix(Xt[:25]), pred_interactions=True).sum(axis=2)[:, :-1],
                               atol=5e-5)
    ref = shap.TreeExplainer(model, bg, feature_perturbation="interventional").shap_values(Xt[:80])
    # (shap's C++ holds the trees in float32)
    np.testing.assert_allclose(got["interv"][:, :-1, 0], ref, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(ref).max()))


def test_copies_of_path_extraction_and_multiclass(copies, monkeypatch):
    X, y = _data(5, n=600)
    yc = np.digitize(y, np.quantile(y, [0.33, 0.66]))
    model = xgb.XGBClassifier(n_estimators=12, max_depth=5, random_state=0).fit(X, yc)

    def calls():
        ex = shap.TreeExplainer(model, backend="cpu")   # path extraction runs in the copies too
        return {"paths": ex.paths.path_ptr.copy(), "zero": ex.paths.zero_fraction.copy(),
                "shap": cpu.shap_values(ex.paths, X[:200], progress=False),
                "inter": cpu.interaction_values(ex.paths, X[:10], progress=False)}

    behind = []
    got, ran = _run_copies(monkeypatch, calls, behind)
    want = _run_numba(monkeypatch, calls)
    assert "_walk" in ran and "shap_quad_kernel_items" in ran, ran
    # the Numba kernels of what ran are compiled behind, for later processes
    assert {"treeshap-paths", "treeshap", "treeshap-interactions"} == set(behind), behind
    for k in want:
        assert got[k].tobytes() == want[k].tobytes(), k
    ref = model.get_booster().predict(xgb.DMatrix(X[:200]), pred_contribs=True)
    np.testing.assert_allclose(np.moveaxis(got["shap"], 2, 1), ref, atol=2e-5)


def test_numba_code_in_the_cache_runs_instead_of_a_copy(copies, monkeypatch):
    monkeypatch.setattr(_aot, "_decided", {})
    monkeypatch.setattr(_aot, "loaded", lambda d, a: True)
    ps = _hand_paths()
    X = np.random.default_rng(0).normal(size=(6, 3))
    cpu.interventional_shap_values(ps, X, X[:3], progress=False)   # work-item kernels, each through _aot.entry
    assert _aot._decided and all(f is key[0] for key, (f, _t) in _aot._decided.items())


def _copy_with(copies: str, tmp_path: Path, **changes) -> Path:
    out = tmp_path / "copies"
    shutil.copytree(copies, out)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest.update(changes)
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


@pytest.mark.parametrize("field, value", [("source", "0" * 64), ("cpu", "pentium"), ("numba", "0.1.0"),
                                          ("features", "+sse2")])
def test_stale_or_foreign_copies_are_never_run(copies, tmp_path, monkeypatch, field, value):
    out = _copy_with(copies, tmp_path, **{field: value})
    monkeypatch.setenv(_aot._DIR_ENV, str(out))
    monkeypatch.setattr(_aot, "_state", {"table": None, "off": False, "why": ""})
    assert not _aot.available()
    assert field in _aot.status()
    d = cpu._q.shap_quad_items.dispatcher
    assert _aot.entry(d, ()) is d


def test_switched_off_and_missing(copies, tmp_path, monkeypatch):
    monkeypatch.setattr(_aot, "_state", {"table": None, "off": False, "why": ""})
    monkeypatch.setenv(_aot._ENV, "0")
    assert not _aot.available() and "HITML_AOT=0" in _aot.status()
    monkeypatch.delenv(_aot._ENV)
    monkeypatch.setenv(_aot._DIR_ENV, str(tmp_path))
    assert not _aot.available() and "no compiled kernels" in _aot.status()


def test_every_kernel_module_has_its_warmup_groups():
    groups = _aot_build.groups()   # imports every family
    assert set(groups) >= {"treeshap-paths", "treeshap", "treeshap-interactions", "treeshap-interventional",
                           "treeshap-transforms"}
    assert set(groups) <= set(_registry.warmups())
    modules = _registry.copy_modules()
    assert all(set(g) <= set(groups) for g in modules.values())
    # every module with a kernel that Python calls through the dispatch declared the groups that compile it
    dispatched = {name for name, mod in list(sys.modules.items()) if name.startswith("hitml.kernels.")
                  for obj in vars(mod).values() if isinstance(obj, _aot.EntryPoint) and obj.__module__ == name}
    assert dispatched and dispatched <= set(modules), sorted(dispatched - set(modules))


def test_source_hash_follows_the_kernel_sources(tmp_path):
    root = tmp_path / "kernels"
    shutil.copytree(Path(_aot.__file__).parent, root, ignore=shutil.ignore_patterns("__pycache__", "_compiled"))
    before = _aot.source_hash(str(root))
    assert before == _aot.source_hash()
    f = root / "treeshap" / "_cpu_quad.py"
    f.write_text(f.read_text() + "\n# an edit\n")
    assert _aot.source_hash(str(root)) != before


_FIRST_EVER = r"""
import json, sys, time
import numpy as np, xgboost as xgb, shap
import hitml.shap_ext
rng = np.random.default_rng(3)
X = rng.normal(size=(2000, 8)); y = X[:, 0] + X[:, 1] * X[:, 2] + rng.normal(size=2000)
X[rng.random(X.shape) < 0.05] = np.nan
m = xgb.XGBRegressor(n_estimators=20, max_depth=6).fit(X, y)
ex = shap.TreeExplainer(m, backend="cpu")
a = ex.shap_values(X[:100]); b = ex.shap_interaction_values(X[:10])
c = shap.TreeExplainer(m, X[:50], feature_perturbation="interventional", backend="cpu").shap_values(X[:40])
np.savez(sys.argv[1], a=a, b=b, c=c)
from hitml.kernels import _aot
from hitml.kernels.treeshap import _cpu_quad as q, _cpu_patterns as pt, paths
ds = [q.shap_quad_items.dispatcher, q.interaction_quad_items.dispatcher, pt.rows_kernel.dispatcher,
      paths._walk.dispatcher, q.shap_quad_kernel]
print(json.dumps({"available": _aot.available(),
                  "compiled": sum(sum(d.stats.cache_misses.values()) for d in ds)}))
"""


def test_first_ever_process_runs_the_copies_without_compiling(copies, tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), HITML_PROGRESS="1", HITML_BACKGROUND="0",
               **{_aot._DIR_ENV: copies})
    env.pop(_background._TIER_ENV, None)
    outs = []
    for aot in ("1", "0"):
        env[_aot._ENV] = aot
        r = subprocess.run([sys.executable, "-c", _FIRST_EVER, str(tmp_path / f"out{aot}.npz")], env=env,
                           capture_output=True, text=True, timeout=1800, check=False, cwd=ROOT)
        assert r.returncode == 0, r.stderr
        outs.append((json.loads(r.stdout.strip().splitlines()[-1]), r.stderr))
    (copied, err1), (numba_run, err0) = outs
    assert copied == {"available": True, "compiled": 0} and "compiling Numba kernels" not in err1
    assert numba_run["compiled"] > 0 and "compiling Numba kernels" in err0
    got, want = np.load(tmp_path / "out1.npz"), np.load(tmp_path / "out0.npz")
    for k in want:
        assert got[k].tobytes() == want[k].tobytes(), k


def test_argument_keys_tell_apart_what_numbas_types_do():
    """entry() caches its choice by a quick key per argument: two arguments with one key have one Numba type."""
    import numba

    base = np.arange(24.0).reshape(4, 6)
    ro = base.copy()
    ro.flags.writeable = False
    args = [base, base.T, base[:, ::2], ro, base.astype(np.float32), base[0], base.ravel(),
            np.zeros(0, np.int64), np.zeros(3, np.int32), np.zeros(3, np.uint32), np.zeros(3, np.bool_),
            np.asfortranarray(base), 1, 2, 1 << 63, -1, True, False, 1.5, np.float32(1), np.int32(3), np.int64(3),
            np.bool_(True)]
    keys = [_aot._arg_key(a) for a in args]
    types = [numba.typeof(a) for a in args]
    for i in range(len(args)):
        for j in range(len(args)):
            if keys[i] == keys[j]:   # (one type may have several keys: a Python int and np.int64, say)
                assert types[i] == types[j], (i, j, keys[i], types[i], types[j])
    # the key is of the type, not of the value
    assert _aot._arg_key(base) == _aot._arg_key(base + 1) and _aot._arg_key(7) == _aot._arg_key(-3)
    assert _aot._arg_key((1, 2)) is None


def test_long_calls_on_several_threads_run_the_numba_kernels(copies, monkeypatch):
    """A call whose single-threaded copy would lose more than a compile costs runs (and compiles) the Numba kernel."""
    import numba

    monkeypatch.setattr(numba, "get_num_threads", lambda: 8)
    assert cpu._copies_pay(1e9) and not cpu._copies_pay(1e11)
    monkeypatch.setattr(numba, "get_num_threads", lambda: 1)
    assert cpu._copies_pay(1e11)                       # one thread: nothing to lose
    monkeypatch.undo()
    monkeypatch.setattr(_aot, "_decided", {})
    monkeypatch.setattr(_aot, "loaded", lambda d, a: False)
    monkeypatch.setattr(_background, "compile_full_tier", lambda groups=(): True)
    d = cpu._q.shap_quad_items.dispatcher
    ps = _hand_paths()
    args = (np.zeros((4, 3)), *cpu._path_args(ps))    # the argument types do not matter while copies are barred
    with _aot.copies_allowed(False):
        assert _aot.entry(d, args) is d and not _aot._decided
    monkeypatch.setattr(cpu, "_copies_pay", lambda work: False)
    X = np.random.default_rng(0).normal(size=(10, 3))
    cpu.interventional_shap_values(ps, X, X[:3], progress=False)
    cpu.shap_values(ps, X, progress=False)
    assert not _aot._decided                           # no copy chosen, none run


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
if sys.argv[2] == "calls":   # the compiled copies run: the Numba kernels would compile behind them
    from hitml.kernels.treeshap import cpu
    from hitml.kernels.treeshap.paths import _tiny_paths
    ps = _tiny_paths()
    X = np.random.default_rng(0).normal(size=(30, 3))
    cpu.shap_values(ps, X, progress=False)
    cpu.interaction_values(ps, X[:5], progress=False)
    cpu.interventional_shap_values(ps, X, X[:5], progress=False)
    assert _aot.available()
else:                        # no copies: a first cache miss starts the compiles ahead
    _background.compile_ahead()
"""


@pytest.mark.parametrize("switch", ["HITML_BACKGROUND", "HITML_COMPILE_AHEAD", None])
def test_the_background_switch_starts_no_process(copies, tmp_path, switch):
    """``HITML_BACKGROUND=0`` (or its earlier name): the library starts no process of its own, neither the compile
    behind the compiled copies nor the compiles ahead of a cold cache; unset, it starts one for each."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), HITML_PROGRESS="0", **{_aot._DIR_ENV: copies})
    for name in ("HITML_BACKGROUND", "HITML_COMPILE_AHEAD", _aot._ENV, _background._TIER_ENV):
        env.pop(name, None)
    if switch:
        env[switch] = "0"
    for case, aot in (("calls", "1"), ("ahead", "0")):
        out = tmp_path / f"{case}.json"
        r = subprocess.run([sys.executable, "-c", _SPAWNS, str(out), case], env=dict(env, **{_aot._ENV: aot}),
                           capture_output=True, text=True, timeout=600, check=False, cwd=ROOT)
        assert r.returncode == 0, r.stderr
        assert json.loads(out.read_text()) == ([] if switch else ["Popen"]), (case, switch)
