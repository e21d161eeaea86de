"""Benchmark: Shapley sampling error vs model evaluations (ours vs shap's sampling explainers), sampler cost, GPU speed.

An *evaluation* is one coalition S for one explained row, i.e. one v(S) = mean over the background of f(x_S, b_~S):
|background| model rows. Every method is charged by the model rows it actually sends to the model (counted by a
wrapper), divided by |background|: PermutationExplainer (2d+1 evaluations per antithetic pair), KernelExplainer
(nsamples coalitions, each over the background) and ours (2 + n(d-1) per row for n permutations: v(empty) and v(all)
are evaluated once per row and shared by all permutations) are charged the same way;
SamplingExplainer evaluates each hybrid row on ONE background row, so it gets nsamples = budget*|background|/2 samples
(2 model rows each) for the same number of model rows.

    python integration/bench_shapley.py                 # accuracy (CPU) + permutation-generation timings
    python integration/bench_shapley.py --speed         # GPU end-to-end speed (XGBoost device="cuda")
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OURS = ["mc", "antithetic", "stratified", "owen", "owen_halved", "herding", "sbq", "orthogonal", "sobol"]
SHAP = ["shap_permutation", "shap_kernel", "shap_sampling"]


# ----------------------------------------------------------------------------------------------- data and models
def load_datasets(names):
    import pandas as pd
    from sklearn.datasets import load_breast_cancer, make_regression

    out = {}
    for name in names:
        if name == "cal_housing":
            df = pd.read_csv(ROOT / "data/cal_housing.csv.gz")
            out[name] = (df.drop(columns="median_house_value").to_numpy(float), df["median_house_value"].to_numpy() / 1e5,
                         "reg")
        elif name == "adult":
            df = pd.read_csv(ROOT / "data/adult.csv.gz")
            y = (df.pop("income").astype(str).str.strip().str.startswith(">50K")).to_numpy(int)
            cats = [c for c in df.columns if not pd.api.types.is_numeric_dtype(df[c])]
            X = pd.get_dummies(df, columns=cats, dtype=float).to_numpy(float)
            out[name] = (X, y, "clf")
        elif name == "breast_cancer":
            X, y = load_breast_cancer(return_X_y=True)
            out[name] = (X, y, "clf")
        elif name == "make_regression":
            X, y = make_regression(n_samples=1000, n_features=10, noise=0.1, random_state=47)
            out[name] = (X, y, "reg")
        else:
            raise ValueError(name)
    return out


def train(model: str, X, y, task: str, device: str = "cpu"):
    """A prediction function on the explained scale: regression output, or log-odds for classifiers."""
    if model == "xgboost":
        import xgboost as xgb

        cls = xgb.XGBRegressor if task == "reg" else xgb.XGBClassifier
        m = cls(n_estimators=100, max_depth=6, learning_rate=0.3, device=device, tree_method="hist").fit(X, y)
        booster = m.get_booster()
        return m, (lambda Z: booster.inplace_predict(Z, predict_type="margin"))
    from sklearn.neural_network import MLPClassifier, MLPRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if task == "reg":
            m = make_pipeline(StandardScaler(), MLPRegressor(random_state=0)).fit(X, y)
            return m, m.predict
        m = make_pipeline(StandardScaler(), MLPClassifier(random_state=0)).fit(X, y)

    def logit(Z):
        p = np.clip(m.predict_proba(Z)[:, 1], 1e-12, 1 - 1e-12)
        return np.log(p / (1 - p))

    return m, logit


def exact_by_enumeration(f, X, bg):
    """Shapley values from all 2^d coalitions (independent of the samplers): (m, d)."""
    m, d = X.shape
    masks = np.array(list(itertools.product([0, 1], repeat=d)), dtype=bool)  # (2^d, d)
    code = masks.astype(np.int64) @ (1 << np.arange(d))
    v = np.empty((m, len(masks)))
    for i in range(m):
        rows = np.where(masks[:, None, :], X[i][None, None, :], bg[None, :, :]).reshape(-1, d)
        v[i, code] = f(rows).reshape(len(masks), -1).mean(axis=1)
    sizes = masks.sum(axis=1)
    wts = np.array([math.factorial(s) * math.factorial(d - s - 1) / math.factorial(d) if s < d else 0 for s in sizes])
    phi = np.zeros((m, d))
    for j in range(d):
        without = ~masks[:, j]
        c = code[without]
        phi[:, j] = (v[:, c | (1 << j)] - v[:, c]) @ wts[without]
    return phi


# ----------------------------------------------------------------------------------------------- methods
class Counter:
    """Wraps a prediction function and counts the model rows it sees."""

    def __init__(self, f):
        self.f, self.rows = f, 0

    def __call__(self, Z):
        Z = np.asarray(Z)
        self.rows += Z.shape[0]
        return self.f(Z)


def run_method(method, f, X, bg, budget, seed):
    """(phi (m, d), evaluations per row actually charged)."""
    import shap

    from hitml.sklearn_ext import ShapleyExplainer, ShapleySampler

    m, d = X.shape
    cf = Counter(f)
    np.random.seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if method in OURS:
            e = ShapleyExplainer(cf, ShapleySampler(method, random_state=seed), max_evals=budget).fit(bg)
            cf.rows = 0
            phi = e.transform(X)
        elif method == "shap_permutation":
            ex = shap.PermutationExplainer(cf, shap.maskers.Independent(bg, max_samples=len(bg)), seed=seed)
            phi = ex(X, max_evals=budget, silent=True).values
        elif method == "shap_kernel":
            ex = shap.KernelExplainer(cf, bg)
            cf.rows = 0
            phi = np.asarray(ex.shap_values(X, nsamples=budget, l1_reg=False, silent=True))
        elif method == "shap_sampling":
            ex = shap.SamplingExplainer(cf, bg)
            cf.rows = 0
            phi = np.asarray(ex.shap_values(X, nsamples=budget * len(bg) // 2, silent=True))
        else:
            raise ValueError(method)
    return np.asarray(phi).reshape(m, d), cf.rows / (m * len(bg))


# ----------------------------------------------------------------------------------------------- experiments
def accuracy(args, report):
    import shap

    data = load_datasets(args.datasets)
    rng = np.random.default_rng(0)
    results = []
    for name, (X, y, task) in data.items():
        d = X.shape[1]
        fg_idx = rng.choice(len(X), args.rows, replace=False)
        bg_idx = rng.choice(len(X), 100, replace=False)
        fg, bg = X[fg_idx], X[bg_idx]
        for model in args.models:
            if model == "mlp" and d > 12:
                print(f"skip mlp on {name}: d = {d} > 12 (no enumeration ground truth)", flush=True)
                continue
            est, f = train(model, X, y, task)
            t0 = time.time()
            if model == "xgboost":
                truth = np.asarray(shap.TreeExplainer(est, bg, feature_perturbation="interventional",
                                                      model_output="raw").shap_values(fg)).reshape(len(fg), d)
                check = exact_by_enumeration(f, fg[:1], bg) if d <= 10 else None
                if check is not None:
                    np.testing.assert_allclose(truth[:1], check, rtol=1e-4, atol=1e-4)
            else:
                truth = exact_by_enumeration(f, fg, bg)
            print(f"{name} d={d} {model}: ground truth in {time.time() - t0:.1f}s", flush=True)
            for budget in args.budgets:
                for method in OURS + SHAP:
                    if method == "shap_permutation" and budget < 2 * d + 1 or method in OURS and budget < d + 1:
                        continue
                    if method == "shap_sampling" and args.sampling_max_budget and budget > args.sampling_max_budget:
                        continue
                    errs, evals, secs = [], [], []
                    for r in range(args.repeats):
                        t0 = time.time()
                        phi, ev = run_method(method, f, fg, bg, budget, 1000 * r + 7)
                        secs.append(time.time() - t0)
                        errs.append(float(np.mean((phi - truth) ** 2)))
                        evals.append(ev)
                    e = np.array(errs)
                    rec = dict(dataset=name, d=d, model=model, budget=budget, method=method,
                               evals_per_row=float(np.mean(evals)), mse=float(e.mean()),
                               mse_ci95=float(1.96 * e.std(ddof=1) / math.sqrt(len(e))) if len(e) > 1 else None,
                               seconds=float(np.mean(secs)), repeats=len(e))
                    results.append(rec)
                    print(f"  B={budget:5d} {method:17s} evals/row={rec['evals_per_row']:8.1f} mse={rec['mse']:.4g}"
                          f" ({rec['seconds']:.2f}s)", flush=True)
    report["accuracy"] = results


def generation_timing(report, backend="cpu"):
    from hitml.kernels import permutations as kp

    rows = []
    for method, n, d in [("herding", 1000, 200), ("sbq", 100, 200), ("orthogonal", 1000, 200), ("sobol", 1000, 200),
                         ("antithetic", 1000, 200)]:
        kp.sample(method, 10, d, 0, backend=backend)  # warm-up (JIT / kernel compilation)
        times, cpu_times = [], []
        for rep in range(2 if method in ("herding", "sbq") else 3):
            t0, c0 = time.perf_counter(), time.process_time()
            p, _ = kp.sample(method, n, d, rep, backend=backend)
            if backend == "gpu":
                import cupy

                cupy.cuda.Device().synchronize()
            times.append(time.perf_counter() - t0)
            cpu_times.append(time.process_time() - c0)
        rows.append(dict(method=method, n=n, d=d, backend=backend, seconds=float(np.median(times)),
                         process_cpu_seconds=float(np.median(cpu_times))))
        print(f"generate {method} n={n} d={d} [{backend}]: {rows[-1]['seconds']:.3f}s", flush=True)
    report.setdefault("generation", []).extend(rows)


def speed(args, report):
    """End-to-end on the GPU: explain `speed_rows` rows at a fixed budget, ours (masked rows + XGBoost on device) vs
    shap's PermutationExplainer with the same GPU model (timed on `shap_rows` rows, scaled linearly)."""
    data = load_datasets(["cal_housing", "adult"])
    out = []
    report["speed"] = out
    for name, (X, y, task) in data.items():
        try:
            _speed_one(args, name, X, y, task, out)
        except Exception as exc:  # keep the other dataset's numbers
            import traceback

            traceback.print_exc()
            out.append(dict(dataset=name, error=f"{type(exc).__name__}: {exc}"))


