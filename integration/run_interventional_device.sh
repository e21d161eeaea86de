#!/usr/bin/env bash
# The device part of docs/benchmarks/interventional_gpu_*: run from the repository root on a GPU machine (after
# `source scripts/device_env.sh <wheel dir>`); writes into ${1:-docs/benchmarks}. The CPU tables at equal threads:
# bench_interventional.py --engines hitml-cpu,woodelf-cpu,shap --threads N (see docs/benchmarks/interventional.md).
set -u
out=${1:-docs/benchmarks}
b="python3 integration/bench_interventional.py --threads $(nproc) --check-rows 20"
# WOODELF's README shape: 3,000,000 rows x 127 features, 5,000,000-row background, XGBoost 100 trees depth 6
if [ "${README:-1}" = 1 ]; then
  timeout 150 $b --readme --engines hitml-gpu --budget 60 --train-rows 200000 --out "$out/interventional_gpu_readme"
  timeout 120 $b --readme --what interactions --bg 1000000 --rows 100000 --engines hitml-gpu --budget 60 \
    --train-rows 200000 --out "$out/interventional_gpu_interactions"
fi
# the grid: three model families, backgrounds 1e3..1e6, rows 1e3..1e6; interactions on XGBoost
timeout 150 $b --models xgboost,lightgbm,forest --bg 1000,100000,1000000 --rows 1000,100000,1000000 \
  --engines hitml-gpu --budget 10 --train-rows 100000 --out "$out/interventional_gpu_grid"
timeout 60 $b --models xgboost --what interactions --bg 1000,1000000 --rows 1000,100000 --engines hitml-gpu \
  --budget 10 --train-rows 100000 --out "$out/interventional_gpu_grid_interactions"
# WOODELF's GPU path (records its failure with CuPy 14)
timeout 40 $b --models xgboost --bg 1000 --rows 1000 --engines woodelf-gpu,hitml-gpu --budget 10 \
  --train-rows 100000 --out "$out/interventional_gpu_woodelf"
# CPU at equal threads (all cores): hitml against WOODELF
if [ "${CPU:-1}" = 1 ]; then
  timeout 90 $b --models xgboost --bg 1000,10000,100000 --rows 1000,10000 --engines hitml-cpu,woodelf-cpu \
    --budget 15 --train-rows 100000 --out "$out/interventional_cpu_allcores"
fi
