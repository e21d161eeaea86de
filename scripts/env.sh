#!/usr/bin/env bash
# Create (or reuse) .venv on Python >= 3.12 and install hitml with its test extras.
# Sourced by scripts/demo.sh and scripts/test.sh; safe to run on its own.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"

ok_python() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; }

find_python() {
  # Prefer 3.12 (the version the project is tested on), then any newer Python on PATH or in pyenv.
  local c v p
  if command -v python3.12 >/dev/null 2>&1 && ok_python python3.12; then command -v python3.12; return 0; fi
  if command -v pyenv >/dev/null 2>&1; then
    for v in $(pyenv versions --bare 2>/dev/null | grep '^3\.12' | sort -rV) \
             $(pyenv versions --bare 2>/dev/null | grep -E '^3\.[0-9]+' | sort -rV); do
      p="$(pyenv prefix "$v" 2>/dev/null)/bin/python3"
      if [ -x "$p" ] && ok_python "$p"; then echo "$p"; return 0; fi
    done
  fi
  for c in python3.13 python3.14 python3; do
    if command -v "$c" >/dev/null 2>&1 && ok_python "$c"; then command -v "$c"; return 0; fi
  done
  return 1
}

if [ ! -x "$venv/bin/python" ]; then
  py="$(find_python)" || { echo "hitml needs Python >= 3.12 (none found on PATH or in pyenv)" >&2; exit 1; }
  echo "creating $venv with $py" >&2
  "$py" -m venv "$venv"
fi
stamp="$venv/.hitml-installed"
want="$(cat "$root/pyproject.toml" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "installing hitml and its test dependencies into $venv" >&2
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  # hitml's build compiles its TreeSHAP kernels ahead (setup.py); here that step runs below, once the dependencies
  # it compiles with (Numba, NumPy) are the ones installed
  "$venv/bin/python" -m pip install -q setuptools wheel >&2
  HITML_AOT=0 "$venv/bin/python" -m pip install -q --no-build-isolation -e "$root[test]" >&2
  # compile the Numba kernels once now (cached per machine), so that no later test or script waits for them
  "$venv/bin/python" -m hitml.kernels warmup >&2 || echo "hitml warm-up failed; kernels compile on first use" >&2
  echo "$want" > "$stamp"
fi
# the compiled TreeSHAP kernels (kernels/_aot.py), built for this machine, again where they no longer match the
# sources or the installed Numba
if ! "$venv/bin/python" -m hitml.kernels aot --check >/dev/null 2>&1; then
  "$venv/bin/python" -m hitml.kernels aot >&2 || echo "hitml: compiled kernels not built; kernels compile on first use" >&2
fi
