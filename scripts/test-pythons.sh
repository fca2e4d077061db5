#!/usr/bin/env bash
# Runs the suite (every test but the GPU ones) on the Python releases pyproject.toml admits
# besides CI's, each in its own environment (.venv-py<X.Y>, built by scripts/setup.sh test
# with that Python):
#
#   scripts/test-pythons.sh                 3.10, 3.12 and 3.13 (one not found fails the run)
#   scripts/test-pythons.sh 3.10 3.13       the releases named
#   FAST_ONLY=1 scripts/test-pythons.sh     the fast tests only (about 4 minutes a release)
#
# A release is found as python<X.Y> on PATH or among pyenv's versions. CI runs the suite on
# the machine's Python (3.11, scripts/test.sh). torch 2.13.0 for another Python comes from
# PyPI: its CUDA build, about 3 GB with its nvidia packages (the CPU wheel on these machines'
# disk is for 3.11 only); it runs on the CPU here. Too long for CI (an environment and a
# suite per release). Record a run's summary in benchmarks/results/ci-history.md ("Python
# releases").
set -uo pipefail
cd "$(dirname "$0")/.."
releases=("$@")
[ ${#releases[@]} -eq 0 ] && releases=(3.10 3.12 3.13)
bash scripts/ensure-postgres.sh  # the search tests start a PostgreSQL server
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
export DET_LIGHTNING_REQUIRE_INTEROP=1  # the parity tests run, never skip
mypy_test=tests/unit/test_types.py::test_mypy_checks_every_module_and_finds_no_issues
summary=()
status=0
# python<X.Y> on PATH where it runs (a pyenv shim runs only for the versions pyenv has
# selected), else the newest of pyenv's X.Y.* installs.
find_python() {
  local candidate
  candidate=$(command -v "python$1" 2>/dev/null) && "$candidate" -c "" 2>/dev/null &&
    { echo "$candidate"; return; }
  for candidate in $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}/versions/$1".* 2>/dev/null | sort -rV); do
    [ -x "$candidate/bin/python" ] && { echo "$candidate/bin/python"; return; }
  done
}
for release in "${releases[@]}"; do
  python=$(find_python "$release")
  if [ -z "$python" ]; then
    summary+=("python $release: not found (python$release on PATH, or under pyenv's versions)")
    status=1
    continue
  fi
  venv=".venv-py$release"
  if ! PYTHON="$python" VENV="$venv" bash scripts/setup.sh test; then
    summary+=("python $release: the environment did not install")
    status=1
    continue
  fi
  version=$("$venv/bin/python" -c "import platform; print(platform.python_version())")
  line="python $version:"
  log=$(mktemp)
  "$venv/bin/python" -m pytest -q -p no:cacheprovider -n 2 \
    -m "not gpu and not slow and not distributed" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  line+=" fast $(tail -n 1 "$log" | sed 's/=//g; s/^ *//; s/ *$//')"
  [ "$rc" -eq 0 ] || status=1
  if [ -z "${FAST_ONLY:-}" ]; then
    # The mypy test checks the sources, not the interpreter: CI's run is the one that counts.
    "$venv/bin/python" -m pytest -q -p no:cacheprovider -n 2 --dist worksteal \
      -m "not gpu and (slow or distributed)" --deselect "$mypy_test" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    line+="; slow $(tail -n 1 "$log" | sed 's/=//g; s/^ *//; s/ *$//')"
    [ "$rc" -eq 0 ] || status=1
  fi
  rm -f "$log"
  summary+=("$line")
done
echo
echo "scripts/test-pythons.sh:"
printf '  %s\n' "${summary[@]}"
exit "$status"
