#!/usr/bin/env bash
# Runs the tests that pin det_lightning's use of Lightning internals on one Lightning release of
# each row of the version table (adapters/lightning/versions.py, TABLE), each release in its own
# environment (.venv-L<release>, built by scripts/setup.sh):
#
#   - tests/integration/test_hooks.py: the trace tests, the lean loop and dispatch against
#     Lightning's own (every hook call, counter and logged metric equal)
#   - tests/integration/test_lightning_contract.py: the internals are there, and the installed
#     release's functions are the ones its row names (source fingerprints)
#   - tests/integration/test_lean_step.py: the lean step (backward, optimizer step without
#     Lightning's closure, the callbacks it dispatches) against Lightning's own
#   - tests/unit/test_lightning_versions.py: the table itself
#
#   scripts/test-lightning-releases.sh              the last release of every row
#   scripts/test-lightning-releases.sh 2.5.3 2.6.1  the releases named
#
# Too long for CI (an environment per release); CI runs the suite on the lowest and the highest
# release (scripts/test.sh). Record a run's summary in benchmarks/results/ci-history.md
# ("Lightning releases").
set -uo pipefail
cd "$(dirname "$0")/.."
releases=("$@")
if [ ${#releases[@]} -eq 0 ]; then
  # The table's rows, read without importing Lightning: Shape("first", "last", ...).
  mapfile -t releases < <(python3 - <<'PY'
import ast
tree = ast.parse(open("adapters/lightning/versions.py").read())
for node in ast.walk(tree):
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Shape" and node.args:
        print(node.args[1].value)
PY
)
fi
tests=(tests/integration/test_hooks.py tests/integration/test_lightning_contract.py
       tests/integration/test_lean_step.py tests/unit/test_lightning_versions.py)
summary=()
status=0
for release in "${releases[@]}"; do
  case "$release" in
    2.6.2|2.6.3) echo "lightning $release is a withdrawn, malicious release: not installed" >&2
                 exit 2 ;;
  esac
  venv=".venv-L$release"
  echo "=== lightning $release ($venv)"
  if ! VENV="$venv" LIGHTNING_SPEC="lightning==$release" bash scripts/setup.sh release-tests; then
    summary+=("$release: install failed"); status=1; continue
  fi
  installed=$("$venv/bin/python" -c "import lightning; print(lightning.__version__)")
  torch=$("$venv/bin/python" -c "import torch; print(torch.__version__)")
  if [ "$installed" != "$release" ]; then
    summary+=("$release: installed $installed instead"); status=1; continue
  fi
  if OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" "$venv/bin/python" -m pytest -q -p no:cacheprovider \
      "${tests[@]}"; then
    summary+=("$release: passed (torch $torch)")
  else
    summary+=("$release: FAILED"); status=1
  fi
done
echo "=== summary ($(date -u +%Y-%m-%d), python $(python3 -c 'import platform; print(platform.python_version())'))"
printf '%s\n' "${summary[@]}"
exit $status
