#!/usr/bin/env bash
# Runs two-process jobs again and again and counts the ones that abort at exit.
#
#   scripts/soak-two-process.sh [--example N] [--tests N] [--select TESTS] [--keep DIR]
#
#   --example N     run `examples/mnist/train.py --devices 2 --accelerator cpu` N times (default 20)
#   --tests N       run `pytest -m distributed TESTS` N times (default 0)
#   --select TESTS  which tests: a path or node id, e.g. one test that once aborted
#                   (default tests/distributed, all 21)
#   --keep DIR    where each run's output goes (default: a new temporary directory)
#
# A run counts as an abort when any process of it (rank 0, or a rank Lightning started, whose
# exit status nobody reads) printed "terminate called", "Aborted" or SIGABRT, or it exited with
# status 134 (128 + SIGABRT). The last line is the count; the status is non-zero if any run
# aborted or failed. Each run's output is kept under --keep; runs that aborted are listed.
set -uo pipefail

examples=20
tests=0
select="tests/distributed"
keep=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --example) examples="$2"; shift 2 ;;
        --tests) tests="$2"; shift 2 ;;
        --select) select="$2"; shift 2 ;;
        --keep) keep="$2"; shift 2 ;;
        *) echo "usage: $0 [--example N] [--tests N] [--select TESTS] [--keep DIR]" >&2; exit 2 ;;
    esac
done

repo="$(cd "$(dirname "$0")/.." && pwd)"
python="$repo/.venv/bin/python"
keep="${keep:-$(mktemp -d /tmp/soak-two-process.XXXXXX)}"
mkdir -p "$keep"
export OMP_NUM_THREADS=1
ABORT_PATTERN='terminate called|Aborted|SIGABRT|core dumped|Fatal Python error'

runs=0 aborts=0 failures=0
declare -a aborted_runs=()

# Records one finished run: its exit status $1 and the directory $2 holding its output.
record() {
    local status="$1" dir="$2" aborted=0
    runs=$((runs + 1))
    if grep -rqE "$ABORT_PATTERN" "$dir" --include='*.txt' --include='*.log' 2>/dev/null \
        || [[ "$status" -eq 134 ]]; then
        aborted=1
        aborts=$((aborts + 1))
        aborted_runs+=("$dir")
    fi
    if [[ "$status" -ne 0 ]]; then
        failures=$((failures + 1))
    fi
    echo "$(date +%T) $(basename "$dir"): status $status, abort $aborted" \
        "(runs $runs, aborts $aborts, non-zero exits $failures)"
}

for ((i = 1; i <= examples; i++)); do
    dir="$keep/example-$i"
    mkdir -p "$dir"
    # Through a pipe: `cat` ends only when every process holding it has exited, the ranks
    # Lightning started included, so their last words are in the log too.
    (
        cd "$dir" &&
            DET_LIGHTNING_CHECKPOINT_DIR="$dir/checkpoints" \
            DET_LIGHTNING_TENSORBOARD_DIR="$dir/tensorboard" \
            "$python" "$repo/examples/mnist/train.py" --devices 2 --accelerator cpu 2>&1 \
            | cat >"$dir/output.txt"
        exit "${PIPESTATUS[0]}"
    )
    record "$?" "$dir"
    rm -rf "$dir/checkpoints" "$dir/tensorboard"
done

for ((i = 1; i <= tests; i++)); do
    dir="$keep/tests-$i"
    mkdir -p "$dir"
    # --basetemp keeps every job's output.txt (each rank's output) where the grep looks.
    (cd "$repo" && "$python" -m pytest -q -m distributed $select \
        --basetemp "$dir/tmp" 2>&1 | cat >"$dir/pytest.log"
        exit "${PIPESTATUS[0]}")
    record "$?" "$dir"
    find "$dir/tmp" -name checkpoints -type d -prune -exec rm -rf {} + 2>/dev/null
done

for dir in "${aborted_runs[@]}"; do
    echo "aborted: $dir"
done
echo "soak: $runs runs, $aborts aborts, $failures non-zero exits (output in $keep)"
[[ "$aborts" -eq 0 && "$failures" -eq 0 ]]
