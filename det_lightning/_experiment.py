"""Running a Determined experiment config locally: ``det-lightning experiment CONFIG MODEL_DIR``.

What Determined's master and harness do for an experiment::

    config = load_config(CONFIG)                  # unknown keys fail; cluster-only keys reported
    plan = plan_experiment(config, MODEL_DIR)     # _plan.py: every check that can fail before
                                                  #   training
    grid, random, adaptive_asha: _search.run_search(plan)   # on Optuna, trials shared through
                                                  #   its storage; each runs one of these, in
                                                  #   a process of its own (_search._template)
    single: for the one trial:
        'model_def:Trial' entrypoint: run_legacy_trial    # the harness: init(), Trial(context),
                                                          #   Trainer.fit(periods from the config)
        command entrypoint ('python3 train.py'): run_command_trial   # `det-lightning run` in
                                                          #   MODEL_DIR, in a child process
    print(format_summary(results))                # trial, hyperparameters, best metric, checkpoint

Each trial writes its checkpoints to ``<checkpoint dir>/trial-<n>/`` and its TensorBoard files to
``<tensorboard dir>/trial-<n>/``. A failing trial is reported and the search goes on, as on a
cluster; configuration errors stop everything before the first trial.
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
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

from det_lightning import errors, pytorch
from det_lightning._env import (
    CHECKPOINT_DIR_ENV,
    LATEST_CHECKPOINT_ENV,
    RESUME_ADVICE_ENV,
    SEARCH_WORKER_ENV,
    TENSORBOARD_DIR_ENV,
)
from det_lightning._harness import load_trial_class, training_lengths
from det_lightning._import import import_from_path
from det_lightning._plan import Plan, UsageError, plan_experiment
from det_lightning.pytorch import _checkpoint as ckpt
from det_lightning.pytorch._remote import CheckpointRoot, RemoteRoot

logger = logging.getLogger("det_lightning")

LAUNCH_FLAGS = {
    "accelerator": "--accelerator",
    "devices": "--devices",
    "num_nodes": "--num-nodes",
    "strategy": "--strategy",
    "precision": "--precision",
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
    checkpoint: Optional[CheckpointRoot] = None  # a path, or a URL (s3://...)
    batches: Optional[int] = None
    rung: Optional[int] = None

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


# ----- running one trial ---------------------------------------------------------------------


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
    extra_callbacks: Optional[Callable[[Any], Dict[str, Any]]] = None,
    latest_checkpoint: Optional[str] = None,
) -> TrialResult:
    """One trial of a ``model_def:Trial`` entrypoint, as Determined's harness runs it.

    Args:
        plan: the experiment's plan.
        number: the trial's number (its directories are ``trial-<number>``).
        hparams: the trial's hyperparameter values.
        lengths: ``fit()``'s lengths (default: from the config's ``searcher.max_length``).
        extra_callbacks: called with the context, returns ``PyTorchCallback``s to run beside
            the trial's own (a search's reporter).
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
            aggregation_frequency=config.aggregation_frequency(),
            **plan.launch,
        ) as context:
            trial = trial_class(context)
            if extra_callbacks is not None:
                _add_callbacks(trial, extra_callbacks(context))
            trainer = pytorch.Trainer(
                trial,
                context,
                checkpoint_dir=str(directory),
                tensorboard_dir=str(plan.tensorboard_root / f"trial-{number}"),
            )
            trainer.fit(
                **(lengths or training_lengths(config, hparams)),
                checkpoint_policy=config.raw["checkpoint_policy"],
                step_zero_validation=config.raw["perform_initial_validation"],
                latest_checkpoint=latest_checkpoint,
            )
    metric, smaller = config.searcher["metric"], config.searcher["smaller_is_better"]
    assert trainer.result is not None
    best = trainer.result.best_metric(metric, smaller)
    checkpoint = trainer.result.reported_checkpoint() or ckpt.latest_checkpoint(directory)
    return TrialResult(number, hparams, "COMPLETED", best, checkpoint,
                       batches=trainer.result.batches_trained)


def _add_callbacks(trial: Any, extra: Dict[str, Any]) -> None:
    """Runs ``extra`` beside the trial's own callbacks, leaving its class untouched (the
    checkpoint records the trial's class, which must stay the user's)."""
    own = trial.build_callbacks

    def build_callbacks() -> Dict[str, Any]:
        return {**own(), **extra}

    trial.build_callbacks = build_callbacks


def launch_flags(options: Dict[str, Any]) -> List[str]:
    """``{"devices": 2}`` -> ``["--devices", "2"]``, for ``det-lightning run``."""
    flags: List[str] = []
    for name, value in options.items():
        flags += [LAUNCH_FLAGS[name], str(value)]
    return flags


