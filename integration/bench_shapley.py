"""Benchmark: Shapley estimation error at equal evaluations (hitml vs shapiq vs shap) and GPU speed per explained row.

An *evaluation* is one coalition S for one explained row: v(S) = mean over the background of f(x_S, b_~S), i.e.
|background| model rows. Every method gets the same value function (the same model and background) and is charged
by the model rows it actually sends (a counting wrapper), divided by |background| and the explained rows: the table
reports that count next to each error so equal budgets can be checked.

    python integration/bench_shapley.py                      # accuracy: the game suite, every budget, method (CPU)
    python integration/bench_shapley.py --gpu-speed          # GPU end to end per explained row vs shapiq (device)

The suite (GAMES) has 14 games, d from 8 to 100, exact values by enumeration, closed form or interventional
TreeSHAP; half were used to choose hyperparameters ("tune"), half were not ("held-out").
"""
from __future__ import annotations

import argparse
import json
import signal
import math
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OURS = ["hitml_auto"]
# every Shapley-value approximator shapiq 1.8 can run here (SPEX is abstract; ShaplEIG needs the optional "shapleig"
# extra), with and without the pairing trick where it is an option
SHAPIQ = ["KernelSHAP", "KernelSHAP_paired", "LeverageSHAP", "PolySHAP", "PolySHAP_paired", "OddSHAP", "kADDSHAP",
          "RegressionMSR", "ProxySHAP", "ProxySPEX", "SVARM", "PermutationSamplingSV", "UnbiasedKernelSHAP",
          "StratifiedSamplingSV", "OwenSamplingSV"]
MULTIPLES = (10, 20, 50)
SLOW = ("ProxySPEX",)  # 5 CPU s a row at 550 evaluations and d = 10 (LightGBM proxy): run at 10 (d + 1) only
# hyperparameters (the family's rho and nugget grids, the heredity candidates, the interval factor) were chosen on
# the "tune" half only; the "held-out" half was run once the estimator was fixed
GAMES = {  # name: (half, d)
    "cal_housing8/xgboost": ("tune", 8), "breast_cancer10/xgboost": ("tune", 10),
    "breast_cancer30/xgboost": ("tune", 30), "soum20/order<=8": ("tune", 20), "diabetes10/knn": ("tune", 10),
    "breast_cancer10/xgboost+sampled_masker": ("tune", 10),
    "adult12/xgboost": ("held-out", 12), "synthetic12/xgboost": ("held-out", 12),
    "soum40/order<=16": ("held-out", 40), "soum100/order<=10": ("held-out", 100),
    "friedman14/single_tree": ("held-out", 14), "breast_cancer12/svm_rbf": ("held-out", 12),
    "friedman14/mlp": ("held-out", 14), "soum30/order<=6+noise": ("held-out", 30),
}
CASES = list(GAMES)


# ----------------------------------------------------------------------------------------------- data and models
def _csv(name: str):
    import pandas as pd

    for folder in (ROOT / "data", ROOT.parent.parent / "shared/data", Path("/work/shared/data")):
        if (folder / name).exists():
            return pd.read_csv(folder / name)
    raise FileNotFoundError(name)


def load(name: str):
    """(X, y, task) for a dataset name."""
    import pandas as pd
    from sklearn.datasets import load_breast_cancer, load_diabetes, make_friedman1

    if name == "cal_housing8":
        df = _csv("cal_housing.csv.gz")
        return df.drop(columns="median_house_value").to_numpy(float), df["median_house_value"].to_numpy() / 1e5, "reg"
    if name == "adult12":  # the 12 raw features, categorical ones label-encoded
        df = _csv("adult.csv.gz")
        y = df.pop("income").astype(str).str.strip().str.startswith(">50K").to_numpy(int)
        for c in df.columns:
            if not pd.api.types.is_numeric_dtype(df[c]):
                df[c] = df[c].astype("category").cat.codes
        return df.to_numpy(float)[:, :12], y, "clf"
    if name.startswith("breast_cancer"):
        X, y = load_breast_cancer(return_X_y=True)
        return X[:, :int(name[len("breast_cancer"):])], y, "clf"
    if name == "diabetes10":
        X, y = load_diabetes(return_X_y=True)
        return X, y / 100.0, "reg"
    if name == "friedman14":
        X, y = make_friedman1(2000, 14, noise=0.5, random_state=0)
        return X, y, "reg"
    if name == "synthetic12":  # strong pairwise and three-way interactions
        rng = np.random.default_rng(0)
        X = rng.normal(size=(4000, 12))
        y = (X[:, 0] * X[:, 1] + np.sin(X[:, 2] * X[:, 3]) + X[:, 4] * X[:, 5] * X[:, 6] + (X[:, 7] > 0) * X[:, 8]
             + 0.5 * X[:, 9] + X[:, 10] ** 2 * X[:, 11])
        return X, y, "reg"
    raise ValueError(name)


