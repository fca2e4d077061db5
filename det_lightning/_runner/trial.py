"""Running ONE trial of a local experiment, as Determined's harness runs it; the search
(``search._worker``, every searcher's) runs its trials here::

    model_def:Trial entrypoint   run_legacy_trial: init(), Trial(context), Trainer.fit(lengths
                                 from the config, or the search's); in this process
    command entrypoint           run_command_trial: ``det-lightning run`` in MODEL_DIR, in a
                                 child process (a search's: forked from its warm template)

Each trial writes its checkpoints to ``<checkpoint dir>/<experiment id>/trial-<n>/`` and its
TensorBoard files to ``<tensorboard dir>/<experiment id>/trial-<n>/`` (``plan.checkpoint_root``
and ``plan.tensorboard_root`` are the experiment's folders). A search's trial reports to the search through the callbacks
that the command starting it registers (``search._child.reporting_to_search``).
"""

import contextlib
import dataclasses
import logging
import os
import pathlib
import shlex
import subprocess
import sys
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from det_lightning import errors, pytorch
from det_lightning._env import (
    CHECKPOINT_DIR_ENV,
    ERROR_LOG_ENV,
    NODE_SLOTS_ENV,
    ONCE_PER_NODE_ENV,
    TENSORBOARD_DIR_ENV,
)
from det_lightning._import import import_from_path
from det_lightning._runner import _failure
from det_lightning._runner._template import TrialRequest
from det_lightning._runner.harness import load_trial_class
from det_lightning._runner.plan import Plan
from det_lightning.pytorch._store import CheckpointStore

logger = logging.getLogger("det_lightning")

# A search's way to run a trial's request in a process of its own (``search._jobs.run_trial``
# bound to its worker): the exit status, or None once ``lost`` is set (the lease was lost).
Launch = Callable[[TrialRequest, Optional[threading.Event]], Optional[int]]

LAUNCH_FLAGS = {
    "accelerator": "--accelerator",
    "devices": "--devices",
    "num_nodes": "--num-nodes",
    "strategy": "--strategy",
    "precision": "--precision",
    "deterministic": "--deterministic",  # a switch: no value
}


@dataclasses.dataclass
class TrialResult:
    """How one trial ended."""

    number: int
    hparams: Dict[str, Any]
    # "COMPLETED", "ERROR", "INVALID_HP" (it raised det.InvalidHP); a search's also "STOPPED_EARLY"
    # (ASHA ranked it out at ``rung``), "RUNNING" (another worker trains it) and "INTERRUPTED"
    # (a signal stopped it here)
    status: str
    best_metric: Optional[float] = None
    checkpoint: Optional[CheckpointStore] = None  # a directory, or a URL (s3://...)
    batches: Optional[int] = None
    rung: Optional[int] = None
    error: Optional[str] = None  # a failed command trial's error, its script's last line
    # a search's trial: (batches, time, metrics) of each validation (TrialRecord.validations)
    validations: Tuple[Tuple[int, float, Dict[str, float]], ...] = ()

    def state(self) -> str:
        """The status as the summary shows it.

        >>> TrialResult(3, {}, "STOPPED_EARLY", rung=1).state()
        'STOPPED EARLY at rung 1'
        """
        if self.status == "STOPPED_EARLY":
            return "STOPPED EARLY" + (f" at rung {self.rung}" if self.rung is not None else "")
        return self.status.replace("_", " ")


# Trials that ended as they should: ranked, and no reason for a failing exit status.
FINISHED = ("COMPLETED", "STOPPED_EARLY")
INVALID_HP = "INVALID_HP"  # the trial rejected its hyperparameters: it exited early, no error


@contextlib.contextmanager
def _working_dir(path: pathlib.Path) -> Iterator[None]:
    """Trials run in their model directory, as on a cluster (relative data paths work)."""
    previous = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


