"""First-call benchmark: how long a user waits on the first calls of a fresh Python process, hitml beside shap.

    python integration/bench_first_call.py                 # CPU part, then the GPU part where CuPy sees a GPU
    python integration/bench_first_call.py --cpu-only
    python integration/bench_first_call.py --gpu-only      # on the GPU machine; merges into the same JSON

Each measurement is a fresh subprocess with a private Numba cache folder (NUMBA_CACHE_DIR): the "first-ever" process
finds it empty (what a user meets on a new machine without `hitml-warmup`), the "later" process finds what the first
one left (a user's second script). The CPU part runs twice: as installed (the Numba cache entries of the TreeSHAP
kernels that installing hitml ships, kernels/_aot.py, seed the empty cache), and with HITML_AOT=0 (what a machine
where the shipped entries do not match meets: Numba compiles on first use). In each process, on one XGBoost model
(cal_housing, 50 trees of depth 6), in this order: the first `shap_values` on 100 rows, then 5,000 rows, the first
`shap_interaction_values` (20 rows), the first interventional call (`data=` 100 background rows,
feature_perturbation="interventional", 100 rows); then shap's own TreeExplainer on the same calls in the same
process, and a second (steady-state) 5,000-row call of each. The GPU part
times `backend="gpu"` the same way (skipped, with a note, where no GPU is visible). Writes first_call.json and
first_call.md to --out (machine, library versions, load average before and after each process).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _machine import cpu_name

ROOT = Path(__file__).resolve().parents[1]
CALLS = ("shap_values_100", "shap_values_5000", "interactions_20", "interventional_100")
LABELS = {"shap_values_100": "first `shap_values`, 100 rows", "shap_values_5000": "then 5,000 rows",
          "interactions_20": "first `shap_interaction_values`, 20 rows",
          "interventional_100": "first interventional `shap_values`, 100 rows (100 background rows)",
          "steady_5000": "steady state: a second 5,000-row call"}


# --------------------------------------------------------------------------------------------- the measured process
def _data():
    import pandas as pd
    df = pd.read_csv(ROOT / "data" / "cal_housing.csv.gz")
    y = df.pop("median_house_value").to_numpy(np.float64) / 1e5
    return df, y


def _child(kind: str, model_path: str) -> dict:
    """Runs in the fresh process: times the first calls (hitml, then shap's own) and prints them as JSON."""
    t = time.perf_counter()
    import hitml.shap_ext  # noqa: F401 - adds backend= to shap.TreeExplainer
    import shap
    import xgboost as xgb
    res: dict = {"import_s": time.perf_counter() - t}
    df, _ = _data()
    model = xgb.XGBRegressor()
    model.load_model(model_path)
    X100, X5000, X20, bg = df.iloc[:100], df.iloc[100:5100], df.iloc[:20], df.iloc[-100:]

    def timed(fn):
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def run(make):
        out = {}
        t0 = time.perf_counter()
        e = make()
        out["explainer_s"] = time.perf_counter() - t0
        out["shap_values_100"] = timed(lambda: e.shap_values(X100))
        out["shap_values_5000"] = timed(lambda: e.shap_values(X5000))
        if kind == "cpu":
            out["interactions_20"] = timed(lambda: e.shap_interaction_values(X20))
            ei = make(data=bg, feature_perturbation="interventional")
            out["interventional_100"] = timed(lambda: ei.shap_values(X100))
        out["steady_5000"] = timed(lambda: e.shap_values(X5000))
        return out

    backend = "cpu" if kind == "cpu" else "gpu"
    res["hitml"] = run(lambda **kw: shap.TreeExplainer(model, backend=backend, **kw))
    res["shap"] = run(lambda **kw: shap.TreeExplainer(model, **kw))
    from hitml.kernels import _aot
    res["shipped_kernels"] = _aot.status()
    return res


# ------------------------------------------------------------------------------------------------------ driver
def _gpu_visible() -> tuple[bool, str]:
    try:
        from hitml.kernels.device import gpu_available
        return bool(gpu_available()), ""
    except Exception as exc:
        return False, f"{type(exc).__name__}: {exc}"


def _versions() -> dict:
    out = {"python": platform.python_version()}
    for mod in ("numpy", "numba", "llvmlite", "xgboost", "shap", "cupy"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:
            out[mod] = None
    return out


def _machine() -> dict:
    gpu = None
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             check=False, text=True, timeout=30).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    return {"cpu": cpu_name(), "cores": os.cpu_count(), "gpu": gpu, "platform": platform.platform(),
            "numba_threads": os.environ.get("NUMBA_NUM_THREADS") or os.cpu_count()}


def _one_process(kind: str, model_path: Path, cache: Path, extra_env: dict) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), HITML_PROGRESS="1", **extra_env)
    load0 = os.getloadavg()
    t = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--child", kind, "--model", str(model_path)], env=env, check=False,
                          capture_output=True, text=True, timeout=3600, cwd=ROOT)
    wall = time.perf_counter() - t
    if done.returncode != 0:
        raise RuntimeError(f"{kind} process failed:\n{done.stderr[-4000:]}")
    res = json.loads(done.stdout.strip().splitlines()[-1])
    res.update(process_s=wall, load_before=load0, load_after=os.getloadavg(),
               notice_shown="hitml: compiling" in done.stderr)
    return res


