#!/usr/bin/env bash
# Builds the sdist and, from it, the wheel (`python -m build`), installs the wheel into a fresh
# virtual environment and runs it there: the version, `det-lightning --help` and `--version`, the example.
#
#   scripts/wheel-smoke.sh           with .venv (scripts/setup.sh test) as the base
#   BASE_VENV=DIR scripts/wheel-smoke.sh
#
# Fast and offline: the build uses the base's setuptools (--no-isolation), and the fresh
# environment sees the base's site-packages through a .pth file after its own, so pip finds
# torch, Lightning and the rest installed and downloads nothing (--no-index), while
# det_lightning itself (and its `det-lightning` command) comes from the wheel alone: the
# base's editable install is a path hook that a plain path entry does not run.
set -euo pipefail
cd "$(dirname "$0")/.."
base="${BASE_VENV:-.venv}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "wheel-smoke: building the sdist and the wheel"
"$base/bin/python" -m build --no-isolation --outdir "$work/dist" . >"$work/build.log" 2>&1 \
  || { cat "$work/build.log" >&2; echo "wheel-smoke: python -m build failed (above)" >&2; exit 1; }
wheel=$(ls "$work"/dist/det_lightning-*.whl)
ls "$work"/dist/det_lightning-*.tar.gz >/dev/null
echo "wheel-smoke: installing $(basename "$wheel") into a fresh venv"
# No pip or setuptools of its own: an old setuptools there would hide the base's (torch needs
# a recent one); the base's pip installs into it (--python).
"$base/bin/python" -m venv --without-pip "$work/venv"  # the same Python as the base
py="$work/venv/bin/python"
base_site=$("$base/bin/python" -c "import sysconfig; print(sysconfig.get_path('purelib'))")
own_site=$("$py" -c "import sysconfig; print(sysconfig.get_path('purelib'))")
echo "$(cd "$base_site" && pwd)" >"$own_site/_base_site_packages.pth"
pip=("$base/bin/python" -m pip --python "$py" --disable-pip-version-check)
"${pip[@]}" install -q --no-index "$wheel[determined-deps]"
"${pip[@]}" check
echo "wheel-smoke: running it"
(cd /tmp && "$py" -c "import sys, det_lightning, det_lightning.adapters
assert det_lightning.__file__.startswith(sys.prefix), det_lightning.__file__
assert det_lightning.adapters.__file__.startswith(sys.prefix), det_lightning.adapters.__file__
print('det_lightning', det_lightning.__version__)")
"$work/venv/bin/det-lightning" --help >/dev/null
version=$("$work/venv/bin/det-lightning" --version | head -n 1)
want=$("$py" -c "import det_lightning; print('det-lightning', det_lightning.__version__)")
[ "$version" = "$want" ] || { echo "wheel-smoke: --version said '$version', not '$want'" >&2; exit 1; }
echo "$version"
cp -r examples/mnist "$work/mnist"
(cd "$work/mnist" && OMP_NUM_THREADS=1 "$work/venv/bin/det-lightning" experiment const.yaml . \
  >"$work/example.log" 2>&1) \
  || { cat "$work/example.log" >&2; echo "wheel-smoke: the example failed (above)" >&2; exit 1; }
tail -n 1 "$work/example.log"
echo "wheel-smoke: ok"