def _speed_one(args, name, X, y, task, out):
    import shap

    from hitml.sklearn_ext import ShapleyExplainer, ShapleySampler

    gpu = args.speed_backend == "gpu"
    if gpu:
        import cupy

        sync = cupy.cuda.Device().synchronize
    else:
        def sync():
            return None
    d = X.shape[1]
    est, f = train("xgboost", X, y, task, device="cuda" if gpu else "cpu")
    booster = est.get_booster()
    rng = np.random.default_rng(1)
    bg = X[rng.choice(len(X), 100, replace=False)]
    fg = X[rng.choice(len(X), args.speed_rows, replace=False)]
    budget = args.speed_budget if args.speed_budget >= 2 * d + 1 else 2 * d + 1
    for method in ("orthogonal", "sobol", "antithetic"):
        e = ShapleyExplainer(lambda Z: booster.inplace_predict(Z, predict_type="margin"),
                             ShapleySampler(method, random_state=0, backend=args.speed_backend), max_evals=budget,
                             model_input="device" if gpu else "numpy").fit(bg)
        e.transform(fg[:5])  # warm-up
        times = []
        for _ in range(3):
            sync()
            t0 = time.perf_counter()
            phi = e.transform(fg)
            sync()
            times.append(time.perf_counter() - t0)
        ours = float(np.median(times))
        gap = np.abs(phi.sum(axis=1) + e.expected_value_ - f(fg)).max()
        out.append(dict(dataset=name, d=d, method=method, rows=len(fg), budget=budget, seconds=ours,
                        efficiency_gap=float(gap)))
        print(f"speed {name} ours[{method}] {len(fg)} rows: {ours:.2f}s (efficiency gap {gap:.2e})", flush=True)
    cf = Counter(f)
    ex = shap.PermutationExplainer(cf, shap.maskers.Independent(bg, max_samples=100), seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex(fg[:5], max_evals=budget, silent=True)
        t0 = time.perf_counter()
        ex(fg[:args.shap_rows], max_evals=budget, silent=True)
        t_shap = (time.perf_counter() - t0) * len(fg) / args.shap_rows
    out.append(dict(dataset=name, d=d, method="shap_permutation", rows=len(fg), budget=budget, seconds=t_shap,
                    timed_rows=args.shap_rows))
    print(f"speed {name} shap PermutationExplainer: {t_shap:.2f}s for {len(fg)} rows (timed on {args.shap_rows})",
          flush=True)


# ----------------------------------------------------------------------------------------------- output
def versions():
    import importlib

    v = {"python": platform.python_version()}
    for mod in ("numpy", "scipy", "sklearn", "shap", "xgboost", "cupy"):
        try:
            v[mod] = importlib.import_module(mod).__version__
        except Exception:
            pass
    return v


def write_markdown(report, path: Path):
    lines = [f"# Shapley sampling benchmark ({report['mode']})", "", f"Device: {report['device']}  ",
             f"Versions: {report['versions']}  ", f"Settings: {report['settings']}", ""]
    if report.get("note"):
        lines += [report["note"], ""]
    acc = report.get("accuracy", [])
    if acc:
        lines += ["## MSE vs evaluations per row (mean over repeats; lower is better)", "",
                  "budget = max_evals, shap's unit: coalitions per explained row, each over the background (100 "
                  "rows). Every method gets the same budget; ours spends 2 + n(d-1) per row on n permutations "
                  "(v(empty), v(all) once per row), shap's PermutationExplainer 2d+1 per antithetic pair. The second "
                  "table shows the model rows each method actually sent / |background| (shap's Independent masker "
                  "skips background rows a toggle does not change, so on sparse one-hot data it sends fewer). "
                  "Bold: lowest in the row.", ""]
        methods = OURS + SHAP
        lines += ["| dataset | d | model | budget | " + " | ".join(methods) + " |",
                  "|---|---|---|---|" + "---|" * len(methods)]
        keys = sorted({(r["dataset"], r["d"], r["model"], r["budget"]) for r in acc}, key=lambda k: (k[0], k[2], k[3]))
        for k in keys:
            cells = {r["method"]: r for r in acc if (r["dataset"], r["d"], r["model"], r["budget"]) == k}
            best = min(c["mse"] for c in cells.values())
            row = []
            for mth in methods:
                c = cells.get(mth)
                if c is None:
                    row.append("-")
                else:
                    s = f"{c['mse']:.3g}"
                    row.append(f"**{s}**" if c["mse"] == best else s)
            lines.append(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | " + " | ".join(row) + " |")
        lines += ["", "Evaluations per row actually charged (mean):", "",
                  "| dataset | model | budget | " + " | ".join(methods) + " |", "|---|---|---|" + "---|" * len(methods)]
        for k in keys:
            cells = {r["method"]: r for r in acc if (r["dataset"], r["d"], r["model"], r["budget"]) == k}
            lines.append(f"| {k[0]} | {k[2]} | {k[3]} | " + " | ".join(
                f"{cells[m]['evals_per_row']:.0f}" if m in cells else "-" for m in methods) + " |")
        lines += ["", "Target check (orthogonal or sobol MSE below shap_permutation, budget >= 1000):", ""]
        for k in keys:
            if k[3] < 1000:
                continue
            cells = {r["method"]: r for r in acc if (r["dataset"], r["d"], r["model"], r["budget"]) == k}
            if "shap_permutation" in cells:
                best = min((c for mth, c in cells.items() if mth in ("orthogonal", "sobol")), key=lambda c: c["mse"])
                ref = cells["shap_permutation"]

                def ci(c):
                    return f" ± {c['mse_ci95']:.2g}" if c.get("mse_ci95") is not None else ""

                lines.append(f"- {k[0]} {k[2]} B={k[3]}: {best['method']} {best['mse']:.3g}{ci(best)} vs "
                             f"shap_permutation {ref['mse']:.3g}{ci(ref)} (95% CI over repeats) -> ratio "
                             f"{ref['mse'] / best['mse']:.2f}x {'MET' if best['mse'] < ref['mse'] else 'MISSED'}")
    gen = report.get("generation", [])
    if gen:
        lines += ["", "## Permutation generation time", "",
                  "Wall seconds (median) and the process's CPU seconds (all threads; on a shared, overloaded CPU the wall "
                  "time includes waiting). The seed's times are single-thread on a Xeon E5-2698.", "",
                  "| method | n | d | backend | wall s | process CPU s | seed time / our wall time |", "|---|---|---|---|---|---|---|"]
        seed = {("herding", 1000, 200): 242.515501, ("orthogonal", 1000, 200): 0.560501, ("sobol", 1000, 200): 1.9955,
                ("antithetic", 1000, 200): 0.007029, ("sbq", 100, 200): 39.163286}
        for g in gen:
            ref = seed.get((g["method"], g["n"], g["d"]))
            cpu_s = g.get("process_cpu_seconds")
            lines.append(f"| {g['method']} | {g['n']} | {g['d']} | {g['backend']} | {g['seconds']:.3f} | "
                         f"{cpu_s if cpu_s is None else round(cpu_s, 3)} | "
                         + (f"{ref / g['seconds']:.1f}x (seed: {ref:.3g}s) |" if ref else "|"))
    sp = report.get("speed", [])
    if sp:
        lines += ["", "## End-to-end speed on the GPU", "", "| dataset | d | method | rows | budget | seconds | speed-up vs shap |",
                  "|---|---|---|---|---|---|---|"]
        for r in sp:
            if "error" in r:
                lines.append(f"| {r['dataset']} | error: {r['error']} |")
                continue
            shap_t = next((x["seconds"] for x in sp if x["dataset"] == r["dataset"]
                           and x.get("method") == "shap_permutation"), float("nan"))
            lines.append(f"| {r['dataset']} | {r['d']} | {r['method']} | {r['rows']} | {r['budget']} | "
                         f"{r['seconds']:.2f} | {shap_t / r['seconds']:.1f}x |")
    path.write_text("\n".join(lines) + "\n")


def plot(report, path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    acc = report["accuracy"]
    panels = sorted({(r["dataset"], r["model"], r["d"]) for r in acc})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8), squeeze=False)
    colors = plt.get_cmap("tab20").colors
    for ax, (ds, model, d) in zip(axes[0], panels):
        cells = [r for r in acc if r["dataset"] == ds and r["model"] == model]
        floor = 1e-6 * float(np.median([r["mse"] for r in cells]))
        for i, mth in enumerate(OURS + SHAP):
            # x = the budget (max_evals, the unit every method is given); exact results (KernelExplainer enumerating
            # all 2^d - 2 subsets, MSE at rounding level) are left out
            pts = sorted((r["budget"], r["mse"]) for r in cells if r["method"] == mth and r["mse"] > floor)
            if pts:
                ax.loglog(*zip(*pts), marker="o", ms=3, ls="--" if mth in SHAP else "-", label=mth,
                          color=colors[(2 * i) % 20 if i < 10 else (2 * i + 1) % 20], lw=2 if mth in (
                              "orthogonal", "sobol", "shap_permutation") else 1)
        ax.set_title(f"{ds} (d={d}), {model}", fontsize=9)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("budget (max_evals, evaluations per row)")
        ax.set_ylabel("MSE")
    axes[0][-1].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def parse_logs(paths):
    """Accuracy rows from the progress lines of a stopped run (dataset/model context lines + one line per cell)."""
    import re

    rows = []
    for path in paths:
        ctx = None
        for line in Path(path).read_text().splitlines():
            m = re.match(r"(\w+) d=(\d+) (\w+): ground truth", line)
            if m:
                ctx = (m.group(1), int(m.group(2)), m.group(3))
                continue
            m = re.match(r"\s+B=\s*(\d+) (\w+)\s+evals/row=\s*([\d.]+) mse=([\d.e+-]+) \(([\d.]+)s\)", line)
            if m and ctx:
                rows.append(dict(dataset=ctx[0], d=ctx[1], model=ctx[2], budget=int(m.group(1)), method=m.group(2),
                                 evals_per_row=float(m.group(3)), mse=float(m.group(4)), mse_ci95=None,
                                 seconds=float(m.group(5)), repeats=None, source=f"log {Path(path).name}"))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["cal_housing", "make_regression", "breast_cancer", "adult"])
    ap.add_argument("--models", nargs="+", default=["xgboost", "mlp"])
    ap.add_argument("--budgets", nargs="+", type=int, default=[500, 1000, 2000])
    ap.add_argument("--rows", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--speed", action="store_true")
    ap.add_argument("--speed-rows", type=int, default=1000)
    ap.add_argument("--speed-budget", type=int, default=500)
    ap.add_argument("--shap-rows", type=int, default=50)
    ap.add_argument("--speed-backend", default="gpu", help="gpu (the benchmark) or cpu (a dry run of the same code)")
    ap.add_argument("--skip-accuracy", action="store_true")
    ap.add_argument("--skip-generation", action="store_true")
    ap.add_argument("--stem", default=None, help="output file stem (default shapley / shapley_speed)")
    ap.add_argument("--merge", nargs="+", default=None, help="combine the JSON reports of split CPU runs")
    ap.add_argument("--from-logs", nargs="+", default=[], help="with --merge: also read accuracy rows from the stdout "
                    "logs of runs stopped before writing JSON (no confidence intervals)")
    ap.add_argument("--sampling-max-budget", type=int, default=None, help="skip shap's SamplingExplainer (slow: "
                    "budget*|background|/2 samples) above this budget")
    ap.add_argument("--note", default=None, help="a paragraph written under the settings in the markdown")
    ap.add_argument("--out", default=str(ROOT / "docs/benchmarks"))
    args = ap.parse_args()
    from hitml.kernels.device import device_name

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"mode": "gpu speed" if args.speed else "cpu accuracy", "device": device_name() if args.speed else
              f"CPU ({platform.processor() or platform.machine()})", "versions": versions(),
              "settings": {k: v for k, v in vars(args).items() if k not in ("out", "note")}, "note": args.note}
    if args.merge:
        parts = [json.loads(Path(p).read_text()) for p in args.merge]
        report = dict(parts[0], note=args.note)
        report["accuracy"] = [r for p in parts for r in p.get("accuracy", [])] + parse_logs(args.from_logs)
        report["generation"] = [r for p in parts for r in p.get("generation", [])]
        report["settings"] = dict(parts[0]["settings"], datasets=[d for p in parts for d in p["settings"]["datasets"]])
        stem = args.stem or "shapley"
    elif args.speed:
        generation_timing(report, args.speed_backend)
        speed(args, report)
        stem = args.stem or "shapley_speed"
    else:
        if not args.skip_generation:
            generation_timing(report, "cpu")
        if not args.skip_accuracy:
            accuracy(args, report)
        stem = args.stem or "shapley"
    (out / f"{stem}.json").write_text(json.dumps(report, indent=1))
    write_markdown(report, out / f"{stem}.md")
    if report.get("accuracy"):
        plot(report, out / f"{stem}_convergence.png")
    print(f"wrote {out / stem}.json/.md", flush=True)


if __name__ == "__main__":
    main()
