"""Interventional (background) SHAP benchmark: hitml CPU and GPU against WOODELF (CPU, GPU) and shap's C++.

    python integration/bench_interventional.py --engines hitml-cpu,woodelf-cpu,shap --bg 100,1000,10000 \\
        --rows 1000 --threads 2 --out docs/benchmarks/interventional_cpu
    python integration/bench_interventional.py --engines hitml-gpu,woodelf-gpu --bg 1000,100000,1000000 \\
        --rows 1000,100000,1000000 --out docs/benchmarks/interventional_gpu
    python integration/bench_interventional.py --readme --engines hitml-gpu      (WOODELF's README shape)

Models: XGBoost, LightGBM and a scikit-learn random forest (--models), --trees trees of depth --depth, trained on
synthetic data of --features features (at most --train-rows rows of the background). The whole background is used
(``shap.maskers.Independent(bg, max_samples=len(bg))``). Each engine is timed in the same process on every
(background, rows) point whose time, predicted from the engine's previous point, stays within --budget seconds;
values (and with --what interactions, interaction values) are compared with hitml's CPU values on the first rows.
A failing engine is recorded with its error. Writes <out>.json and <out>.md.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engines", default="hitml-cpu,woodelf-cpu,shap")
    ap.add_argument("--models", default="xgboost,lightgbm,forest")
    ap.add_argument("--bg", default="100,1000,10000")
    ap.add_argument("--rows", default="1000")
    ap.add_argument("--what", default="values", help="values,interactions")
    ap.add_argument("--features", type=int, default=30)
    ap.add_argument("--trees", type=int, default=100)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--train-rows", type=int, default=200_000)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--budget", type=float, default=60.0, help="seconds per timed point at most (predicted)")
    ap.add_argument("--no-predict", action="store_true",
                    help="time every point of the grid (with a background of a million rows, the fixed cost of the "
                         "warm-up calls varies by more than the row cost, so the prediction can skip a point that "
                         "takes seconds)")
    ap.add_argument("--check-rows", type=int, default=200)
    ap.add_argument("--readme", action="store_true",
                    help="WOODELF's README shape: 127 features, XGBoost 100 trees depth 6, 5,000,000-row background, "
                         "3,000,000 rows (override with --bg/--rows)")
    ap.add_argument("--e2e", action="store_true",
                    help="end to end as a user meets it: per engine, the explainer's build (with the peak host RSS "
                         "above the process's before it), the first call, and a second call on new rows, timed "
                         "apart (one background, one row count: the first of --bg and --rows)")
    ap.add_argument("--cold", action="store_true",
                    help="--e2e: no untimed warm-up build, so the timed build and first call are the process's first "
                         "(with an empty CuPy cache, CUPY_CACHE_DIR, they include every kernel's compile)")
    ap.add_argument("--masker-copy", choices=("lazy", "shap"), default="lazy",
                    help="--e2e: shap.maskers.Independent as hitml.shap_ext installs it (lazy: the masking buffer is "
                         "made on first read, the default) or shap's own (shap: it copies the background up front), "
                         "for an A/B of the build's time and peak RSS")
    ap.add_argument("--call-ahead", choices=("on", "off"), default="on",
                    help="hitml-gpu: whether the explainer's build also compiles the call's kernels in a thread "
                         "(the default, on); off for an A/B of a cold first call")
    ap.add_argument("--out", default="docs/benchmarks/interventional")
    ap.add_argument("--note", default="", help="a line for the markdown (the machine, how the threads were pinned)")
    ap.add_argument("--merge", default=None, metavar="DIR",
                    help="only merge DIR/interventional_*.json (the parts: CPU here, GPU on the device) into "
                         "DIR/interventional.json and .md")
    return ap.parse_args()


def _ints(s):
    return [int(float(v)) for v in s.split(",") if v]


ARGS = _args()
os.environ.setdefault("NUMBA_NUM_THREADS", str(ARGS.threads))
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, str(ARGS.threads))
os.environ.setdefault("HITML_PROGRESS", "0")

import numpy as np  # noqa: E402 - after the thread-count variables above
import pandas as pd  # noqa: E402 - after the thread-count variables above


def data(n, M, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, M)).astype(np.float32)
    X[:, : M // 4] = np.round(X[:, : M // 4] * 2)        # a few discrete columns: repeated values, as in real data
    return X


def target(X):
    M = X.shape[1]
    return (X[:, 0] * X[:, 1] + np.sin(X[:, 2]) + (X[:, 3] > 0) * X[:, 4 % M] + 0.3 * X[:, 5 % M:].sum(axis=1) / M
            ).astype(np.float32)


def train(kind, X, y, trees, depth, threads):
    if kind == "xgboost":
        import xgboost as xgb
        return xgb.XGBRegressor(n_estimators=trees, max_depth=depth, learning_rate=0.1, tree_method="hist",
                                n_jobs=threads).fit(X, y)
    if kind == "lightgbm":
        import lightgbm as lgb
        return lgb.LGBMRegressor(n_estimators=trees, max_depth=depth, num_leaves=2 ** depth, learning_rate=0.1,
                                 verbose=-1, n_jobs=threads).fit(X, y)
    from sklearn.ensemble import RandomForestRegressor
    return RandomForestRegressor(n_estimators=trees, max_depth=depth, n_jobs=threads, random_state=0,
                                 max_samples=min(1.0, 50_000 / len(X))).fit(X, y)


def versions():
    """The versions of the libraries measured, read from their installed metadata (importing none of them, so that
    a ``--cold`` build still imports CuPy and Numba itself), and the GPU's name (this imports CuPy: call it after
    the timed work of a ``--cold`` process)."""
    import importlib.metadata as md

    out = {"python": platform.python_version(), "machine": platform.machine(), "cpu_count": os.cpu_count()}
    dists = md.packages_distributions()
    for mod in ("numpy", "numba", "xgboost", "lightgbm", "sklearn", "shap", "cupy", "woodelf"):
        names = dists.get(mod, [])
        try:
            out[mod] = md.version(names[0]) if names else "unavailable (not installed)"
        except Exception as exc:
            out[mod] = f"unavailable ({type(exc).__name__})"
    try:
        out["woodelf-explainer"] = md.version("woodelf-explainer")
    except Exception:
        pass
    try:
        import cupy as cp
        out["gpu"] = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    except Exception:
        out["gpu"] = None
    return out


# ------------------------------------------------------------------------------------------------------ engines
def make_engine(name, model, bg, what):
    """fn(X) -> values (host NumPy, shap's shape) for engine ``name``; a set-up cost is paid here, not timed."""
    import shap
    masker = shap.maskers.Independent(bg, max_samples=len(bg))
    inter = what == "interactions"
    if name.startswith("hitml"):
        from hitml.shap_ext import TreeExplainer
        ex = TreeExplainer(model, data=masker, feature_perturbation="interventional",
                           backend="gpu" if name == "hitml-gpu" else "cpu")
        if inter:
            return lambda X: ex.shap_interaction_values(X)
        return lambda X: ex.shap_values(X, check_additivity=False)
    if name.startswith("woodelf"):
        from woodelf.explainer import WoodelfExplainer
        cols = [f"f{i}" for i in range(bg.shape[1])]
        ex = WoodelfExplainer(model, pd.DataFrame(bg, columns=cols), GPU=name == "woodelf-gpu")

        def run(X):
            Xd = pd.DataFrame(X, columns=cols)
            if inter:
                return np.asarray(ex.shap_interaction_values(Xd, verbose=False))
            return np.asarray(ex.shap_values(Xd, verbose=False))
        return run
    if name == "shap":
        if inter:
            raise NotImplementedError("shap has no interventional interaction values")
        ex = shap.TreeExplainer(model, data=masker, feature_perturbation="interventional")
        return lambda X: ex.shap_values(X, check_additivity=False)
    raise ValueError(name)


def measure(fn, X, rows_grid, budget, warm=(10, 100)):
    """([(rows, seconds or None)] over rows_grid, the last timed call's output). Three untimed warm-up calls
    (``warm`` rows: compilation, then a fixed cost plus a cost per row, which predict the first point); a point
    predicted above ``budget`` seconds (fixed cost plus rows times the last measured cost per row) is skipped
    (None). With an infinite budget only the first warm-up call runs (a call re-reads the whole background, so each
    extra one costs as much as a timed point at a large background)."""
    w1, w2 = warm
    fn(X[:w1])                                # compile / first-call costs
    out, last = [], None
    if budget == float("inf"):
        for n in rows_grid:
            t = time.perf_counter()
            last = fn(X[:n])
            out.append((n, time.perf_counter() - t))
        return out, last
    t1 = time.perf_counter()
    fn(X[:w1])
    t2 = time.perf_counter()
    fn(X[:w2])
    t3 = time.perf_counter()
    per_row = max((t3 - t2) - (t2 - t1), 0.0) / (w2 - w1)
    fixed = max((t2 - t1) - w1 * per_row, 0.0)
    for n in rows_grid:
        pred = fixed + per_row * n
        if pred > budget:
            out.append((n, None))
            continue
        t = time.perf_counter()
        last = fn(X[:n])
        dt = time.perf_counter() - t
        out.append((n, dt))
        per_row = max(dt - fixed, 0.0) / n      # the fixed (background) cost stays; the row cost is re-measured
    return out, last


def build_engine(name, model, bg, what):
    """(fn, build seconds, peak RSS bytes above the process's before the build) for engine ``name``."""
    from integration._machine import RssPeak

    with RssPeak() as mem:
        t = time.perf_counter()
        fn = make_engine(name, model, bg, what)
        dt = time.perf_counter() - t
    return fn, dt, mem.peak - mem.before


def end_to_end(a, engines, models, M, bgs, rows, whats):
    """Per engine: build, first call, second call on new rows (NumPy in and out), each timed apart; the first call's
    values against hitml's."""
    nb, n = bgs[0], rows[0]
    records = []
    # --cold: the versions are read after the timed work (reading the GPU's name imports CuPy); the user's own
    # imports come first, as in a script (they import neither CuPy nor Numba)
    import shap  # noqa: F401 -- see above

    import hitml.shap_ext  # noqa: F401 -- see above
    if a.masker_copy == "shap":        # shap's own masker: its background copied up front
        from hitml.shap_ext import _patch

        _patch._ShapIndependent.__init__ = _patch._SHAP_INDEPENDENT_INIT
    info = {"versions": "read after the timed work (--cold)" if a.cold else versions(), "args": vars(a),
            "threads": a.threads, "features": M, "mode": "end to end"}
    print(json.dumps(info["versions"]), flush=True)
    bg = data(nb, M, 1)
    X1, X2 = data(n, M, 2), data(n, M, 3)
    Xtr = bg[:a.train_rows] if len(bg) >= a.train_rows else data(a.train_rows, M, 0)
    for kind in models:
        model = train(kind, Xtr, target(Xtr), a.trees, a.depth, a.threads)
        # the engines' kernels compile (or load) once per process: a tiny build and call first, not timed (--cold:
        # none, so that the timed build and first call are the process's first, compiles included)
        for eng in [] if a.cold else engines:
            try:
                make_engine(eng, model, bg[:64], whats[0])(X1[:8])
            except Exception:
                pass
        for what in whats:
            reference = None
            for eng in engines:
                rec = {"model": kind, "what": what, "engine": eng, "background": nb, "rows": n, "features": M,
                       "trees": a.trees, "depth": a.depth, "threads": a.threads,
                       "background_bytes": int(bg.nbytes)}
                try:
                    fn, rec["build_s"], rec["build_peak_rss_bytes"] = build_engine(eng, model, bg, what)
                    rec["build_peak_rss_over_background"] = rec["build_peak_rss_bytes"] / bg.nbytes
                    t = time.perf_counter()
                    first = fn(X1)
                    rec["first_call_s"] = time.perf_counter() - t
                    rec["end_to_end_s"] = rec["build_s"] + rec["first_call_s"]
                    t = time.perf_counter()
                    fn(X2)
                    rec["second_call_s"] = time.perf_counter() - t
                    k = min(a.check_rows, n)
                    vals = np.asarray(first)[:k]
                    if reference is None and eng.startswith("hitml"):
                        reference = vals
                    elif reference is not None:
                        rec["max_abs_diff_vs_hitml"] = float(np.nanmax(np.abs(vals.reshape(reference.shape)
                                                                              - reference)))
                    del first
                except Exception as exc:
                    _failed(rec, exc)
                records.append(rec)
                print(json.dumps(rec), flush=True)
                _write_e2e(a.out, info, records)
    if a.cold:
        info["versions"] = versions()
        print(json.dumps(info["versions"]), flush=True)
        _write_e2e(a.out, info, records)


def _report(out, info, records, title):
    """Writes <out>.json; returns (the .md path, its first lines: title, versions, the --note)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"info": info, "records": records}, indent=1))
    note = info["args"].get("note")
    return out.with_suffix(".md"), [f"# {title} ({out.name})", "", f"Versions: `{json.dumps(info['versions'])}`",
                                    ""] + ([note, ""] if note else [])


def _failed(rec, exc):
    """Records an engine's failure (its error and the traceback's tail) in ``rec``."""
    rec["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    rec["traceback_tail"] = traceback.format_exc().splitlines()[-3:]


def _write_e2e(out, info, records):
    md, lines = _report(out, info, records, "Interventional SHAP end to end")
    lines += [
             f"Threads: {info['threads']}; {info['features']} features; whole background "
             "(`Independent(bg, max_samples=len(bg))`); NumPy float32 in, float64 out. Build = the explainer's "
             "constructor; peak RSS = the highest resident size during the build above the process's before it "
             "(the background itself was allocated before). Ratios: WOODELF's (or shap's) time over hitml's in "
             "this process.", "",
             "| model | what | background | rows | engine | build s | first call s | end to end s | second call s "
             "| build peak RSS / background | end-to-end ratio | max abs diff vs hitml |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        head = f"| {r['model']} | {r['what']} | {r['background']:,} | {r['rows']:,} | {r['engine']} |"
        if "error" in r:
            lines.append(head + f" failed: {r['error'][:120].replace('|', '/')} | | | | | | |")
            continue
        ratio = ""
        if not r["engine"].startswith("hitml"):
            ours = [o for o in records if o["engine"].startswith("hitml") and o["model"] == r["model"]
                    and o["what"] == r["what"] and "end_to_end_s" in o]
            if ours:
                ratio = f"{r['end_to_end_s'] / ours[0]['end_to_end_s']:.2f}x slower than {ours[0]['engine']}"
        diff = r.get("max_abs_diff_vs_hitml")
        lines.append(head + f" {r['build_s']:.2f} | {r['first_call_s']:.2f} | {r['end_to_end_s']:.2f} | "
                     f"{r['second_call_s']:.2f} | {r['build_peak_rss_over_background']:.2f} | {ratio} | "
                     f"{'' if diff is None else f'{diff:.2e}'} |")
    md.write_text("\n".join(lines) + "\n")


def merge(folder):
    """DIR/interventional.json = {part: its JSON}; .md = the headline figures, then each part's table."""
    folder = Path(folder)
    parts = {f.stem: json.loads(f.read_text()) for f in sorted(folder.glob("interventional_*.json"))}
    (folder / "interventional.json").write_text(json.dumps(parts, indent=1))
    lines = ["# Interventional SHAP: hitml against WOODELF and shap's C++", "",
             "Produced by `integration/bench_interventional.py` (parts below; `--merge` writes this file). The "
             "device parts ran on one H100 80GB HBM3 with its 16-core host (`integration/run_interventional_device.sh`),"
             " the 2-thread CPU parts on a 2-core host shared with other jobs (same-process ratios only) unless a part "
             "names its machine. Design and headline figures: `docs/design/treeshap.md`, section 6.", ""]
    readme = parts.get("interventional_gpu_readme_parts")
    if readme:
        lines += ["## WOODELF's README shape on one H100 (`interventional_gpu_readme_parts.json`)", "",
                  "| part | seconds |", "|---|---|"]
        lines += [f"| {k} | {v:.3f} |" for k, v in readme.items() if isinstance(v, float)]
        lines += [f"| background phases | {json.dumps(readme.get('background_phases_s'))} |", ""]
    for name in sorted(parts):
        md = folder / f"{name}.md"
        if md.exists() and name != "interventional_gpu_readme_parts":
            body = md.read_text().splitlines()
            lines += [f"## {name}", ""] + body[1:] + [""]
    (folder / "interventional.md").write_text("\n".join(lines) + "\n")


