#!/usr/bin/env bash
# The shap_ext, xgboost_ext and sklearn_ext tests in a minimal environment, .venv-min: hitml's declared dependencies
# plus the `test-min` extra (pytest, hypothesis, lightgbm) and none of the optional packages (pyarrow, polars, dask,
# catboost, treelite, matplotlib, datasketches, sphinx, CuPy). A missing optional package must never change a value:
# these tests compare against the libraries' own numbers here too, and the tests that need a missing package skip.
#   bash scripts/test_min.sh            those tests (scripts/test.sh runs them after the full suite)
#   bash scripts/test_min.sh --quick    their quick subset (pytest -m "not slow"); other args go to pytest
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv-min"
# shellcheck source=scripts/_python.sh
source "$root/scripts/_python.sh"
ensure_venv "$venv"
# the Numba kernels compile on first use into Numba's cache next to the sources, which .venv shares
if ! hitml_current "$venv"; then
  install_hitml "$venv" test-min
fi
# none of the optional packages may have come in with a dependency
present="$("$venv/bin/python" - <<'EOF'
import importlib.util
names = ["pyarrow", "polars", "dask", "distributed", "catboost", "treelite", "matplotlib", "datasketches", "sphinx",
         "cupy"]
print(" ".join(n for n in names if importlib.util.find_spec(n) is not None))
EOF
)"
if [ -n "$present" ]; then
  echo "$venv is not minimal: $present installed (a dependency pulled it in; see pip show -r)" >&2
  exit 1
fi
cd "$root"
shopt -s nullglob
files=(tests/test_shap_ext_*.py tests/test_xgboost_ext*.py tests/test_sklearn_*.py tests/test_shapley_sklearn.py
       tests/test_reader_*.py tests/test_permutation_importance*.py tests/test_value_hostile*.py
       tests/test_inputs_arrow_polars*.py)
args=()
for a in "$@"; do
  if [ "$a" = "--quick" ]; then args+=(-m "not slow"); else args+=("$a"); fi
done
exec "$venv/bin/python" -m pytest "${files[@]}" ${args[@]+"${args[@]}"}