def run_command_trial(plan: Plan, number: int, hparams: Dict[str, Any],
                      extra_env: Optional[Dict[str, str]] = None,
                      lost: Optional[threading.Event] = None,
                      launch: Optional[Callable[..., Optional[int]]] = None) -> TrialResult:
    """A command entrypoint: ``det-lightning run`` in a child process, in the model directory
    (``extra_env``: what a search tells the trial, see ``_search``; ``lost``: set when another
    worker took the trial over, which ends the child at once; ``launch``: a search's way to
    start it, ``_search._jobs.run_trial``, else a new interpreter).

    Raises:
        errors.TrialPreempted: the script stopped for a signal after checkpointing.
        LeaseLost: ``lost`` was set while the child ran.
    """
    assert plan.command is not None
    directory = plan.checkpoint_root / f"trial-{number}"
    argv = ["run", *launch_flags(plan.launch), *plan.command]
    env = dict(os.environ)
    env[CHECKPOINT_DIR_ENV] = str(directory)
    if isinstance(directory, RemoteRoot):  # checkpoint_storage's endpoint and keys
        env.update(directory.environment())
    env[TENSORBOARD_DIR_ENV] = str(plan.tensorboard_root / f"trial-{number}")
    env.update(extra_env or {})
    logger.info(f"trial {number}: det-lightning {shlex.join(argv)} in {plan.model_dir}")
    if launch is not None:
        from det_lightning._search._template import TrialRequest

        code = launch(TrialRequest("det_lightning._search._jobs:command_job", (argv,),
                                   str(plan.model_dir), env, [sys.argv[0]]), lost)
    else:
        child = subprocess.Popen([sys.executable, "-m", "det_lightning", *argv],
                                 cwd=plan.model_dir, env=env)
        code = _wait_unless_lost(child, lost)
    if code is None:
        from det_lightning._search._lease import LeaseLost

        raise LeaseLost(f"trial {number} was taken over by another worker")
    if code == errors.TrialPreempted.EXIT_CODE:
        raise errors.TrialPreempted(f"trial {number} was stopped by a signal.")
    status = "COMPLETED" if code == 0 else "ERROR"
    if code != 0:
        logger.error(f"trial {number}: the command exited with status {code}")
    return TrialResult(number, hparams, status, None, ckpt.latest_checkpoint(directory))


def _wait_unless_lost(child: "subprocess.Popen[bytes]",
                      lost: Optional[threading.Event]) -> Optional[int]:
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


# ----- the whole experiment ------------------------------------------------------------------


