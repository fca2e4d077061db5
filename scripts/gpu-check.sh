#!/usr/bin/env bash
# The GPU check in one command of at most 8 minutes, on a fresh GPU machine without a package
# index: install what is missing, prove the imports, run tests/gpu, then the CUDA benchmark in the
# time left, writing each workload's report as it ends.
#
#   here (with an index, after scripts/setup.sh test):
#       bash scripts/gpu-check.sh --prepare --have /work/.library/device/KINDS.md
#           downloads into .whl/ only the wheels of what `import det_lightning.adapters,
#           determined.pytorch, lightning` loads that the GPU image lacks (scripts/gpu_wheels.py;
#           today appdirs, determined, ruamel.yaml: Determined with --no-deps, so without the
#           storage libraries determined.pytorch never imports)
#   there (the device tool: carry=[".whl"], timeout_s=600):
#       bash scripts/gpu-check.sh
#
# Options: --no-tests, --no-bench; anything else goes to benchmarks/run.py. Environment:
#   GPU_CHECK_BUDGET_S   seconds for the whole check (default 480: 8 minutes)
#   GPU_CHECK_SYSTEMS    the benchmark's systems (default raw-best,det_lightning,determined)
#   GPU_CHECK_WORKLOADS  in the order run, while time is left (default mlp,validation,amp,cnn)
#   GPU_CHECK_PROCESS_S  the estimate of one benchmark process, to size the benchmark (default 15)
#   PYTHON               the Python to use (default: python3, the image's, with its CUDA torch)
#   GPU_CHECK_RESULTS    the folder of the reports (default benchmarks/results/gpu-check-<time>)
#   GPU_CHECK_PROFILE    workloads to profile after the benchmark, while time is left (default
#                        none; e.g. validation): one run of each with BENCH_CUDA_PROFILE, its
#                        tables in $OUT/prof (else the results folder's prof/)
#   GPU_CHECK_PROFILE_SYSTEMS  the systems profiled (default det_lightning,determined)
#
# The steps:
#   1. a Python whose torch sees a CUDA device (else exit 2, nothing run);
#   2. scripts/gpu_install.py with that Python: each carried wheel whose distribution that Python
#      lacks goes, --no-deps, into a folder of its own put on PYTHONPATH (nothing is laid over the
#      machine's packages: its lightning, torchmetrics and accelerate stay as they are), and
#      det_lightning is built from this checkout into it; then
#      `import det_lightning.adapters, determined.pytorch, lightning` is proven (else exit 3), and
#      in the same process the torch functions the loop follows without profiler labels logged;
#   3. pytest -m gpu tests/gpu (four processes with pytest-xdist), stopped when the budget is half
#      spent;
#   4. benchmarks/run.py --device cuda --quick, two counted repetitions of each workload (the first
#      workload's after a warm-up repetition, dropped; the later ones' with --no-warm-up), one
#      workload at a time while the estimate fits the time left; each writes its report into
#      benchmarks/results/gpu-check-<time>/<workload>/ as it ends;
#   5. with GPU_CHECK_PROFILE, one profiled run of each named workload per system, while time is
#      left: torch's profiler over the timed window, its table of operations per worker
#      (benchmarks/cuda_window.py; the times of those runs are not measurements), then the
#      operations whose time per step differs most between the systems
#      (benchmarks/profile_diff.py).
# With $OUT set (the device tool's folder of files that come back) the log is written there as it
# goes, and each report is copied there as it is written.
#
# Exit codes: 0 all ran and the tests passed (the benchmark reports, it never fails on a ratio);
# 1 a test or a benchmark run failed; 2 no CUDA device is visible; 3 the imports fail.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
budget=${GPU_CHECK_BUDGET_S:-480}

if [ "${1:-}" = "--prepare" ]; then
  shift
  [ -x .venv/bin/python ] || { echo "scripts/gpu-check.sh --prepare: run scripts/setup.sh test first (.venv)" >&2; exit 2; }
  rm -rf .whl
  exec .venv/bin/python scripts/gpu_wheels.py .whl "$@"
fi
bench_args=()
tests=1
bench=1
for arg in "$@"; do
  case "$arg" in
    --no-tests) tests=0 ;;
    --no-bench) bench=0 ;;
    --prepare) echo "scripts/gpu-check.sh: --prepare comes first, alone" >&2; exit 2 ;;
    *) bench_args+=("$arg") ;;  # benchmarks/run.py's own options
  esac
done

# One start of each Python tried (on the GPU image a Python importing torch takes seconds):
# prints the device line and succeeds when its torch sees a CUDA device.
describe_cuda='import sys, torch
if not torch.cuda.is_available():
    sys.exit(1)
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)}")'
python=""
device=""
for candidate in ${PYTHON:-} "$(command -v python3 || true)"; do
  if [ -n "$candidate" ] && [ -x "$candidate" ] && device=$("$candidate" -c "$describe_cuda" 2>/dev/null); then
    python="$candidate"
    break
  fi
done
if [ -z "$python" ]; then
  gpus=$(nvidia-smi -L 2>/dev/null || true)
  if [ -n "$gpus" ]; then
    echo "scripts/gpu-check.sh: nvidia-smi lists a GPU ($gpus), but no Python here has a CUDA build of torch that sees it (tried \$PYTHON, python3); install one (header of this script) or set PYTHON" >&2
  else
    echo "scripts/gpu-check.sh: no CUDA device is visible (nvidia-smi lists none, torch sees none); run this on a GPU machine, or run scripts/test.sh and benchmarks/run.py --device cpu here" >&2
  fi
  exit 2
