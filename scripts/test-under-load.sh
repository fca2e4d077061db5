#!/usr/bin/env bash
# The test command (docs/contributing.md) while the machine is busy: one CPU-burning process per core runs
# beside the tests (as on a shared CI machine), and all of them end when the tests end.
#
#   scripts/test-under-load.sh                 the whole suite (scripts/test.sh), under load
#   scripts/test-under-load.sh tests/unit -x   just what you name, under load
#   LOAD_PROCS=4 scripts/test-under-load.sh    more burners than cores
#
# A test that fails here and passes on an idle machine waits for a duration instead of an
# event: make the code under test expose the event, and wait for that.
set -euo pipefail
cd "$(dirname "$0")/.."
procs="${LOAD_PROCS:-$(nproc)}"
burners=()
stop_burners() {
  [ ${#burners[@]} -gt 0 ] && kill "${burners[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap stop_burners EXIT INT TERM
for _ in $(seq "$procs"); do
  sh -c 'while :; do :; done' &
  burners+=($!)
done
echo "test-under-load: $procs CPU burner(s) running beside the tests ($(nproc) cores)"
started=$SECONDS
status=0
bash scripts/test.sh "$@" || status=$?
echo "test-under-load: exit status $status after $((SECONDS - started)) s with $procs burner(s)"
exit "$status"
