#!/usr/bin/env bash
# Installs det_lightning into .venv and trains the MNIST-style example on generated data.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
exec .venv/bin/python examples/mnist/train.py "$@"
