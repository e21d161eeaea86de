#!/usr/bin/env bash
# Run the test suite (CPU tests; GPU tests skip where CuPy sees no GPU). Extra args go to pytest.
#   bash scripts/test.sh            the full suite in .venv, then the shap_ext, xgboost_ext and sklearn_ext tests in
#                                   the minimal environment .venv-min, without the optional packages
#                                   (scripts/test_min.sh); what CI runs through .ci/run
#   bash scripts/test.sh --quick    the quick subset of both: pytest -m "not slow" (no Dask clusters, wheel builds, doc
#                                   examples or API build; a spread of each parametrized test's cases)
#   bash scripts/test.sh ARGS       where ARGS name tests (a path, -k, -m): those tests, in .venv only
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/env.sh"
cd "$root"
args=()
selects=0
for a in "$@"; do
  case "$a" in
    --quick) args+=(-m "not slow") ;;
    -k* | -m* | --deselect*) selects=1; args+=("$a") ;;
    -*) args+=("$a") ;;
    *.py | *.py::* | tests | tests/*) selects=1; args+=("$a") ;;
    *) args+=("$a") ;;
  esac
done
if [ "$selects" = 1 ]; then
  exec "$root/.venv/bin/python" -m pytest ${args[@]+"${args[@]}"}
fi
full=0
"$root/.venv/bin/python" -m pytest ${args[@]+"${args[@]}"} || full=$?
echo "== the minimal environment: bash scripts/test_min.sh $* ==" >&2
minimal=0
bash "$root/scripts/test_min.sh" "$@" || minimal=$?
if [ "$full" != 0 ]; then exit "$full"; fi
exit "$minimal"
