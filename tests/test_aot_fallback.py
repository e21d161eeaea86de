"""What a user meets where the shipped TreeSHAP kernels cannot serve (docs/design/compile.md): none built (a build
that failed at install), built for another CPU, or switched off. The values stay XGBoost's own, Numba compiles the
kernels on first use, and one notice on stderr says so and why; where they serve, a first-ever process compiles
nothing."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hitml.kernels import _aot, _background

ROOT = Path(__file__).resolve().parents[1]
xgb = pytest.importorskip("xgboost")
pytest.importorskip("shap")

# a fresh process: path-dependent SHAP values and interactions of an XGBoost model, and how many of the TreeSHAP
# kernels it compiled (Numba's cache misses)
_SCRIPT = r"""
import json, sys
import numpy as np, xgboost as xgb, shap
import hitml.shap_ext
rng = np.random.default_rng(int(sys.argv[2]))
X = rng.normal(size=(600, 7)); y = X[:, 0] + X[:, 1] * X[:, 2] + np.sin(X[:, 3]) + rng.normal(size=600)
X[rng.random(X.shape) < 0.08] = np.nan
m = xgb.XGBRegressor(n_estimators=15, max_depth=5).fit(X, y)
ex = shap.TreeExplainer(m, backend="cpu")
np.savez(sys.argv[1], X=X, phi=ex.shap_values(X[:200]), inter=ex.shap_interaction_values(X[:12]))
m.get_booster().save_model(sys.argv[1] + ".ubj")
from hitml.kernels import _aot
from hitml.kernels.treeshap import _cpu_quad as q, _path_walk
ds = [q.shap_quad_kernel, q.interaction_quad_kernel, _path_walk._walk]
print(json.dumps({"compiled": sum(sum(d.stats.cache_misses.values()) for d in ds), "status": _aot.status()}))
"""


def _fresh(tmp_path: Path, tag: str, seed: int, **env: str) -> tuple[dict, str, Path]:
    """Run ``_SCRIPT`` in a fresh process on an empty Numba cache, starting no process of its own."""
    full = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / f"cache_{tag}"), HITML_PROGRESS="1",
                HITML_BACKGROUND="0", **env)
    out = tmp_path / f"{tag}.npz"
    r = subprocess.run([sys.executable, "-c", _SCRIPT, str(out), str(seed)], env=full, capture_output=True,
                       text=True, timeout=1800, check=False, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr, out


def _assert_xgboosts_values(out: Path) -> None:
    """The values equal XGBoost's own (``Booster.predict(pred_contribs=True / pred_interactions=True)``)."""
    got = np.load(out)
    booster = xgb.Booster()
    booster.load_model(str(out) + ".ubj")
    X = got["X"]
    want = booster.predict(xgb.DMatrix(X[:200], missing=np.nan), pred_contribs=True)
    np.testing.assert_allclose(got["phi"], want[:, :-1], rtol=1e-4, atol=1e-5)
    want_i = booster.predict(xgb.DMatrix(X[:12], missing=np.nan), pred_interactions=True)
    np.testing.assert_allclose(got["inter"], want_i[:, :-1, :-1], rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def shipped(tmp_path_factory) -> Path:
    """A folder with the shipped Numba cache entries of the TreeSHAP kernels, built as an install would."""
    out = tmp_path_factory.mktemp("shipped")
    r = subprocess.run([sys.executable, "-m", "hitml.kernels", "aot", str(out)],
                       capture_output=True, text=True, timeout=1800, check=False, cwd=ROOT,
                       env=dict(os.environ, HITML_BACKGROUND="0"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert list((out / _aot._CACHE_SUBDIR).rglob("*.nbi")), "entries shipped"
    return out


@pytest.mark.parametrize("case", ["none built", "switched off", "another CPU"])
def test_without_usable_entries_numba_compiles_and_says_why_once(shipped, tmp_path, case):
    env = {_aot._DIR_ENV: str(tmp_path / "empty") if case == "none built" else str(shipped)}
    if case == "switched off":
        env[_aot._ENV] = "0"
    if case == "another CPU":
        # NUMBA_CPU_NAME changes the CPU that Numba compiles for, which its cache keys name: the shipped entries,
        # built for this CPU, match no key
        env["NUMBA_CPU_NAME"] = "generic"
    info, err, out = _fresh(tmp_path, "run", 11, **env)
    _assert_xgboosts_values(out)
    assert info["compiled"] > 0
    lines = [ln for ln in err.splitlines() if ln.startswith(_background._NOTICE)]
    assert len(lines) == 1, err[-2000:]                     # the notice, once per process
    reason = {"none built": "no shipped kernels", "switched off": "switched off (HITML_AOT=0)",
              "another CPU": "do not match this machine (built for another CPU"}[case]
    assert reason in lines[0] and reason in info["status"]   # and why the shipped entries did not serve


def test_shipped_entries_serve_a_first_ever_process(shipped, tmp_path):
    info, err, out = _fresh(tmp_path, "seeded", 12, **{_aot._DIR_ENV: str(shipped)})
    _assert_xgboosts_values(out)
    assert info["compiled"] == 0, (info, err[-2000:])       # every TreeSHAP kernel loaded from the seeded cache
    assert _background._NOTICE not in err
    assert re.search(r"\([1-9][0-9]* cache entries seeded", info["status"]), info["status"]
    assert list((tmp_path / "cache_seeded").rglob("*.nbi")), "the entries went into the process's own cache"