def _total(r: dict) -> float:
    return sum(r["hitml"][k] for k in CALLS if k in r["hitml"])


def _part(kind: str, model_path: Path, cache_root: Path, repeat: int, extra_env: dict | None = None,
          tag: str = "") -> dict:
    """``repeat`` pairs of (first-ever, later) processes, each pair with a cache folder of its own; the pair whose
    first-ever total is the median (of an even count, the higher middle one) is reported in full, the totals of all
    of them beside it."""
    pairs = []
    for r in range(repeat):
        cache = cache_root / f"numba_cache_{kind}{tag}_{r}"
        cache.mkdir(parents=True, exist_ok=True)
        first = _one_process(kind, model_path, cache, extra_env or {})
        later = _one_process(kind, model_path, cache, extra_env or {})
        pairs.append((first, later))
    order = sorted(range(repeat), key=lambda i: _total(pairs[i][0]))
    first, later = pairs[order[repeat // 2]]   # the median (of an even count, the higher of the middle two)
    shown = "the median one" if repeat % 2 else "the higher of the middle two"
    return {"first_ever": first, "later": later, "shown": shown, "env": extra_env or {}, "repeats": [
                {"first_ever_total_s": _total(a), "first_ever_explainer_s": a["hitml"]["explainer_s"],
                 "later_total_s": _total(b), "load_before": a["load_before"]} for a, b in pairs],
            "machine": _machine(), "versions": _versions(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def _markdown(res: dict) -> str:
    lines = ["# First calls in a fresh process: hitml beside shap's own TreeExplainer", "",
             ("`integration/bench_first_call.py`: each column is a fresh Python process with a private Numba cache "
             "folder; \"first-ever\" finds it empty, \"later\" finds what the first-ever process compiled. Model: "
             "XGBoost on cal_housing, 50 trees of depth 6. Seconds of wall time."), ""]
    titles = {"cpu": "CPU (`backend=\"cpu\"`), as installed: the shipped cache entries of the kernels",
              "cpu_numba": "CPU (`backend=\"cpu\"`), `HITML_AOT=0`: Numba compiles on first use",
              "gpu": "GPU (`backend=\"gpu\"`)"}
    for kind in ("cpu", "cpu_numba", "gpu"):
        part = res.get(kind)
        if part is None:
            continue
        if "skipped" in part:
            lines += [f"## {titles[kind]}", "", f"Skipped: {part['skipped']}", ""]
            continue
        f, later = part["first_ever"], part["later"]
        m, v = part["machine"], part["versions"]
        lines += [f"## {titles[kind]}", "",
                  (f"{part['date']}. Machine: {m['cpu']}, {m['cores']} cores, Numba threads {m['numba_threads']}, "
                   f"GPU: {m['gpu'] or 'none'}. {m['platform']}."), "",
                  "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items() if val) + ".", "",
                  ("| call | hitml, first-ever process | shap, same process | hitml, later process "
                   "| shap, same process | later: hitml - shap |"), "|---|---|---|---|---|---|"]
        for key in (*CALLS, "steady_5000"):
            if key not in f["hitml"]:
                continue
            a, b, c, d = f["hitml"][key], f["shap"][key], later["hitml"][key], later["shap"][key]
            lines.append(f"| {LABELS[key]} | {_fmt(a)} | {_fmt(b)} | {_fmt(c)} | {_fmt(d)} | {_fmt(c - d)} |")
        first_total, later_total = _total(f), _total(later)
        reps = part.get("repeats", [])
        lines += ["", (f"- First-ever process, all first calls together: {first_total:.2f} s (compile notice shown: "
                  f"{f['notice_shown']}); later process: {later_total:.2f} s."),
                  (f"- Building the explainer (`shap.TreeExplainer(model, backend=...)`, path extraction), not in "
                   f"the totals: {f['hitml']['explainer_s']:.2f} s first-ever, {later['hitml']['explainer_s']:.2f} s "
                   f"later (shap's own: {later['shap']['explainer_s']:.2f} s)."),
                  *([f"- {len(reps)} repeats, each with a cache folder of its own ({part.get('shown', 'one')} is "
                     "shown above). "
                     "First-ever totals: " + ", ".join(f"{r['first_ever_total_s']:.2f}" for r in reps) +
                     " s (explainer " + ", ".join(f"{r['first_ever_explainer_s']:.2f}" for r in reps) +
                     " s); later totals: " + ", ".join(f"{r['later_total_s']:.2f}" for r in reps) + " s."]
                    if len(reps) > 1 else []),
                  (f"- `import hitml.shap_ext` (with shap and xgboost): {f['import_s']:.2f} s / "
                  f"{later['import_s']:.2f} s; the engine (Numba) is imported on the first call, so its import is "
                  "inside the first call's time."),
                  f"- Load average (1, 5, 15 min) before / after: first-ever {_load(f)}, later {_load(later)}.",
                  *([f"- Shipped kernels, first-ever process: {f['shipped_kernels']}."] if "shipped_kernels" in f
                    else []), ""]
    return "\n".join(lines) + "\n"


def _load(r: dict) -> str:
    return f"{tuple(round(x, 2) for x in r['load_before'])} / {tuple(round(x, 2) for x in r['load_after'])}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    only = ap.add_mutually_exclusive_group()
    only.add_argument("--cpu-only", action="store_true")
    only.add_argument("--gpu-only", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    ap.add_argument("--repeat", type=int, default=3, help="pairs of fresh processes per part (median reported)")
    ap.add_argument("--child", choices=("cpu", "gpu"), help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.model)))
        return

    import xgboost as xgb
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "first_call.json"
    res = json.loads(path.read_text()) if path.exists() else {}
    with tempfile.TemporaryDirectory(prefix="hitml_first_call_") as tmp:
        df, y = _data()
        model_path = Path(tmp) / "model.ubj"
        xgb.XGBRegressor(n_estimators=50, max_depth=6, n_jobs=2).fit(df, y).save_model(model_path)
        if not args.gpu_only:
            res["cpu"] = _part("cpu", model_path, Path(tmp), args.repeat)
            res["cpu_numba"] = _part("cpu", model_path, Path(tmp), args.repeat, {"HITML_AOT": "0"}, "_numba")
        if not args.cpu_only:
            ok, why = _gpu_visible()
            res["gpu"] = (_part("gpu", model_path, Path(tmp), args.repeat) if ok else
                          {"skipped": f"no GPU visible to CuPy on this machine{(' (' + why + ')') if why else ''}; "
                                      "run `python integration/bench_first_call.py --gpu-only` on a GPU machine"})
    path.write_text(json.dumps(res, indent=1) + "\n")
    md_path = out / "first_call.md"
    # the hand-written "## Status" section at the end (targets, what the numbers mean) survives a rerun
    old = md_path.read_text() if md_path.exists() else ""
    status = old[old.index("\n## Status"):] if "\n## Status" in old else ""
    md_path.write_text(_markdown(res) + status)
    print(_markdown(res))


if __name__ == "__main__":
    main()
