"""Running a Determined experiment config locally: ``det-lightning experiment CONFIG MODEL_DIR``.

What Determined's master and harness do for an experiment::

    config = load_config(CONFIG)                  # unknown keys fail; cluster-only keys reported
    plan = plan_experiment(config, MODEL_DIR)     # plan.py: every check that can fail before
                                                  #   training
    write_experiment_record(plan)                 # <checkpoint dir>/<id>/experiment.json, once
    search.run_search(plan)                       # every searcher, single a search of one
                                                  #   trial: on Optuna, trials shared through
                                                  #   its storage, each trial in a process of
                                                  #   its own (_template), as the harness runs
                                                  #   it (trial.py): 'model_def:Trial' or a
                                                  #   command ('python3 train.py')
    print(format_summary(results))                # summary.py: trials, best metric, checkpoints

Each trial writes its checkpoints to ``<checkpoint dir>/<experiment id>/trial-<n>/`` and its
TensorBoard files to ``<tensorboard dir>/<experiment id>/trial-<n>/`` (the id: the config's name
and a hash of what makes the experiment, ``_search_settings.experiment_id``). A failing trial is
restarted ``max_restarts`` times from its latest checkpoint, then reported, and the search goes on,
as on a cluster; configuration errors stop everything before the first trial. Rerunning the same
command continues the experiment.
"""

import logging
import os
import sys
import time
from typing import Any, Dict, Optional, Sequence

from det_lightning import errors
from det_lightning._env import SEARCH_WORKER_ENV
from det_lightning._runner._record import (
    clear_stop,
    stop_mark,
    stopped_at,
    stopped_by,
    write_experiment_record,
)
from det_lightning._runner.plan import Plan
from det_lightning._runner.search._interrupt import past
from det_lightning._runner.summary import best_trial, format_summary, stopped_as, terminal_width
from det_lightning._runner.trial import FINISHED, INVALID_HP, TrialResult

logger = logging.getLogger("det_lightning")


def _retain_experiment_best(plan: Plan, results: Sequence[TrialResult]) -> None:
    """Determined's end-of-experiment garbage collection: each trial keeps its
    ``save_trial_best``/``save_trial_latest`` checkpoints, and the ``save_experiment_best`` best
    of all trials are kept wherever they are."""
    from det_lightning.pytorch._retention import retain_experiment_best

    trial_dirs = [plan.checkpoint_root / f"trial-{r.number}" for r in results]
    searcher = plan.config.searcher_config
    deleted = retain_experiment_best(
        trial_dirs,
        plan.config.checkpoint_storage_config,
        metric=searcher.metric,
        smaller_is_better=searcher.smaller_is_better,
    )
    if deleted:
        logger.info(f"checkpoint_storage retention deleted {len(deleted)} checkpoint(s)")


def announce(plan: Plan) -> None:
    """The experiment's first line: its id, name, trials, searcher and folder."""
    config = plan.config
    logger.info(
        f"experiment {plan.experiment_id} ({config.name!r}): {plan.search.max_trials} "
        f"trial(s), searcher {config.searcher_config.name}; checkpoints under "
        f"{plan.checkpoint_root}"
    )


def run_experiment(plan: Plan, started: Optional[float] = None) -> int:
    """Runs every trial of ``plan`` and prints the summary (``started``: when the command
    began, ``time.monotonic()``, for the wall time it shows; by default now).

    Returns:
        0 unless a trial failed (trials other workers of a search still run do not count).
    """
    from det_lightning._runner.search import _worker

    started, config = time.monotonic() if started is None else started, plan.config
    if os.environ.get(SEARCH_WORKER_ENV) is None:  # --workers: their parent said it
        announce(plan)
    interrupted_by, seen = None, None
    if os.environ.get(SEARCH_WORKER_ENV) == "summary":  # the workers are done
        results = _worker.search_summary(plan, plan.storage)
    else:
        write_experiment_record(plan)
        mark = clear_stop(plan.checkpoint_root)
        if mark is not None:
            by = stopped_by(mark)
            logger.info(
                f"Experiment {plan.experiment_id} was {past(by)} ({by}() at "
                f"{stopped_at(mark)}); this run continues it."
            )
        try:
            outcome = _worker.run_search(plan, plan.storage)
        except errors.InvalidExperimentException:  # e.g. no searcher.metric: it stops
            _report(plan, _worker.search_summary(plan, plan.storage), False, started)
            raise  # the command prints its one line
        results, interrupted_by, seen = outcome.trials, outcome.interrupted_by, outcome.mark
    interrupted = interrupted_by is not None or any(r.status == "INTERRUPTED" for r in results)
    stopped = _stopped(plan, results, seen)
    chief = os.environ.get("RANK", "0") == "0"
    if chief and config.checkpoint_storage and not interrupted and stopped is None:
        _retain_experiment_best(plan, results)
    worker = os.environ.get(SEARCH_WORKER_ENV) not in (None, "summary")
    if chief and not worker:  # one report: the chief's, the parent's
        _report(plan, results, interrupted, started, stopped=stopped)
    if stopped is not None:  # not 75: a scheduler requeueing on 75 would undo a cancel, a pause
        return 1
    if interrupted:
        return errors.TrialPreempted.EXIT_CODE
    # RUNNING: a trial another worker of the same search is training.
    return 1 if any(r.status not in (*FINISHED, "RUNNING", INVALID_HP) for r in results) else 0


