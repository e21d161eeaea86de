#!/usr/bin/env bash
# Run the test suite (CPU tests; GPU tests skip where CuPy sees no GPU). Extra args go to pytest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/env.sh"
cd "$root"
exec "$root/.venv/bin/python" -m pytest "$@"
