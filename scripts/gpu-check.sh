#!/usr/bin/env bash
# The GPU check in one command: the CUDA tests (tests/gpu) and the CUDA benchmark
# (benchmarks/run.py --device cuda, results into benchmarks/results/, named for the device).
#
#   scripts/gpu-check.sh              on the GPU machine: check, install, test, measure
#   scripts/gpu-check.sh --quick      the same with the benchmark's few-step smoke sizes
#   scripts/gpu-check.sh --no-tests --repeats 3 --workloads mlp,validation
#                                     the benchmark alone; other options go to benchmarks/run.py
#   scripts/gpu-check.sh --prepare [--have FILE]
#                                     on a machine WITH a package index and this checkout's
#                                     .venv (scripts/setup.sh test): download into .whl/ the
#                                     wheels the GPU machine lacks (scripts/gpu_wheels.py)
#
# Exit codes: 0 all ran and the tests passed (the benchmark reports, it never fails on a ratio);
# 1 a test or the benchmark failed; 2 no CUDA device is visible (nothing was run).
#
# Which Python (the first that sees a CUDA device, else exit 2 saying what was found):
#   1. $PYTHON, if set;
#   2. .venv/bin/python, when its torch is a CUDA build (scripts/setup.sh pins torch==2.13.0 from
#      the CPU index of this project's machines, so usually it is not);
#   3. python3 on PATH (the lent GPU machines' image: /opt/torch/.venv, a CUDA torch 2.11).
# The project pins torch 2.13.0; the check runs on whatever CUDA torch the machine has (torch>=2.1
# is all pyproject.toml asks), and the report names the version. A CUDA wheel of torch 2.13.0 is
# several hundred MB: it cannot travel with the device tool (64 MiB with the working tree), and
# the lent machines reach no index, so installing one there is not attempted. On a GPU machine
# with an index, scripts/setup.sh test with PIP_INDEX_URL (or PIP_EXTRA_INDEX_URL) naming an index
# that holds a CUDA build of torch==2.13.0 (pytorch.org's per-CUDA indexes) builds a CUDA .venv
# that step 2 then uses (not tried: no such machine was at hand).
#
# Installing det_lightning beside that torch: a venv .venv-gpu that sees the chosen Python's
# packages (the machine's torch, lightning, numpy, pytest stay as they are; pip installs only what
# is missing or does not satisfy a pin), det_lightning installed editable
# with the testing and interop extras (the real Determined, for the benchmark's Determined rows):
#   - with a .whl/ folder (from --prepare): pip --no-index --find-links .whl, nothing downloaded;
#   - without one: pip from the index (fails fast where there is none).
#
# On this workplace's device tool (no index on the GPU machine, 64 MiB carried):
#   here:   bash scripts/gpu-check.sh --prepare --have /work/.library/device/KINDS.md
#           (.whl/ is in .gitignore, so it travels only when carried)
#   there:  a command runs 10 minutes at most, and the whole benchmark (18 processes a repetition,
#           5 repetitions by default; estimated well over 10 minutes, never timed on a GPU) does
#           not fit one, so three calls, each with carry=[".whl"]:
#           run(command="bash scripts/gpu-check.sh --quick")                  install, tests, smoke
#           run(command="bash scripts/gpu-check.sh --no-tests --repeats 3 --workloads mlp,validation")
#           run(command="bash scripts/gpu-check.sh --no-tests --repeats 3 --workloads cnn,amp")
# When OUT is set (the device tool's folder of files that come back) the script copies the
# reports it wrote (benchmarks/results/overhead-cuda*) and its log there. Two calls on one day
# write reports of the same name: rename them as they come back.
#
# NEVER RUN ON A GPU YET: written 2026-11-24 on a CPU-only machine (no GPU was lent to that
# session). What was checked there: --prepare, the exit-2 path, the benchmark's CPU path.
set -euo pipefail
cd "$(dirname "$0")/.."

