"""The environment variables several modules share: the runner sets them, the trial reads them.

A leaf module: it imports nothing of det_lightning, so any module can name a variable without
importing the module that sets or reads it (which made import cycles).
"""

import os
import pathlib
import time

# Where checkpoints go when neither fit() nor the config says (Trainer, the runner, export).
CHECKPOINT_DIR_ENV = "DET_LIGHTNING_CHECKPOINT_DIR"
# Where TensorBoard files go when Trainer(tensorboard_dir=...) is not given.
TENSORBOARD_DIR_ENV = "DET_LIGHTNING_TENSORBOARD_DIR"
# A resume source for fit() when latest_checkpoint is None ("latest", a path or a UUID).
LATEST_CHECKPOINT_ENV = "DET_LIGHTNING_LATEST_CHECKPOINT"
# A search's trial: the storage, study, trial and bracket it reports to (JSON).
SEARCH_ENV = "DET_LIGHTNING_SEARCH"
# A search's worker process: its index; "summary": the parent that prints the summary.
SEARCH_WORKER_ENV = "DET_LIGHTNING_SEARCH_WORKER"
# A search's command trial: Determined's cluster info (hyperparameters, checkpoint; JSON).
TRIAL_INFO_ENV = "DET_LIGHTNING_TRIAL_INFO"
# "1": every fit() runs Determined's test mode (one batch, a validation, a checkpoint), as
# fit(test_mode=True); `det-lightning check` smoke-runs a project's script with it.
TEST_MODE_ENV = "DET_LIGHTNING_TEST_MODE"
# How a trial of `det-lightning experiment` stopped by a signal continues (printed after it).
RESUME_ADVICE_ENV = "DET_LIGHTNING_RESUME_ADVICE"
# A search's command trial: the file its process appends the traceback it ends with to (the
# trial's error.log), so the log the search points at holds the script's error.
ERROR_LOG_ENV = "DET_LIGHTNING_ERROR_LOG"
# A trial of `det-lightning experiment`: its experiment id and trial number (JSON), recorded in
# each checkpoint's metadata so that `latest` never resumes another experiment's checkpoint.
RUN_IDENTITY_ENV = "DET_LIGHTNING_RUN_IDENTITY"
# "1": a checkpoint named explicitly whose trial class or hyperparameters differ from the run's
# is a warm start (its weights, from batch 0) instead of an error.
ALLOW_WARM_START_ENV = "DET_LIGHTNING_ALLOW_WARM_START"
# A command trial's slots on this machine: ClusterInfo.slot_ids, container_slot_counts.
NODE_SLOTS_ENV = "DET_LIGHTNING_NODE_SLOTS"
# "1": a command trial whose entrypoint has no launcher runs once per node, as Determined runs
# it; `run` then leaves starting a process per slot to the first pytorch.init()/core.init().
ONCE_PER_NODE_ENV = "DET_LIGHTNING_ONCE_PER_NODE"
# Set by `run` for that first init(): the process allowed to start them, and how (JSON).
RELAUNCH_ENV = "DET_LIGHTNING_RELAUNCH"
# The port of the chief's rendezvous for DistributedContext(chief_ip=...) in such a trial.
CHIEF_PORT_ENV = "DET_LIGHTNING_CHIEF_PORT"


def default_tensorboard_dir() -> pathlib.Path:
    """``$DET_LIGHTNING_TENSORBOARD_DIR``, else a new ``./tensorboard/<time>`` run directory
    (``pytorch.Trainer`` and ``core.init()`` without a TensorBoard directory)."""
    configured = os.environ.get(TENSORBOARD_DIR_ENV)
    if configured:
        return pathlib.Path(configured)
    return pathlib.Path.cwd() / "tensorboard" / time.strftime("%Y%m%d-%H%M%S")
