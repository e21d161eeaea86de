"""Interventional SHAP through Dask at scale: the background counted where it lies, rows explained where they lie.

    python integration/bench_dask_interventional.py --mode gpu --workers 1,2,4 --rows 12000000 --bg 5000000
    python integration/bench_dask_interventional.py --mode cpu --workers 1,2 --rows 200000 --bg 1000000
    python integration/bench_dask_interventional.py --mode cpu --cpu-threads 4 --workers 1,2,4 --second off

For each worker count k: a cluster of k workers (one GPU each, or --cpu-threads cores each in CPU mode; integration/
_dask_cluster.py), the background and the rows generated on the workers (synthetic standard-normal float32 rows,
--features wide; partition i on worker i mod k; CuPy on the worker's GPU in GPU mode), an XGBoost model (--trees
trees of depth --depth) trained in the client on rows of the same law. Timed apart:

- build: ``shap.TreeExplainer(model, data=<the Dask background>)``: each worker counts its own partitions
  (``dask_background_summary``), the summaries are summed in a tree, and only the sum reaches the client;
- call: the SHAP values of all rows (``explainer.shap_values(<Dask rows>)``, a lazy Dask array), reduced to column
  sums on the workers so that only a few numbers come back (12,000,000 x 127 float64 values are 12 GB).

A small warm-up partition per worker runs first (kernel loading). Diagnostics of where a call's time goes: the task
stream per worker (seconds computing and transferring, the partitions explained and how many of them another worker
held), and the scheduler settings ``--stealing``, ``--saturation`` and ``--sync`` (each partition's task waits for its
GPU work, so that the stream shows each GPU's own time). The expected value is checked to be equal for every
k (integer counts: the partitioning cannot change it). Writes <out>.json and <out>.md (rows/s, scaling against one
worker, efficiency).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HITML_PROGRESS", "0")

import numpy as np  # noqa: E402 - after the environment set-up above

from integration._dask_cluster import (device_name, make_cluster, warm_slice,  # noqa: E402 - after sys.path
                                       worker_addresses, worker_blocks, worker_gpus)


def _block(n: int, M: int, seed: int, gpu: bool):
    """One partition of n standard-normal float32 rows, made on the worker that runs it."""
    if gpu:
        import cupy as cp

        return cp.random.RandomState(seed).standard_normal((n, M), dtype=cp.float32)
    return np.random.default_rng(seed).standard_normal((n, M), dtype=np.float32)


def worker_array(client, addrs: list[str], n: int, M: int, chunk: int, gpu: bool, seed: int):
    return worker_blocks(client, addrs, n, chunk, M, gpu, seed, lambda s, sd: (_block, s, M, sd, gpu))


def versions() -> dict:
    out = {"python": platform.python_version(), "cpu_count": os.cpu_count()}
    for mod in ("numpy", "numba", "xgboost", "shap", "dask", "distributed", "cupy"):
        try:
            out[mod] = getattr(__import__(mod), "__version__", None)
        except ImportError:
            out[mod] = None
    return out


def task_summary(records: list, t0: float, addrs: list[str] | None = None) -> dict:
    """Per worker, from the scheduler's task stream: seconds computing, the first compute's start and the last's end
    (after the client's start t0, perf_counter mapped to wall time), the transfer seconds, the partitions it
    explained and how many of them another worker held (``addrs``: partition i is made on worker i mod k); by task
    name prefix, the compute seconds (where the call's time goes: explaining partitions, the sums, the reduction)."""
    shift = time.time() - time.perf_counter()
    per: dict = {}
    names: dict = {}
    for r in records:
        w = per.setdefault(r["worker"], {"compute_s": 0.0, "transfer_s": 0.0, "first_start_s": None, "last_end_s": 0.0,
                                         "tasks": 0, "explained": 0, "explained_away": 0})
        full = str(r["key"][0] if isinstance(r["key"], tuple) else r["key"])
        name = full.split("-")[0]
        if "explain_part" in full and isinstance(r["key"], tuple):
            w["explained"] += 1
            w["explained_away"] += int(addrs is not None and addrs[r["key"][1] % len(addrs)] != r["worker"])
        for ss in r["startstops"]:
            d = ss["stop"] - ss["start"]
            if ss["action"] == "compute":
                w["compute_s"] += d
                w["tasks"] += 1
                names[name] = names.get(name, 0.0) + d
                st = ss["start"] - shift - t0
                w["first_start_s"] = st if w["first_start_s"] is None else min(w["first_start_s"], st)
                w["last_end_s"] = max(w["last_end_s"], ss["stop"] - shift - t0)
            elif ss["action"] == "transfer":
                w["transfer_s"] += d
    return {"workers": {k: {a: round(b, 3) if isinstance(b, float) else b for a, b in v.items()}
                        for k, v in per.items()},
            "compute_by_name": {k: round(v, 3) for k, v in sorted(names.items(), key=lambda kv: -kv[1])}}


def _sync_each_part() -> None:
    """On a worker: each partition's task waits for its GPU work (a diagnostic: the scheduler then sees how long
    each partition takes, instead of the launch alone)."""
    from hitml.kernels.device import is_cupy_array
    from hitml.shap_ext import _dask

    inner = _dask._explain_part

    def synced(*a, **kw):
        out = inner(*a, **kw)
        if is_cupy_array(out):
            out.device.synchronize()
        return out

    _dask._explain_part = synced


def run(args, k: int, model, report: dict) -> None:
    import shap
    from distributed import Client, get_task_stream

    import hitml.shap_ext  # noqa: F401 - registers the backend
    gpu = args.mode == "gpu"
    import dask

    dask.config.set({"distributed.scheduler.work-stealing": args.stealing == "on"})
    if args.saturation is not None:
        dask.config.set({"distributed.scheduler.worker-saturation": float(args.saturation)})
    cluster, how = make_cluster(k, args.mode, args.cpu_threads)
    rec = {"workers": k, "cluster": how, "stealing": args.stealing, "sync": args.sync,
           "saturation": args.saturation}
    try:
        with Client(cluster) as client:
            addrs = worker_addresses(client, k)
            if args.sync == "on":
                client.run(_sync_each_part)
            if gpu:
                rec["gpus"] = worker_gpus(client)
            bg, _ = worker_array(client, addrs, args.bg, args.features, args.chunk, gpu, seed=1)
            X, _ = worker_array(client, addrs, args.rows, args.features, args.chunk, gpu, seed=2)
            backend = "gpu" if gpu else "cpu"
            warm = shap.TreeExplainer(model, data=warm_slice(bg, k, 1000), backend=backend)  # kernels on every worker
            warm.shap_values(warm_slice(X, k)).sum(axis=0).compute()
            t = time.perf_counter()
            ex = shap.TreeExplainer(model, data=bg, backend=backend)
            rec["build_s"] = time.perf_counter() - t
            rec["expected_value"] = float(np.ravel(ex.expected_value)[0])
            rec["summary_bytes"] = int(ex.background_summary.nbytes)
            t = time.perf_counter()
            with get_task_stream(client) as ts:
                sums = ex.shap_values(X, check_additivity=False).sum(axis=0).compute()
            rec["call_s"] = time.perf_counter() - t
            rec["call_tasks"] = task_summary(ts.data, t, addrs)
            sums = sums.get() if hasattr(sums, "get") else np.asarray(sums)
            rec["finite"] = bool(np.all(np.isfinite(sums)))
            rec["rows_per_s"] = args.rows / rec["call_s"]
            # again: each worker now holds the explainer with its packed paths, tables and device summary
            if args.second == "on":
                t = time.perf_counter()
                with get_task_stream(client) as ts:
                    ex.shap_values(X, check_additivity=False).sum(axis=0).compute()
                rec["second_call_s"] = time.perf_counter() - t
                rec["second_call_tasks"] = task_summary(ts.data, t, addrs)
                rec["second_rows_per_s"] = args.rows / rec["second_call_s"]
    except Exception as exc:
        rec["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    finally:
        cluster.close()
    report["runs"].append(rec)
    print(json.dumps(rec), flush=True)


def write(report: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    runs = [r for r in report["runs"] if "rows_per_s" in r]
    base = next((r for r in runs if r["workers"] == 1), None)
    a = report["args"]
    lines = [f"# Interventional SHAP through Dask ({out.name})", "",
             f"Device: {report['device']}. Versions: `{json.dumps(report['versions'])}`", ""]
    lines += [a["note"], ""] if a.get("note") else []
    lines += [
             f"{a['rows']:,} rows x {a['features']} features explained against a {a['bg']:,}-row background "
             f"(synthetic standard-normal float32, generated on the workers in partitions of {a['chunk']:,} rows); "
             f"XGBoost {a['trees']} trees of depth {a['depth']}. Build = the explainer over the Dask background "
             "(each worker counts its partitions; the summed counts reach the client); call = all rows' values, "
             "column sums reduced on the workers.", "",
             "| workers | build s | call s | rows/s | vs 1 worker | efficiency | second call rows/s | expected value |",
             "|---|---|---|---|---|---|---|---|"]
    for r in report["runs"]:
        if "error" in r:
            lines.append(f"| {r['workers']} | failed: {r['error'][:150].replace('|', '/')} | | | | | | |")
            continue
        sp = r["rows_per_s"] / base["rows_per_s"] if base else float("nan")
        lines.append(f"| {r['workers']} | {r['build_s']:.2f} | {r['call_s']:.2f} | {r['rows_per_s']:,.0f} | "
                     f"{sp:.2f}x | {sp / r['workers']:.2f} | "
                     f"{'' if 'second_rows_per_s' not in r else format(r['second_rows_per_s'], ',.0f')} | "
                     f"{r['expected_value']!r} |")
    evs = {r["expected_value"] for r in runs}
    lines += ["", f"Expected value equal for every worker count: {len(evs) <= 1}."]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("gpu", "cpu"), default="gpu")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--rows", type=int, default=12_000_000)
    ap.add_argument("--bg", type=int, default=5_000_000)
    ap.add_argument("--features", type=int, default=127)
    ap.add_argument("--chunk", type=int, default=500_000)
    ap.add_argument("--trees", type=int, default=100)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--cpu-threads", type=int, default=1, help="CPU mode: cores per worker (its Numba threads)")
    ap.add_argument("--second", choices=("on", "off"), default="on", help="time a second call on the same rows")
    ap.add_argument("--saturation", default=None,
                    help="Dask's distributed.scheduler.worker-saturation (inf: every ready task goes to its worker; "
                         "default: Dask's own)")
    ap.add_argument("--stealing", choices=("on", "off"), default="on", help="Dask's work stealing on the scheduler")
    ap.add_argument("--sync", choices=("on", "off"), default="off",
                    help="diagnostic: each partition's task waits for its GPU work before it ends")
    ap.add_argument("--out", default=None)
    ap.add_argument("--note", default="", help="a line for the markdown (the machine, what else ran on it)")
    ap.add_argument("--rewrite", action="store_true", help="only rewrite <out>.md from <out>.json (with --note)")
    args = ap.parse_args()
    if args.rewrite:
        out = Path(args.out)
        report = json.loads(out.with_suffix(".json").read_text())
        report["args"]["note"] = args.note
        write(report, out)
        return
    import xgboost as xgb

    out = Path(args.out or ROOT / "docs" / "benchmarks" / f"dask_interventional_{args.mode}")
    Xtr = _block(200_000, args.features, 0, False)
    y = Xtr[:, 0] * Xtr[:, 1] + np.sin(Xtr[:, 2]) + 0.3 * Xtr[:, 3:].mean(axis=1)
    model = xgb.XGBRegressor(n_estimators=args.trees, max_depth=args.depth, tree_method="hist").fit(Xtr, y)
    report = {"device": device_name(args.mode), "versions": versions(), "args": vars(args), "runs": []}
    for k in [int(v) for v in args.workers.split(",") if v]:
        run(args, k, model, report)
        write(report, out)
    write(report, out)


if __name__ == "__main__":
    main()
