#!/usr/bin/env bash
# Create (or reuse) .venv on Python >= 3.12 and install hitml with its test extras.
# Sourced by scripts/demo.sh and scripts/test.sh; safe to run on its own.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"

find_python() {
  local c
  for c in python3.14 python3.13 python3.12 python3; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; then
      command -v "$c"; return 0
    fi
  done
  if command -v pyenv >/dev/null 2>&1; then
    local v
    for v in $(pyenv versions --bare 2>/dev/null | sort -rV); do
      local p; p="$(pyenv prefix "$v" 2>/dev/null)/bin/python3"
      if [ -x "$p" ] && "$p" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; then
        echo "$p"; return 0
      fi
    done
  fi
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
  "$venv/bin/python" -m pip install -q -e "$root[test]" >&2
  echo "$want" > "$stamp"
fi
