"""Speed of the moment sketch (device): GPU sketch vs device bandwidth, and hist-ready matrices with our cuts vs
XGBoost's own QuantileDMatrix on the GPU (10M x 50) and on the CPU at equal threads (2M x 50).

Usage: python integration/bench_sketch_speed.py [--quick] [--skip-cpu] [--out DIR] [--from-json FILE]
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


def med(ts):
    return float(np.median(ts))


def gpu_time(fn, reps, cp):
    """Median seconds of fn() with the device synchronised around each call (fn may sync itself)."""
    fn()
    cp.cuda.Device().synchronize()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        cp.cuda.Device().synchronize()
        ts.append(time.perf_counter() - t0)
    return med(ts)


def cpu_time(fn, reps):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return med(ts)


def make_data(xp, n, d, seed=0, dtype=np.float32):
    """Mixed columns: normal, lognormal, shifted normal, a few discrete (<= 50 values), 1% NaN in some."""
    rs = xp.random.RandomState(seed)
    X = rs.standard_normal((n, d), dtype=np.float32) if xp.__name__ == "cupy" else \
        np.random.default_rng(seed).standard_normal((n, d), dtype=np.float32)
    X[:, 1::5] = xp.exp(X[:, 1::5])
    X[:, 2::5] += 1000.0
    X[:, 3::5] = xp.round(X[:, 3::5] * 8)
    X[: n // 100, 4::5] = np.nan
    return X.astype(dtype, copy=False)


def solver_threads():
    from hitml.kernels.sketch._newton import n_threads

    return n_threads()


def numba_layer():
    import numba

    try:
        return numba.threading_layer()
    except ValueError:
        return None


def kernels_only(X, n_moments: int = 15, max_distinct: int = 256, **opts):
    """A callable that queues only the sketch's three kernels on X (no checks, allocation or transfer): for timing.
    opts as kernels.sketch._gpu_moments.sketch_moments's, same defaults."""
    from hitml.kernels.sketch import _gpu_moments as gm

    l, X, w, has_w, cap, p, b = gm._prepare(X, None, n_moments, max_distinct, gm.GpuSketchOptions(**opts))
    return lambda: gm._launch(X, w, has_w, l, cap, p, b)


