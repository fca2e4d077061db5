#!/usr/bin/env bash
# Installs everything the tests need into .venv, then runs the whole suite (all but `gpu`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
exec .venv/bin/python -m pytest -m "not gpu" -q "$@"
