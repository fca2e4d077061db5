#!/usr/bin/env bash
# Trains the MNIST-style example (examples/mnist) on generated data, installing det_lightning
# into .venv first if scripts/setup.sh has not done so for this pyproject.toml.
#
#   scripts/run-example.sh              one epoch
#   scripts/run-example.sh --epochs 3   options go to examples/mnist/train.py (--help lists them)
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=.venv/.det_lightning-setup  # written by scripts/setup.sh: pyproject.toml's checksum
if [ -x .venv/bin/python ] && [ -f "$stamp" ] && sha256sum --quiet -c "$stamp" >/dev/null 2>&1; then
  echo "run-example: det_lightning is installed in .venv (delete .venv to reinstall)"
else
  echo "run-example: installing det_lightning into .venv (a minute or more the first time)..."
  bash scripts/setup.sh
fi
echo "run-example: training examples/mnist on generated data (the log follows)"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
exec .venv/bin/python examples/mnist/train.py "$@"
