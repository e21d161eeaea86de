"""Dask scaling benchmark: SHAP throughput, distributed moment sketch and bijective shuffle on 1 and 2 workers.

    python integration/bench_dask.py --mode gpu --workers 1,2 --rows 10000000      # multi-GPU host, one GPU per worker
    python integration/bench_dask.py --mode cpu --workers 1,2 --rows 4000          # CPU-only (CI machine numbers)

GPU mode uses dask_cuda.LocalCUDACluster when dask_cuda is installed, else a distributed SpecCluster of Nannies with
CUDA_VISIBLE_DEVICES pinned to one GPU per worker (the "plain LocalCluster" way); CPU mode pins one core per worker
(NUMBA_NUM_THREADS=1). Models: cal_housing-medium (real data, 100 rounds depth 8) and covtype-medium (synthetic data
of covtype's shape: 54 columns, 7 classes), trained as in bench_treeshap.py. Rows to explain are generated on the
workers (bootstrap of cal_housing, synthetic covtype rows), persisted before timing; SHAP blocks are reduced on the
workers (a column sum) so only a few numbers travel back. Anchors: Dask's own dask.array.shuffle (index lists built on
the client) and, where dask.dataframe imports, DataFrame.random_split against our exact-size train_test_split.
Writes docs/benchmarks/dask_<mode>.json and .md.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "integration")]
PAPER_ROWS_PER_S = 1.2e6  # GPUTreeShap paper: 8 V100s (Mitchell et al. 2022)
PAPER_GPUS = 8


def versions() -> dict:
    out = {"python": platform.python_version()}
    for mod in ("numpy", "dask", "distributed", "dask_cuda", "xgboost", "shap", "cupy", "numba"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            out[mod] = None
    return out


def device_name(mode: str) -> str:
    if mode == "gpu":
        import cupy as cp

        n = cp.cuda.runtime.getDeviceCount()
        return f"{n} x {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}"
    return f"CPU ({os.cpu_count()} cores) {platform.processor() or platform.machine()}"


def make_cluster(n: int, mode: str):
    """(cluster, how): one worker per GPU (or per core in CPU mode), one thread each."""
    if mode == "gpu":
        try:
            from dask_cuda import LocalCUDACluster

            return (LocalCUDACluster(n_workers=n, CUDA_VISIBLE_DEVICES=",".join(map(str, range(n))),
                                     threads_per_worker=1, dashboard_address=None), "dask_cuda.LocalCUDACluster")
        except ImportError:
            pass
    from distributed import Nanny, Scheduler, SpecCluster

    env = {"NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "HITML_PROGRESS": "0"}
    workers = {i: {"cls": Nanny, "options": {"nthreads": 1, "env": dict(
        env, **({"CUDA_VISIBLE_DEVICES": str(i)} if mode == "gpu" else {}))}} for i in range(n)}
    cluster = SpecCluster(scheduler={"cls": Scheduler, "options": {"dashboard_address": None}}, workers=workers,
                          silence_logs=40)
    how = "SpecCluster of Nannies, CUDA_VISIBLE_DEVICES pinned per worker" if mode == "gpu" else \
        "SpecCluster of Nannies, one core per worker"
    return cluster, how


# ----------------------------------------------------------------------------------------------- data on workers
def _cal_block(block_info=None, *, real=None, seed=0):
    i = block_info[None]["chunk-location"][0]
    n = block_info[None]["chunk-shape"][0]
    rng = np.random.default_rng([seed, i])
    return real[rng.integers(0, len(real), n)]


def _covtype_block(block_info=None, *, seed=0):
    i = block_info[None]["chunk-location"][0]
    n = block_info[None]["chunk-shape"][0]
    rng = np.random.default_rng([seed, i])
    return np.hstack([rng.normal(size=(n, 10)), (rng.random((n, 44)) < 0.1)]).astype(np.float32)


def worker_rows(name: str, n: int, chunk: int, real: np.ndarray | None, gpu: bool):
    """A dask.array of n rows generated partition by partition on the workers (CuPy partitions on GPU)."""
    import dask.array as da

    chunks = ((chunk,) * (n // chunk) + ((n % chunk,) if n % chunk else ()),)
    M = real.shape[1] if name == "cal_housing" else 54
    chunks = chunks + ((M,),)
    if name == "cal_housing":
        X = da.map_blocks(_cal_block, chunks=chunks, dtype=np.float32, real=real, meta=np.empty((0, 0), np.float32))
    else:
        X = da.map_blocks(_covtype_block, chunks=chunks, dtype=np.float32, meta=np.empty((0, 0), np.float32))
    if gpu:
        import cupy as cp

        X = X.map_blocks(cp.asarray, meta=cp.empty((0, 0), np.float32))
    return X


def _wait(x):
    from distributed import wait

    x = x.persist()
    wait(x)
    return x


# ------------------------------------------------------------------------------------------------------- SHAP
def bench_shap(client, ex, X, backend: str, interactions: bool = False) -> float:
    """Seconds to explain all rows of the persisted X (values reduced on the workers)."""
    from shap_ext._dask import dask_shap_values

    t = time.perf_counter()
    out = dask_shap_values(ex, X, backend=backend, check_additivity=False, interactions=interactions)
    red = client.compute(out.sum(axis=0), sync=True)
    elapsed = time.perf_counter() - t
    assert np.all(np.isfinite(red.get() if hasattr(red, "get") else red))
    return elapsed


def warm_all_workers(client, ex, X, backend):
    """Run one partition per worker so every worker has compiled its kernels before timing."""
    from shap_ext._dask import dask_shap_values

    n_workers = len(client.scheduler_info()["workers"])
    k = min(len(X.chunks[0]), 2 * n_workers)
    rows = sum(X.chunks[0][:k])
    client.compute(dask_shap_values(ex, X[:rows], backend=backend, check_additivity=False).sum(axis=0), sync=True)


# --------------------------------------------------------------------------------------------- sketch, shuffle
def bench_sketch(client, X_host, backend: str) -> float:
    from xgboost_ext.dask import sketch_partitions

    sketch_partitions(X_host[: X_host.chunks[0][0]], n_moments=15, backend=backend)  # warm
    t = time.perf_counter()
    sk = sketch_partitions(X_host, n_moments=15, backend=backend)
    elapsed = time.perf_counter() - t
    assert int(sk.weight[0]) == X_host.shape[0]
    return elapsed


def bench_shuffle(client, X) -> dict:
    import dask.array as da

    from sklearn_ext._dask import dask_shuffle, dask_train_test_split

    out = {}
    t = time.perf_counter()
    s = _wait(dask_shuffle(X, random_state=0))
    out["ours_shuffle_s"] = time.perf_counter() - t
    del s
    t = time.perf_counter()
    parts = [_wait(p) for p in dask_train_test_split(X, test_size=0.25, random_state=0)]
    out["ours_train_test_split_s"] = time.perf_counter() - t
    del parts
    try:  # Dask's own array shuffle: the permutation is drawn and split into index lists on the client
        t = time.perf_counter()
        perm = np.random.default_rng(0).permutation(X.shape[0])
        bounds = np.cumsum((0,) + X.chunks[0])
        indexer = [perm[a:b].tolist() for a, b in zip(bounds[:-1], bounds[1:])]
        s = _wait(da.shuffle(X, indexer, axis=0))
        out["dask_array_shuffle_s"] = time.perf_counter() - t
        del s
    except Exception as exc:  # noqa: BLE001
        out["dask_array_shuffle_error"] = f"{type(exc).__name__}: {exc}"[:200]
    return out


def bench_frame_split(client, n: int, chunk: int) -> dict:
    """Our exact train_test_split of a DataFrame vs DataFrame.random_split (per-partition, approximate sizes)."""
    try:
        import dask.array as da
        import dask.dataframe as dd
    except Exception as exc:  # noqa: BLE001 - dask.dataframe needs pandas + pyarrow
        return {"frame_error": f"{type(exc).__name__}: {exc}"[:200]}
    from sklearn_ext._dask import dask_train_test_split

    ddf = dd.from_dask_array(da.random.default_rng(0).random((n, 8), chunks=(chunk, 8)),
                             columns=[f"c{i}" for i in range(8)]).persist()
    _ = len(ddf)
    out = {}
    t = time.perf_counter()
    tr, te = dask_train_test_split(ddf, test_size=0.25, random_state=0)
    tr, te = _wait(tr), _wait(te)
    out["ours_frame_split_s"] = time.perf_counter() - t
    out["ours_frame_test_rows"] = int(len(te))
    t = time.perf_counter()
    tr2, te2 = ddf.random_split([0.75, 0.25], random_state=0)
    tr2, te2 = _wait(tr2), _wait(te2)
    out["dask_random_split_s"] = time.perf_counter() - t
    out["dask_random_split_test_rows"] = int(len(te2))
    out["exact_test_rows"] = int(np.ceil(0.25 * n))
    return out


# ------------------------------------------------------------------------------------------------------- main
def run(args) -> dict:
    from distributed import Client

    import shap_ext
    from bench_treeshap import load_dataset, train_model

    gpu = args.mode == "gpu"
    backend = "gpu" if gpu else "cpu"
    report = {"mode": args.mode, "device": device_name(args.mode), "versions": versions(), "rows": args.rows,
              "chunk_rows": args.chunk, "data_rows": args.data_rows, "data_chunk_rows": args.data_chunk, "paper_rows_per_s_8xV100": PAPER_ROWS_PER_S, "shap": [], "sketch": [],
              "shuffle": []}
    models = {}
    for spec in args.models.split(","):
        name, size = spec.split("-")
        X, y, objective, num_class, source = load_dataset(name, args.train_rows)
        bst, _ = train_model(name, size, X, y, objective, num_class, "cuda" if gpu else "cpu")
        ex = shap_ext.TreeExplainer(bst, backend="cpu")  # parsed once on the client; workers pick their backend
        ex.paths  # noqa: B018 - build the PathSet before shipping
        models[spec] = (name, ex, X if name == "cal_housing" else None, source)
    for n_workers in [int(w) for w in args.workers.split(",")]:
        cluster, how = make_cluster(n_workers, args.mode)
        with cluster, Client(cluster) as client:
            client.wait_for_workers(n_workers, timeout=300)
            report.setdefault("clusters", {})[n_workers] = how
            for spec, (name, ex, real, source) in models.items():
                rows = args.rows if name == "cal_housing" else max(args.chunk, int(args.rows * args.covtype_scale))
                X = _wait(worker_rows(name, rows, args.chunk, real, gpu))
                warm_all_workers(client, ex, X, backend)
                s = bench_shap(client, ex, X, backend)
                rec = {"model": spec, "data": source, "workers": n_workers, "rows": rows, "seconds": s,
                       "rows_per_s": rows / s, "rows_per_s_per_worker": rows / s / n_workers}
                print(json.dumps(rec), flush=True)
                report["shap"].append(rec)
                del X
            Xh = _wait(worker_rows("covtype", args.data_rows, args.data_chunk, None, False))
            s = bench_sketch(client, Xh, backend)
            rec = {"what": "moment sketch, 54 cols, 15 moments, tree merge", "workers": n_workers,
                   "rows": args.data_rows, "seconds": s, "rows_per_s": args.data_rows / s}
            print(json.dumps(rec), flush=True)
            report["sketch"].append(rec)
            Xs = Xh if not gpu else _wait(Xh.map_blocks(__import__("cupy").asarray))
            rec = {"workers": n_workers, "rows": args.data_rows, "cols": 54, **bench_shuffle(client, Xs)}
            if not gpu:
                rec.update(bench_frame_split(client, args.data_rows, args.data_chunk))
            print(json.dumps(rec), flush=True)
            report["shuffle"].append(rec)
            del Xh, Xs
    return report


def scaling(report: dict) -> None:
    by = {}
    for r in report["shap"]:
        by.setdefault(r["model"], {})[r["workers"]] = r["rows_per_s"]
    report["shap_scaling"] = {m: {"speedup_2_vs_1": v[2] / v[1]} for m, v in by.items() if 1 in v and 2 in v}
    sk = {r["workers"]: r["rows_per_s"] for r in report["sketch"]}
    if 1 in sk and 2 in sk:
        report["sketch_scaling"] = sk[2] / sk[1]


def write_md(report: dict, out: Path) -> str:
    unit = "GPU" if report["mode"] == "gpu" else "worker (1 core)"
    lines = [f"# Dask scaling ({report['mode']}): {report['device']}", "",
             f"Versions: {json.dumps(report['versions'])}. Clusters: {json.dumps(report.get('clusters'))}.", "",
             f"## SHAP throughput (rows/s; per {unit} next to the paper's {PAPER_ROWS_PER_S / PAPER_GPUS:,.0f} "
             f"rows/s per V100 = 1.2M rows/s on 8 V100s)", "",
             "| model | workers | rows | seconds | rows/s | rows/s per worker | speedup vs 1 |", "|---|---|---|---|---|---|---|"]
    base = {r["model"]: r["rows_per_s"] for r in report["shap"] if r["workers"] == 1}
    for r in report["shap"]:
        sp = r["rows_per_s"] / base[r["model"]] if r["model"] in base else float("nan")
        lines.append(f"| {r['model']} | {r['workers']} | {r['rows']:,} | {r['seconds']:.2f} | {r['rows_per_s']:,.0f} "
                     f"| {r['rows_per_s_per_worker']:,.0f} | {sp:.2f}x |")
    lines += ["", "Target: >= 1.8x on 2 workers.", "", "## Distributed moment sketch", "",
              "| workers | rows | seconds | rows/s |", "|---|---|---|---|"]
    for r in report["sketch"]:
        lines.append(f"| {r['workers']} | {r['rows']:,} | {r['seconds']:.2f} | {r['rows_per_s']:,.0f} |")
    lines += ["", "## Shuffle (54 float32 columns; seconds, persisted on the workers)", "",
              "| workers | rows | ours shuffle | ours train_test_split | dask.array.shuffle (client-built index) | "
              "ours DataFrame split | DataFrame.random_split | test rows ours / random_split / exact |",
              "|---|---|---|---|---|---|---|---|"]

    def f(r, k):
        return f"{r[k]:.2f}" if k in r else ("error" if k.replace("_s", "_error") in r else "-")
    for r in report["shuffle"]:
        rows = (f"{r.get('ours_frame_test_rows', '-')} / {r.get('dask_random_split_test_rows', '-')} / "
                f"{r.get('exact_test_rows', '-')}")
        lines.append(f"| {r['workers']} | {r['rows']:,} | {f(r, 'ours_shuffle_s')} | "
                     f"{f(r, 'ours_train_test_split_s')} | {f(r, 'dask_array_shuffle_s')} | "
                     f"{f(r, 'ours_frame_split_s')} | {f(r, 'dask_random_split_s')} | {rows} |")
    md = "\n".join(lines) + "\n"
    (out / f"dask_{report['mode']}.md").write_text(md)
    return md


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--rows", type=int, default=None, help="rows to explain (default 10M on GPU, 4000 on CPU)")
    ap.add_argument("--covtype-scale", type=float, default=None,
                    help="covtype rows = rows * scale (default 1 on GPU, 0.25 on CPU)")
    ap.add_argument("--chunk", type=int, default=None, help="rows per partition (default 500k GPU, 250 CPU)")
    ap.add_argument("--data-rows", type=int, default=None, help="rows for sketch/shuffle (default: --rows on GPU, "
                    "1M on CPU)")
    ap.add_argument("--data-chunk", type=int, default=None, help="rows per partition for sketch/shuffle")
    ap.add_argument("--models", default="cal_housing-medium,covtype-medium")
    ap.add_argument("--train-rows", type=int, default=None)
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    args = ap.parse_args(argv)
    gpu = args.mode == "gpu"
    args.rows = args.rows or (10_000_000 if gpu else 4000)
    args.covtype_scale = args.covtype_scale if args.covtype_scale is not None else (1.0 if gpu else 0.25)
    args.chunk = args.chunk or (500_000 if gpu else 250)
    args.data_rows = args.data_rows or (args.rows if gpu else 1_000_000)
    args.data_chunk = args.data_chunk or (args.chunk if gpu else 100_000)
    args.train_rows = args.train_rows or (581_012 if gpu else 20_000)
    os.environ.setdefault("HITML_PROGRESS", "0")
    report = run(args)
    scaling(report)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"dask_{args.mode}.json").write_text(json.dumps(report, indent=1, default=str))
    print(write_md(report, out))


if __name__ == "__main__":
    main()