def train(model: str, X, y, task: str):
    """(fitted model, prediction function on the explained scale: regression output, log-odds or decision value)."""
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if model.startswith("xgboost"):
        import xgboost as xgb

        cls = xgb.XGBRegressor if task == "reg" else xgb.XGBClassifier
        m = cls(n_estimators=100, max_depth=6, learning_rate=0.3, tree_method="hist", n_jobs=1).fit(X, y)
        booster = m.get_booster()
        return m, (lambda Z: booster.inplace_predict(np.asarray(Z), predict_type="margin"))
    if model == "knn":
        from sklearn.neighbors import KNeighborsRegressor

        m = make_pipeline(StandardScaler(), KNeighborsRegressor(n_neighbors=5)).fit(X, y)
        return m, m.predict
    if model == "single_tree":
        from sklearn.tree import DecisionTreeRegressor

        m = DecisionTreeRegressor(max_depth=8, random_state=0).fit(X, y)
        return m, m.predict
    if model == "svm_rbf":
        from sklearn.svm import SVC

        m = make_pipeline(StandardScaler(), SVC(kernel="rbf", C=1.0)).fit(X[:400], y[:400])
        return m, m.decision_function
    from sklearn.neural_network import MLPRegressor

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = make_pipeline(StandardScaler(), MLPRegressor(hidden_layer_sizes=(64, 64), max_iter=300,
                                                         random_state=0)).fit(X, y)
    return m, m.predict


def _masks(d: int) -> np.ndarray:
    code = np.arange(2 ** d)
    return ((code[:, None] >> np.arange(d)) & 1).astype(bool)


def _subset_shapley(v: np.ndarray, d: int) -> np.ndarray:
    """Shapley values of a game given as its 2^d table (bit i of the index: feature i), by the subset formula."""
    code = np.arange(2 ** d)
    masks = _masks(d)
    sizes = masks.sum(axis=1)
    wts = np.array([math.factorial(s) * math.factorial(d - s - 1) / math.factorial(d) if s < d else 0 for s in sizes])
    phi = np.zeros(d)
    for j in range(d):
        c = code[~masks[:, j]]
        phi[j] = (v[c | (1 << j)] - v[c]) @ wts[~masks[:, j]]
    return phi


def _per_background_table(f, x, bg) -> np.ndarray:
    """(|bg|, 2^d): f(x_S, b_~S) for every coalition S and background row b."""
    d = x.shape[0]
    masks = _masks(d)
    out = np.empty((len(bg), 2 ** d))
    for b in range(len(bg)):
        rows = np.where(masks, x[None, :], bg[b][None, :])
        out[b] = np.asarray(f(rows), dtype=np.float64).reshape(-1)
    return out


class Game:
    """One explained row as a cooperative game: ``values(C, rng)`` -> v(S) for coalitions C (n, d) bool, noisy
    where the game is (``rng`` draws the noise), and the exact Shapley values of its expectation."""

    def __init__(self, d, values, exact):
        self.d, self.values, self.exact = d, values, np.asarray(exact, dtype=np.float64)


def _table_game(table: np.ndarray, d: int) -> Game:
    pw = 1 << np.arange(d)
    return Game(d, lambda C, rng: table[np.asarray(C, dtype=np.int64) @ pw], _subset_shapley(table, d))


