"""QuantileBinner.fit + quantile_dmatrix against XGBoost's own QuantileDMatrix at equal threads, on a wide frame
(5,000 x 2,000) and a narrow one (200,000 x 20), max_bin 64 and 256, 1 and 2 threads.

Both sides run in this process, alternating call by call (ours, theirs, ours, ...), so a change of machine load
hits both; the figure is the ratio of medians (XGBoost's time / ours: above 1.0 we are faster). Wall time and the
process's CPU time are both recorded, with the 1-minute load average before and after each configuration. Every
configuration also checks that XGBoost's cuts on our matrix are our cuts bit for bit.

Usage: python integration/bench_binner_wide.py [--reps 5] [--quick] [--out docs/benchmarks]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from _machine import cpu_name


def make_data(n: int, d: int, seed: int = 0) -> np.ndarray:
    """Mixed columns: normal, lognormal, offset normal, discrete (about 40 values), 1% NaN, zero-inflated."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d), dtype=np.float32)
    X[:, 1::6] = np.exp(X[:, 1::6])
    X[:, 2::6] += 1000.0
    X[:, 3::6] = np.round(X[:, 3::6] * 6)
    X[: n // 100, 4::6] = np.nan
    Z = X[:, 5::6]
    Z[rng.random(Z.shape) < 0.3] = 0.0
    X[:, 5::6] = Z
    return X


def set_threads(t: int) -> None:
    import numba

    numba.set_num_threads(min(t, numba.config.NUMBA_NUM_THREADS))
    os.environ["HITML_SOLVER_THREADS"] = str(t)


def timed(fn):
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def run_config(X, y, max_bin: int, threads: int, reps: int) -> dict:
    import xgboost as xgb

    from hitml.xgboost_ext import QuantileBinner, check_cuts, quantile_dmatrix

    set_threads(threads)

    def ours():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SketchFallbackWarning on zero-inflated columns: expected
            b = QuantileBinner(max_bin=max_bin).fit(X)
        return quantile_dmatrix(X, y, binner=b, nthread=threads), b

    def theirs():
        return xgb.QuantileDMatrix(X, y, max_bin=max_bin, nthread=threads)

    dm, b = ours()  # warm-up (compiles) and the cut check
    check_cuts(dm, b)
    theirs()
    load0 = os.getloadavg()[0]
    rows = {"ours": [], "xgboost": []}
    for _ in range(reps):
        rows["ours"].append(timed(ours))
        rows["xgboost"].append(timed(theirs))
    load1 = os.getloadavg()[0]
    med = {k: (float(np.median([w for w, _ in v])), float(np.median([c for _, c in v]))) for k, v in rows.items()}
    return {"shape": list(X.shape), "max_bin": max_bin, "threads": threads, "reps": reps,
            "ours_wall_s": med["ours"][0], "xgboost_wall_s": med["xgboost"][0],
            "ours_cpu_s": med["ours"][1], "xgboost_cpu_s": med["xgboost"][1],
            "ratio_wall": med["xgboost"][0] / med["ours"][0], "ratio_cpu": med["xgboost"][1] / med["ours"][1],
            "all_wall_s": {k: [w for w, _ in v] for k, v in rows.items()},
            "load_before": load0, "load_after": load1, "cuts_equal": True}


def versions() -> dict:
    import numba
    import xgboost

    return {"python": platform.python_version(), "numpy": np.__version__, "numba": numba.__version__,
            "xgboost": xgboost.__version__}


def machine() -> dict:
    return {"cpu": cpu_name(), "cpu_count": os.cpu_count(), "platform": platform.platform()}


def report(res: dict, out: Path) -> None:
    lines = ["# QuantileBinner + quantile_dmatrix against XGBoost's QuantileDMatrix (CPU, equal threads)", "",
             f"Machine: {res['machine']['cpu']}, {res['machine']['cpu_count']} CPUs; versions: {res['versions']}", "",
             f"Command: `{res['command']}`", "",
             ("Ours = `QuantileBinner(max_bin).fit(X)` + `quantile_dmatrix(X, y, binner=..., nthread=t)` (sketch, "
              "cuts, occupancy screen, XGBoost binning the data on our cuts); XGBoost = `QuantileDMatrix(X, y, "
              "max_bin, nthread=t)`. Both in one process, alternating, median of the reps; ratio = XGBoost / ours "
              "(above 1: ours faster). CPU time is the process's (both sides run on t threads). Load = 1-minute load "
              "average before / after the configuration (the machine was shared)."), "",
             ("| frame | max_bin | threads | ours wall s | XGBoost wall s | ratio (wall) | ours CPU s | XGBoost CPU s "
              "| ratio (CPU) | load | cuts equal |"),
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['shape'][0]:,} x {r['shape'][1]:,} | {r['max_bin']} | {r['threads']} | "
                     f"{r['ours_wall_s']:.3f} | {r['xgboost_wall_s']:.3f} | **{r['ratio_wall']:.2f}** | "
                     f"{r['ours_cpu_s']:.3f} | {r['xgboost_cpu_s']:.3f} | {r['ratio_cpu']:.2f} | "
                     f"{r['load_before']:.1f} / {r['load_after']:.1f} | {r['cuts_equal']} |")
    (out / "binner_wide.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="wide frame only, max_bin 64, 1 thread")
    ap.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--frames", nargs="*", default=["wide", "narrow"], choices=["wide", "narrow"])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "docs" / "benchmarks"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frames = {"wide": (5_000, 2_000), "narrow": (200_000, 20)}
    configs = [("wide", 64, 1)] if args.quick else [
        (f, mb, t) for f in args.frames for mb in (64, 256) for t in args.threads]
    data = {}
    res = {"machine": machine(), "versions": versions(), "rows": [],
           "command": "python integration/bench_binner_wide.py " + " ".join(sys.argv[1:])}
    for f, mb, t in configs:
        if f not in data:
            n, d = frames[f]
            data[f] = (make_data(n, d), np.random.default_rng(1).standard_normal(n).astype(np.float32))
        row = run_config(*data[f], mb, t, args.reps)
        res["rows"].append(row)
        print(f"{f} {row['shape']} max_bin={mb} threads={t}: ours {row['ours_wall_s']:.3f}s, xgboost "
              f"{row['xgboost_wall_s']:.3f}s -> {row['ratio_wall']:.2f}x wall, {row['ratio_cpu']:.2f}x cpu "
              f"(load {row['load_before']:.1f}/{row['load_after']:.1f})", flush=True)
    (out / "binner_wide.json").write_text(json.dumps(res, indent=2))
    report(res, out)


if __name__ == "__main__":
    main()