def _flat(hparams: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in hparams.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _show(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def best_trial(results: Sequence[TrialResult], smaller_is_better: bool) -> Optional[TrialResult]:
    """The completed trial with the best searcher metric, if any reported one."""
    scored = [r for r in results if r.status in FINISHED and r.best_metric is not None]
    if not scored:
        return None
    sign = 1.0 if smaller_is_better else -1.0
    return min(scored, key=lambda r: sign * float(r.best_metric or 0.0))


def format_summary(results: Sequence[TrialResult], metric: str, smaller_is_better: bool) -> str:
    """The table printed after an experiment: one row per trial, then the best trial.

    >>> rows = [TrialResult(1, {"lr": 0.1}, "COMPLETED", 0.5, None, batches=8),
    ...         TrialResult(2, {"lr": 0.01}, "COMPLETED", 0.25, None),
    ...         TrialResult(3, {"lr": 1.0}, "STOPPED_EARLY", 0.9, None, batches=2, rung=0)]
    >>> print(format_summary(rows, "loss", True))  # doctest: +NORMALIZE_WHITESPACE
    trial  status                   hyperparameters  batches  best loss  checkpoint
    1      COMPLETED                lr=0.1           8        0.5        -
    2      COMPLETED                lr=0.01          -        0.25       -
    3      STOPPED EARLY at rung 0  lr=1             2        0.9        -
    best: trial 2 (loss=0.25), checkpoint -
    """
    header = ["trial", "status", "hyperparameters", "batches", f"best {metric}", "checkpoint"]
    rows = [header] + [
        [
            str(r.number),
            r.state(),
            ", ".join(f"{k}={_show(v)}" for k, v in _flat(r.hparams).items()) or "-",
            str(r.batches) if r.batches is not None else "-",
            _show(r.best_metric) if r.best_metric is not None else "-",
            str(r.checkpoint) if r.checkpoint else "-",
        ]
        for r in results
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    best = best_trial(results, smaller_is_better)
    if best is not None:
        lines.append(
            f"best: trial {best.number} ({metric}={_show(best.best_metric)}), checkpoint "
            f"{best.checkpoint or '-'}"
        )
    return "\n".join(lines)


def write_trial_hparams(plan: Plan, number: int, hparams: Dict[str, Any]) -> None:
    """The chief writes the trial's hyperparameters for TensorBoard's HParams view into the
    trial's run directory, once (``_search._tensorboard``)."""
    if os.environ.get("RANK", "0") != "0":
        return
    from det_lightning._search._tensorboard import write_hparams

    write_hparams(plan.tensorboard_root / f"trial-{number}", hparams,
                  plan.config.searcher["metric"], f"trial-{number}")


def run_trials(plan: Plan) -> List[TrialResult]:
    """Runs the plan's trials in order; a failing trial is logged and the search goes on."""
    results = []
    total = len(plan.trials)
    for number, hparams in enumerate(plan.trials, start=1):
        logger.info(f"trial {number} of {total}: hyperparameters {hparams}")
        write_trial_hparams(plan, number, hparams)
        try:
            if plan.trial_class is not None:
                results.append(run_legacy_trial(plan, number, hparams))
            else:
                results.append(run_command_trial(plan, number, hparams))
        except errors.InvalidConfigException:
            raise  # the entrypoint cannot be loaded: every trial would fail alike
        except errors.InvalidHP as e:  # Determined's single searcher: an early exit, no error
            logger.info(f"trial {number}: InvalidHP ({e.msg}); the trial exited early")
            results.append(TrialResult(number, hparams, INVALID_HP))
        except Exception:
            logger.exception(f"trial {number} failed")
            results.append(TrialResult(number, hparams, "ERROR"))
    return results


def _retain_experiment_best(plan: Plan, results: Sequence[TrialResult]) -> None:
    """Determined's end-of-experiment garbage collection: each trial keeps its
    ``save_trial_best``/``save_trial_latest`` checkpoints, and the ``save_experiment_best`` best
    of all trials are kept wherever they are."""
    from det_lightning.adapters.retention import retain_experiment_best

    trial_dirs = [plan.checkpoint_root / f"trial-{r.number}" for r in results]
    deleted = retain_experiment_best(trial_dirs, plan.config.raw)
    if deleted:
        logger.info(f"checkpoint_storage retention deleted {len(deleted)} checkpoint(s)")


def run_experiment(plan: Plan) -> int:
    """Runs every trial of ``plan`` and prints the summary.

    Returns:
        0 unless a trial failed (trials other workers of a search still run do not count).
    """
    config = plan.config
    if plan.command is not None and plan.search is None:
        logger.info(
            "A command entrypoint chooses its own hyperparameters and training length locally "
            "(det.get_cluster_info() is None); the config's hyperparameters and "
            "searcher.max_length are not passed to it."
        )
    count = plan.search.max_trials if plan.search is not None else len(plan.trials)
    logger.info(
        f"experiment {config.raw.get('name') or ''!r}: {count} trial(s), searcher "
        f"{config.searcher['name']}; checkpoints under {plan.checkpoint_root}"
    )
    interrupted_by = None
    if plan.search is not None:
        from det_lightning._search import _runner

        if os.environ.get(SEARCH_WORKER_ENV) == "summary":  # the workers are done
            results = _runner.search_summary(plan, plan.storage)
        else:
            outcome = _runner.run_search(plan, plan.storage)
            results, interrupted_by = outcome.trials, outcome.interrupted_by
    else:
        os.environ.setdefault(RESUME_ADVICE_ENV, SINGLE_ADVICE)
        results = run_trials(plan)
    interrupted = interrupted_by is not None or any(r.status == "INTERRUPTED" for r in results)
    chief = os.environ.get("RANK", "0") == "0"
    if chief and config.raw.get("checkpoint_storage") and not interrupted:
        _retain_experiment_best(plan, results)
    worker = os.environ.get(SEARCH_WORKER_ENV) not in (None, "summary")
    if chief and not worker:  # one report: the chief's, the parent's
        _report(results, config.searcher, interrupted)
    if interrupted:
        return errors.TrialPreempted.EXIT_CODE
    # RUNNING: a trial another worker of the same search is training.
    return 1 if any(r.status not in (*FINISHED, "RUNNING", INVALID_HP) for r in results) else 0


SINGLE_ADVICE = ("To continue from it, rerun the same command with "
                 f"{LATEST_CHECKPOINT_ENV}=latest.")
INTERRUPTED_NOTE = ("det-lightning experiment: the search was interrupted by a signal. Rerun "
                    "the same command to continue it: an interrupted trial resumes from its "
                    f"latest checkpoint. Exiting with status {errors.TrialPreempted.EXIT_CODE}.")


def _report(results: Sequence[TrialResult], searcher: Dict[str, Any], interrupted: bool) -> None:
    """The summary table on stdout; after a signal, how to continue on stderr."""
    print(format_summary(results, searcher["metric"], searcher["smaller_is_better"]), flush=True)
    running = sum(1 for r in results if r.status == "RUNNING")
    if running:
        print(f"{running} trial(s) still running in other workers of this search.", flush=True)
    if interrupted:
        print(INTERRUPTED_NOTE, file=sys.stderr, flush=True)


__all__ = [
    "Plan",
    "TrialResult",
    "UsageError",
    "format_summary",
    "plan_experiment",
    "run_experiment",
]