def _stopped(
    plan: Plan, results: Sequence[TrialResult], seen: Optional[Dict[str, Any]]
) -> Optional[Dict[str, Any]]:
    """The experiment's cancel or pause mark when a client canceled or paused it before its
    end: the one this worker stopped for (``seen``), else the one there now (seen by another
    worker, or written before this one started); a cancel there now outranks a pause it
    stopped for (killed while its trials stopped for the pause: every reader says CANCELED).
    None otherwise, also when every trial ended first (it stays COMPLETED). (A mark taken back
    meanwhile, by ``activate()``, leaves the one it stopped for.)"""
    from det_lightning._runner._bookkeeping import state

    now = stop_mark(plan.checkpoint_root)
    mark = seen if seen is not None else now
    if mark is not None and now is not None and stopped_by(mark) == "pause":
        mark = now  # a cancel outranks the pause (stop_mark reads it first)
    if mark is None or state(list(results), plan.search.max_trials) == "COMPLETED":
        return None
    return mark


def stopped_note(experiment_id: str, mark: Dict[str, Any]) -> str:
    """What a canceled or paused experiment's command says last, on stderr.

    >>> print(stopped_note("mnist-3f2a9c01de", {"by": "cancel", "canceled": "12:00"}))
    det-lightning experiment: experiment mnist-3f2a9c01de was canceled (cancel() at 12:00); its trials stopped with a checkpoint. `det-lightning experiment activate mnist-3f2a9c01de`, or the same command again, continues it. Exiting with status 1.
    >>> print(stopped_note("mnist-3f2a9c01de", {"by": "pause", "paused": "12:00"}))
    det-lightning experiment: experiment mnist-3f2a9c01de was paused (pause() at 12:00); its trials stopped with a checkpoint. `det-lightning experiment activate mnist-3f2a9c01de`, or the same command again, continues it. Exiting with status 1.
    """
    by = stopped_by(mark)
    return (
        f"det-lightning experiment: experiment {experiment_id} was {past(by)} ({by}() at "
        f"{stopped_at(mark)}); its trials stopped with a checkpoint. `det-lightning "
        f"experiment activate {experiment_id}`, or the same command again, continues it. "
        "Exiting with status 1."
    )


INTERRUPTED_NOTE = (
    "det-lightning experiment: the experiment was interrupted by a signal. Rerun "
    "the same command to continue it: an interrupted trial resumes from its "
    f"latest checkpoint. Exiting with status {errors.TrialPreempted.EXIT_CODE}."
)


def _report(
    plan: Plan,
    results: Sequence[TrialResult],
    interrupted: bool,
    started: float,
    *,
    stopped: Optional[Dict[str, Any]] = None,
) -> None:
    """The summary table on stdout; after a signal, a cancel or a pause, how to continue on
    stderr. A canceled (paused) experiment's trials that stopped before their end are CANCELED
    (PAUSED), as the client and Determined show them."""
    if stopped is not None:  # its other workers stop theirs too (RUNNING)
        word = "PAUSED" if stopped_by(stopped) == "pause" else "CANCELED"
        results = stopped_as(results, word, ("INTERRUPTED", "RUNNING"))
    searcher = plan.config.searcher_config
    table = format_summary(
        results,
        searcher.metric,
        searcher.smaller_is_better,
        root=plan.checkpoint_root,
        width=terminal_width(),
        wall_s=time.monotonic() - started,
    )
    print(table, flush=True)
    running = sum(1 for r in results if r.status == "RUNNING")
    if running:
        print(f"{running} trial(s) still running in other workers of this search.", flush=True)
    if stopped is not None:
        print(stopped_note(plan.experiment_id, stopped), file=sys.stderr, flush=True)
    elif interrupted:
        print(INTERRUPTED_NOTE, file=sys.stderr, flush=True)


__all__ = ["announce", "best_trial", "format_summary", "run_experiment"]
