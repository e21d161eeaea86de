"""Roofline of hitml's GPU kernels: each kernel's achieved DRAM bandwidth and FP64 operation rate against the device's
peaks, its Nsight Compute speed-of-light throughputs, and what bounds it.

    python integration/bench_roofline.py --out docs/benchmarks                 (every scenario, under ncu)
    python integration/bench_roofline.py --scenarios values-xgb-d8,sketch      (a subset)
    python integration/bench_roofline.py --scenario values-xgb-d8              (one scenario's workload, no ncu)

Each scenario builds its inputs (synthetic data, said so in the report), calls the engine once untimed (compiles,
tables, caches), then once inside ``cupyx.profiler.profile()``; ``ncu --profile-from-start off`` profiles only the
kernels of that second call, one process per scenario (``--clock-control none``: the clocks the device runs at).
Per kernel (summed over its launches in the call): duration, DRAM bytes read and written, FP64 operations
(add + mul + 2 fma, per thread), FP32 likewise, and the speed-of-light throughputs of the SM, L1/TEX, L2 and DRAM
(duration-weighted over launches). Peaks: DRAM from the device's memory clock and bus width (double data rate),
FP64 from the SM count, 64 FP64 lanes per SM (sm_90) and the SM clock ncu reports. Writes ``roofline_gpu.json`` and
``roofline_gpu.md``.

"Bound by": the SM or a memory level where its speed-of-light throughput reaches 60% (the larger one); otherwise
"latency" (no unit past 60%: too few warps, or dependent chains, to keep any unit busy).
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "integration"))
from _treeshap_common import versions  # noqa: E402 - after the sys.path set-up above
from _treeshap_families import data, models  # noqa: E402 - after the sys.path set-up above

RAW_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum",
               "sm__sass_thread_inst_executed_op_dadd_pred_on.sum",
               "sm__sass_thread_inst_executed_op_dmul_pred_on.sum",
               "sm__sass_thread_inst_executed_op_dfma_pred_on.sum",
               "sm__sass_thread_inst_executed_op_fadd_pred_on.sum",
               "sm__sass_thread_inst_executed_op_fmul_pred_on.sum",
               "sm__sass_thread_inst_executed_op_ffma_pred_on.sum")
SOL = {"Duration": "duration", "Compute (SM) Throughput": "sm_pct", "Memory Throughput": "mem_pct",
       "DRAM Throughput": "dram_pct", "L1/TEX Cache Throughput": "l1_pct", "L2 Cache Throughput": "l2_pct",
       "SM Frequency": "sm_freq", "Achieved Occupancy": "occ_achieved", "Theoretical Occupancy": "occ_theoretical",
       "Registers Per Thread": "registers"}
BOUND_AT = 60.0
DATASHEET_DRAM_BPS = {"H200": 4.8e12, "H100 80GB HBM3": 3.35e12, "H100 NVL": 3.9e12, "H100 PCIe": 2.0e12}
FP64_LANES_PER_SM = 64        # sm_90 (H100, H200)


# ------------------------------------------------------------------------------------------------ the workloads
def _xgb(depth: int, trees: int, M: int = 20, n: int = 50_000):
    import xgboost as xgb
    X, y = data(n, M)
    return xgb.train({"max_depth": depth, "eta": 0.1, "nthread": os.cpu_count()}, xgb.DMatrix(X, y), trees), M


def _rows(n: int, M: int, seed: int = 7):
    return data(n, M, seed)[0]


def _explainer(model):
    import shap

    import hitml.shap_ext  # noqa: F401 - registers the backend
    return shap.TreeExplainer(model, backend="gpu")


def _forest():
    return models(["rf-depth30"], 50, 100_000, os.cpu_count())["rf-depth30"][0], 50


def scenario(name: str):
    """(description, one call) of scenario ``name``; the call returns after its kernels are queued."""
    import cupy as cp
    if name in ("values-xgb-d8", "inter-xgb-d8"):
        bst, M = _xgb(8, 100)
        ex = _explainer(bst)
        if name == "values-xgb-d8":
            Xd = cp.asarray(_rows(10_000, M))
            return ("TreeSHAP values: XGBoost 100 trees of depth 8, 20 features, 10,000 rows (CuPy in and out)",
                    lambda: ex.shap_values(Xd, check_additivity=False))
        Xd = cp.asarray(_rows(500, M))
        return ("TreeSHAP interactions: XGBoost 100 trees of depth 8, 20 features, 500 rows (CuPy in and out)",
                lambda: ex.shap_interaction_values(Xd))
    if name in ("values-rf-d30", "inter-rf-d30"):
        model, M = _forest()
        ex = _explainer(model)
        if name == "values-rf-d30":
            Xd = cp.asarray(_rows(1_000, M))
            return ("TreeSHAP values: RandomForestRegressor 100 trees of depth 30 (per-tree linear kernel), "
                    "1,000 rows", lambda: ex.shap_values(Xd, check_additivity=False))
        Xd = cp.asarray(_rows(20, M))
        return ("TreeSHAP interactions: the same forest, 20 rows", lambda: ex.shap_interaction_values(Xd))
    if name in ("interventional-build", "interventional-call"):
        from hitml.kernels.treeshap import background_summary, interventional_shap_values
        bst, M = _xgb(6, 100, M=50)
        ps = _explainer(bst).paths
        bg = cp.asarray(_rows(1_000_000, M, seed=11))
        if name == "interventional-build":
            return ("Interventional background pass: XGBoost 100 trees of depth 6, 1,000,000 x 50 float32 "
                    "background", lambda: background_summary(ps, bg, backend="gpu"))
        summary = background_summary(ps, bg, backend="gpu")
        Xd = cp.asarray(_rows(100_000, M))
        return ("Interventional values: the same model and background summary, 100,000 rows",
                lambda: interventional_shap_values(ps, Xd, summary, backend="gpu"))
    if name == "sketch":
        from hitml.kernels.sketch import sketch
        Xd = cp.asarray(_rows(4_000_000, 50))
        return ("Moment sketch (with its row sample): 4,000,000 x 50 float32", lambda: sketch(Xd, backend="gpu"))
    if name == "shuffle":
        from hitml.kernels.shuffle import shuffle_rows
        Xd = cp.random.RandomState(7).standard_normal((10_000_000, 4), dtype=cp.float32)
        return ("Bijective shuffle of rows: 10,000,000 x 4 float32", lambda: shuffle_rows(Xd, 0, backend="gpu"))
    raise ValueError(f"unknown scenario {name!r}; one of {', '.join(SCENARIOS)}")


SCENARIOS = ("values-xgb-d8", "inter-xgb-d8", "values-rf-d30", "inter-rf-d30", "interventional-build",
             "interventional-call", "sketch", "shuffle")


def run_scenario(name: str, info_path: str | None) -> None:
    """The child: scenario ``name`` once untimed, then once inside the profiler's range; the device's peaks to
    ``info_path``."""
    import cupy as cp
    import cupyx.profiler

    desc, call = scenario(name)
    call()
    cp.cuda.Device().synchronize()
    with cupyx.profiler.profile():
        call()
        cp.cuda.Device().synchronize()
    if info_path:
        dev = cp.cuda.Device()
        a = dev.attributes
        name_ = cp.cuda.runtime.getDeviceProperties(dev.id)["name"]
        name_ = name_.decode() if isinstance(name_, bytes) else str(name_)
        if a.get("MemoryClockRate") and a.get("GlobalMemoryBusWidth"):
            peak = 2.0 * a["MemoryClockRate"] * 1e3 * a["GlobalMemoryBusWidth"] / 8     # kHz, bits
        else:                                    # the attribute is gone from some CUDA versions: the data sheets
            peak = next((v for k, v in DATASHEET_DRAM_BPS.items() if k in name_), float("nan"))
        Path(info_path).write_text(json.dumps({"description": desc, "device": name_,
                                               "sms": a["MultiProcessorCount"], "dram_peak_Bps": peak}))


# ------------------------------------------------------------------------------------------------ ncu and parsing
def _number(value: str) -> float | None:
    v = value.replace(",", "").strip()
    try:
        return float(v)
    except ValueError:
        return None


_BYTES = {"byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12}
_UNIT = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0, "hz": 1.0, "khz": 1e3, "mhz": 1e6,
         "ghz": 1e9, "cycle/nsecond": 1e9, "cycle/usecond": 1e6, "cycle/second": 1.0}


def parse_details(text: str) -> list[dict]:
    """Launches of ncu's ``--csv --page details`` report: one dict per launch (ID, kernel, the SOL fields in SI
    units or %, the raw metrics)."""
    start = text.find('"ID"')
    if start < 0:
        raise RuntimeError("no ncu details table in the report:\n" + text[:2000])
    launches: dict = {}
    for row in csv.DictReader(io.StringIO(text[start:])):
        key = row.get("ID")
        if key is None or not key.strip().isdigit():
            continue
        rec = launches.setdefault(int(key), {"kernel": row["Kernel Name"], "grid": row.get("Grid Size", ""),
                                             "block": row.get("Block Size", "")})
        name, unit, val = row["Metric Name"], (row.get("Metric Unit") or "").strip().lower(), _number(
            row.get("Metric Value", ""))
        if val is None:
            continue
        if name in RAW_METRICS:
            rec[name] = val * _BYTES.get(unit, 1.0)
        elif name in SOL:
            rec[SOL[name]] = val * _UNIT.get(unit, 1.0) if name in ("Duration", "SM Frequency") else val
    return [launches[k] for k in sorted(launches)]


def short_name(kernel: str) -> str:
    """A kernel's name without its parameter list (templates kept)."""
    depth, out = 0, []
    for ch in kernel:
        if ch == "(" and depth == 0:
            break
        depth += ch == "<"
        depth -= ch == ">"
        out.append(ch)
    return "".join(out).strip()


