"""The GPU TreeSHAP benchmark's report: JSON, markdown tables and the plot."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

def _variant_cells(v: dict, keys: tuple) -> str:
    """Markdown cells of variant timings, keyed as now: records from before the quadrature kernels have no "quad",
    and their "split" ran the DP on the paths without tables."""
    if "quad" not in v and "split_dp" not in v:
        v = {("split_dp" if k == "split" else k): t for k, t in v.items()}
    return " | ".join(f"{v[k]:.4g}" if k in v else "-" for k in keys)


def _pick(plan) -> str:
    """A recorded plan [variant, dmax, extra] as text."""
    if not isinstance(plan, list):
        return str(plan)
    text = f"{plan[0]}" + (f" (<= {plan[1]}" if plan[0] in ("table", "split") else "")
    if len(plan) > 2 and plan[2]:
        text += f", +{plan[2]} of {plan[1] + 1}"
    return text + (")" if plan[0] in ("table", "split") else "")


def write_outputs(report, out_dir: Path, tag: str):
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"treeshap_{tag}.json").write_text(json.dumps(report, indent=1))
    lines = [f"# TreeSHAP benchmark ({tag})", "",
             f"Device: {report['device']}; CPU threads: {report['threads']}; versions: "
             + ", ".join(f"{k} {v}" for k, v in report["versions"].items() if v), "",
             "Ratio = our time / fastest anchor's time (below 1: we are faster). Rows/s; anchors timed on fewer rows "
             "where slow (rows in parentheses). shap_cpu is shap's C++ dense_tree_shap on the TreeEnsemble (not the "
             "XGBoost short-circuit); it is single-threaded, while ours (CPU) and xgb_cpu use all the CPU threads.",
             ""]
    if report.get("notes"):
        lines += [f"- {n}" for n in report["notes"]] + [""]
    keys = ["ours", "shap_cuda", "xgb_gpu", "xgb_cpu", "shap_cpu"] if tag.startswith("gpu") else \
        ["ours", "xgb_cpu", "shap_cpu"]
    for key, title, nrow in (("shap", "SHAP values", "rows"), ("inter", "SHAP interaction values", "inter_rows")):
        gpu_keys = [k for k in ("shap_cuda", "xgb_gpu") if k in keys]
        extra = " x fastest GPU anchor |" if gpu_keys else ""
        lines += [f"## {title}", "", "| model | trees | paths | " + " | ".join(keys) + " | fastest anchor | ratio |"
                  + extra, "|---" * (len(keys) + 5 + bool(gpu_keys)) + "|"]
        for r in report["models"]:
            if key not in r:
                continue
            cells = []
            for k in keys:
                v = r[key].get(k)
                cells.append("-" if v is None else f"{v['rows_per_s']:.3g}" +
                             ("" if v["rows"] == r[nrow] else f" ({v['rows']})"))
            row = (f"| {r['model']} | {r['trees']} | {r['paths']} | " + " | ".join(cells) +
                   f" | {r[key + '_fastest_anchor']} | {r[key + '_ratio']:.3g} |")
            if gpu_keys:    # our rows/s over the faster GPU anchor's
                g = [r[key][k]["rows_per_s"] for k in gpu_keys if k in r[key]]
                row += f" {r[key]['ours']['rows_per_s'] / max(g):.3g} |" if g else " - |"
            lines.append(row)
        lines.append("")
    bound = [r for r in report["models"] if r.get("copy_bound_rows_per_s") and "shap" in r]
    if bound:
        lines += ["## NumPy output against the host-copy bound (SHAP values)", "",
                  "NumPy in and out, as in the tables above. Copy bound: the output's bytes per row (float64) over "
                  "the device-to-host bandwidth into pinned memory measured in the same run (rows/s no call with "
                  "NumPy output can beat). Of bound = our NumPy rows/s / copy bound. CuPy in/out: the same call "
                  "with X and the output on the device.", "",
                  "| model | output bytes/row | ours NumPy rows/s | CuPy in/out rows/s | pinned D2H GB/s | "
                  "copy bound rows/s | of bound | x fastest GPU anchor |", "|---" * 8 + "|"]
        for r in bound:
            ours = r["shap"]["ours"]["rows_per_s"]
            cupy = r.get("cupy_rows", r["rows"]) / r["ours_cupy_in_out_s"] if r.get("ours_cupy_in_out_s") else None
            g = [r["shap"][k]["rows_per_s"] for k in ("shap_cuda", "xgb_gpu") if k in r["shap"]]
            lines.append(f"| {r['model']} | {r['out_bytes_per_row']} | {ours:.3g} | "
                         f"{'-' if cupy is None else f'{cupy:.3g}'} | {r['d2h_pinned_gbs']:.3g} | "
                         f"{r['copy_bound_rows_per_s']:.3g} | {ours / r['copy_bound_rows_per_s']:.2f} | "
                         f"{f'{ours / max(g):.3g}x' if g else '-'} |")
        lines.append("")
    if tag.startswith("gpu"):
        lines += ["## First call (path extraction excluded) and packing", "",
                  "| model | extract s | pack s | bins | utilisation | first call s | warm s |", "|---" * 7 + "|"]
        for r in report["models"]:
            lines.append(f"| {r['model']} | {r['extract_s']:.3g} | {r.get('pack_s', 0):.3g} | {r.get('bins')} | "
                         f"{r.get('utilisation', 0):.4f} | {r.get('ours_first_s', 0):.3g} | "
                         f"{r['shap']['ours']['seconds']:.3g} |")
        lines.append("")
    if tag.startswith("gpu"):
        lines += ["## SHAP kernel variants, seconds (NumPy in/out unless said)", "",
                  "Per row: the kernel for paths without tables, DP or quadrature; auto uses the DP. Tables and the "
                  "DP sum the terms of a block's paths per output in shared memory where every path has one leaf "
                  "value (options.shap_sums, \"block\"); \"auto, direct sums\" adds every term to the output "
                  "instead. Older records lack some columns.", "",
                  "| model | rows | auto picks | per row: DP | per row: quadrature | DP + warp shared-memory sums | "
                  "pattern tables | tables + DP | tables + quadrature | auto, CuPy in/out | auto, direct sums |",
                  "|---" * 11 + "|"]
        for r in report["models"]:
            cells = _variant_cells(r.get("variants", {}), ("dp", "quad", "smem", "table", "split_dp", "split"))
            pick = _pick(r.get("variant"))
            direct = f"{r['direct_sums_s']:.4g}" if "direct_sums_s" in r else "-"
            same_rows = r.get("cupy_rows", r.get("variant_rows", r["rows"])) == r.get("variant_rows", r["rows"])
            cupy = f"{r['ours_cupy_in_out_s']:.4g}" if "ours_cupy_in_out_s" in r and same_rows else "-"
            lines.append(f"| {r['model']} | {r.get('variant_rows', r['rows'])} | {pick} | {cells} | {cupy} | "
                         f"{direct} |")
        lines.append("")
        lines += ["## Interaction kernel variants, seconds for the interaction rows (NumPy in/out)", "",
                  "Per row: the kernel for paths without tables, DP (EXTEND/UNWOUNDSUM per conditioned element) or "
                  "quadrature (Gauss-Legendre); auto uses quadrature. Older records have no quadrature columns.", "",
                  "| model | rows | auto picks (tables for paths of) | per row: DP | per row: quadrature | tables | "
                  "tables + DP | tables + quadrature |", "|---" * 8 + "|"]
        for r in report["models"]:
            v = r.get("inter_variants")
            if v is None:
                continue
            cells = _variant_cells(v, ("dp", "quad", "table", "split_dp", "split"))
            pick = _pick(r.get("inter_variant"))
            lines.append(f"| {r['model']} | {r['inter_rows']} | {pick} | {cells} |")
        lines.append("")
    det = [r for r in report["models"] if r.get("determinism")]
    if det:
        lines += ["## Cost of reproducible output: fixed-point sums against double atomics", "",
                  "Seconds per call, median of alternating calls in one process (our default, fixed point, against "
                  "`options.deterministic = False`); cost = fixed / atomics - 1. \"Same bytes\": two calls on the "
                  "same input gave identical arrays (fixed / atomics). SHAP on the SHAP rows, interactions on the "
                  "interaction rows.", "",
                  "| model | SHAP fixed s | atomics s | cost | SHAP, CuPy in/out: fixed s | atomics s | cost | "
                  "interactions fixed s | atomics s | cost | interactions, CuPy in/out: fixed s | atomics s | cost | "
                  "same bytes (SHAP) | same bytes (interactions) |", "|---" * 15 + "|"]
        for r in det:
            d = r["determinism"]
            cells = []
            for k in ("shap", "shap_cupy", "inter", "inter_cupy"):
                if k not in d:
                    cells.append("- | - | -")
                    continue
                f, a = d[k]["fixed_s"], d[k]["atomics_s"]
                cells.append(f"{f:.4g} | {a:.4g} | {100 * (f / a - 1):+.1f}%")
            same = [f"{'yes' if d[k]['same_bytes_fixed'] else 'NO'} / {'yes' if d[k]['same_bytes_atomics'] else 'no'}"
                    for k in ("shap", "inter")]
            lines.append(f"| {r['model']} | " + " | ".join(cells) + " | " + " | ".join(same) + " |")
        lines.append("")
    if report.get("crossover"):
        c = report["crossover"]
        lines += [f"## GPU/CPU crossover ({c['model']}, ours on GPU vs XGBoost CPU on {report['threads']} threads)", "",
                  "| rows | ours GPU s | XGBoost CPU s |", "|---|---|---|"]
        lines += [f"| {s['rows']} | {s['gpu_s']:.3g} | {s['xgb_cpu_s']:.3g} |" for s in c["series"]]
        lines += ["", f"Crossover: GPU faster from {c['crossover_rows']} rows.", ""]
    for r in report["models"]:
        if r.get("shap_cuda_error"):
            lines.append(f"shap-cuda unavailable: {r['shap_cuda_error']}")
            break
    (out_dir / f"treeshap_{tag}.md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 2, figsize=(14, 5))
        for ax, key in zip(axes, ("shap", "inter")):
            models = [r for r in report["models"] if key in r]
            xs = np.arange(len(models))
            for j, k in enumerate(keys):
                vals = [r[key].get(k, {}).get("rows_per_s", np.nan) for r in models]
                ax.bar(xs + j * 0.15, vals, 0.15, label=k)
            ax.set_xticks(xs + 0.3, [r["model"] for r in models], rotation=60, ha="right")
            ax.set_yscale("log")
            ax.set_ylabel("rows / s")
            ax.set_title(f"{'SHAP values' if key == 'shap' else 'interactions'} ({report['device']})")
            ax.legend()
        fig.tight_layout()
        fig.savefig(out_dir / f"treeshap_{tag}.png", dpi=110)
    except Exception as exc:  # plotting is best effort
        print("plot failed:", exc)
