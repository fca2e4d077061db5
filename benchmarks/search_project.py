"""The model directory ``benchmarks/search.py`` runs its searches on: the test fixture project's
``RegressionTrial``, plus a trial class and a command script that record when each trial's
process trains its first batch and when its trial ends, and can hold a trial (for the takeover
measurement).

Each record is one JSON line ``{"event", "time", "pid", "batch"}`` appended to
``$BENCH_TIMES``: ``first_batch`` (the first batch this process trains, ``batch`` its index:
more than 0 for a resumed trial) and ``end`` (``on_trial_shutdown``, fit()'s last hook).
"""

import pathlib
import shutil

HERE = pathlib.Path(__file__).resolve().parent
FIXTURE = HERE.parent / "tests" / "fixtures" / "determined_project"

TIMED_TRIAL = """
import json
import os
import pathlib
import time

from determined import pytorch

from model_def import RegressionTrial

_first = []


def record(event, batch=None):
    path = os.environ.get("BENCH_TIMES")
    if path:
        line = {"event": event, "time": time.time(), "pid": os.getpid(), "batch": batch}
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\\n")


class EndTime(pytorch.PyTorchCallback):
    def on_trial_shutdown(self):
        record("end")


class TimedTrial(RegressionTrial):
    def build_callbacks(self):
        return {**super().build_callbacks(), "bench_end_time": EndTime()}

    def train_batch(self, batch, epoch_idx, batch_idx):
        if not _first:
            _first.append(batch_idx)
            record("first_batch", batch_idx)
        hold = os.environ.get("BENCH_HOLD_MARKER")
        if hold and batch_idx == 2 and not pathlib.Path(hold).exists():
            pathlib.Path(hold).write_text(str(os.getpid()))
            while True:  # checkpointed at 2 batches: the benchmark kills this worker now
                time.sleep(0.05)
        return super().train_batch(batch, epoch_idx, batch_idx)
"""

TIMED_SCRIPT = """
import determined as det
from determined import pytorch

import timed_def

if __name__ == "__main__":
    info = det.get_cluster_info()
    with pytorch.init(hparams=info.trial.hparams) as context:
        trial = timed_def.TimedTrial(context)
        trainer = pytorch.Trainer(trial, context)
        trainer.fit(validation_period=pytorch.Batch(4), latest_checkpoint=info.latest_checkpoint)
"""


def make_project(directory: pathlib.Path) -> pathlib.Path:
    """Writes the benchmark's model directory into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("model_def.py", "data.py"):
        shutil.copy(FIXTURE / name, directory / name)
    (directory / "timed_def.py").write_text(TIMED_TRIAL)
    (directory / "timed_train.py").write_text(TIMED_SCRIPT)
    return directory


def config(
    searcher: str,
    trials: int,
    max_time: int,
    entrypoint: str = "timed_def:TimedTrial",
    *,
    checkpoint_every: int = 0,
) -> str:
    """An experiment config over the project: ``asha`` (adaptive_asha) or ``random``."""
    search = (
        f"  name: adaptive_asha\n  max_trials: {trials}\n  time_metric: batches\n"
        f"  max_time: {max_time}\n  divisor: 2\n  mode: aggressive\n  max_rungs: 4\n"
        if searcher == "asha"
        else f"  name: random\n  max_trials: {trials}\n  max_length:\n    batches: {max_time}\n"
    )
    checkpoints = (
        f"min_checkpoint_period:\n  batches: {checkpoint_every}\n" if checkpoint_every else ""
    )
    return (
        f"name: bench\nentrypoint: {entrypoint}\nhyperparameters:\n"
        "  global_batch_size: 8\n  hidden_size: 8\n"
        "  learning_rate: {type: log, minval: -3, maxval: -0.5, base: 10}\n"
        "searcher:\n  metric: validation_loss\n"
        + search
        + f"min_validation_period:\n  batches: {max_time}\n{checkpoints}"
        "reproducibility:\n  experiment_seed: 3\n"
    )
