"""Benchmark of the bijective shuffle on the GPU against copy, random gather, CuPy, torch and CPU shuffles, plus
permutation_importance on the GPU vs sklearn's on the CPU; writes JSON + markdown + plot to docs/benchmarks/."""
from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def gpu_times(fns, reps: int, warmup: int = 1) -> list[float]:
    """Median milliseconds of each fn() between CUDA events (a lone call each), after warm-up. Several functions are
    timed alternately (f, g, f, g, ...), so that drift in the GPU's state (clocks, caches, other work of the process)
    falls on all of them alike."""
    import cupy as cp

    for _ in range(warmup):
        for fn in fns:
            fn()
    cp.cuda.Device().synchronize()
    out: list[list[float]] = [[] for _ in fns]
    for _ in range(reps):
        for fn, acc in zip(fns, out):
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record()
            fn()
            b.record()
            b.synchronize()
            acc.append(cp.cuda.get_elapsed_time(a, b))
    return [statistics.median(acc) for acc in out]


def gpu_time(fn, reps: int, warmup: int = 1) -> float:
    """Median milliseconds of fn() between CUDA events, after warm-up."""
    return gpu_times([fn], reps, warmup)[0]


def gpu_stream_time(fn, calls: int) -> float:
    """Milliseconds per call of fn() over `calls` back-to-back calls between two CUDA events (after one warm-up): the
    GPU's time per call when the host enqueues faster than the GPU runs, without the host latency of a lone call."""
    import cupy as cp

    fn()
    a, b = cp.cuda.Event(), cp.cuda.Event()
    a.record()
    for _ in range(calls):
        fn()
    b.record()
    b.synchronize()
    return cp.cuda.get_elapsed_time(a, b) / calls


def cpu_time(fn, reps: int) -> float:
    fn()
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e3)
    return statistics.median(out)


def reps_for(m: int) -> int:
    return 20 if m <= 1 << 20 else 7 if m <= 1 << 25 else 3


def bench_keys(ws, dtypes=("uint32", "uint64"), torch_ok=True):
    import cupy as cp

    from hitml.kernels.shuffle import gpu

    rows = []
    try:
        import torch
    except Exception:
        torch_ok = False
    for w in ws:
        for m in (1 << w, (1 << w) + 1):
            r = reps_for(m)
            for dt in dtypes:
                x = cp.arange(m, dtype=dt) * 7 + 3
                perm = cp.random.permutation(m)
                rec = {"form": f"keys {dt}", "w": w, "m": m, "bytes_per_item": x.itemsize}
                # ours and the gather bound alternately, with 3x the reps: the ratio the target is stated in
                rec["ours_ms"], rec["gather_ms"] = gpu_times([lambda: gpu.shuffle_rows(x, 1),
                                                              lambda: cp.take(x, perm)], 3 * r)
                rec["ours_lcg_ms"] = gpu_time(lambda: gpu._launch(m, None, (5, 7), (x,)), r)
                rec["copy_ms"] = gpu_time(lambda: x.copy(), r)
                if m >= 1 << 23:
                    rec["ours_stream_ms"] = gpu_stream_time(lambda: gpu.shuffle_rows(x, 1), 3 * r)
                    rec["gather_stream_ms"] = gpu_stream_time(lambda: cp.take(x, perm), 3 * r)
                if dt == "uint64":
                    rec["cupy_permutation_ms"] = gpu_time(lambda: cp.random.permutation(m), r)
                    y = x.copy()
                    rec["cupy_shuffle_ms"] = gpu_time(lambda: cp.random.shuffle(y), r)
                    del y
                    if torch_ok:
                        xt = torch.as_tensor(x.astype(cp.int64), device="cuda")
                        rec["torch_randperm_gather_ms"] = gpu_time(
                            lambda: xt[torch.randperm(m, device="cuda")], r)
                        del xt
                        torch.cuda.empty_cache()
                del x, perm
                cp.get_default_memory_pool().free_all_blocks()
                rows.append(rec)
                print(json.dumps(rec), flush=True)
            # key-value pairs: u64 keys with u64 values
            if m <= 1 << 28:
                k = cp.arange(m, dtype=cp.uint64)
                v = k * 5
                perm = cp.random.permutation(m)
                rec = {"form": "pairs u64+u64", "w": w, "m": m, "bytes_per_item": 16}
                rec["ours_ms"], rec["gather_ms"] = gpu_times([lambda: gpu.shuffle_pairs(k, v, 1),
                                                              lambda: (cp.take(k, perm), cp.take(v, perm))], 3 * r)
                rec["copy_ms"] = gpu_time(lambda: (k.copy(), v.copy()), r)
                if m >= 1 << 23:
                    rec["ours_stream_ms"] = gpu_stream_time(lambda: gpu.shuffle_pairs(k, v, 1), 3 * r)
                    rec["gather_stream_ms"] = gpu_stream_time(lambda: (cp.take(k, perm), cp.take(v, perm)), 3 * r)
                rows.append(rec)
                print(json.dumps(rec), flush=True)
                del k, v, perm
                cp.get_default_memory_pool().free_all_blocks()
    return rows


