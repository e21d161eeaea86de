"""The full realistic-frame differential (tests/_frames.py): N seeded configurations of XGBoost, LightGBM,
scikit-learn and CatBoost explained on hostile pandas inputs, each against the library's own answer.

    python integration/differential_frames.py [--n 1300] [--backend cpu|gpu] [--start 0] [--stop N]

Prints one line per failure and a summary (outcomes per family and variant, time); exit status 1 on any failure.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import _frames


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1300)
    parser.add_argument("--backend", default="cpu", choices=["cpu", "gpu"])
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--stop", type=int, default=None)
    args = parser.parse_args(argv)
    cfgs = _frames.configs(args.n)[args.start:args.stop]
    outcomes: collections.Counter = collections.Counter()
    per_family: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    per_variant: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    failures = 0
    t0 = time.time()
    run = _frames.run_pair if args.backend == "gpu" else _frames.run
    for cfg in cfgs:
        try:
            outcome = run(cfg) if args.backend == "gpu" else run(cfg, backend="cpu")
        except Exception as exc:
            outcome = "FAIL"
            failures += 1
            detail = {k: v for k, v in cfg.items() if k not in ("seed",)}
            print(f"FAIL {cfg['index']} {detail} {type(exc).__name__}: {str(exc)[:400]}", flush=True)
            if not isinstance(exc, AssertionError):
                traceback.print_exc(limit=3)
        kind = outcome.split(":")[0]
        outcomes[outcome] += 1
        per_family[cfg["family"]][kind] += 1
        per_variant[cfg["variant"]][kind] += 1
    elapsed = time.time() - t0
    print(f"\n{len(cfgs)} configurations ({args.backend}), {elapsed:.0f} s: {dict(outcomes)}")
    for name, table in (("family", per_family), ("variant", per_variant)):
        for key in sorted(table):
            print(f"  {name} {key:>16}: {dict(table[key])}")
    print(f"failures: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
