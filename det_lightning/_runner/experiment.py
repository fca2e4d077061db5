"""Running a Determined experiment config locally: ``det-lightning experiment CONFIG MODEL_DIR``.

What Determined's master and harness do for an experiment::

    config = load_config(CONFIG)                  # unknown keys fail; cluster-only keys reported
    plan = plan_experiment(config, MODEL_DIR)     # plan.py: every check that can fail before
                                                  #   training
    grid, random, adaptive_asha: search.run_search(plan)    # on Optuna, trials shared through
                                                  #   its storage; each runs one of these, in
                                                  #   a process of its own (_template)
    single: for the one trial:                    # _trial.py: one trial, as the harness runs it
        'model_def:Trial' entrypoint: run_legacy_trial    # the harness: init(), Trial(context),
                                                          #   Trainer.fit(periods from the config)
        command entrypoint ('python3 train.py'): run_command_trial   # `det-lightning run` in
                                                          #   MODEL_DIR, in a child process
    print(format_summary(results))                # trial, hyperparameters, best metric, checkpoint

Each trial writes its checkpoints to ``<checkpoint dir>/trial-<n>/`` and its TensorBoard files to
``<tensorboard dir>/trial-<n>/``. A failing trial is reported and the search goes on, as on a
cluster; configuration errors stop everything before the first trial.
"""

import logging
import os
import sys
import time
from typing import List, Sequence

from det_lightning import errors
from det_lightning._env import LATEST_CHECKPOINT_ENV, RESUME_ADVICE_ENV, SEARCH_WORKER_ENV
from det_lightning._runner.plan import Plan
from det_lightning._runner.summary import best_trial, format_summary, terminal_width
from det_lightning._runner.trial import (
    FINISHED,
    INVALID_HP,
    TrialResult,
    run_command_trial,
    run_legacy_trial,
    write_trial_hparams,
)

logger = logging.getLogger("det_lightning")


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
    started, config = time.monotonic(), plan.config
    if plan.command is not None and plan.search is None:
        logger.info(
            "A command entrypoint chooses its own hyperparameters and training length locally "
            "(det.get_cluster_info() is None); the config's hyperparameters and "
            "searcher.max_length are not passed to it."
        )
    count = plan.search.max_trials if plan.search is not None else len(plan.trials)
    logger.info(
        f"experiment {config.name!r}: {count} trial(s), searcher "
        f"{config.searcher['name']}; checkpoints under {plan.checkpoint_root}"
    )
    interrupted_by = None
    if plan.search is not None:
        from det_lightning._runner.search import _worker

        if os.environ.get(SEARCH_WORKER_ENV) == "summary":  # the workers are done
            results = _worker.search_summary(plan, plan.storage)
        else:
            outcome = _worker.run_search(plan, plan.storage)
            results, interrupted_by = outcome.trials, outcome.interrupted_by
    else:
        os.environ.setdefault(RESUME_ADVICE_ENV, SINGLE_ADVICE)
        results = run_trials(plan)
    interrupted = interrupted_by is not None or any(r.status == "INTERRUPTED" for r in results)
    chief = os.environ.get("RANK", "0") == "0"
    if chief and config.checkpoint_storage and not interrupted:
        _retain_experiment_best(plan, results)
    worker = os.environ.get(SEARCH_WORKER_ENV) not in (None, "summary")
    if chief and not worker:  # one report: the chief's, the parent's
        _report(plan, results, interrupted, time.monotonic() - started)
    if interrupted:
        return errors.TrialPreempted.EXIT_CODE
    # RUNNING: a trial another worker of the same search is training.
    return 1 if any(r.status not in (*FINISHED, "RUNNING", INVALID_HP) for r in results) else 0


SINGLE_ADVICE = f"To continue from it, rerun the same command with {LATEST_CHECKPOINT_ENV}=latest."
INTERRUPTED_NOTE = (
    "det-lightning experiment: the search was interrupted by a signal. Rerun "
    "the same command to continue it: an interrupted trial resumes from its "
    f"latest checkpoint. Exiting with status {errors.TrialPreempted.EXIT_CODE}."
)


def _report(plan: Plan, results: Sequence[TrialResult], interrupted: bool, wall_s: float) -> None:
    """The summary table on stdout; after a signal, how to continue on stderr."""
    searcher = plan.config.searcher
    table = format_summary(
        results,
        searcher["metric"],
        searcher["smaller_is_better"],
        root=plan.checkpoint_root,
        width=terminal_width(),
        wall_s=wall_s,
    )
    print(table, flush=True)
    running = sum(1 for r in results if r.status == "RUNNING")
    if running:
        print(f"{running} trial(s) still running in other workers of this search.", flush=True)
    if interrupted:
        print(INTERRUPTED_NOTE, file=sys.stderr, flush=True)


__all__ = ["best_trial", "format_summary", "run_experiment", "run_trials"]