def end_to_end_gpu(X, y, sk_kw, reps, cp, xgb, skgpu, skcpu):
    """Ours (sketch -> cuts -> ref -> QuantileDMatrix) vs XGBoost's own QuantileDMatrix, with stage times taken
    inside the same loop, and diagnostics for time the stages alone do not explain."""
    from hitml.kernels.sketch.cuts import cut_points
    from hitml.xgboost_ext.hook import check_cuts, reference_dmatrix, reference_matrix

    max_bin = 256
    sync = cp.cuda.Device().synchronize
    out = {"max_bin": max_bin, "reference_xgboost_h100_s": 0.114}
    with xgb.config_context(use_rmm=False):
        def ours_staged():
            t0 = time.perf_counter()
            s = skgpu.sketch(X, n_moments=15, **sk_kw)
            sync()
            t1 = time.perf_counter()
            c = cut_points(s, max_bin, "maxent")
            t2 = time.perf_counter()
            ref = reference_dmatrix(c)
            t3 = time.perf_counter()
            q = xgb.QuantileDMatrix(X, y, ref=ref, max_bin=max_bin)
            sync()
            t4 = time.perf_counter()
            del q
            sync()
            t5 = time.perf_counter()
            return [t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t5 - t0]

        def theirs():
            q = xgb.QuantileDMatrix(X, y, max_bin=max_bin)
            sync()
            del q
            sync()

        # warm-up (kernels compiled, solver pool started) and a check that XGBoost reports our cuts
        s = skgpu.sketch(X, n_moments=15, **sk_kw)
        cuts = cut_points(s, max_bin, "maxent")
        q = xgb.QuantileDMatrix(X, y, ref=reference_dmatrix(cuts), max_bin=max_bin)
        try:
            check_cuts(q, cuts)
            out["xgboost_reports_our_cuts"] = True
        except AssertionError as e:
            out["xgboost_reports_our_cuts"] = f"no: {e}"[:300]
        del q
        theirs()
        ours_staged()
        stages = np.array([ours_staged() for _ in range(reps)])
        t_theirs = gpu_time(theirs, reps, cp)
        med_st = np.median(stages, axis=0)
        names = ["sketch", "solve_cuts_cpu", "ref_dmatrix", "qdm_with_ref", "free_qdm", "total"]
        out["ours_stages_s"] = dict(zip(names, map(float, med_st)))
        out["ours_s"] = float(np.median(stages[:, -1]))
        out["xgboost_qdm_s"] = t_theirs
        out["speedup"] = t_theirs / out["ours_s"]
        # stages alone, back to back (the old breakdown)
        alone = {
            "sketch": gpu_time(lambda: skgpu.sketch(X, n_moments=15, **sk_kw), reps, cp),
            "solve_cuts_cpu": cpu_time(lambda: cut_points(s, max_bin, "maxent"), reps),
            "qdm_with_ref": gpu_time(lambda: xgb.QuantileDMatrix(X, y, ref=reference_dmatrix(cuts), max_bin=max_bin),
                                     reps, cp),
        }
        out["stages_alone_s"] = alone
        # diagnostics: QuantileDMatrix(ref) right after a Numba-parallel (prange, OpenMP layer) call, whose spinning
        # threads compete with XGBoost's own libgomp pool; and right after our thread-pool solve
        Xs = np.random.default_rng(0).standard_normal((200_000, 50)).astype(np.float32)
        skcpu.sketch(Xs, n_moments=15, max_distinct=0)

        def after(fn):
            ts = []
            for _ in range(reps):
                fn()
                t0 = time.perf_counter()
                q = xgb.QuantileDMatrix(X, y, ref=reference_dmatrix(cuts), max_bin=max_bin)
                sync()
                ts.append(time.perf_counter() - t0)
                del q
            return med(ts)

        out["diag_qdm_after_numba_prange_s"] = after(lambda: skcpu.sketch(Xs, n_moments=15, max_distinct=0))
        out["diag_qdm_after_threadpool_solve_s"] = after(lambda: cut_points(s, max_bin, "maxent"))
        out["diag_qdm_after_sleep_20ms_s"] = after(lambda: time.sleep(0.02))
        # ref kinds: a host DMatrix (hook default) vs a device QuantileDMatrix of the same reference matrix
        R = reference_matrix(cuts)
        t_dm = gpu_time(lambda: xgb.DMatrix(R), reps, cp)
        t_qr = gpu_time(lambda: xgb.QuantileDMatrix(cp.asarray(R), max_bin=max_bin), reps, cp)
        qref = xgb.QuantileDMatrix(cp.asarray(R), max_bin=max_bin)
        t_q_dev = gpu_time(lambda: xgb.QuantileDMatrix(X, y, ref=qref, max_bin=max_bin), reps, cp)
        try:
            check_cuts(xgb.QuantileDMatrix(X, y, ref=qref, max_bin=max_bin), cuts)
            same = True
        except AssertionError:
            same = False
        out["diag_ref_kinds"] = {"build_host_dmatrix_s": t_dm, "build_device_qdm_s": t_qr,
                                 "qdm_with_device_qdm_ref_s": t_q_dev, "device_ref_gives_our_cuts": same}
    b = out["ours_stages_s"]
    print(f"gpu end-to-end: ours {out['ours_s']:.4f}s vs xgboost {t_theirs:.4f}s -> {out['speedup']:.2f}x; stages "
          + ", ".join(f"{k} {v*1e3:.1f} ms" for k, v in b.items()), flush=True)
    print("stages alone:", {k: round(v * 1e3, 2) for k, v in alone.items()}, "ms", flush=True)
    print("diagnostics:", {k: v for k, v in out.items() if k.startswith("diag")}, flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default="docs/benchmarks")
    ap.add_argument("--skip-cpu", action="store_true")
    ap.add_argument("--cpu-rows", type=int, default=2_000_000)
    ap.add_argument("--profile-once", action="store_true",
                    help="one fast sketch with distinct tracking, one without, then exit (for ncu)")
    ap.add_argument("--sketch-only", action="store_true", help="GPU sketch timings only (no end-to-end, no CPU)")
    ap.add_argument("--reps", type=int, default=30, help="repeats of each GPU sketch timing (median)")
    ap.add_argument("--from-json", help="re-render the markdown and plot from a results JSON")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.from_json:
        report(json.loads(Path(args.from_json).read_text()), out)
        return
    if args.profile_once:
        import cupy as cp

        from hitml.kernels.sketch import gpu as skgpu

        X = make_data(cp, 10_000_000, 50)
        for md in (256, 0):
            skgpu.sketch(X, n_moments=15, max_distinct=md)
        cp.cuda.Device().synchronize()
        for md in (256, 0):  # the profiled calls (kernels compiled above)
            skgpu.sketch(X, n_moments=15, max_distinct=md)
        cp.cuda.Device().synchronize()
        return
    res: dict = {"versions": {}, "gpu": {}, "cpu": {}}
    import numba

    import hitml.kernels.sketch.cpu as skcpu
    from hitml.kernels.sketch.cuts import cut_points

    res["versions"].update(numpy=np.__version__, numba=numba.__version__, python=platform.python_version())
    try:
        import xgboost as xgb

        res["versions"]["xgboost"] = xgb.__version__
    except ImportError:
        xgb = None
    from hitml.xgboost_ext.hook import reference_dmatrix

    reps = 3 if args.quick else 5
    # ------------------------------------------------------------------------------------------------ GPU
    try:
        import cupy as cp

        from hitml.kernels.device import device_name
        from hitml.kernels.sketch import gpu as skgpu

        have_gpu = True
    except Exception:
        have_gpu = False
    if have_gpu:
        res["device"] = device_name()
        res["versions"]["cupy"] = cp.__version__
        res["host"] = {"cpu_count": os.cpu_count(), "numba_threading_layer": None, "solver_threads": solver_threads()}
        n, d = (10_000_000, 50)
        X = make_data(cp, n, d)
        y = cp.random.RandomState(1).standard_normal(n, dtype=np.float32)
        nbytes = X.nbytes
        Y = cp.empty_like(X)
        t_copy = gpu_time(lambda: cp.copyto(Y, X), 20, cp)
        bw = 2 * nbytes / t_copy
        del Y
        res["gpu"]["copy_bandwidth_GBps"] = bw / 1e9
        res["gpu"]["shape"] = [n, d]
        # the headline: the whole call users make (checks, three kernels, one transfer, host unpacking)
        from hitml.kernels.sketch import sketch as public_sketch

        t_pub = gpu_time(lambda: public_sketch(X, n_moments=15, max_distinct=256, backend="gpu"), args.reps, cp)
        t_pub0 = gpu_time(lambda: public_sketch(X, n_moments=15, max_distinct=0, backend="gpu"), args.reps, cp)
        res["gpu"]["public_call"] = {"call": "kernels.sketch.sketch(X, n_moments=15, max_distinct=256, backend='gpu')",
                                     "reps": args.reps, "seconds": t_pub, "GBps": nbytes / t_pub / 1e9,
                                     "fraction_of_copy_bw": nbytes / t_pub / bw, "seconds_max_distinct_0": t_pub0,
                                     "fraction_max_distinct_0": nbytes / t_pub0 / bw}
        print(f"public sketch call: {t_pub*1e3:.3f} ms = {nbytes/t_pub/bw:.3f} of copy bw (max_distinct 0: "
              f"{t_pub0*1e3:.3f} ms = {nbytes/t_pub0/bw:.3f})", flush=True)
        rows = []
        # (variant, n_moments, max_distinct, options): n_sample = rows of the row sample (0: none, default 4096),
        # vals (values per thread per tile; default 32 for float32 at l <= 16), stages (cp.async pipeline depth, default 2), minb (blocks
        # per SM the registers must allow, default 2), fastpath, bulk; {} = the defaults users get
        configs = [("fast", 15, 256, {}),
                   ("fast", 15, 256, {"n_sample": 0}),
                   ("fast", 15, 0, {"n_sample": 0}),
                   ("fast", 15, 256, {"bulk": False}),
                   ("fast", 15, 0, {"bulk": False}),
                   ("fast", 15, 256, {"fastpath": False}),
                   ("fast", 15, 256, {"vals": 16}),
                   ("fast", 15, 0, {}),
                   ("fast", 8, 256, {}),
                   ("fast", 8, 0, {})]
        if not args.quick:
            configs += [("fast", 15, 256, {"vals": 16, "stages": 3}), ("fast", 15, 256, {"stages": 3}),
                        ("fast", 20, 256, {})]
        for variant, l, md, opt in configs:
            try:
                t = gpu_time(lambda: skgpu.sketch(X, n_moments=l, max_distinct=md, **opt), args.reps, cp)
            except Exception as e:  # a failing variant must not hide the others' numbers
                print(f"gpu sketch {variant} l={l} {opt}: FAILED {type(e).__name__}: {e}", flush=True)
                rows.append({"variant": variant, "n_moments": l, "max_distinct": md, "options": opt,
                             "error": f"{type(e).__name__}: {e}"})
                continue
            rows.append({"variant": variant, "n_moments": l, "max_distinct": md, "options": opt, "seconds": t,
                         "GBps": nbytes / t / 1e9, "fraction_of_copy_bw": nbytes / t / bw})
            print(f"gpu sketch {variant} l={l} max_distinct={md} {opt}: {t*1e3:.2f} ms, {nbytes/t/1e9:.0f} GB/s, "
                  f"{nbytes/t/bw:.2f} of copy bw", flush=True)
        res["gpu"]["sketch"] = rows
        # the three fast kernels alone (sketch_prep + the read kernel + sketch_finish: no checks, no transfer, no host
        # work), best options at l = 15
        fast15 = [r for r in rows if "seconds" in r and r["variant"] == "fast" and r["n_moments"] == 15]
        for md in (256, 0):
            cand_rows = [r for r in fast15 if r["max_distinct"] == md]
            if not cand_rows:
                continue
            o = {k: v for k, v in min(cand_rows, key=lambda r: r["seconds"])["options"].items() if k != "n_sample"}
            t = gpu_time(kernels_only(X, 15, md, **o), args.reps, cp)
            res["gpu"].setdefault("fast_kernel_only", []).append(
                {"max_distinct": md, "options": o, "seconds": t, "fraction_of_copy_bw": nbytes / t / bw})
            print(f"fast kernels only (max_distinct={md}, {o}): {t*1e3:.3f} ms, {nbytes/t/bw:.3f} of copy bw",
                  flush=True)
        # end to end with the defaults users get (the row sample on: the cut check needs it)
        res["gpu"]["end_to_end_sketch"] = {"variant": "fast", "options": {}}
        sk_kw = {}
        if xgb is not None and not args.sketch_only:
            res["gpu"]["end_to_end"] = end_to_end_gpu(X, y, sk_kw, reps, cp, xgb, skgpu, skcpu)
            res["host"]["numba_threading_layer"] = numba_layer()
        del X, y
        cp.get_default_memory_pool().free_all_blocks()
    # ------------------------------------------------------------------------------------------------ CPU
    if xgb is not None and not args.skip_cpu and not args.sketch_only:
        threads = os.cpu_count() or 1
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        n, d = (args.cpu_rows, 50)
        X = make_data(np, n, d)
        y = np.random.default_rng(1).standard_normal(n).astype(np.float32)
        max_bin = 256
        t_sk = cpu_time(lambda: skcpu.sketch(X, n_moments=15), 3)
        sk = skcpu.sketch(X, n_moments=15)
        t_cut = cpu_time(lambda: cut_points(sk, max_bin, "maxent"), 3)
        cuts = cut_points(sk, max_bin, "maxent")
        t_ref_only = cpu_time(lambda: xgb.QuantileDMatrix(X, y, ref=reference_dmatrix(cuts), max_bin=max_bin,
                                                          nthread=threads), 3)

        def ours():
            c = cut_points(skcpu.sketch(X, n_moments=15), max_bin, "maxent")
            return xgb.QuantileDMatrix(X, y, ref=reference_dmatrix(c), max_bin=max_bin, nthread=threads)

        t_ours = cpu_time(ours, 3)
        t_theirs = cpu_time(lambda: xgb.QuantileDMatrix(X, y, max_bin=max_bin, nthread=threads), 3)
        res["cpu"] = {"shape": [n, d], "threads": threads, "ours_s": t_ours, "xgboost_qdm_s": t_theirs,
                      "speedup": t_theirs / t_ours, "reference_xgboost_16threads_s": 2.03,
                      "ours_breakdown_s": {"sketch": t_sk, "solve_cuts": t_cut, "qdm_with_ref": t_ref_only}}
        print(f"cpu end-to-end ({threads} threads): ours {t_ours:.3f}s vs xgboost {t_theirs:.3f}s -> "
              f"{t_theirs/t_ours:.2f}x (sketch {t_sk:.3f}s, cuts {t_cut:.3f}s, QDM with ref {t_ref_only:.3f}s)",
              flush=True)
    res["cpu_name"] = platform.processor() or platform.machine()
    res["command"] = "python3 integration/bench_sketch_speed.py " + " ".join(
        a for a in sys.argv[1:] if not a.startswith("/"))
    (out / "sketch_speed.json").write_text(json.dumps(res, indent=2))
    report(res, out)