def bench_rows(cases):
    import cupy as cp

    from hitml.kernels.shuffle import gpu

    rows = []
    for d, ws in cases:
        for w in ws:
            for m in (1 << w, (1 << w) + 1):
                X = cp.random.random((m, d), dtype=cp.float32)
                perm = cp.random.permutation(m)
                r = reps_for(m * d // 8)
                rec = {"form": f"rows float32 d={d}", "w": w, "m": m, "bytes_per_item": 4 * d}
                rec["ours_ms"] = gpu_time(lambda: gpu.shuffle_rows(X, 1), r)
                rec["copy_ms"] = gpu_time(lambda: X.copy(), r)
                rec["gather_ms"] = gpu_time(lambda: cp.take(X, perm, axis=0), r)
                rows.append(rec)
                print(json.dumps(rec), flush=True)
                del X, perm
                cp.get_default_memory_pool().free_all_blocks()
    return rows


def bench_batched(cases):
    from hitml.kernels.shuffle import gpu

    rows = []
    for k, d in cases:
        rec = {"form": "batched int64", "k": k, "d": d, "m": k * d,
               "ours_ms": gpu_time(lambda: gpu.batched_permutations(k, d, 1), 5)}
        rows.append(rec)
        print(json.dumps(rec), flush=True)
    return rows


def bench_cpu(ws):
    from hitml.kernels.shuffle import cpu

    rows = []
    rng = np.random.default_rng(0)
    for w in ws:
        m = (1 << w) + 1
        r = 5 if w <= 20 else 2
        rec = {"form": "cpu", "w": w, "m": m,
               "numpy_permutation_ms": cpu_time(lambda: rng.permutation(m), r),
               "numba_twin_ms": cpu_time(lambda: cpu.permutation(m, 1), r)}
        rows.append(rec)
        print(json.dumps(rec), flush=True)
    return rows


def bench_pi(n: int, p: int, n_repeats: int, n_estimators: int, cpu_budget_s: float):
    """permutation_importance on the GPU (CuPy data, XGBoost device=cuda) vs sklearn's on the CPU (same model)."""
    import cupy as cp
    import xgboost as xgb
    from sklearn.inspection import permutation_importance as sk_pi

    from hitml.sklearn_ext import permutation_importance

    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, p)).astype(np.float32)
    beta = rng.normal(size=p) * (rng.random(p) < 0.3)
    y = (X @ beta + np.sin(X[:, 0]) * 2 + 0.3 * rng.normal(size=n)).astype(np.float32)
    Xg, yg = cp.asarray(X), cp.asarray(y)
    m = xgb.XGBRegressor(n_estimators=n_estimators, max_depth=6, device="cuda", tree_method="hist").fit(Xg, yg)
    # warm-up: compile our kernels and XGBoost's GPU predictor
    permutation_importance(m, Xg[:2000], yg[:2000], n_repeats=1, random_state=0, progress=False)
    cp.cuda.Device().synchronize()
    t = time.perf_counter()
    ours = permutation_importance(m, Xg, yg, n_repeats=n_repeats, random_state=0, progress=False)
    cp.cuda.Device().synchronize()
    t_gpu = time.perf_counter() - t
    mc = copy.deepcopy(m)
    mc.set_params(device="cpu", n_jobs=os.cpu_count())
    t = time.perf_counter()
    mc.predict(X)
    t_pred = time.perf_counter() - t
    est = t_pred * (p * n_repeats + 1)
    rec = {"form": "permutation_importance", "n": n, "p": p, "n_repeats": n_repeats, "n_estimators": n_estimators,
           "gpu_s": t_gpu, "cpu_one_predict_s": t_pred, "cpu_estimated_s": est}
    if est <= cpu_budget_s:
        t = time.perf_counter()
        ref = sk_pi(mc, X, y, n_repeats=n_repeats, random_state=0)
        rec["sklearn_cpu_s"] = time.perf_counter() - t
        rec["max_abs_mean_diff"] = float(np.abs(ref.importances_mean - ours.importances_mean).max())
        rec["max_importance"] = float(ref.importances_mean.max())
    rec["speedup"] = rec.get("sklearn_cpu_s", est) / t_gpu
    print(json.dumps(rec), flush=True)
    return [rec]


