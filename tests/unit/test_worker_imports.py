"""A search worker leaves Lightning to its trials' processes.

A worker that imported Lightning when a trial ended held ~130 MB more (245-260 MB per worker
with its trial, against 128-131 MB) and spent seconds of CPU importing it: in the 16-worker
scale drill, run side by side with the code before, killed workers' trials were taken over
after 16-17 s instead of 7.5-8.8 s. The cause was retention's best checkpoint, read from
``det_lightning.adapters`` (the bridge, which imports Lightning) after every command trial.
"""

import json
import pathlib
import subprocess
import sys

SCRIPT = """
import json, sys
from det_lightning import core
from det_lightning._runner.config import load_config
from det_lightning._runner.plan import plan_experiment
from det_lightning._runner.search._results import _unfinished_checkpoint
from det_lightning._runner.trial import run_command_trial

config, project, checkpoints = sys.argv[1:]
plan = plan_experiment(load_config(config), project, None, checkpoints)
trial_dir = plan.checkpoint_root / "trial-1"
with core.init(checkpoint_storage=str(trial_dir)) as context:  # a Core API loop's checkpoints
    for steps in (30, 20):
        with context.checkpoint.store_path({"steps_completed": steps}) as (path, _):
            (path / "state.txt").write_text(str(steps))
# What a worker does when its trial's process has ended (launched here by the worker's own
# hook, as the search's template launches it): read the trial's checkpoints.
ended = run_command_trial(plan, 1, {}, launch=lambda request, lost: 0)
unfinished = _unfinished_checkpoint(plan, 1, "INTERRUPTED")
print(json.dumps({
    "lightning": sorted(m for m in sys.modules if m.split(".")[0] in ("lightning", "adapters")),
    "dynamo": "torch._dynamo" in sys.modules,
    "ended": [ended.status, str(ended.checkpoint), ended.batches],
    "unfinished": [str(unfinished[0]), unfinished[1]],
}))
"""


def test_a_worker_reads_an_ended_trials_checkpoints_without_importing_lightning(
    tmp_path: pathlib.Path,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print('the trial')\n")
    config = tmp_path / "exp.yaml"
    config.write_text(
        "name: footprint\n"
        "entrypoint: python3 train.py\n"
        "searcher: {name: single, metric: loss, max_length: {batches: 30}}\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(config), str(project), str(tmp_path / "ckpt")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["lightning"] == [] and not found["dynamo"], found
    # Both readings name the Core API loop's newest checkpoint (most steps) and its steps.
    status, checkpoint, batches = found["ended"]
    assert status == "COMPLETED" and batches == 30, found
    assert found["unfinished"] == [checkpoint, 30], found
    assert (pathlib.Path(checkpoint) / "state.txt").read_text() == "30"
