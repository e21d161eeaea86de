# Sourced by scripts/env.sh and scripts/test_min.sh: find a Python >= 3.12, create a virtual environment with it and
# install hitml into it.
# Defines functions only.

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

ensure_venv() {
  # ensure_venv DIR: create the virtual environment DIR with find_python's Python, unless it is there.
  local venv="$1" py
  if [ ! -x "$venv/bin/python" ]; then
    py="$(find_python)" || { echo "hitml needs Python >= 3.12 (none found on PATH or in pyenv)" >&2; exit 1; }
    echo "creating $venv with $py" >&2
    "$py" -m venv "$venv"
  fi
}

hitml_current() {
  # hitml_current DIR: whether hitml's install in the virtual environment DIR matches pyproject.toml.
  local root
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  [ -f "$1/.hitml-installed" ] && [ "$(cat "$1/.hitml-installed")" = "$(sha256sum < "$root/pyproject.toml" | cut -c1-16)" ]
}

install_hitml() {
  # install_hitml DIR EXTRA: install hitml (editable) with EXTRA into the virtual environment DIR, and stamp it with
  # pyproject.toml's hash. Call it as a statement (not in a condition), so that a failed pip stops the script.
  # hitml's build compiles its TreeSHAP kernels and ships their Numba cache entries (setup.py); HITML_AOT=0 leaves
  # that to the caller, once the Numba it compiles with is the one installed.
  local venv="$1" extra="$2" root
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  echo "installing hitml[$extra] into $venv" >&2
  "$venv/bin/python" -m pip install -q --upgrade pip setuptools wheel >&2
  HITML_AOT=0 "$venv/bin/python" -m pip install -q --no-build-isolation -e "$root[$extra]" >&2
  sha256sum < "$root/pyproject.toml" | cut -c1-16 > "$venv/.hitml-installed"
}
