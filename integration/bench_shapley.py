"""Benchmark: Shapley estimation error at equal evaluations (hitml vs shapiq vs shap) and GPU speed per explained row.

An *evaluation* is one coalition S for one explained row: v(S) = mean over the background of f(x_S, b_~S), i.e.
|background| model rows. Every method gets the same value function (the same model and background) and is charged
by the model rows it actually sends (a counting wrapper), divided by |background| and the explained rows: the table
reports that count next to each error so equal budgets can be checked.

    python integration/bench_shapley.py                      # accuracy: every dataset, budget, method (CPU)
    python integration/bench_shapley.py --speed              # GPU end to end per explained row vs shapiq (device)
"""
from __future__ import annotations

import argparse
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

OURS = ["hitml_auto", "hitml_regression_o1", "hitml_orthogonal"]
SHAPIQ = ["LeverageSHAP", "PolySHAP", "KernelSHAP", "PermutationSamplingSV", "SVARM", "UnbiasedKernelSHAP"]
SHAP = ["shap_permutation", "shap_kernel"]
CASES = ["cal_housing/xgboost", "cal_housing/mlp", "adult12/xgboost", "breast_cancer10/xgboost", "synthetic12/xgboost",
         "breast_cancer30/xgboost"]
MULTIPLES = (2, 5, 10, 20, 50, 100)


# ----------------------------------------------------------------------------------------------- data and models
def load(name: str):
    """(X, y, task) for a dataset name."""
    import pandas as pd
    from sklearn.datasets import load_breast_cancer

    if name == "cal_housing":
        df = pd.read_csv(ROOT / "data/cal_housing.csv.gz")
        return df.drop(columns="median_house_value").to_numpy(float), df["median_house_value"].to_numpy() / 1e5, "reg"
    if name == "adult12":  # the 12 raw features, categorical ones label-encoded
        df = pd.read_csv(ROOT / "data/adult.csv.gz")
        y = df.pop("income").astype(str).str.strip().str.startswith(">50K").to_numpy(int)
        for c in df.columns:
            if not pd.api.types.is_numeric_dtype(df[c]):
                df[c] = df[c].astype("category").cat.codes
        return df.to_numpy(float)[:, :12], y, "clf"
    if name.startswith("breast_cancer"):
        X, y = load_breast_cancer(return_X_y=True)
        return X[:, :int(name[len("breast_cancer"):])], y, "clf"
    if name == "synthetic12":  # strong pairwise and three-way interactions
        rng = np.random.default_rng(0)
        X = rng.normal(size=(4000, 12))
        y = (X[:, 0] * X[:, 1] + np.sin(X[:, 2] * X[:, 3]) + X[:, 4] * X[:, 5] * X[:, 6] + (X[:, 7] > 0) * X[:, 8]
             + 0.5 * X[:, 9] + X[:, 10] ** 2 * X[:, 11])
        return X, y, "reg"
    raise ValueError(name)


def train(model: str, X, y, task: str):
    """(fitted model, prediction function on the explained scale: regression output or log-odds)."""
    if model == "xgboost":
        import xgboost as xgb

        cls = xgb.XGBRegressor if task == "reg" else xgb.XGBClassifier
        m = cls(n_estimators=100, max_depth=6, learning_rate=0.3, tree_method="hist", n_jobs=1).fit(X, y)
        booster = m.get_booster()
        return m, (lambda Z: booster.inplace_predict(np.asarray(Z), predict_type="margin"))
    from sklearn.neural_network import MLPRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = make_pipeline(StandardScaler(), MLPRegressor(random_state=0)).fit(X, y)
    return m, m.predict


def exact_by_enumeration(f, X, bg):
    """Shapley values from all 2^d coalitions, by the subset formula (independent of every estimator): (m, d)."""
    m, d = X.shape
    code = np.arange(2 ** d)
    masks = ((code[:, None] >> np.arange(d)) & 1).astype(bool)
    v = np.empty((m, 2 ** d))
    for i in range(m):
        rows = np.where(masks[:, None, :], X[i][None, None, :], bg[None, :, :]).reshape(-1, d)
        v[i] = np.asarray(f(rows)).reshape(2 ** d, -1).mean(axis=1)
    sizes = masks.sum(axis=1)
    wts = np.array([math.factorial(s) * math.factorial(d - s - 1) / math.factorial(d) if s < d else 0 for s in sizes])
    phi = np.zeros((m, d))
    for j in range(d):
        c = code[~masks[:, j]]
        phi[:, j] = (v[:, c | (1 << j)] - v[:, c]) @ wts[~masks[:, j]]
    return phi


