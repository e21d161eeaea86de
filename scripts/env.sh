#!/usr/bin/env bash
# Create (or reuse) .venv on Python >= 3.12 and install hitml with its test extras.
# Sourced by scripts/demo.sh and scripts/test.sh; safe to run on its own.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"

# shellcheck source=scripts/_python.sh
source "$root/scripts/_python.sh"
ensure_venv "$venv"
if ! hitml_current "$venv"; then
  install_hitml "$venv" test
  # compile the Numba kernels once now (cached per machine), so that no later test or script waits for them
  "$venv/bin/python" -m hitml.kernels warmup >&2 || echo "hitml warm-up failed; kernels compile on first use" >&2
fi
# the shipped Numba cache entries of the TreeSHAP kernels (kernels/_aot.py), built for this machine, again where they
# no longer serve it (other kernel sources, another Numba)
if ! "$venv/bin/python" -m hitml.kernels aot --check >/dev/null 2>&1; then
  "$venv/bin/python" -m hitml.kernels aot >&2 || echo "hitml: shipped kernels not built; kernels compile on first use" >&2
fi
