#!/usr/bin/env bash
# Run the test suite (CPU tests; GPU tests skip where CuPy sees no GPU). Extra args go to pytest.
#   bash scripts/test.sh            the full suite (what CI runs through .ci/run)
#   bash scripts/test.sh --quick    the quick subset: pytest -m "not slow" (no Dask clusters, wheel builds, doc
#                                   examples or API build; a spread of each parametrized test's cases)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/env.sh"
cd "$root"
args=()
for a in "$@"; do
  if [ "$a" = "--quick" ]; then args+=(-m "not slow"); else args+=("$a"); fi
done
exec "$root/.venv/bin/python" -m pytest ${args[@]+"${args[@]}"}