bench_args=()
tests=1
if [ "${1:-}" = "--prepare" ]; then
  shift
  [ -x .venv/bin/python ] || { echo "scripts/gpu-check.sh --prepare: run scripts/setup.sh test first (.venv)" >&2; exit 2; }
  rm -rf .whl
  exec .venv/bin/python scripts/gpu_wheels.py .whl "$@"
fi
for arg in "$@"; do
  case "$arg" in
    --no-tests) tests=0 ;;
    --prepare) echo "scripts/gpu-check.sh: --prepare comes first, alone" >&2; exit 2 ;;
    *) bench_args+=("$arg") ;;  # benchmarks/run.py's own options (--quick, --repeats N, ...)
  esac
done

sees_cuda() {  # true when the torch of Python $1 sees a CUDA device
  "$1" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null
}
python=""
for candidate in ${PYTHON:-} .venv/bin/python "$(command -v python3 || true)"; do
  if [ -n "$candidate" ] && [ -x "$candidate" ] && sees_cuda "$candidate"; then
    python="$candidate"
    break
  fi
done
if [ -z "$python" ]; then
  gpus=$(nvidia-smi -L 2>/dev/null || true)
  if [ -n "$gpus" ]; then
    echo "scripts/gpu-check.sh: nvidia-smi lists a GPU ($gpus), but no Python here has a CUDA build of torch that sees it (tried \$PYTHON, .venv/bin/python, python3); install one (header of this script) or set PYTHON" >&2
  else
    echo "scripts/gpu-check.sh: no CUDA device is visible (nvidia-smi lists none, torch sees none); run this on a GPU machine, or run scripts/test.sh and benchmarks/run.py --device cpu here" >&2
  fi
  exit 2
fi
echo "scripts/gpu-check.sh: $("$python" -c 'import torch; print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)}")') ($python)"

if [ "$python" != ".venv/bin/python" ]; then
  venv=.venv-gpu
  if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv --without-pip "$venv"  # pip and setuptools: the chosen Python's
    # The chosen Python's packages (its CUDA torch) seen from the new venv, below its own: a
    # .pth file rather than --system-site-packages, which would reach the base interpreter's
    # packages, not those of a venv (the GPU image's python3 is /opt/torch/.venv's).
    base=$("$python" -c 'import sysconfig as s; print(s.get_paths()["purelib"]); print(s.get_paths()["platlib"])' | sort -u)
    echo "$base" >"$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/gpu-base.pth"
  fi
  pip=("$venv/bin/python" -m pip --disable-pip-version-check -q install --no-build-isolation)
  if [ -d .whl ]; then
    pip+=(--no-index --find-links .whl)
  fi
  "${pip[@]}" -e ".[testing,interop]"
  python="$venv/bin/python"
fi
"$python" -c "import det_lightning.adapters, lightning, torch; assert torch.cuda.is_available()"

export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
logs=$(mktemp -d)  # also older than the reports this run writes
trap 'rm -rf "$logs"' EXIT
status=0
if [ "$tests" = 1 ]; then
  echo "== pytest -m gpu tests/gpu"
  "$python" -m pytest -m gpu tests/gpu -q 2>&1 | tee "$logs/tests.log" || status=1
else
  echo "not run (--no-tests)" >"$logs/tests.log"
fi
echo "== benchmarks/run.py --device cuda ${bench_args[*]:-}"
"$python" benchmarks/run.py --device cuda "${bench_args[@]}" 2>&1 | tee "$logs/benchmark.log" || status=1
if [ -n "${OUT:-}" ]; then  # the device tool's folder of files that come back
  cat "$logs/tests.log" "$logs/benchmark.log" >"$OUT/gpu-check.log"
  find benchmarks/results -maxdepth 1 -name 'overhead-cuda*' -newer "$logs" -exec cp {} "$OUT/" \;
fi
echo
echo "== summary"
echo "tests/gpu: $(tail -n 1 "$logs/tests.log")"
echo "benchmark: $(grep -E '^wrote ' "$logs/benchmark.log" || echo 'no report written')"
if [ "$status" = 0 ]; then echo "scripts/gpu-check.sh: done"; else echo "scripts/gpu-check.sh: FAILED (above)"; fi
exit "$status"
