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
    print(format_summary(results))                # trial, hyperparameters, best metric, checkpoint

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
from typing import Any, Dict, Optional, Sequence

from det_lightning import errors
from det_lightning._env import SEARCH_WORKER_ENV
from det_lightning._runner._record import write_experiment_record
from det_lightning._runner.plan import Plan
from det_lightning._runner.trial import FINISHED, INVALID_HP, TrialResult

logger = logging.getLogger("det_lightning")


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
    from det_lightning._runner.search import _worker

    config = plan.config
    logger.info(
        f"experiment {plan.experiment_id} ({config.name!r}): {plan.search.max_trials} "
        f"trial(s), searcher {config.searcher['name']}; checkpoints under "
        f"{plan.checkpoint_root}"
    )
    interrupted_by = None
    if os.environ.get(SEARCH_WORKER_ENV) == "summary":  # the workers are done
        results = _worker.search_summary(plan, plan.storage)
    else:
        write_experiment_record(plan)
        outcome = _worker.run_search(plan, plan.storage)
        results, interrupted_by = outcome.trials, outcome.interrupted_by
    interrupted = interrupted_by is not None or any(r.status == "INTERRUPTED" for r in results)
    chief = os.environ.get("RANK", "0") == "0"
    if chief and config.checkpoint_storage and not interrupted:
        _retain_experiment_best(plan, results)
    worker = os.environ.get(SEARCH_WORKER_ENV) not in (None, "summary")
    if chief and not worker:  # one report: the chief's, the parent's
        _report(results, config.searcher, interrupted)
    if interrupted:
        return errors.TrialPreempted.EXIT_CODE
    # RUNNING: a trial another worker of the same search is training.
    return 1 if any(r.status not in (*FINISHED, "RUNNING", INVALID_HP) for r in results) else 0


INTERRUPTED_NOTE = (
    "det-lightning experiment: the experiment was interrupted by a signal. Rerun "
    "the same command to continue it: an interrupted trial resumes from its "
    f"latest checkpoint. Exiting with status {errors.TrialPreempted.EXIT_CODE}."
)


def _report(results: Sequence[TrialResult], searcher: Dict[str, Any], interrupted: bool) -> None:
    """The summary table on stdout; after a signal, how to continue on stderr."""
    print(format_summary(results, searcher["metric"], searcher["smaller_is_better"]), flush=True)
    running = sum(1 for r in results if r.status == "RUNNING")
    if running:
        print(f"{running} trial(s) still running in other workers of this search.", flush=True)
    if interrupted:
        print(INTERRUPTED_NOTE, file=sys.stderr, flush=True)


__all__ = ["best_trial", "format_summary", "run_experiment"]