fi
echo "scripts/gpu-check.sh: $device ($python)"


log=${OUT:-$(mktemp -d)}/gpu-check.log
: >"$log"
say() { echo "$@" | tee -a "$log"; }
left() { echo $((budget - (SECONDS - started))); }

site=${GPU_CHECK_SITE:-/tmp/det-lightning-gpu-site}
"$python" scripts/gpu_install.py "$site" --wheels .whl 2>&1 | tee -a "$log" || exit 3
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" PYTHONUNBUFFERED=1

status=0
tests_line="not run (--no-tests)"
if [ "$tests" = 1 ]; then
  say "== pytest -m gpu tests/gpu ($(left) s left)"
  set +e
  # Four test processes at once where the machine has pytest-xdist (the GPU image does): the
  # deterministic tests' child processes spend most of their time starting Python.
  parallel=()
  "$python" -c 'import xdist' 2>/dev/null && parallel=(-n 4)
  timeout $(( $(left) / 2 )) "$python" -m pytest -m gpu tests/gpu -q -p no:cacheprovider \
    "${parallel[@]}" 2>&1 | tee -a "$log"
  code=${PIPESTATUS[0]}
  set -e
  [ "$code" = 0 ] || status=1
  tests_line=$(grep -E "passed|failed|error" "$log" | tail -n 1)
  [ "$code" = 124 ] && tests_line="stopped at half the budget: $tests_line"
fi

systems=${GPU_CHECK_SYSTEMS:-raw-best,det_lightning,determined}
per_process=${GPU_CHECK_PROCESS_S:-15}
results=${GPU_CHECK_RESULTS:-benchmarks/results/gpu-check-$(date -u +%Y%m%d-%H%M)}
measured=()
if [ "$bench" = 1 ]; then
  IFS=, read -ra workloads <<<"${GPU_CHECK_WORKLOADS:-mlp,validation,amp,cnn}"
  IFS=, read -ra names <<<"$systems"
  # The first workload measured runs a warm-up repetition (dropped); the machine is warm for the
  # ones after it (the libraries read, the GPU clocked up), which count both repetitions.
  repeats=(--repeats 3)
  for w in "${workloads[@]}"; do
    need=$(( ${#names[@]} * (${#measured[@]} ? 2 : 3) * per_process ))
    if [ "$(left)" -lt "$need" ]; then
      say "== $w: not run ($(left) s left, about $need s needed)"
      continue
    fi
    say "== benchmarks/run.py --device cuda --quick ${repeats[*]} --workloads $w ($(left) s left)"
    "$python" benchmarks/run.py --device cuda --quick "${repeats[@]}" --workloads "$w" \
      --systems "$systems" --out "$results/$w" "${bench_args[@]}" 2>&1 | tee -a "$log" || status=1
    for report in "$results/$w"/overhead-cuda*.md; do
      [ -e "$report" ] || continue
      measured+=("$w")
      repeats=(--repeats 2 --no-warm-up)
      [ -n "${OUT:-}" ] && cp "$report" "$OUT/$w-$(basename "$report")"
    done
  done
fi
profiled=()
if [ -n "${GPU_CHECK_PROFILE:-}" ]; then
  IFS=, read -ra targets <<<"$GPU_CHECK_PROFILE"
  profile_systems=${GPU_CHECK_PROFILE_SYSTEMS:-det_lightning,determined}
  IFS=, read -ra names <<<"$profile_systems"
  tables=${OUT:-$results}/prof
  for w in "${targets[@]}"; do
    need=$(( ${#names[@]} * per_process ))
    if [ "$(left)" -lt "$need" ]; then
      say "== $w, profiled: not run ($(left) s left, about $need s needed)"
      continue
    fi
    say "== $w, profiled (BENCH_CUDA_PROFILE=$tables; $(left) s left)"
    BENCH_CUDA_PROFILE="$tables" "$python" benchmarks/run.py --device cuda --quick --repeats 1 \
      --no-warm-up --workloads "$w" --systems "$profile_systems" --out "$results/profile-$w" \
      "${bench_args[@]}" 2>&1 | tee -a "$log" || status=1
    profiled+=("$w")
  done
  if [ ${#profiled[@]} -gt 0 ]; then
    # Where the systems' profiled steps differ most, printed here so the call's output has it.
    base=determined
    [[ ",$profile_systems," == *,determined,* ]] || base=${names[-1]}
    say "== where the profiled steps differ (benchmarks/profile_diff.py, against $base)"
    "$python" benchmarks/profile_diff.py "$tables" --base "$base" 2>&1 | tee -a "$log" || true
  fi
fi
say ""
say "== summary ($((SECONDS - started)) s)"
say "tests/gpu: $tests_line"
say "benchmark: ${measured[*]:-no workload measured} (reports in $results)"
[ -n "${GPU_CHECK_PROFILE:-}" ] && say "profiled: ${profiled[*]:-none} (tables in $tables)"
if [ "$status" = 0 ]; then say "scripts/gpu-check.sh: done"; else say "scripts/gpu-check.sh: FAILED (above)"; fi
exit "$status"