def aggregate(launches: list[dict], info: dict) -> list[dict]:
    """Per kernel name: launches, summed duration, bytes and operations, duration-weighted throughputs, achieved
    rates against the peaks, and what bounds it."""
    by: dict = {}
    for ln in launches:
        by.setdefault(short_name(ln["kernel"]), []).append(ln)
    rows = []
    for name, lns in by.items():
        t = sum(ln.get("duration", 0.0) for ln in lns)
        if t <= 0:
            continue

        def wavg(k):
            vals = [(ln.get("duration", 0.0), ln[k]) for ln in lns if k in ln]
            w = sum(d for d, _ in vals)
            return sum(d * v for d, v in vals) / w if w else None

        def total(k):
            return sum(ln.get(k, 0.0) for ln in lns)
        dram = total("dram__bytes_read.sum") + total("dram__bytes_write.sum")
        fp64 = (total("sm__sass_thread_inst_executed_op_dadd_pred_on.sum")
                + total("sm__sass_thread_inst_executed_op_dmul_pred_on.sum")
                + 2 * total("sm__sass_thread_inst_executed_op_dfma_pred_on.sum"))
        fp32 = (total("sm__sass_thread_inst_executed_op_fadd_pred_on.sum")
                + total("sm__sass_thread_inst_executed_op_fmul_pred_on.sum")
                + 2 * total("sm__sass_thread_inst_executed_op_ffma_pred_on.sum"))
        freq = wavg("sm_freq")
        fp64_peak = info["sms"] * FP64_LANES_PER_SM * 2 * freq if freq else None
        r = {"kernel": name, "launches": len(lns), "seconds": t, "dram_bytes": dram, "dram_Bps": dram / t,
             "dram_of_peak": dram / t / info["dram_peak_Bps"], "fp64_ops": fp64, "fp64_flops": fp64 / t,
             "fp64_of_peak": (fp64 / t / fp64_peak) if fp64_peak else None, "fp32_flops": fp32 / t,
             "sm_freq_hz": freq, "registers": max((ln.get("registers", 0) for ln in lns), default=None)}
        for k in ("sm_pct", "mem_pct", "dram_pct", "l1_pct", "l2_pct", "occ_achieved", "occ_theoretical"):
            r[k] = wavg(k)
        r["bound_by"] = bound_by(r)
        rows.append(r)
    return sorted(rows, key=lambda r: -r["seconds"])