def _soum(d: int, n_terms: int, max_order: int, seed: int, noise: float = 0.0) -> Game:
    """A sum of unanimity games: v(S) = sum_T c_T [T inside S], orders 1..max_order (closed form: c_T / |T| to each
    member of T), plus independent N(0, (noise sd(v))^2) on every evaluation when ``noise``."""
    rng = np.random.default_rng(seed)
    terms = [(rng.choice(d, int(rng.integers(1, max_order + 1)), replace=False), rng.normal()) for _ in range(n_terms)]
    phi = np.zeros(d)
    for t, c in terms:
        phi[t] += c / len(t)
    member = np.zeros((n_terms, d))
    for j, (t, _) in enumerate(terms):
        member[j, t] = 1.0
    size = member.sum(axis=1)
    coef = np.array([c for _, c in terms])

    def exact_values(C):
        return (np.asarray(C, dtype=np.float64) @ member.T >= size - 0.5) @ coef

    sd = float(np.std(exact_values(rng.random((2000, d)) < 0.5))) * noise

    def values(C, rng2):
        v = exact_values(C)
        return v + sd * rng2.normal(size=v.shape) if noise else v
    return Game(d, values, phi)


def suite_game(spec: str, rows: int, n_bg: int) -> tuple[list[Game], str]:
    """(games, how the exact values were obtained): one game per explained row."""
    d = GAMES[spec][1]
    if spec.startswith("soum"):
        noise = 0.1 if spec.endswith("+noise") else 0.0
        order = int(spec.split("<=")[1].split("+")[0])
        return [_soum(d, 3 * d // 2, order, 100 + r, noise) for r in range(rows)], "closed form (sum of unanimity games)"
    name, model = spec.split("/")
    X, y, task = load(name)
    est, f = train(model, X, y, task)
    rng = np.random.default_rng(0)
    idx = rng.choice(len(X), rows + n_bg, replace=False)
    fg, bg = X[idx[:rows]], X[idx[rows:]]
    if d > 16:
        import shap

        explainer = shap.TreeExplainer(est, bg, feature_perturbation="interventional", model_output="raw")
        truth = np.asarray(explainer.shap_values(fg)).reshape(rows, d)

        def model_game(x, phi):
            def values(C, rng2):
                C = np.atleast_2d(np.asarray(C, dtype=bool))
                z = np.where(C[:, None, :], x[None, None, :], bg[None, :, :]).reshape(-1, d)
                return np.asarray(f(z), dtype=np.float64).reshape(len(C), -1).mean(axis=1)
            return Game(d, values, phi)
        return [model_game(fg[r], truth[r]) for r in range(rows)], \
            "interventional TreeSHAP (shap.TreeExplainer) with the same background"
    games = []
    for r in range(rows):
        per_bg = _per_background_table(f, fg[r], bg)
        if model.endswith("+sampled_masker"):  # each evaluation averages a random 8 of the background rows
            pw = 1 << np.arange(d)

            def values(C, rng2, per_bg=per_bg, pw=pw):
                codes = np.asarray(C, dtype=np.int64) @ pw
                pick = np.argsort(rng2.random((len(codes), per_bg.shape[0])), axis=1)[:, :8]
                return per_bg[pick, codes[:, None]].mean(axis=1)
            games.append(Game(d, values, _subset_shapley(per_bg.mean(axis=0), d)))
        else:
            games.append(_table_game(per_bg.mean(axis=0), d))
    return games, "enumeration of all 2^d coalitions (of the expected value function)"


# ----------------------------------------------------------------------------------------------- methods
class Counted:
    """A game's value function that counts the coalitions it is asked for and draws its noise from one stream."""

    def __init__(self, game: Game, seed: int):
        self.game, self.rng, self.calls = game, np.random.default_rng(seed + 7919), 0

    def __call__(self, coalitions):
        c = np.atleast_2d(np.asarray(coalitions, dtype=bool))
        self.calls += c.shape[0]
        return self.game.values(c, self.rng)


def _shapiq(method: str, d: int, seed: int):
    import shapiq.approximator as sa

    paired = method.endswith("_paired")
    name = method.removesuffix("_paired")
    cls = getattr(sa, name)
    if name in ("KernelSHAP", "PolySHAP", "kADDSHAP", "LeverageSHAP"):
        return cls(d, pairing_trick=paired or name == "LeverageSHAP", random_state=seed)
    if name == "RegressionMSR":
        return cls(d, index="SV", random_state=seed)
    if name == "ProxySHAP":
        return cls(d, max_order=1, index="SV", random_state=seed)
    if name == "ProxySPEX":
        return cls(n=d, max_order=1, index="SV", hpo=False, random_state=seed)
    return cls(d, random_state=seed)


WALL_LIMIT = 300.0  # seconds of wall time for one competitor call (all rows of a game); --max-wall-seconds


class TooSlow(Exception):
    """A call over the wall-time limit."""


def _too_slow(signum, frame):
    raise TooSlow(f"over {WALL_LIMIT:.0f} s of wall time")


def run_method(method: str, games: list[Game], budget: int, seed: int, tol: float | None = None):
    """(phi (m, d), standard errors (m, d) or None, coalitions evaluated per row, seconds per row)."""
    from hitml.kernels.shapley import RegressionPlan, shapley_until

    d = games[0].d
    counters = [Counted(g, seed) for g in games]
    t0 = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if method == "hitml_auto" and tol is None:
            plan = RegressionPlan(d, budget, seed=[seed, 1])
            vals = np.stack([c(plan.coalitions) for c in counters])[:, :, None]
            phi, se = (a[:, :, 0] for a in plan.apply_se(vals))
        elif method == "hitml_auto":
            phi, se, _ = shapley_until(lambda C, rows: np.stack([counters[r](C) for r in rows])[:, :, None], d,
                                       len(games), tol=tol, max_evals=budget, seed=[seed, 1])
            phi, se = phi[:, :, 0], se[:, :, 0]
        else:
            se = None
            phi = np.zeros((len(games), d))
            signal.signal(signal.SIGALRM, _too_slow)
            signal.alarm(int(WALL_LIMIT))  # a call that would take many minutes on a loaded machine is cut
            try:
                for r, c in enumerate(counters):
                    iv = _shapiq(method, d, seed).approximate(budget, c)
                    phi[r] = [iv[(j,)] for j in range(d)]
            finally:
                signal.alarm(0)
    secs = (time.process_time() - t0) / len(games)
    return phi, se, float(np.mean([c.calls for c in counters])), secs


def budgets_for(d: int) -> list[int]:
    """k (d + 1) for k in MULTIPLES, below the 2^d that enumerate everything."""
    return [k * (d + 1) for k in MULTIPLES if k * (d + 1) < 2 ** d]


def _record(results, out_path, report, **rec):
    results.append(rec)
    if out_path is not None:  # partial results as they come: a cut run keeps what it measured
        out_path.write_text(json.dumps(report, indent=1))


def accuracy(args, report, out_path=None):
    results = report.setdefault("accuracy", [])
    methods = OURS + SHAPIQ if not args.methods else args.methods
    skip = set(args.skip or ())
    for spec in args.cases:
        t0 = time.time()
        games, source = suite_game(spec, args.rows, args.background)
        d = games[0].d
        truth = np.stack([g.exact for g in games])
        print(f"{spec} d={d}: exact values by {source} in {time.time() - t0:.1f}s", flush=True)
        too_slow: set[str] = set()
        for method in sorted(skip & set(methods)):
            _record(results, out_path, report, case=spec, half=GAMES[spec][0], d=d, budget=budgets_for(d)[0],
                    method=method, skipped=args.skip_reason)
        for budget in budgets_for(d):
            for method in methods:
                if method in SLOW and budget > 10 * (d + 1) or method in too_slow or method in skip:
                    continue
                errs, evals, secs, cover = [], [], [], []
                try:
                    for r in range(args.repeats):
                        phi, se, ev, sec = run_method(method, games, budget, 1000 * r + 7)
                        if sec * len(games) > args.max_cpu_seconds:  # this game's larger budgets are skipped too
                            too_slow.add(method)
                            _record(results, out_path, report, case=spec, half=GAMES[spec][0], d=d, budget=budget,
                                    method=method, skipped=f"{sec:.0f} CPU s a row (limit {args.max_cpu_seconds} "
                                    "a call)")
                            print(f"  B={budget} {method}: too slow ({sec:.0f} CPU s a row), skipped", flush=True)
                            break
                        errs.append(float(np.mean((phi - truth) ** 2)))
                        evals.append(ev)
                        secs.append(sec)
                        if se is not None:
                            cover.append(float(np.mean(np.abs(phi - truth) <= 1.96 * se)))
                except TooSlow as exc:
                    too_slow.add(method)
                    _record(results, out_path, report, case=spec, half=GAMES[spec][0], d=d, budget=budget,
                            method=method, skipped=str(exc))
                    print(f"  B={budget} {method}: too slow ({exc}), skipped", flush=True)
                    continue
                except Exception as exc:  # a competitor that refuses this budget: recorded, not fatal
                    print(f"  B={budget} {method}: {type(exc).__name__}: {exc}", flush=True)
                    continue
                if method in too_slow:
                    continue
                e = np.array(errs)
                rec = dict(case=spec, half=GAMES[spec][0], d=d, budget=budget, method=method,
                           evals_per_row=float(np.mean(evals)), mse=float(e.mean()),
                           mse_ci95=float(1.96 * e.std(ddof=1) / math.sqrt(len(e))), cpu_seconds_per_row=float(
                               np.mean(secs)), repeats=len(e), truth=source,
                           coverage95=float(np.mean(cover)) if cover else None)
                _record(results, out_path, report, **rec)
                cov = f" cover={rec['coverage95']:.2f}" if cover else ""
                print(f"  B={budget:5d} {method:22s} evals/row={rec['evals_per_row']:8.1f} mse={rec['mse']:.3e}"
                      f" ±{rec['mse_ci95']:.1e} ({rec['cpu_seconds_per_row']:.3f} CPU s/row){cov}", flush=True)
        if "hitml_auto" in methods and not args.no_tol:
            tolerance(spec, games, truth, results, args, report, out_path)


def tolerance(spec, games, truth, results, args, report, out_path):
    """The stopping rule against a fixed budget: tol set to the 95% interval width that the fixed budget of
    20 (d + 1) reached on average; evaluations spent and MSE of tol= (capped at 50 (d + 1)) against the fixed run."""
    d = games[0].d
    fixed = next((r for r in results if r["case"] == spec and r["method"] == "hitml_auto"
                  and r["budget"] == 20 * (d + 1)), None)
    if fixed is None:
        return
    tol = 2 * 1.96 * math.sqrt(fixed["mse"])
    errs, evals, cover = [], [], []
    for r in range(args.repeats):
        phi, se, ev, _ = run_method("hitml_auto", games, min(50 * (d + 1), 2 ** d), 1000 * r + 7, tol=tol)
        errs.append(float(np.mean((phi - truth) ** 2)))
        evals.append(ev)
        cover.append(float(np.mean(np.abs(phi - truth) <= 1.96 * se)))
    e = np.array(errs)
    rec = dict(case=spec, half=GAMES[spec][0], d=d, budget=None, method="hitml_auto[tol]", tol=tol,
               evals_per_row=float(np.mean(evals)), mse=float(e.mean()),
               mse_ci95=float(1.96 * e.std(ddof=1) / math.sqrt(len(e))), fixed_budget=fixed["budget"],
               fixed_mse=fixed["mse"], coverage95=float(np.mean(cover)), repeats=len(e))
    _record(results, out_path, report, **rec)
    print(f"  tol={tol:.3g}: evals/row={rec['evals_per_row']:.1f} mse={rec['mse']:.3e} (fixed {fixed['budget']}: "
          f"{fixed['mse']:.3e})", flush=True)


# ----------------------------------------------------------------------------------------------- GPU speed
SPEED_SHAPIQ = ("LeverageSHAP", "KernelSHAP_paired", "PolySHAP", "OddSHAP", "RegressionMSR")


def game_for(f, x, bg):
    """shapiq's value function for one row: coalitions (n, d) bool -> v(S) through the model f."""
    def game(coalitions):
        c = np.atleast_2d(np.asarray(coalitions, dtype=bool))
        rows = np.where(c[:, None, :], x[None, None, :], bg[None, :, :]).reshape(-1, bg.shape[1])
        return np.asarray(f(rows), dtype=np.float64).reshape(c.shape[0], -1).mean(axis=1)
    return game


def speed(args, report):
    """End to end per explained row on the GPU: a torch MLP on cal_housing, ours (masked rows built on the device,
    the model fed by DLPack) vs shapiq's LeverageSHAP / PolySHAP calling the same GPU model through NumPy."""
    import cupy
    import torch

    X, y, _ = load("cal_housing8")
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
        for method in SPEED_SHAPIQ:
            n = args.shapiq_rows
            _shapiq(method, 8, 0).approximate(budget, game_for(f, fg[0], bg))  # warm-up
            t0 = time.perf_counter()
            for i in range(n):
                _shapiq(method, 8, 0).approximate(budget, game_for(f, fg[i], bg))
            per_row = (time.perf_counter() - t0) / n
            out.append(dict(budget=budget, method=method, seconds_per_row=per_row, rows=n,
                            ratio_vs_hitml_gpu=per_row / ours["gpu"]))
        for rec in out[-2 - len(SPEED_SHAPIQ):]:
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


def _fixed(acc):
    return [r for r in acc if r.get("budget") is not None and "skipped" not in r]


def summary(acc: list[dict]) -> list[str]:
    """The targets cell by cell: lowest MSE (or 95% intervals overlapping the lowest), >= 1.5x below the best shapiq
    estimator, MSE never rising with the budget beyond its interval, coverage 90-98% per game."""
    acc = _fixed(acc)
    cells = sorted({(r["case"], r["budget"]) for r in acc}, key=lambda c: (CASES.index(c[0]) if c[0] in CASES
                                                                            else 99, c[1]))
    lowest = ratio15 = n = 0
    rows = ["| game (half) | B | hitml_auto MSE ± 95% | best shapiq (method) | lowest or overlapping? | "
            "best shapiq / hitml_auto |", "|---|---|---|---|---|---|"]
    for spec, b in cells:
        here = [r for r in acc if r["case"] == spec and r["budget"] == b]
        ours = next((r for r in here if r["method"] == "hitml_auto"), None)
        others = [r for r in here if r["method"] in SHAPIQ]
        if ours is None or not others:
            continue
        n += 1
        best = min(others, key=lambda r: r["mse"])
        q = best["mse"] / ours["mse"] if ours["mse"] > 0 else math.inf
        ok = ours["mse"] <= best["mse"] or ours["mse"] - ours["mse_ci95"] <= best["mse"] + best["mse_ci95"]
        lowest += ok
        ratio15 += q >= 1.5
        verdict = "lowest" if ours["mse"] <= best["mse"] else ("overlapping" if ok else "**no**")
        rows.append(f"| {spec} ({GAMES.get(spec, ('?',))[0]}) | {b} | {ours['mse']:.2e} ±{ours['mse_ci95']:.0e} | "
                    f"{best['mse']:.2e} ±{best['mse_ci95']:.0e} ({best['method']}) | {verdict} | {q:.2f}x |")
    mono = []
    for spec in dict.fromkeys(r["case"] for r in acc):
        ours = sorted((r for r in acc if r["case"] == spec and r["method"] == "hitml_auto"), key=lambda r: r["budget"])
        for lo, hi in zip(ours, ours[1:]):
            if hi["mse"] - hi["mse_ci95"] > lo["mse"] + lo["mse_ci95"]:
                mono.append(f"{spec} {lo['budget']}->{hi['budget']}")
    cov = ["| game (half) | coverage of the 95% intervals, per budget | all budgets |", "|---|---|---|"]
    cov_ok = 0
    games = list(dict.fromkeys(r["case"] for r in acc))
    for spec in games:
        ours = sorted((r for r in acc if r["case"] == spec and r["method"] == "hitml_auto"
                       and r.get("coverage95") is not None), key=lambda r: r["budget"])
        if not ours:
            continue
        allc = float(np.mean([r["coverage95"] for r in ours]))
        cov_ok += 0.90 <= allc <= 0.98
        cov.append(f"| {spec} ({GAMES.get(spec, ('?',))[0]}) | " + ", ".join(
            f"{r['budget']}: {r['coverage95']:.3f}" for r in ours) + f" | {allc:.3f} |")
    return ["## Targets", "",
            f"- hitml_auto lowest, or its 95% interval overlapping the lowest shapiq estimator's, in {lowest} of {n} "
            f"cells; at least 1.5x below the best shapiq estimator in {ratio15} of {n}.",
            f"- MSE rising with the budget beyond the intervals: {', '.join(mono) if mono else 'nowhere'}.",
            f"- Coverage of the 95% intervals within 90-98% (mean over budgets) on {cov_ok} of {len(cov) - 2} games.",
            ""] + rows + ["", "### Coverage (fraction of the rows x features x seeds whose 95% interval holds the "
                          "exact value)", ""] + cov + [""]


def _budget_for_mse(acc: list[dict], spec: str, mse: float) -> float | None:
    """The fixed budget whose hitml_auto MSE would equal ``mse``: log-log interpolation between the measured budgets
    (None outside their range)."""
    pts = sorted((r["budget"], r["mse"]) for r in _fixed(acc) if r["case"] == spec and r["method"] == "hitml_auto")
    for (b0, m0), (b1, m1) in zip(pts, pts[1:]):
        if min(m0, m1) <= mse <= max(m0, m1) and m0 != m1:
            t = (math.log(mse) - math.log(m0)) / (math.log(m1) - math.log(m0))
            return math.exp(math.log(b0) + t * (math.log(b1) - math.log(b0)))
    return None


def tol_table(acc: list[dict]) -> list[str]:
    recs = [r for r in acc if r["method"] == "hitml_auto[tol]"]
    if not recs:
        return []
    lines = ["## The stopping rule (`tol=`) against a fixed budget", "",
             "tol is the 95% interval width (2 x 1.96 x RMSE) the fixed budget of 20(d+1) reached; tol= starts at "
             "10(d+1), doubles while any interval of the row is wider, capped at 50(d+1).", "",
             "The last column is the fixed budget that reaches the tol= run's MSE (log-log interpolation between the "
             "fixed budgets measured; '-' outside them): below 1 tol= is cheaper for equal error.", "",
             "| game | tol | evaluations per row (tol=) | MSE (tol=) | fixed budget | MSE (fixed) | coverage (tol=) | "
             "fixed budget for tol='s MSE | tol= / fixed for equal error |", "|---|---|---|---|---|---|---|---|---|"]
    for r in recs:
        eq = _budget_for_mse(acc, r["case"], r["mse"])
        eq_txt = f"{eq:.0f} | {r['evals_per_row'] / eq:.2f}" if eq else "- | -"
        lines.append(f"| {r['case']} | {r['tol']:.3g} | {r['evals_per_row']:.0f} | {r['mse']:.2e} ±{r['mse_ci95']:.0e}"
                     f" | {r['fixed_budget']} | {r['fixed_mse']:.2e} | {r['coverage95']:.3f} | {eq_txt} |")
    return lines + [""]


def merge(paths: list[str]) -> dict:
    """One report from several runs: a later file's (case, budget, method) record replaces an earlier one."""
    reports = [json.loads(Path(p).read_text()) for p in paths]
    recs = {}
    for rep in reports:
        for r in rep.get("accuracy", []):
            recs[(r["case"], r["budget"], r["method"])] = r
    order = OURS + SHAPIQ + ["hitml_auto[tol]"]
    acc = sorted(recs.values(), key=lambda r: (CASES.index(r["case"]) if r["case"] in CASES else 99,
                                               r["budget"] or 10 ** 9,
                                               order.index(r["method"]) if r["method"] in order else 99))
    keep = ("rows", "background", "repeats")
    settings = {k: v for k, v in reports[0]["settings"].items() if k in keep}
    settings.update(cases=list(dict.fromkeys(r["case"] for r in acc)), merged_runs=len(paths))
    return {"versions": reports[0]["versions"], "settings": settings, "accuracy": acc}


def write_markdown(report: dict, path: Path) -> None:
    """Tables: MSE (95% interval) per game, budget and method; the targets; coverage; the stopping rule."""
    v = report["versions"]
    lines = [f"# Shapley estimation: {'GPU speed per explained row' if 'speed' in report else 'error at equal evaluations'}",
             "", "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items() if val), "",
             "Settings: " + ", ".join(f"{k}={val}" for k, val in report["settings"].items()), ""]
    if "speed" in report:
        lines += ["| budget | method | ms per row | rows timed | shapiq / hitml GPU |", "|---|---|---|---|---|"]
        for r in report["speed"]:
            ratio = f"{r['ratio_vs_hitml_gpu']:.0f}x" if "ratio_vs_hitml_gpu" in r else ""
            lines.append(f"| {r['budget']} | {r['method']} | {r['seconds_per_row'] * 1e3:.3f} | {r['rows']} | {ratio} |")
        lines += ["", "Target: GPU time per explained row at least 10x below shapiq's fastest estimator here.", ""]
        for budget in dict.fromkeys(r["budget"] for r in report["speed"]):
            theirs = [r for r in report["speed"] if r["budget"] == budget and "ratio_vs_hitml_gpu" in r]
            if theirs:
                fastest = min(theirs, key=lambda r: r["seconds_per_row"])
                lines.append(f"- B={budget}: shapiq's fastest, {fastest['method']}, takes "
                             f"{fastest['ratio_vs_hitml_gpu']:.0f}x hitml's GPU time per row.")
        path.write_text("\n".join(lines) + "\n")
        return
    acc = report["accuracy"]
    lines += ["Halves: hyperparameters were chosen on the games marked *tune*; the *held-out* games were run once, "
              "after.", ""]
    lines += summary(acc) + tol_table(acc)
    fixed = _fixed(acc)
    for spec in dict.fromkeys(r["case"] for r in fixed):
        rows = [r for r in fixed if r["case"] == spec]
        budgets = sorted({r["budget"] for r in rows})
        d = rows[0]["d"]
        lines += [f"## {spec} (d={d}, {GAMES.get(spec, ('?',))[0]}; exact values: {rows[0]['truth']})", "",
                  "MSE over the explained rows and features, mean of the seeds ± 95% interval; coalitions evaluated "
                  "per row in brackets; CPU seconds per row after the slash. Bold: lowest.", "",
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
                txt = f"{r['mse']:.2e} ±{r['mse_ci95']:.0e} [{r['evals_per_row']:.0f}] / {r['cpu_seconds_per_row']:.3f}"
                cells.append(f"**{txt}**" if r["mse"] == best[b] else txt)
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
        ratio = []
        for b in budgets:
            ours = [r["mse"] for r in rows if r["budget"] == b and r["method"] == "hitml_auto"]
            theirs = [r["mse"] for r in rows if r["budget"] == b and r["method"] in SHAPIQ]
            ratio.append(f"{min(theirs) / ours[0]:.2f}x" if ours and theirs and ours[0] > 0 else "-")
        lines += ["| best shapiq / hitml_auto | " + " | ".join(ratio) + " |", ""]
        skipped = [r for r in acc if r["case"] == spec and "skipped" in r]
        if skipped:
            lines += ["Skipped (over the CPU limit of one call, at this budget and above): " + "; ".join(
                f"{r['method']} at B={r['budget']} ({r['skipped']})" for r in skipped), ""]
    path.write_text("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", default=CASES)
    ap.add_argument("--methods", nargs="+", default=None)
    ap.add_argument("--rows", type=int, default=2)
    ap.add_argument("--background", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--no-tol", action="store_true", help="skip the stopping-rule comparison")
    ap.add_argument("--multiples", nargs="+", type=int, default=list(MULTIPLES),
                    help="budgets k (d + 1) for these k (a cell run alone, e.g. 50 for the largest)")
    ap.add_argument("--max-cpu-seconds", type=float, default=30.0,
                    help="a method whose one call (all rows of a game) takes longer is skipped for that game")
    ap.add_argument("--speed", "--gpu-speed", dest="speed", action="store_true",
                    help="GPU time per explained row (ours on the GPU and the CPU vs shapiq), on the device")
    ap.add_argument("--speed-rows", type=int, default=2000)
    ap.add_argument("--shapiq-rows", type=int, default=20)
    ap.add_argument("--background-speed", type=int, default=100)
    ap.add_argument("--speed-budgets", nargs="+", type=int, default=[90, 256])
    ap.add_argument("--out", default=str(ROOT / "docs/benchmarks"))
    ap.add_argument("--stem", default=None)
    ap.add_argument("--merge", nargs="+", default=None, help="combine the JSON reports of split runs")
    ap.add_argument("--skip", nargs="+", default=None, help="methods not run on these cases (recorded as skipped)")
    ap.add_argument("--skip-reason", default="not run")
    ap.add_argument("--max-wall-seconds", type=float, default=WALL_LIMIT,
                    help="a competitor call (all rows of a game) cut after this many seconds is skipped for the game")
    args = ap.parse_args()
    globals()["WALL_LIMIT"] = args.max_wall_seconds
    globals()["MULTIPLES"] = tuple(args.multiples)
    keys = ("speed_rows", "shapiq_rows", "background_speed", "speed_budgets") if args.speed else (
        "cases", "methods", "rows", "background", "repeats")
    report = {"versions": versions(), "settings": {k: getattr(args, k) for k in keys}}
    stem = args.stem or ("shapley_speed" if args.speed else "shapley")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.merge:
        report = merge(args.merge)
    elif args.speed:
        speed(args, report)
    else:
        accuracy(args, report, out / f"{stem}.json")
    (out / f"{stem}.json").write_text(json.dumps(report, indent=1))
    write_markdown(report, out / f"{stem}.md")


if __name__ == "__main__":
    main()