def run_legacy_trial(
    plan: Plan,
    number: int,
    hparams: Dict[str, Any],
    lengths: Optional[Dict[str, Any]] = None,
    *,
    latest_checkpoint: Optional[str] = None,
) -> TrialResult:
    """One trial of a ``model_def:Trial`` entrypoint, as Determined's harness runs it.

    Args:
        plan: the experiment's plan.
        number: the trial's number (its directories are ``trial-<number>``).
        hparams: the trial's hyperparameter values.
        lengths: ``fit()``'s lengths (default: from the config's ``searcher.max_length``).
        latest_checkpoint: resume from this (``"latest"``: the trial's newest checkpoint).
    """
    assert plan.trial_class is not None
    config = plan.config
    directory = plan.checkpoint_root / f"trial-{number}"
    with import_from_path(plan.model_dir), _working_dir(plan.model_dir):
        trial_class = load_trial_class(plan.trial_class)
        with pytorch.init(
            hparams=hparams,
            exp_conf=config.raw,
            aggregation_frequency=config.optimizations_config.aggregation_frequency,
            **plan.launch,
        ) as context:
            trial = trial_class(context)
            trainer = pytorch.Trainer(
                trial,
                context,
                checkpoint_dir=str(directory),
                tensorboard_dir=str(plan.tensorboard_root / f"trial-{number}"),
            )
            trainer.fit(
                **(lengths or config.lengths.fit_lengths(hparams)),
                checkpoint_policy=config.checkpoint_policy,
                step_zero_validation=config.perform_initial_validation,
                latest_checkpoint=latest_checkpoint,
            )
    metric, smaller = config.searcher_config.metric, config.searcher_config.smaller_is_better
    assert trainer.result is not None
    best = trainer.result.best_metric(metric, smaller)
    checkpoint = trainer.result.reported_checkpoint() or directory.latest()
    return TrialResult(
        number, hparams, "COMPLETED", best, checkpoint, batches=trainer.result.batches_trained
    )


def launch_flags(options: Dict[str, Any]) -> List[str]:
    """``{"devices": 2}`` -> ``["--devices", "2"]``, for ``det-lightning run``.

    >>> launch_flags({"precision": "bf16-mixed", "deterministic": True})
    ['--precision', 'bf16-mixed', '--deterministic']
    """
    flags: List[str] = []
    for name, value in options.items():
        if isinstance(value, bool):
            flags += [LAUNCH_FLAGS[name]] if value else []
        else:
            flags += [LAUNCH_FLAGS[name], str(value)]
    return flags


def node_slots(launch: Dict[str, Any]) -> Optional[int]:
    """A command trial's slots on this machine (``ClusterInfo.slot_ids``): None on several
    machines, or for a device count Lightning settles (``auto``).

    >>> node_slots({}), node_slots({"devices": 4}), node_slots({"devices": "0,2"})
    (1, 4, 2)
    >>> node_slots({"devices": 2, "num_nodes": 2}), node_slots({"devices": "auto"})
    (None, None)
    """
    if (launch.get("num_nodes") or 1) > 1:
        return None
    devices = launch.get("devices", 1)
    if isinstance(devices, int):
        return max(devices, 1)
    if isinstance(devices, (list, tuple)):
        return len(devices)
    if isinstance(devices, str) and "," in devices:
        return len([d for d in devices.split(",") if d.strip()])
    return None


def command_environment(plan: Plan, environ: Dict[str, str]) -> Dict[str, str]:
    """What a command trial's process learns of its machine, as in a Determined container:
    its slots (``ClusterInfo``), whether it runs once per node (``_relaunch``), and
    ``import determined`` in the Python processes it starts (``_stand_in``)."""
    from det_lightning._runner._stand_in import child_environment

    env = child_environment(environ)
    slots = node_slots(plan.launch)
    if slots is not None:
        env[NODE_SLOTS_ENV] = str(slots)
    if plan.once_per_node:
        env[ONCE_PER_NODE_ENV] = "1"
    return env