def versions():
    import importlib

    out = {"python": platform.python_version(), "host": platform.node(), "cpu_count": os.cpu_count()}
    for mod in ("numpy", "cupy", "torch", "numba", "sklearn", "xgboost"):
        try:
            out[mod] = importlib.import_module(mod).__version__
        except Exception:
            out[mod] = None
    try:
        import cupy as cp

        from hitml.kernels.device import device_name

        out["device"] = device_name()
        out["cuda_runtime"] = cp.cuda.runtime.runtimeGetVersion()
    except Exception:
        out["device"] = "cpu"
    return out


def fmt(v, nd=3):
    return "" if v is None else f"{v:.{nd}f}"


def write_report(res, outdir: Path, tag: str):
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / f"shuffle{tag}.json").write_text(json.dumps(res, indent=1))
    v = res["versions"]
    lines = [f"# Bijective shuffle benchmark{tag}", "",
             f"Device: {v.get('device')}; CUDA runtime {v.get('cuda_runtime')}; cupy {v.get('cupy')}, torch "
             f"{v.get('torch')}, numpy {v.get('numpy')}, numba {v.get('numba')}, scikit-learn {v.get('sklearn')}, "
             f"xgboost {v.get('xgboost')}; {v.get('cpu_count')} CPU cores. Times are medians of CUDA-event timings "
             "after warm-up (ms): CUDA events around one call, so a call's host latency before its launch counts, for "
             "our calls and the anchors alike. 'vs gather' = gather time / our time (>= 1 is at or above the "
             "random-gather bound; for keys and pairs, ours and the gather are timed alternately in one loop, 3x the other "
             "anchors' repeats). 'GPU vs gather' (m >= 2^23, keys and pairs): the same ratio from back-to-back "
             "calls between two events (GPU time per call, without the host latency of a lone call).",
             ""]
    lines += [f"- {note}" for note in res.get("notes", [])] + ([""] if res.get("notes") else [])
    runs = any("run" in r for r in res["gpu"])
    lines += ["| form | m | ours | ours LCG | copy | gather | vs gather | cupy.permutation | cupy.shuffle | "
              "torch randperm+gather | ours vs cupy.shuffle | ours vs torch | G items/s | GPU vs gather |"
              + (" run |" if runs else ""),
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if runs else "")]
    for r in res["gpu"]:
        if "gather_ms" not in r:
            continue
        m = r["m"]
        mlabel = f"2^{r['w']}" + ("+1" if m != 1 << r["w"] else "")
        cs, tt = r.get("cupy_shuffle_ms"), r.get("torch_randperm_gather_ms")
        lines.append("| " + " | ".join([
            r["form"], mlabel, fmt(r["ours_ms"]), fmt(r.get("ours_lcg_ms")), fmt(r["copy_ms"]), fmt(r["gather_ms"]),
            fmt(r["gather_ms"] / r["ours_ms"], 2), fmt(r.get("cupy_permutation_ms")), fmt(cs), fmt(tt),
            fmt(cs / r["ours_ms"], 2) if cs else "", fmt(tt / r["ours_ms"], 2) if tt else "",
            fmt(m / r["ours_ms"] / 1e6, 2),
            fmt(r["gather_stream_ms"] / r["ours_stream_ms"], 2) if "ours_stream_ms" in r else ""]
            + ([r.get("run", "")] if runs else [])) + " |")
    if res.get("batched"):
        lines += ["", "| batched permutations k x d | ms | G items/s |", "|---|---|---|"]
        lines += [f"| {r['k']} x {r['d']} | {fmt(r['ours_ms'])} | {fmt(r['m'] / r['ours_ms'] / 1e6, 2)} |"
                  for r in res["batched"]]
    if res.get("cpu"):
        lines += ["", "| CPU m | numpy Generator.permutation ms | Numba twin ms | twin / numpy |", "|---|---|---|---|"]
        lines += [f"| 2^{r['w']}+1 | {fmt(r['numpy_permutation_ms'])} | {fmt(r['numba_twin_ms'])} | "
                  f"{fmt(r['numba_twin_ms'] / r['numpy_permutation_ms'], 2)} |" for r in res["cpu"]]
    for r in res.get("pi", []):
        lines += ["", f"permutation_importance, XGBoost ({r['n_estimators']} trees, depth 6) on {r['n']} x {r['p']}, "
                  f"n_repeats={r['n_repeats']}: GPU (CuPy data) {r['gpu_s']:.2f} s; sklearn on the CPU "
                  + (f"{r['sklearn_cpu_s']:.2f} s measured" if "sklearn_cpu_s" in r else
                     f"{r['cpu_estimated_s']:.1f} s estimated from one CPU predict ({r['cpu_one_predict_s']:.2f} s) "
                     "x (p*n_repeats+1), not run")
                  + f"; speedup {r['speedup']:.1f}x."
                  + (f" Max |mean importance difference| {r['max_abs_mean_diff']:.4f} (largest importance "
                     f"{r['max_importance']:.3f})." if "max_abs_mean_diff" in r else "")]
    lines += targets(res)
    (outdir / f"shuffle{tag}.md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 5))
        u64 = [r for r in res["gpu"] if r["form"] == "keys uint64"]
        series = (("ours_ms", "bijective shuffle (ours)"), ("gather_ms", "gather by permutation"),
                  ("copy_ms", "device copy"), ("cupy_permutation_ms", "cupy.random.permutation"),
                  ("cupy_shuffle_ms", "cupy.random.shuffle"), ("torch_randperm_gather_ms", "torch randperm+gather"))
        for color, (key, label) in zip(("C0", "C1", "C7", "C2", "C3", "C4"), series):
            for parity, style in ((0, "-o"), (1, "--x")):
                pts = [(r["m"], r["m"] / r[key] / 1e3) for r in u64 if key in r and (r["m"] != 1 << r["w"]) == parity]
                if pts:
                    ax.plot(*zip(*pts), style, color=color, label=label + (" (2^w+1)" if parity else " (2^w)"),
                            markersize=3)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("m (uint64 keys)")
        ax.set_ylabel("M items / s")
        ax.set_title(f"Shuffle throughput, {v.get('device')}")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(outdir / f"shuffle{tag}.png", dpi=120)
    except Exception as exc:  # plotting is optional
        print("plot skipped:", exc)


def targets(res) -> list[str]:
    """The issue's targets, checked against this run's numbers."""
    out = ["", "## Targets (issue 5)", ""]
    big = [r for r in res["gpu"] if "gather_ms" in r and r["m"] >= 1 << 23]
    forms = list(dict.fromkeys(r["form"] for r in big))
    for parity, name in ((0, "m = 2^w"), (1, "m = 2^w+1")):
        rs = [r for r in big if (r["m"] != 1 << r["w"]) == parity]
        if rs:
            worst = min(rs, key=lambda r: r["gather_ms"] / r["ours_ms"])
            ratio = worst["gather_ms"] / worst["ours_ms"]
            out.append(f"- >= 0.9x gather at m >= 2^23 ({name}): worst {ratio:.2f}, {worst['form']} at "
                       f"2^{worst['w']}{'+1' if parity else ''} ({'met' if ratio >= 0.9 else 'missed'}); " + "; ".join(
                           f.replace("keys ", "") + ": " + ", ".join(
                               f"2^{r['w']}{'+1' if parity else ''} {r['gather_ms'] / r['ours_ms']:.2f}"
                               for r in rs if r["form"] == f) for f in forms if any(r["form"] == f for r in rs)))
    st = [r for r in big if "ours_stream_ms" in r]
    if st:
        worst = min(st, key=lambda r: r["gather_stream_ms"] / r["ours_stream_ms"])
        out.append(f"- GPU time (back-to-back calls), keys and pairs at m >= 2^23: worst "
                   f"{worst['gather_stream_ms'] / worst['ours_stream_ms']:.2f}x gather, {worst['form']} at m = "
                   f"{worst['m']} ({worst['ours_stream_ms']:.3f} against {worst['gather_stream_ms']:.3f} ms)")
    for r in res["gpu"]:
        if r["form"] == "keys uint64" and r["w"] == 28 and "cupy_shuffle_ms" in r:
            lab = "2^28" + ("+1" if r["m"] != 1 << 28 else "")
            cs, tt = r["cupy_shuffle_ms"] / r["ours_ms"], r.get("torch_randperm_gather_ms", float("nan")) / r["ours_ms"]
            out.append(f"- {lab} u64: {cs:.2f}x cupy.random.shuffle (target 2.5x: {'met' if cs >= 2.5 else 'missed'}), "
                       f"{tt:.2f}x torch.randperm+gather (target 4x: {'met' if tt >= 4 else 'missed'}); anchors "
                       f"copy {r['copy_ms']:.2f} ms, gather {r['gather_ms']:.2f} ms, cupy.permutation "
                       f"{r['cupy_permutation_ms']:.2f} ms, cupy.shuffle {r['cupy_shuffle_ms']:.2f} ms, torch "
                       f"{r.get('torch_randperm_gather_ms', float('nan')):.2f} ms (issue: 1.43 / 10.1 / 15.2 / 26.6 / "
                       "46.3 ms)")
    for r in res.get("pi", []):
        out.append(f"- permutation_importance {r['n']} x {r['p']}: {r['speedup']:.1f}x sklearn on the CPU "
                   f"(target 10x: {'met' if r['speedup'] >= 10 else 'missed'})")
    return out


def merge(paths) -> dict:
    """One result from several partial runs (same device): the later file wins for a repeated (form, m) cell."""
    res: dict = {"gpu": [], "batched": [], "cpu": [], "notes": []}
    cells: dict = {}
    for path in paths:
        part = json.loads(Path(path).read_text())
        res["versions"] = part.get("versions", res.get("versions"))
        res["notes"] += part.get("notes", [])
        for r in part.get("gpu", []):
            cells[(r["form"], r["m"])] = r
        for key in ("batched", "cpu", "pi"):
            if part.get(key):
                res[key] = part[key]
    order = {f: i for i, f in enumerate(["keys uint32", "keys uint64", "pairs u64+u64"])}
    res["gpu"] = sorted(cells.values(), key=lambda r: (r["form"].startswith("rows"), r["form"] if r["form"].startswith(
        "rows") else "", r["w"], r["m"], order.get(r["form"], 9)))
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--report-from", default=None, help="rewrite the markdown and plot from a stored JSON and exit")
    ap.add_argument("--merge", nargs="+", default=None, help="merge partial JSON results into one report and exit")
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    ap.add_argument("--tag", default="")
    ap.add_argument("--note", action="append", default=[], help="a line for the report's notes (repeatable)")
    ap.add_argument("--parts", default="keys,rows,batched,cpu", help="comma list of keys, rows, batched, cpu")
    ap.add_argument("--ws", default=None, help="comma list of w for the keys part (m = 2^w and 2^w + 1)")
    ap.add_argument("--pi", default="1000000x50", help="n x p for permutation_importance, or 'none'")
    ap.add_argument("--pi-repeats", type=int, default=5)
    ap.add_argument("--pi-trees", type=int, default=100)
    ap.add_argument("--pi-cpu-budget", type=float, default=170.0)
    args = ap.parse_args()
    os.environ.setdefault("HITML_PROGRESS", "0")
    if args.report_from or args.merge:
        res = merge(args.merge) if args.merge else json.loads(Path(args.report_from).read_text())
        write_report(res, Path(args.out), args.tag)
        return
    res = {"versions": versions(), "notes": list(args.note)}
    print(json.dumps(res["versions"]), flush=True)
    if args.quick:
        ws, rows_cases = [10, 16, 20, 23, 26], [(16, [16, 20]), (256, [14])]
        cpu_ws, batched = [14, 20], [(10_000, 100)]
    else:
        ws = [10, 13, 16, 19, 21, 23, 25, 27, 28, 29]
        rows_cases = [(16, [12, 16, 20, 23, 25]), (256, [10, 14, 18, 20, 23])]
        cpu_ws, batched = [14, 17, 20, 23, 25], [(1_000_000, 100), (100_000, 1000), (1000, 100_000)]
    if args.ws:
        ws = [int(w) for w in args.ws.split(",")]
    parts = set(args.parts.split(","))
    res["gpu"] = bench_keys(ws) if "keys" in parts else []
    res["gpu"] += bench_rows(rows_cases) if "rows" in parts else []
    res["batched"] = bench_batched(batched) if "batched" in parts else []
    res["cpu"] = bench_cpu(cpu_ws) if "cpu" in parts else []
    write_report(res, Path(args.out), args.tag)  # keep the shuffle figures even if the long CPU anchor is cut off
    if args.pi != "none":
        try:
            n, p = (int(s) for s in args.pi.split("x"))
            res["pi"] = bench_pi(n, p, args.pi_repeats, args.pi_trees, args.pi_cpu_budget)
        except ImportError as exc:
            print("permutation_importance benchmark skipped:", exc)
    write_report(res, Path(args.out), args.tag)
    print(Path(args.out, f"shuffle{args.tag}.md").read_text())


if __name__ == "__main__":
    main()