def bound_by(r: dict) -> str:
    units = {"SM": r.get("sm_pct"), "DRAM": r.get("dram_pct"), "L2": r.get("l2_pct"), "L1/TEX": r.get("l1_pct")}
    units = {k: v for k, v in units.items() if v is not None}
    if not units:
        return "-"
    top = max(units, key=units.get)
    if units[top] >= BOUND_AT:
        return f"{'compute' if top == 'SM' else 'memory'} ({top} {units[top]:.0f}%)"
    return f"latency (busiest: {top} {units[top]:.0f}%)"


def profile(name: str, ncu: str, keep: Path | None, timeout: float | None = None) -> dict:
    """Scenario ``name`` under ncu, in a process of its own: (description, device, per-kernel rows)."""
    with tempfile.TemporaryDirectory() as tmp:
        rep, info_path = Path(tmp) / "r", Path(tmp) / "info.json"
        cmd = [ncu, "--profile-from-start", "off", "--clock-control", "none", "--section", "SpeedOfLight",
               "--section", "Occupancy", "--section", "LaunchStats", "--metrics", ",".join(RAW_METRICS),
               "--export", str(rep), "--force-overwrite", sys.executable, __file__, "--scenario", name,
               "--info", str(info_path)]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if run.returncode != 0 or not info_path.exists():
            raise RuntimeError(f"{' '.join(cmd)} failed ({run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
        csv_text = subprocess.run([ncu, "--import", str(rep) + ".ncu-rep", "--csv", "--page", "details",
                                   "--print-units", "base"],
                                  capture_output=True, text=True, check=True).stdout
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            (keep / f"roofline_{name}.csv").write_text(csv_text)
        info = json.loads(info_path.read_text())
    return {"scenario": name, "description": info["description"], "device": info["device"],
            "dram_peak_Bps": info["dram_peak_Bps"], "sms": info["sms"],
            "kernels": aggregate(parse_details(csv_text), info)}


# ------------------------------------------------------------------------------------------------ report
def _pct(v) -> str:
    return "-" if v is None else f"{v:.0f}%"


def report(res: dict) -> str:
    lines = ["# Roofline of the GPU kernels (roofline_gpu)", "",
             f"`integration/bench_roofline.py` on one {res['device']}; {res['ncu']}. Versions: "
             + ", ".join(f"{k} {v}" for k, v in res["versions"].items() if v) + ".", "",
             "Each scenario's second call (the first compiles and builds caches) under `ncu --clock-control none` with "
             "the SpeedOfLight, Occupancy and LaunchStats sections and raw DRAM-byte and FP64/FP32 instruction "
             "counts; one process per scenario; synthetic standard-normal data. Per kernel, summed over its launches "
             "in the call. DRAM peak: memory clock x bus width x 2 = "
             f"{res['dram_peak_Bps'] / 1e12:.2f} TB/s; FP64 peak: {res['sms']} SMs x {FP64_LANES_PER_SM} lanes x 2 x "
             "the SM clock ncu reports. SM / L1 / L2 / DRAM: ncu's speed-of-light throughput, % of each unit's peak "
             f"(duration-weighted). Bound by: the busiest unit where it reaches {BOUND_AT:.0f}%, else latency. ncu "
             "replays each launch (caches flushed between passes), so these durations are the profiler's, not the "
             "benchmarks'.", ""]
    if res.get("note"):
        lines += [res["note"], ""]
    for sc in res["scenarios"]:
        lines += [f"## {sc['scenario']}: {sc['description']}", ""]
        if "error" in sc:
            lines += [f"Failed: {sc['error'][:500]}", ""]
            continue
        lines += ["| kernel | launches | ms | DRAM GB/s (of peak) | FP64 GFLOP/s (of peak) | FP32 GFLOP/s | SM | L1/TEX "
                  "| L2 | DRAM | occupancy achieved / theoretical | registers | bound by |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for k in sc["kernels"]:
            fp64 = "-" if k["fp64_of_peak"] is None else f"{k['fp64_flops'] / 1e9:.0f} ({k['fp64_of_peak']:.2f})"
            occ = f"{_pct(k['occ_achieved'])} / {_pct(k['occ_theoretical'])}"
            lines.append(f"| `{k['kernel']}` | {k['launches']} | {k['seconds'] * 1e3:.3f} | "
                         f"{k['dram_Bps'] / 1e9:.0f} ({k['dram_of_peak']:.2f}) | {fp64} | {k['fp32_flops'] / 1e9:.0f} | "
                         f"{_pct(k['sm_pct'])} | {_pct(k['l1_pct'])} | {_pct(k['l2_pct'])} | {_pct(k['dram_pct'])} | "
                         f"{occ} | {k['registers']:.0f} | {k['bound_by']} |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> dict | None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--scenario", default=None, help="run one scenario's workload (the profiled child)")
    ap.add_argument("--info", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--ncu", default=shutil.which("ncu") or "ncu")
    ap.add_argument("--keep-csv", default=None, help="folder for each scenario's raw ncu CSV")
    ap.add_argument("--timeout", type=float, default=None, help="seconds a scenario's profiled process may take")
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    ap.add_argument("--note", default="", help="a paragraph for the report (where and how its runs were made)")
    ap.add_argument("--rebuild", nargs="+", default=None, metavar="CSV_DIR:JSON",
                    help="no profiling: the report from kept CSVs (--keep-csv) and the JSON of the run that kept them "
                         "(for the device, its peaks and the scenarios' descriptions); a later pair's scenarios "
                         "replace an earlier one's")
    a = ap.parse_args(argv)
    if a.scenario:
        run_scenario(a.scenario, a.info)
        return None
    if a.rebuild:
        return _write(dict(rebuild(a.rebuild), note=a.note), Path(a.out))
    ncu_version = subprocess.run([a.ncu, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    res = {"note": a.note, "ncu": ncu_version[-1] if ncu_version else a.ncu, "versions": versions(("numpy", "cupy", "numba", "xgboost", "sklearn", "shap")), "scenarios": []}
    for name in a.scenarios.split(","):
        try:
            sc = profile(name, a.ncu, Path(a.keep_csv) if a.keep_csv else None, a.timeout)
            res.update(device=sc["device"], dram_peak_Bps=sc["dram_peak_Bps"], sms=sc["sms"])
        except Exception as exc:       # a scenario's failure is reported in its section; the rest run
            sc = {"scenario": name, "description": "", "error": f"{type(exc).__name__}: {exc}"}
        res["scenarios"].append(sc)
        print(json.dumps({k: v for k, v in sc.items() if k != "kernels"}), flush=True)
    if "device" not in res:
        raise SystemExit("every scenario failed:\n" + "\n".join(s["error"] for s in res["scenarios"]))
    return _write(res, Path(a.out))


def _write(res: dict, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    (out / "roofline_gpu.json").write_text(json.dumps(res, indent=1))
    md = report(res)
    (out / "roofline_gpu.md").write_text(md + "\n")
    print(md)
    return res


def rebuild(pairs: list[str]) -> dict:
    """The results of earlier runs from their kept CSVs: ``pairs`` of "CSV_DIR:JSON", in scenario order of the first
    run; a later pair's scenarios replace an earlier one's."""
    res: dict = {}
    found: dict = {}
    for pair in pairs:
        csv_dir, js = pair.rsplit(":", 1)
        run = json.loads(Path(js).read_text())
        if not res:
            res = {k: v for k, v in run.items() if k != "scenarios"}
            res["scenarios"] = []
        for sc in run["scenarios"]:
            f = Path(csv_dir) / f"roofline_{sc['scenario']}.csv"
            if not f.exists() or "error" in sc:
                found.setdefault(sc["scenario"], sc)
                continue
            info = {"sms": run["sms"], "dram_peak_Bps": run["dram_peak_Bps"]}
            found[sc["scenario"]] = {"scenario": sc["scenario"], "description": sc["description"],
                                     "device": run["device"], "dram_peak_Bps": run["dram_peak_Bps"], "sms": run["sms"],
                                     "kernels": aggregate(parse_details(f.read_text()), info)}
    res["scenarios"] = [found[n] for n in SCENARIOS if n in found]
    return res


if __name__ == "__main__":
    main()