def run_command_trial(
    plan: Plan,
    number: int,
    hparams: Dict[str, Any],
    *,
    extra_env: Optional[Dict[str, str]] = None,
    lost: Optional[threading.Event] = None,
    launch: Optional[Launch] = None,
) -> TrialResult:
    """A command entrypoint: ``det-lightning run`` in a child process, in the model directory
    (``extra_env``: what a search tells the trial, see ``search``; ``lost``: set when another
    worker took the trial over, which ends the child at once; ``launch``: a search's way to
    start it, ``search._jobs.run_trial``, else a new interpreter).

    Raises:
        errors.TrialPreempted: the script stopped for a signal after checkpointing.
        LeaseLost: ``lost`` was set while the child ran.
    """
    assert plan.command is not None
    directory = plan.checkpoint_root / f"trial-{number}"
    argv = ["run", *launch_flags(plan.launch), *plan.command]
    env = dict(os.environ)
    env[CHECKPOINT_DIR_ENV] = str(directory)
    env.update(directory.environment())  # a bucket's: checkpoint_storage's endpoint and keys
    env[TENSORBOARD_DIR_ENV] = str(plan.tensorboard_root / f"trial-{number}")
    env.update(command_environment(plan, env))
    env.update(extra_env or {})
    error_log = _failure.error_log(plan.checkpoint_root, number)
    env[ERROR_LOG_ENV] = str(error_log)
    logged_before = error_log.stat().st_size if error_log.exists() else 0
    logger.info(f"trial {number}: det-lightning {shlex.join(argv)} in {plan.model_dir}")
    if launch is not None:
        code = launch(
            TrialRequest(
                "det_lightning._runner.cli:main", (argv,), str(plan.model_dir), env, [sys.argv[0]]
            ),
            lost,
        )
    else:
        child = subprocess.Popen(
            [sys.executable, "-m", "det_lightning", *argv], cwd=plan.model_dir, env=env
        )
        code = _wait_unless_lost(child, lost)
    if code is None:
        from det_lightning._runner._lease import taken_over  # imports optuna

        raise taken_over(number)
    if code == errors.TrialPreempted.EXIT_CODE:
        # The trial's process said how it stopped.
        raise errors.TrialPreempted(f"trial {number} was stopped by a signal.", reported=True)
    status = "COMPLETED" if code == 0 else "ERROR"
    error = None
    if code != 0:
        error = _failure.last_error(error_log, logged_before)
        logger.error(f"trial {number}: the command exited with status {code}")
    from det_lightning.pytorch._retention import best_checkpoint

    searcher = plan.config.searcher_config
    listed = directory.complete()  # one listing (of a bucket: one request)
    newest, batches = newest_with_steps(directory, listed)
    checkpoint = (
        best_checkpoint(directory, searcher.metric, searcher.smaller_is_better, listed) or newest
    )
    # batches: what it trained, its newest checkpoint's steps (validations may count epochs)
    return TrialResult(number, hparams, status, None, checkpoint, batches=batches, error=error)


def newest_with_steps(
    directory: CheckpointStore, listed: Optional[List[Any]] = None
) -> Tuple[Optional[CheckpointStore], Optional[int]]:
    """A trial's newest checkpoint and its ``steps_completed``: a ``Trainer``'s (from
    ``listed``, ``directory.complete()``: one listing, given when the caller has it), else one
    a Core API loop stored (``store_path``: its own files and ``metadata.json``, which
    ``complete`` never lists)."""
    from det_lightning.pytorch import _checkpoint as ckpt

    listed = directory.complete() if listed is None else listed
    name = ckpt.newest(listed)
    metadata: Dict[str, Any] = {}
    if name is not None:
        metadata = next(e.metadata for e in listed if e.name == name)
    else:
        from det_lightning.core._checkpoint import newest_stored

        # Never a Trainer's checkpoint that lacks files (``complete`` left it out).
        stored = newest_stored(
            directory, [e for e in directory.published() if ckpt.WRITER_KEY not in e.metadata]
        )
        if stored is not None:
            name, metadata = stored.name, stored.metadata
    steps = metadata.get("steps_completed")
    steps = steps if isinstance(steps, int) and not isinstance(steps, bool) else None
    return (None if name is None else directory / name), steps


def newest_checkpoint(directory: CheckpointStore) -> Optional[CheckpointStore]:
    """A trial's newest checkpoint: a ``Trainer``'s (``latest``), else one a Core API loop
    stored (``core_context.checkpoint.store_path``)."""
    return newest_with_steps(directory)[0]


def _wait_unless_lost(
    child: "subprocess.Popen[bytes]", lost: Optional[threading.Event]
) -> Optional[int]:
    """The child's exit status; None, with the child killed, once ``lost`` is set."""
    while True:
        try:
            return child.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            if lost is not None and lost.is_set():
                child.kill()
                child.wait()
                return None
        except BaseException:  # Ctrl+C reached the child too; wait for it to checkpoint
            child.wait()
            raise


def write_trial_hparams(plan: Plan, number: int, hparams: Dict[str, Any]) -> None:
    """The chief writes the trial's hyperparameters for TensorBoard's HParams view into the
    trial's run directory, once (``_tensorboard``)."""
    if os.environ.get("RANK", "0") != "0":
        return
    from det_lightning._runner._tensorboard import write_hparams

    write_hparams(
        plan.tensorboard_root / f"trial-{number}",
        hparams,
        plan.config.searcher_config.metric,
        f"trial-{number}",
    )


__all__ = [
    "FINISHED",
    "INVALID_HP",
    "TrialResult",
    "run_command_trial",
    "run_legacy_trial",
    "write_trial_hparams",
]
