"""Import budgets: what a new interpreter imports is part of every command's start-up time.

Each check runs in a new interpreter (never the warm launcher's forks, which have imported
everything already). Budgets are counts and ratios, not seconds: the suite runs under load.
"""

import pathlib
import subprocess
import sys
from typing import List, Tuple

import pytest

from tests.integration.cli_support import PROJECT, output

pytestmark = [pytest.mark.slow, pytest.mark.new_interpreters]

# Imported by Lightning (torch._dynamo through lightning.fabric, matplotlib through torchmetrics'
# plotting): seconds of CPU that ``import det_lightning`` and ``--help`` must not pay.
HEAVY = ("lightning", "torch._dynamo", "matplotlib")
# ``det-lightning --help``: how many of our modules it imports (59 when this was written; 73
# once the CLI gained `check`, `--config` overrides and the launch checks, and `core` its local
# mode; 82 when the seams work split code already imported into smaller modules: the checkpoint
# store interface and its local kind, the checkpoint policy, the typed config sections; 86
# when files over 420 lines were split: `_buckets` out of `_remote`, `_to_device` out of
# `_data`, the experiment command, its texts and the launch checks out of `cli`, the runner's
# typed config sections), and their own import time (not counting what they import) against torch's in the same process
# (6-12 % when this was written, idle and under load): the share is the budget that counts time.
HELP_MODULES = 88
HELP_SHARE_OF_TORCH = 0.25


def _python(*args: str, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def test_import_det_lightning_imports_no_lightning_dynamo_or_matplotlib(
    isolated_run: pathlib.Path,
) -> None:
    code = (
        "import sys, det_lightning, det_lightning.pytorch, det_lightning.core\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    result = _python("-c", code, cwd=isolated_run)
    assert result.returncode == 0, output(result)
    assert result.stdout.strip() == "[]", output(result)


def _import_times(stderr: str) -> List[Tuple[str, int, int]]:
    """``-X importtime``'s (module, self us, cumulative us) lines."""
    rows = []
    for line in stderr.splitlines():
        if line.startswith("import time:") and "self [us]" not in line:
            own, cumulative, name = line[len("import time:") :].split("|")
            rows.append((name.strip(), int(own), int(cumulative)))
    return rows


# ``python -m det_lightning --help`` with the cyclic garbage collector off: a full collection
# (about 80 ms once torch is imported, proportional to torch's objects) lands in whichever module
# is importing when the allocation count crosses the threshold, and ``-X importtime`` counts it
# as that module's own time (it doubled the share, 7% to 17%, when the file splits moved it
# into ``_runner/_launch_checks.py``, a module whose own import takes under 1 ms).
HELP_WITHOUT_GC = (
    "import gc, runpy; gc.disable(); "
    "runpy.run_module('det_lightning', run_name='__main__', alter_sys=True)"
)


def test_help_stays_within_its_import_budget(isolated_run: pathlib.Path) -> None:
    result = _python("-X", "importtime", "-c", HELP_WITHOUT_GC, "--help", cwd=isolated_run)
    assert result.returncode == 0 and "usage: det-lightning" in result.stdout, output(result)
    rows = _import_times(result.stderr)
    names = {name for name, _, _ in rows}
    assert not names & set(HEAVY), sorted(names & set(HEAVY))
    ours = [(name, own) for name, own, _ in rows if name.split(".")[0] == "det_lightning"]
    assert len(ours) <= HELP_MODULES, f"{len(ours)} of our modules: {sorted(n for n, _ in ours)}"
    torch = next(cumulative for name, _, cumulative in rows if name == "torch")
    share = sum(own for _, own in ours) / torch
    slowest = sorted(ours, key=lambda row: -row[1])[:5]
    assert share <= HELP_SHARE_OF_TORCH, f"{share:.0%} of torch's import time; slowest: {slowest}"


WATCHED_RUN = """
import atexit, json, runpy, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(
    m for m in ("lightning", "torch._dynamo", "matplotlib") if m in sys.modules))))
sys.argv[0] = "det-lightning"
runpy.run_module("det_lightning", run_name="__main__", alter_sys=True)
"""


def test_a_search_workers_own_process_imports_no_lightning(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    """The worker only asks, leases and reports; its trials, forked from the template, train
    (``det_lightning/_runner/_template.py``). What its process imported, seen at its exit."""
    config = isolated_run / "one.yaml"
    grid = (PROJECT / "search.yaml").read_text()
    config.write_text(
        grid.replace("vals: [2, 8]", "vals: [2]")
        .replace("count: 2", "count: 1")
        .replace("batches: 8", "batches: 2")
        .replace("batches: 4", "batches: 2")
    )
    seen = isolated_run / "modules.json"
    result = _python(
        "-c", WATCHED_RUN, str(seen), "experiment", str(config), str(PROJECT), cwd=isolated_run
    )
    assert result.returncode == 0, output(result)
    assert "COMPLETED" in result.stdout, output(result)
    trials = list(checkpoint_dir.glob("*/trial-1"))  # <checkpoint dir>/<experiment id>/
    assert len(trials) == 1 and list(trials[0].iterdir()), "the trial checkpointed nothing"
    assert seen.read_text() == "[]", seen.read_text()