def report(res: dict, out: Path) -> None:
    """sketch_speed.md and sketch_speed.png from the results dict."""
    lines = ["# Moment sketch speed", "", f"Device: {res.get('device', 'none')}; versions: {res['versions']}; "
             f"host: {res.get('host')}", "", f"Command: `{res.get('command', '')}`", ""]
    g = res["gpu"]
    if g.get("sketch"):
        lines += [f"Device copy bandwidth (read+write): {g['copy_bandwidth_GBps']:.0f} GB/s; "
                  f"data {g['shape'][0]:,} x {g['shape'][1]} float32 ({g['shape'][0] * g['shape'][1] * 4 / 1e9:.1f} "
                  "GB). Target: the sketch reads at >= 50% of the copy bandwidth.", "",
                  "max_distinct = 0 switches the distinct-value tracking off (diagnostic). fast options ({} = the "
                  "defaults): vals = values per thread per tile (default 32 for float32 at n_moments <= 16), stages = "
                  "tiles in flight per block (cp.async, default 2), minb = blocks per SM the registers must allow "
                  "(default 2), fastpath = straight-line sums in chunks of 16 values, one path per warp (default "
                  "True), bulk = the read "
                  "kernel: sketch_bulk (bulk copy engine, no block-wide barrier per tile; the default on sm_90+ where "
                  "it applies) or, with bulk=False, sketch_tiles (cp.async).", ""]
        pc = g.get("public_call")
        if pc:
            lines += [f"**The whole call** `{pc['call']}` (median of {pc['reps']}): {pc['seconds']*1e3:.3f} ms = "
                      f"{pc['GBps']:.0f} GB/s read = **{pc['fraction_of_copy_bw']:.3f} of the copy bandwidth** "
                      f"(target 0.5: {'met' if pc['fraction_of_copy_bw'] >= 0.5 else 'not met'}); with "
                      f"max_distinct=0 {pc['seconds_max_distinct_0']*1e3:.3f} ms = "
                      f"{pc['fraction_max_distinct_0']:.3f}.", ""]
        lines += [
                  "| variant | options | n_moments | max_distinct | ms | GB/s read | fraction of copy bandwidth |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['variant']} | {r['options']} | {r['n_moments']} | {r['max_distinct']} | "
                  + (f"{r['seconds']*1e3:.2f} | {r['GBps']:.0f} | {r['fraction_of_copy_bw']:.2f} |" if "seconds" in r
                     else f"failed: {r['error'][:80]} | | |") for r in g["sketch"]]
        for r in g.get("fast_kernel_only", []):
            lines += ["", f"fast kernels alone (sketch_prep + the read kernel + sketch_finish, no checks / transfer / "
                      f"host work), max_distinct "
                      f"{r['max_distinct']}, {r['options']}: {r['seconds']*1e3:.2f} ms = "
                      f"{r['fraction_of_copy_bw']:.2f} of copy bandwidth"]
    e = g.get("end_to_end")
    if e:
        st, al = e["ours_stages_s"], e["stages_alone_s"]
        lines += ["", "## Hist-ready matrix, GPU (10M x 50, max_bin 256)", "",
                  "| path | seconds | speedup vs XGBoost |", "|---|---|---|",
                  f"| XGBoost QuantileDMatrix (own sketch) | {e['xgboost_qdm_s']:.4f} | 1.00 |",
                  f"| ours: GPU sketch + cuts + QuantileDMatrix(ref) | {e['ours_s']:.4f} | {e['speedup']:.2f} |",
                  "", f"Sketch {g['end_to_end_sketch']}."
                  + (f" XGBoost reports our cuts (get_quantile_cut): {e['xgboost_reports_our_cuts']}."
                     if "xgboost_reports_our_cuts" in e else "")
                  + " Stages of ours, timed inside the same loop (synchronised):",
                  "", "| stage | ms in the loop | ms alone (back to back) |", "|---|---|---|"]
        for k, v in st.items():
            lines.append(f"| {k} | {v*1e3:.2f} | " + (f"{al[k]*1e3:.2f} |" if k in al else " |"))
        lines += ["", "Diagnostics (QuantileDMatrix with our ref, 10M x 50, right after another call):", "",
                  f"- after a Numba `prange` call (OpenMP layer): {e['diag_qdm_after_numba_prange_s']*1e3:.1f} ms",
                  f"- after our thread-pool solve: {e['diag_qdm_after_threadpool_solve_s']*1e3:.1f} ms",
                  f"- after a 20 ms sleep: {e['diag_qdm_after_sleep_20ms_s']*1e3:.1f} ms",
                  f"- ref kinds: {e['diag_ref_kinds']}"]
    c = res.get("cpu")
    if c:
        b = c["ours_breakdown_s"]
        lines += ["", f"## Hist-ready matrix, CPU ({c['shape'][0]:,} x {c['shape'][1]}, {c['threads']} threads)", "",
                  "| path | seconds | speedup vs XGBoost |", "|---|---|---|",
                  f"| XGBoost QuantileDMatrix (own sketch) | {c['xgboost_qdm_s']:.3f} | 1.00 |",
                  f"| ours: Numba sketch + cuts + QuantileDMatrix(ref) | {c['ours_s']:.3f} | {c['speedup']:.2f} |",
                  "", f"Breakdown (ours, stages alone): sketch {b['sketch']:.3f} s, solve+cuts {b['solve_cuts']:.3f} s, "
                  f"QuantileDMatrix with ref {b['qdm_with_ref']:.3f} s."]
    (out / "sketch_speed.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    if not g.get("sketch"):
        return
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    ok = [r for r in g["sketch"] if "seconds" in r]
    labels = [f"{r['variant']} l={r['n_moments']} md={r['max_distinct']}\n"
              + ",".join(f"{k}={v}" for k, v in r["options"].items()) for r in ok]
    ax = axes[0]
    ax.barh(range(len(ok)), [r["fraction_of_copy_bw"] for r in ok],
            color=["tab:gray" if r["options"].get("n_sample") == 0 else "tab:blue" for r in ok])
    ax.axvline(0.5, color="tab:red", ls="--", label="target 0.5")
    ax.set_yticks(range(len(ok)), labels, fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("fraction of device copy bandwidth (read of 10M x 50 float32)")
    ax.set_title("GPU sketch throughput")
    ax.legend(fontsize=7)
    if e:
        ax = axes[1]
        parts = [(k, v) for k, v in e["ours_stages_s"].items() if k != "total"]
        left = 0.0
        for k, v in parts:
            ax.barh(1, v * 1e3, left=left, label=k)
            left += v * 1e3
        ax.barh(0, e["xgboost_qdm_s"] * 1e3, color="tab:gray")
        ax.axvline(e["xgboost_qdm_s"] * 1e3 / 2, color="tab:red", ls="--", label="target (2x faster)")
        ax.set_yticks([0, 1], ["XGBoost QuantileDMatrix", f"ours ({e['speedup']:.2f}x)"])
        ax.set_xlabel("ms (H100, 10M x 50, max_bin 256)")
        ax.set_title("Hist-ready matrix, end to end")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "sketch_speed.png", dpi=120)


if __name__ == "__main__":
    main()