def main():
    a = ARGS
    if a.merge:
        merge(a.merge)
        return
    engines = [e for e in a.engines.split(",") if e]
    models = [m for m in a.models.split(",") if m]
    bgs, rows = _ints(a.bg), _ints(a.rows)
    whats = [w for w in a.what.split(",") if w]
    M = a.features
    if a.readme:
        M, models = 127, ["xgboost"]
        bgs = bgs if "--bg" in sys.argv else [5_000_000]
        rows = rows if "--rows" in sys.argv else [3_000_000]
    if a.call_ahead == "off":
        from hitml.kernels.treeshap import _gpu_patterns
        _gpu_patterns.COMPILE_CALL_AHEAD = False
    if a.e2e:
        end_to_end(a, engines, models, M, bgs, rows, whats)
        return
    records = []
    info = {"versions": versions(), "args": vars(a), "threads": a.threads, "features": M}
    print(json.dumps(info["versions"]), flush=True)
    bg_all = data(max(bgs), M, 1)
    X_all = data(max(rows), M, 2)
    Xtr = bg_all[:a.train_rows] if len(bg_all) >= a.train_rows else data(a.train_rows, M, 0)
    for kind in models:
        ntr = len(Xtr)
        t = time.perf_counter()
        model = train(kind, Xtr, target(Xtr), a.trees, a.depth, a.threads)
        print(f"{kind}: trained on {ntr} rows in {time.perf_counter() - t:.1f}s", flush=True)
        for what in whats:
            for nb in bgs:
                bg = bg_all[:nb]
                reference = None
                for eng in engines:
                    rec = {"model": kind, "what": what, "engine": eng, "background": nb, "features": M,
                           "trees": a.trees, "depth": a.depth, "threads": a.threads}
                    try:
                        t = time.perf_counter()
                        fn = make_engine(eng, model, bg, what)
                        rec["setup_s"] = time.perf_counter() - t
                        pts, last = measure(fn, X_all, rows, float("inf") if a.no_predict else a.budget,
                                            (1, 4) if eng == "shap" else (10, 100))
                        rec["points"] = [{"rows": n, "seconds": s, "rows_per_s": None if s is None else n / s}
                                         for n, s in pts]
                        k = min(a.check_rows if eng != "shap" else 4, len(X_all))
                        # the check rows: the last timed call's first rows where it covered them (a call re-reads
                        # the whole background), else a call of their own
                        vals = (np.asarray(last)[:k] if last is not None and len(np.asarray(last)) >= k
                                else np.asarray(fn(X_all[:k])))
                        if reference is None and eng.startswith("hitml"):
                            reference = vals
                        elif reference is not None:
                            ref = reference[:len(vals)]
                            rec["max_abs_diff_vs_hitml"] = float(np.nanmax(np.abs(vals.reshape(ref.shape) - ref)))
                    except Exception as exc:
                        _failed(rec, exc)
                    records.append(rec)
                    print(json.dumps(rec), flush=True)
                    _write(a.out, info, records)
    _write(a.out, info, records)