def case(spec: str, rows: int, n_bg: int):
    """(f, foreground, background, exact values, truth source) for 'dataset/model'."""
    name, model = spec.split("/")
    X, y, task = load(name)
    est, f = train(model, X, y, task)
    rng = np.random.default_rng(0)
    idx = rng.choice(len(X), rows + n_bg, replace=False)
    fg, bg = X[idx[:rows]], X[idx[rows:]]
    if X.shape[1] <= 12:
        return f, fg, bg, exact_by_enumeration(f, fg, bg), "enumeration of all 2^d coalitions"
    import shap

    explainer = shap.TreeExplainer(est, bg, feature_perturbation="interventional", model_output="raw")
    truth = np.asarray(explainer.shap_values(fg)).reshape(rows, X.shape[1])
    return f, fg, bg, truth, "interventional TreeSHAP (shap.TreeExplainer) with the same background"


# ----------------------------------------------------------------------------------------------- methods
class Counter:
    """Wraps a prediction function and counts the model rows it sees."""

    def __init__(self, f):
        self.f, self.rows = f, 0

    def __call__(self, Z):
        self.rows += np.asarray(Z).shape[0]
        return self.f(Z)


def game_for(cf, x, bg):
    """shapiq's value function for one row: coalitions (n, d) bool -> v(S), through the counted model."""
    def game(coalitions):
        c = np.atleast_2d(np.asarray(coalitions, dtype=bool))
        rows = np.where(c[:, None, :], x[None, None, :], bg[None, :, :]).reshape(-1, bg.shape[1])
        return np.asarray(cf(rows), dtype=np.float64).reshape(c.shape[0], -1).mean(axis=1)
    return game


