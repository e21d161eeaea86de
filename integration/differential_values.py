"""The full value-hostile differential (tests/_values.py): N seeded configurations of XGBoost, LightGBM,
scikit-learn and CatBoost explained on rows at every split threshold (and one ulp either side, float32 and float64),
near zero, subnormal, signed zero, NaN, huge and beyond float32, each against the library's own answer.

    python integration/differential_values.py [--n 2000] [--backend cpu|gpu] [--start 0] [--stop N] [--cap ROWS]

``--backend gpu`` checks the GPU engine against the library and against the CPU engine. CatBoost configurations
need catboost; where it is absent they are skipped with the reason printed.

Prints one block per configuration with a disagreement, then a summary: configurations and checks per library,
disagreements by class, refusals by reason, references unavailable, run time; exit status 1 on any disagreement.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import _values


def _reason(text: str) -> str:
    """A refusal or unavailability message without its counts and form (for tallying reasons)."""
    text = re.sub(r"^(f64|f32|frame)( [a-z_ ]+?)?: ", "", text)
    text = re.sub(r" \((all-hostile|1e300|beyond32|halfway|inf|nan|thr[0-9+-]*|, )+\)", "", text)
    return re.sub(r"\b\d+ (rows|refused|with)\b", r"N \1", text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--backend", default="cpu", choices=["cpu", "gpu"])
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--stop", type=int, default=None)
    parser.add_argument("--cap", type=int, default=None, help="explained rows per configuration (default: all)")
    args = parser.parse_args(argv)
    cfgs = _values.configs(args.n)[args.start:args.stop]
    skip_reason = None
    saved: list[str] = []
    try:
        import catboost  # noqa: F401 - only whether it imports
    except ImportError as exc:
        saved = _values.saved_catboost()
        skip_reason = (f"catboost is not installed ({exc}): CatBoost configurations skipped"
                       + (f"; the {len(saved)} saved CatBoost models (tests/data/catboost) run instead" if saved
                          else "; no saved CatBoost models (tests/data/catboost) either"))
        print(skip_reason, flush=True)
    per_lib: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    classes: collections.Counter = collections.Counter()
    refusals: collections.Counter = collections.Counter()
    unavailable: collections.Counter = collections.Counter()
    failed = 0
    t0 = time.time()
    gpu = args.backend == "gpu"
    for cfg in cfgs:
        fam = cfg["family"]
        if fam == "catboost" and skip_reason:
            per_lib[fam]["skipped"] += 1
            continue
        t = time.time()
        try:
            res = _values.run(cfg, backend=args.backend, compare_cpu=gpu, cap=args.cap)
        except Exception as exc:  # a harness error is reported, and the run goes on
            per_lib[fam]["harness errors"] += 1
            failed += 1
            print(f"HARNESS ERROR {cfg} {type(exc).__name__}: {exc}", flush=True)
            traceback.print_exc(limit=4)
            continue
        if res.skipped:
            per_lib[fam]["skipped"] += 1
            continue
        per_lib[fam]["configurations"] += 1
        per_lib[fam]["checks"] += res.checks
        per_lib[fam]["seconds"] += time.time() - t
        for r in res.refusals:
            refusals[f"{fam}: {_reason(r)}"] += 1
        for u in res.unavailable:
            unavailable[f"{fam}: {_reason(u)}"] += 1
        if res.disagreements:
            failed += 1
            per_lib[fam]["disagreeing configurations"] += 1
            print(f"DISAGREEMENT {cfg}", flush=True)
            for d in res.disagreements:
                cls = _values.classify(fam, args.backend, d)
                classes[cls] += 1
                print(f"    [{cls}] {d[:600]}", flush=True)
    for name in saved:
        res = _values.run_saved(name, backend=args.backend, compare_cpu=gpu)
        per_lib["catboost"]["saved models"] += 1
        per_lib["catboost"]["checks"] += res.checks
        if res.disagreements:
            failed += 1
            per_lib["catboost"]["disagreeing saved models"] += 1
            print(f"DISAGREEMENT saved CatBoost model {name}", flush=True)
            for d in res.disagreements:
                cls = _values.classify("catboost", args.backend, d)
                classes[cls] += 1
                print(f"    [{cls}] {d[:600]}", flush=True)
    elapsed = time.time() - t0
    print(f"\n{len(cfgs)} configurations ({args.backend}), {elapsed:.0f} s")
    for fam in _values.FAMILIES:
        table = per_lib.get(fam, {})
        secs = table.pop("seconds", 0.0) if table else 0.0
        print(f"  {fam:>9}: {dict(table)}, {secs:.0f} s")
    if skip_reason:
        print(f"  {skip_reason}")
    print("disagreements by class:" + ("" if classes else " none"))
    for cls, n in classes.most_common():
        print(f"  {n:6d}  {cls}")
    print("refusals (the library refuses the input), by reason:" + ("" if refusals else " none"))
    for why, n in refusals.most_common():
        print(f"  {n:6d}  {why}")
    print("references unavailable:" + ("" if unavailable else " none"))
    for why, n in unavailable.most_common():
        print(f"  {n:6d}  {why}")
    print(f"configurations with a disagreement or harness error: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
