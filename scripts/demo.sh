#!/usr/bin/env bash
# Run the demo: XGBoost on California housing explained through shap.TreeExplainer(model, backend="auto").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/env.sh"
cd "$root"
exec "$root/.venv/bin/python" "$root/integration/demo.py" "$@"