def _write(out, info, records):
    md, lines = _report(out, info, records, "Interventional SHAP benchmark")
    lines += [
             f"Threads: {info['threads']}; {info['features']} features; whole background used "
             "(`Independent(bg, max_samples=len(bg))`). Rows/s per engine at each explained-row count; `-` = "
             "skipped (predicted over the time budget); ratio = hitml / WOODELF at the same point.", "",
             "| model | what | background | rows | engine | rows/s | hitml/WOODELF | max abs diff vs hitml CPU |",
             "|---|---|---|---|---|---|---|---|"]
    for r in records:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['what']} | {r['background']:,} | | {r['engine']} | failed: "
                         f"{r['error'][:120].replace('|', '/')} | | |")
            continue
        for pt in r["points"]:
            ratio = ""
            if r["engine"].startswith("hitml"):
                twin = "woodelf-gpu" if r["engine"] == "hitml-gpu" else "woodelf-cpu"
                for o in records:
                    if (o["engine"] == twin and o["model"] == r["model"] and o["what"] == r["what"]
                            and o["background"] == r["background"] and "points" in o):
                        for q in o["points"]:
                            if q["rows"] == pt["rows"] and q["rows_per_s"] and pt["rows_per_s"]:
                                ratio = f"{pt['rows_per_s'] / q['rows_per_s']:.2f}x"
            rate = "-" if pt["rows_per_s"] is None else f"{pt['rows_per_s']:,.0f}"
            diff = r.get("max_abs_diff_vs_hitml", "")
            diff = f"{diff:.2e}" if isinstance(diff, float) else ""
            lines.append(f"| {r['model']} | {r['what']} | {r['background']:,} | {pt['rows']:,} | {r['engine']} | "
                         f"{rate} | {ratio} | {diff} |")
    md.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
