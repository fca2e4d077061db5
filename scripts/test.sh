#!/usr/bin/env bash
# Installs everything the tests need into .venv, then runs the whole suite (all but `gpu`).
#
#   scripts/test.sh                  everything: the linter, the fast tests on both cores, then
#                                    the slow and distributed ones (they start processes of their
#                                    own), two at a time, and beside them the built wheel's smoke
#                                    test, the docs site and the Lightning-dependent and parity
#                                    tests on Lightning 2.4.0 (.venv-low, installed there);
#                                    each phase says when it starts ("scripts/test.sh: ... (N min
#                                    N s in)")
#   scripts/test.sh tests/unit -x    just what you name, in one run
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
bash scripts/ensure-postgres.sh  # the search tests start a PostgreSQL server
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
export DET_LIGHTNING_REQUIRE_INTEROP=1  # the parity tests run, never skip (tests/compat/conftest.py)
pytest=(.venv/bin/python -m pytest -q)
if [ $# -gt 0 ]; then
  exec "${pytest[@]}" -m "not gpu" "$@"
fi
.venv/bin/python -m ruff check .  # the linter (pyproject.toml's [tool.ruff])
.venv/bin/python -m ruff format --check .  # the formatter: `ruff format .` fixes what it lists
phase() { echo "scripts/test.sh: $1 ($((SECONDS / 60)) min $((SECONDS % 60)) s in)"; }
phase "the fast tests, on both cores"
"${pytest[@]}" -m "not gpu and not slow and not distributed" -n 2
# The slow and distributed tests mostly wait on processes of their own (imports, servers, leases
# expiring), two at a time; each waits for events, not durations (docs/contributing.md, "Under
# load"). They leave about half a core idle, which the checks below use meanwhile, one after the
# other, their output held until the slow tests end:
#   the built wheel in a fresh venv (version, --help, the example);
#   the docs site (docs/), warnings as errors (its code blocks run in
#     tests/integration/test_docs_pages.py);
#   mypy over every module (tests/unit/test_types.py's one slow test: 70-90 s of one core,
#     which the slow tests' two workers then no longer wait for);
#   the lowest Lightning pyproject.toml allows, in its own environment (.venv-low, installed
#     here: scripts/setup.sh release-tests): what depends on the
#     Lightning release (the lean loop's trace against Lightning's own, the internals' contract,
#     the version table, Lightning interop) and the bit-for-bit parity with the real Determined.
#     Every release's row: scripts/test-lightning-releases.sh (too long for CI; see
#     docs/contributing.md).
side_log=$(mktemp)
MYPY_TEST=tests/unit/test_types.py::test_mypy_checks_every_module_and_finds_no_issues
set -m
(
  set -e
  bash scripts/wheel-smoke.sh
  .venv/bin/python -m sphinx -W --keep-going -n -q -E -b html docs docs/_build/html
  echo "docs: built (docs/_build/html)"
  .venv/bin/python -m pytest -q "$MYPY_TEST"
  VENV=.venv-low LIGHTNING_SPEC="lightning==2.4.0" bash scripts/setup.sh release-tests
  .venv-low/bin/python -m pytest -q -m "not gpu and not slow and not distributed" \
    tests/integration/test_hooks.py tests/integration/test_lightning_contract.py \
    tests/integration/test_lean_step.py tests/unit/test_lightning_versions.py \
    tests/integration/test_lightning_interop.py tests/compat/test_parity.py \
    tests/compat/test_fixture_parity.py tests/compat/test_hook_rng_parity.py
) >"$side_log" 2>&1 &
side_pid=$!
set +m
# Its own process group (set -m): a failure here ends it all (pip, pytest), not only its shell.
trap 'kill -- -"$side_pid" 2>/dev/null || true; rm -f "$side_log"' EXIT
phase "the slow and distributed tests, two at a time; beside them the wheel, the docs, mypy, Lightning 2.4.0's install and tests"
slow=0
"${pytest[@]}" -m "not gpu and (slow or distributed)" -n 2 --dist worksteal --durations=15 \
  --deselect "$MYPY_TEST" || slow=$?
side=0
wait "$side_pid" || side=$?
phase "the wheel, the docs, mypy and Lightning 2.4.0 (run beside the slow tests)"
cat "$side_log"
[ "$side" -eq 0 ] || echo "scripts/test.sh: the wheel smoke test, the docs build, mypy, or Lightning 2.4.0's install or tests failed (above)" >&2
[ "$slow" -eq 0 ] || echo "scripts/test.sh: the slow and distributed tests failed (further above)" >&2
if [ "$slow" -ne 0 ] || [ "$side" -ne 0 ]; then
  exit 1
fi
phase "all passed"
