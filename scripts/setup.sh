#!/usr/bin/env bash
# Creates .venv and installs det_lightning into it.
#
#   scripts/setup.sh            runtime only (what the example needs)
#   scripts/setup.sh test       plus the dev, interop and docs extras (pytest, the real
#                               determined, Sphinx)
#   scripts/setup.sh release-tests
#                               plus pytest and the real determined only: what the environments
#                               of other Lightning releases run (the release-dependent and
#                               parity tests; scripts/test.sh, scripts/test-lightning-releases.sh)
#
# VENV (default .venv) names the environment; LIGHTNING_SPEC pins Lightning in it (the test
# script builds .venv-low with the lowest Lightning pyproject.toml allows).
#
# torch is installed first and pinned through constraints.txt, so that no later step lets pip
# pick a torch build on its own (on a CPU machine that would pull several GB of CUDA packages).
# Set TORCH_SPEC to install another torch, e.g. TORCH_SPEC="torch==2.5.1"; INSTALLER=pip
# installs the rest with pip instead of uv.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=""
case "${1:-}" in
  "") ;;
  test) extras="[dev,interop,docs]" ;;
  release-tests) extras="[testing,interop]" ;;
  *) echo "scripts/setup.sh: unknown mode '$1' (none, test or release-tests)" >&2; exit 2 ;;
esac
python="${PYTHON:-python3}"
venv="${VENV:-.venv}"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
torch_spec="${TORCH_SPEC:-torch==2.13.0}"
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
echo "$torch_spec" >"$constraints"
[ -n "${LIGHTNING_SPEC:-}" ] && echo "$LIGHTNING_SPEC" >>"$constraints"
"${pip[@]}" install "$torch_spec" 2>&1 | grep -v "is ignored: it is neither" || true
"$venv/bin/python" -c "import importlib.util as u, sys; sys.exit(u.find_spec(\"torch\") is None)" || { echo "torch did not install" >&2; exit 1; }
# The rest through uv where it can be had: on the 2-core machine it installs the test
# environment in 14 s where pip takes 60 s (it unpacks and compiles in parallel), the same
# packages at the same versions. uv comes into the environment from pip, and pip does the
# install where uv cannot be had (no index) or INSTALLER=pip asks for it. torch stays pip's
# (above): uv does not look in the machine's folder of wheels, and the constraints keep the
# torch that pip installed.
if [ "${INSTALLER:-uv}" = uv ] && "${pip[@]}" install "uv>=0.5" >/dev/null 2>&1; then
  UV_LINK_MODE=copy "$venv/bin/uv" pip install -q --python "$venv/bin/python" --compile-bytecode \
    -c "$constraints" -e ".$extras"
else
  "${pip[@]}" install -c "$constraints" -e ".$extras" 2>&1 | grep -v "is ignored: it is neither" || true
fi
"$venv/bin/python" -c "import det_lightning.adapters, lightning"
# What this environment was installed from, so scripts/run-example.sh installs only once.
sha256sum pyproject.toml >"$venv/.det_lightning-setup"