def run_method(method: str, f, X, bg, budget: int, seed: int):
    """(phi (m, d), evaluations charged per row)."""
    from hitml.sklearn_ext import ShapleyExplainer, ShapleySampler

    m, d = X.shape
    cf = Counter(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if method.startswith("hitml"):
            sampler = {"hitml_auto": ShapleySampler("auto", random_state=seed),
                       "hitml_regression_o1": ShapleySampler("regression", order=1, random_state=seed),
                       "hitml_orthogonal": ShapleySampler("orthogonal", random_state=seed)}[method]
            e = ShapleyExplainer(cf, sampler, max_evals=budget, background_size=len(bg)).fit(bg)
            cf.rows = 0
            phi = e.transform(X)
        elif method in SHAPIQ:
            import shapiq.approximator as sa

            phi = np.zeros((m, d))
            for i in range(m):
                approx = getattr(sa, method)(d, random_state=seed)
                iv = approx.approximate(budget, game_for(cf, X[i], bg))
                phi[i] = [iv[(j,)] for j in range(d)]
        elif method == "shap_permutation":
            import shap

            np.random.seed(seed)
            ex = shap.PermutationExplainer(cf, shap.maskers.Independent(bg, max_samples=len(bg)), seed=seed)
            phi = ex(X, max_evals=budget, silent=True).values
        elif method == "shap_kernel":
            import shap

            np.random.seed(seed)
            ex = shap.KernelExplainer(cf, bg)
            cf.rows = 0
            phi = np.asarray(ex.shap_values(X, nsamples=budget, l1_reg=False, silent=True))
        else:
            raise ValueError(method)
    return np.asarray(phi, dtype=np.float64).reshape(m, d), cf.rows / (m * len(bg))


def budgets_for(d: int) -> list[int]:
    """k (d + 1) for k = 2..100, below the 2^d that enumerate everything."""
    return [k * (d + 1) for k in MULTIPLES if k * (d + 1) < 2 ** d]


def accuracy(args, report):
    results = report.setdefault("accuracy", [])
    methods = OURS + SHAPIQ + SHAP if not args.methods else args.methods
    for spec in args.cases:
        t0 = time.time()
        f, fg, bg, truth, source = case(spec, args.rows, args.background)
        d = fg.shape[1]
        print(f"{spec} d={d}: exact values by {source} in {time.time() - t0:.1f}s", flush=True)
        for budget in budgets_for(d):
            for method in methods:
                if method == "shap_permutation" and budget < 2 * d + 1:
                    continue
                errs, evals, secs = [], [], []
                try:
                    for r in range(args.repeats):
                        t1 = time.time()
                        phi, ev = run_method(method, f, fg, bg, budget, 1000 * r + 7)
                        secs.append(time.time() - t1)
                        errs.append(float(np.mean((phi - truth) ** 2)))
                        evals.append(ev)
                except Exception as exc:  # a competitor that refuses this budget: recorded, not fatal
                    print(f"  B={budget} {method}: {type(exc).__name__}: {exc}", flush=True)
                    continue
                e = np.array(errs)
                rec = dict(case=spec, d=d, budget=budget, method=method, evals_per_row=float(np.mean(evals)),
                           mse=float(e.mean()), mse_ci95=float(1.96 * e.std(ddof=1) / math.sqrt(len(e))),
                           seconds=float(np.mean(secs)), repeats=len(e), truth=source)
                results.append(rec)
                print(f"  B={budget:5d} {method:22s} evals/row={rec['evals_per_row']:8.1f} mse={rec['mse']:.3e}"
                      f" ±{rec['mse_ci95']:.1e} ({rec['seconds']:.2f}s)", flush=True)


# ----------------------------------------------------------------------------------------------- GPU speed
def speed(args, report):
    """End to end per explained row on the GPU: a torch MLP on cal_housing, ours (masked rows built on the device,
    the model fed by DLPack) vs shapiq's LeverageSHAP / PolySHAP calling the same GPU model through NumPy."""
    import cupy
    import torch

    X, y, _ = load("cal_housing")
    X = ((X - X.mean(0)) / X.std(0)).astype(np.float32)
    dev = torch.device("cuda")
    net = torch.nn.Sequential(torch.nn.Linear(8, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
                              torch.nn.Linear(256, 1)).to(dev)
    opt = torch.optim.Adam(net.parameters(), 1e-3)
    xt, yt = torch.tensor(X, device=dev), torch.tensor(y, dtype=torch.float32, device=dev)
    torch.manual_seed(0)
    for _ in range(300):
        opt.zero_grad()
        loss = ((net(xt)[:, 0] - yt) ** 2).mean()
        loss.backward()
        opt.step()

    @torch.no_grad()
    def f(Z):
        on_gpu = isinstance(Z, cupy.ndarray)
        t = torch.from_dlpack(Z.astype(cupy.float32)) if on_gpu else torch.as_tensor(np.asarray(Z, np.float32),
                                                                                     device=dev)
        out = net(t)[:, 0].double()
        return cupy.from_dlpack(out) if on_gpu else out.cpu().numpy()

    from hitml.sklearn_ext import ShapleyExplainer, ShapleySampler

    rng = np.random.default_rng(1)
    bg = X[rng.choice(len(X), args.background_speed, replace=False)].astype(np.float64)
    fg = X[rng.choice(len(X), args.speed_rows, replace=False)].astype(np.float64)
    out = report.setdefault("speed", [])
    for budget in args.speed_budgets:
        ours = {}
        for backend in ("gpu", "cpu"):
            rows = fg if backend == "gpu" else fg[:max(4, len(fg) // 10)]  # the host path is timed on fewer rows
            e = ShapleyExplainer(f, ShapleySampler("auto", random_state=0, backend=backend), max_evals=budget,
                                 model_input="device" if backend == "gpu" else "numpy").fit(bg)
            e.transform(fg[:4])
            cupy.cuda.Device().synchronize()
            t0 = time.perf_counter()
            phi = e.transform(rows)
            cupy.cuda.Device().synchronize()
            ours[backend] = (time.perf_counter() - t0) / len(rows)
            gap = float(np.abs(phi.sum(axis=1) + e.expected_value_ - f(rows)).max())
            out.append(dict(budget=budget, method=f"hitml_auto[{backend}]", seconds_per_row=ours[backend],
                            rows=len(rows), efficiency_gap=gap))
            if backend == "gpu":
                phi_gpu = phi
        out[-1]["max_abs_diff_vs_gpu"] = float(np.abs(phi - phi_gpu[:len(phi)]).max())
        import shapiq.approximator as sa

        for method in ("LeverageSHAP", "PolySHAP"):
            n = args.shapiq_rows
            getattr(sa, method)(8, random_state=0).approximate(budget, game_for(f, fg[0], bg))  # warm-up
            t0 = time.perf_counter()
            for i in range(n):
                getattr(sa, method)(8, random_state=0).approximate(budget, game_for(f, fg[i], bg))
            per_row = (time.perf_counter() - t0) / n
            out.append(dict(budget=budget, method=method, seconds_per_row=per_row, rows=n,
                            ratio_vs_hitml_gpu=per_row / ours["gpu"]))
        for rec in out[-4:]:
            print(f"speed B={budget} {rec['method']:22s} {rec['seconds_per_row'] * 1e3:9.3f} ms/row", flush=True)


# ----------------------------------------------------------------------------------------------- output
def versions() -> dict:
    import importlib

    v = {"python": platform.python_version(), "machine": platform.processor() or platform.machine()}
    for mod in ("numpy", "sklearn", "shap", "shapiq", "xgboost", "cupy", "torch"):
        try:
            v[mod] = importlib.import_module(mod).__version__
        except Exception:
            pass
    try:
        import cupy

        v["gpu"] = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    except Exception:
        v["gpu"] = None
    return v


def summary(acc: list[dict]) -> list[str]:
    """The targets, cell by cell from 10 (d + 1) up: is hitml_auto lowest of all, and best shapiq / hitml_auto."""
    cells = sorted({(r["case"], r["budget"], r["d"]) for r in acc if r["budget"] >= 10 * (r["d"] + 1)},
                   key=lambda c: (CASES.index(c[0]) if c[0] in CASES else 99, c[1]))
    lowest = ratio15 = 0
    rows = ["| case | B | hitml_auto MSE | best other (method) | lowest? | best shapiq / hitml_auto |", "|---|---|---|---|---|---|"]
    for spec, b, _ in cells:
        here = [r for r in acc if r["case"] == spec and r["budget"] == b]
        ours = next((r for r in here if r["method"] == "hitml_auto"), None)
        if ours is None:
            continue
        others = [r for r in here if not r["method"].startswith("hitml")]
        best = min(others, key=lambda r: r["mse"])
        q = min(r["mse"] for r in here if r["method"] in SHAPIQ) / ours["mse"]
        lowest += ours["mse"] < best["mse"]
        ratio15 += q >= 1.5
        rows.append(f"| {spec} | {b} | {ours['mse']:.2e} | {best['mse']:.2e} ({best['method']}) | "
                    f"{'yes' if ours['mse'] < best['mse'] else 'no'} | {q:.2f}x |")
    return ["## Targets from 10(d+1) up", "",
            f"hitml_auto lowest of every non-hitml method in {lowest} of {len(cells)} cells; at least 1.5x below the best "
            f"shapiq estimator in {ratio15} of {len(cells)}.", ""] + rows + [""]


def merge(paths: list[str]) -> dict:
    """One report from several runs: a later file's (case, budget, method) record replaces an earlier one."""
    reports = [json.loads(Path(p).read_text()) for p in paths]
    recs = {}
    for rep in reports:
        for r in rep.get("accuracy", []):
            recs[(r["case"], r["budget"], r["method"])] = r
    order = OURS + SHAPIQ + SHAP
    acc = sorted(recs.values(), key=lambda r: (CASES.index(r["case"]) if r["case"] in CASES else 99, r["budget"],
                                               order.index(r["method"]) if r["method"] in order else 99))
    keep = ("rows", "background", "repeats")
    settings = {k: v for k, v in reports[0]["settings"].items() if k in keep}
    settings.update(cases=list(dict.fromkeys(r["case"] for r in acc)), merged_runs=len(paths))
    return {"versions": reports[0]["versions"], "settings": settings, "accuracy": acc}


def write_markdown(report: dict, path: Path) -> None:
    """Tables: MSE (95% interval) per case, budget and method; the ratio of the best shapiq MSE to ours."""
    v = report["versions"]
    lines = [f"# Shapley estimation: {'GPU speed per explained row' if 'speed' in report else 'error at equal evaluations'}",
             "", "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items() if val), "",
             "Settings: " + ", ".join(f"{k}={val}" for k, val in report["settings"].items()), ""]
    if "speed" in report:
        lines += ["| budget | method | ms per row | rows timed | shapiq / hitml GPU |", "|---|---|---|---|---|"]
        for r in report["speed"]:
            ratio = f"{r['ratio_vs_hitml_gpu']:.0f}x" if "ratio_vs_hitml_gpu" in r else ""
            lines.append(f"| {r['budget']} | {r['method']} | {r['seconds_per_row'] * 1e3:.3f} | {r['rows']} | {ratio} |")
        path.write_text("\n".join(lines) + "\n")
        return
    acc = report["accuracy"]
    lines += summary(acc)
    for spec in dict.fromkeys(r["case"] for r in acc):
        rows = [r for r in acc if r["case"] == spec]
        budgets = sorted({r["budget"] for r in rows})
        d = rows[0]["d"]
        lines += [f"## {spec} (d={d}; exact values: {rows[0]['truth']})", "",
                  "MSE over the explained rows and features, mean of the seeds ± 95% interval; evaluations charged per "
                  "row (counted model rows / background / rows) in brackets. Bold: lowest.", "",
                  "| method | " + " | ".join(f"B={b} ({b // (d + 1)}(d+1))" for b in budgets) + " |",
                  "|---|" + "---|" * len(budgets)]
        best = {b: min(r["mse"] for r in rows if r["budget"] == b) for b in budgets}
        for method in dict.fromkeys(r["method"] for r in rows):
            cells = []
            for b in budgets:
                r = next((r for r in rows if r["method"] == method and r["budget"] == b), None)
                if r is None:
                    cells.append("-")
                    continue
                txt = f"{r['mse']:.2e} ±{r['mse_ci95']:.0e} [{r['evals_per_row']:.0f}]"
                cells.append(f"**{txt}**" if r["mse"] == best[b] else txt)
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
        ratio = []
        for b in budgets:
            ours = [r["mse"] for r in rows if r["budget"] == b and r["method"] == "hitml_auto"]
            theirs = [r["mse"] for r in rows if r["budget"] == b and r["method"] in SHAPIQ]
            ratio.append(f"{min(theirs) / ours[0]:.2f}x" if ours and theirs and ours[0] > 0 else "-")
        lines += ["| best shapiq / hitml_auto | " + " | ".join(ratio) + " |", ""]
    path.write_text("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", default=CASES)
    ap.add_argument("--methods", nargs="+", default=None)
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--background", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--speed", action="store_true")
    ap.add_argument("--speed-rows", type=int, default=2000)
    ap.add_argument("--shapiq-rows", type=int, default=20)
    ap.add_argument("--background-speed", type=int, default=100)
    ap.add_argument("--speed-budgets", nargs="+", type=int, default=[90, 256])
    ap.add_argument("--out", default=str(ROOT / "docs/benchmarks"))
    ap.add_argument("--stem", default=None)
    ap.add_argument("--merge", nargs="+", default=None, help="combine the JSON reports of split runs")
    args = ap.parse_args()
    keys = ("speed_rows", "shapiq_rows", "background_speed", "speed_budgets") if args.speed else (
        "cases", "methods", "rows", "background", "repeats")
    report = {"versions": versions(), "settings": {k: getattr(args, k) for k in keys}}
    if args.merge:
        report = merge(args.merge)
    elif args.speed:
        speed(args, report)
    else:
        accuracy(args, report)
    stem = args.stem or ("shapley_speed" if args.speed else "shapley")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(report, indent=1))
    write_markdown(report, out / f"{stem}.md")


if __name__ == "__main__":
    main()
