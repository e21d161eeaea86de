#!/usr/bin/env bash
# Source from a hitml checkout on a machine where hitml is not pip-installed (a bare GPU machine):
#   source scripts/device_env.sh [WHEEL_DIR ...]
# installs the wheels found in the given folders (default: every .whl* folder of the checkout) into /tmp/site and
# puts the `hitml` namespace (hitml.kernels, hitml.shap_ext, ...) and those wheels on PYTHONPATH.
_hitml_root="$(pwd)"
_hitml_dirs=("$@"); [ ${#_hitml_dirs[@]} -eq 0 ] && _hitml_dirs=("$_hitml_root"/.whl*)
_hitml_wheels=()
for _d in "${_hitml_dirs[@]}"; do for _w in "$_d"/*.whl; do [ -f "$_w" ] && _hitml_wheels+=("$_w"); done; done
if [ ${#_hitml_wheels[@]} -gt 0 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "${_hitml_wheels[@]}" || return 1
fi
mkdir -p /tmp/hitml_ns/hitml
for _p in kernels shap_ext xgboost_ext sklearn_ext; do ln -sfn "$_hitml_root/$_p" "/tmp/hitml_ns/hitml/$_p"; done
export PYTHONPATH="/tmp/hitml_ns:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
unset _hitml_root _hitml_dirs _hitml_wheels _d _w _p
