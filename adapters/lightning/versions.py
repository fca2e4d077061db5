"""The one table of Lightning releases whose internals det_lightning reproduces.

Every module in this folder that follows a private Lightning function asks ``SHAPE`` (the row
for the installed release) which variant of it to follow; none compares version strings itself.
The rows were built by diffing, release by release, the functions the lean path mirrors (wheels
from ``pip download lightning==X --no-deps``; 2.6.2 and 2.6.3, withdrawn malicious releases,
never downloaded):

    function (lightning.pytorch ...)           changed in     what changed, for us
    -----------------------------------------  -------------  ----------------------------------
    _TrainingEpochLoop.advance                 2.5.0          restart handling (the lean path
                                                              runs Lightning's on a restart)
                                               2.5.2          SIGTERM flag broadcast before each
                                                              batch (several ranks)
                                               2.6.0          a batch skipped by
                                                              on_train_batch_start (-1) is marked
                                                              the last one first
    _TrainingEpochLoop.on_advance_end          2.5.0          _skip_next_val (the lean one honours
                                                              it where the row says so)
    _TrainingEpochLoop.on_run_start            2.5.3          resuming: iter() not called again
                                                              (the lean path calls super())
    _TrainingEpochLoop._should_check_val_fx    2.6.0          time-based intervals (replaced by
                                                              ours: internals.answer_validation_checks)
    _FitLoop (run, on_advance_*, setup_data)   2.5.0, 2.5.5,  restart stages, eval-mode warning,
                                               2.6.0, 2.6.4   data set-up: stays Lightning's
    _EvaluationLoop.run / on_run_end           2.5.0, 2.6.0   restart handling, results printing:
                                                              stays Lightning's
    _EvaluationLoop._evaluation_step,          none           (lean_validation.py's step)
      _on_before_fetch/_on_after_fetch,
      _verify_dataloader_idx_requirement,
      _on_evaluation_end (resets the results),
      _on_evaluation_start/_epoch_start/
      _epoch_end/_model_eval,
      _store_dataloader_outputs,
      _LoggerConnector.on_epoch_end/
      update_eval_epoch_metrics/
      epoch_end_reached/metrics,
      _LoggerConnector.on_batch_start/
      update_eval_step_metrics, Strategy.
      validation_step, _ResultCollection.metrics
    _ResultMetric.to,                          none           (lean_results.py's self.log)
      _ResultCollection.log
    call._call_callback_hooks,                 none           (hooks.py's dispatch)
      _call_lightning_module_hook,
      _call_strategy_hook
    _SignalConnector.register_signal_handlers  2.5.0          (replaced whole by ours)
    LightningOptimizer.step,                   none           (lean_step.BackendFastPath)
      Strategy.backward/training_step,
      _DDPForwardRedirection
    DDPStrategy.post_backward                  2.6.0 (added)  static-graph flush: the lean
                                                              backward calls post_backward too
    ManualResult.from_training_step_output     2.5.3          dict -> Mapping: called, not copied
                                                              (None -> {} in every release: the
                                                              lean step makes that one itself)

A release newer than the last row (or older than the first) runs Lightning's own loops and
dispatch, with one warning saying what that costs.
"""

import hashlib
import importlib
import inspect
import os
from typing import Any, Dict, NamedTuple, Optional, Tuple

import lightning
from lightning.pytorch.utilities import rank_zero_warn
from packaging.version import Version


class Shape(NamedTuple):
    """What the lean code depends on, for one range of Lightning releases."""

    first: str  # the first release of the range
    last: str  # the last release checked (inclusive)
    advance: str  # the release whose _TrainingEpochLoop.advance the lean one follows
    advance_digest: str  # fingerprint() of that release's advance (the contract test
    # checks the installed one against it)
    marks_last_batch: bool  # a batch skipped by on_train_batch_start is marked the last one
    broadcasts_sigterm: bool  # advance broadcasts the SIGTERM flag before each batch
    advance_end_digest: str  # fingerprint() of the range's _TrainingEpochLoop.on_advance_end
    skips_next_val: bool  # on_advance_end skips a validation when _skip_next_val is set


# One row per range of releases with the same ``advance`` (and the same everything else the
# lean path follows). scripts/test-lightning-releases.sh runs the trace and contract tests on
# one release of each row.
TABLE: Tuple[Shape, ...] = (
    Shape(
        "2.4.0",
        "2.4.0",
        advance="2.4.0",
        advance_digest="7ba935fd01c4",
        marks_last_batch=False,
        broadcasts_sigterm=False,
        advance_end_digest="c9b65f051396",
        skips_next_val=False,
    ),
    Shape(
        "2.5.0",
        "2.5.1.post0",
        advance="2.5.0",
        advance_digest="419c08cd10df",
        marks_last_batch=False,
        broadcasts_sigterm=False,
        advance_end_digest="8edd3ae96599",
        skips_next_val=True,
    ),
    Shape(
        "2.5.2",
        "2.5.6",
        advance="2.5.2",
        advance_digest="b77340a10ed2",
        marks_last_batch=False,
        broadcasts_sigterm=True,
        advance_end_digest="8edd3ae96599",
        skips_next_val=True,
    ),
    Shape(
        "2.6.0",
        "2.6.6",
        advance="2.6.0",
        advance_digest="a89952bfe388",
        marks_last_batch=True,
        broadcasts_sigterm=True,
        advance_end_digest="8edd3ae96599",
        skips_next_val=True,
    ),
)

# The functions the lean pieces mirror that are the same in every row (fingerprints of 2.4.0 to
# 2.6.6 alike), by "module:qualified name" under lightning.pytorch.
UNCHANGED: Dict[str, str] = {
    "trainer.call:_call_callback_hooks": "db53c7410f78",
    "trainer.call:_call_lightning_module_hook": "160281faa0f9",
    "trainer.call:_call_strategy_hook": "ecbeca072455",
    "loops.optimization.manual:_ManualOptimization.run": "f8904bd88575",
    "loops.optimization.manual:_ManualOptimization.on_run_start": "731903ddfa0d",
    "loops.optimization.manual:_ManualOptimization.advance": "f4cc59b495d3",
    "loops.optimization.manual:_ManualOptimization.on_run_end": "53c6ffbd9f1c",
    "core.optimizer:LightningOptimizer.step": "12600c58ed6e",
    "strategies.strategy:Strategy.training_step": "7cdf5e14381e",
    "strategies.strategy:Strategy.batch_to_device": "c726a3515f1b",
    "strategies.strategy:Strategy.backward": "55de60695aeb",
    "strategies.strategy:Strategy.optimizer_step": "0932bdd3c973",
    "strategies.strategy:_ForwardRedirection.__call__": "25bbacdf9b97",
    "strategies.ddp:_DDPForwardRedirection.on_after_inner_forward": "74a946a9e418",
    "strategies.ddp:DDPStrategy.pre_backward": "0b0c1ded9138",
    "overrides.distributed:prepare_for_backward": "d9713ca356a8",
    "strategies.ddp:_DDPForwardRedirection.on_after_outer_forward": "0b05cddba34a",
    "core.module:LightningModule.manual_backward": "31da643072d4",
    "core.module:LightningModule._apply_batch_transfer_handler": "168f5bf65759",
    "plugins.precision.precision:Precision.backward": "7c4c5605cb88",
    "plugins.precision.precision:Precision.pre_backward": "29db84744fe0",
    "plugins.precision.precision:Precision.post_backward": "8a617b066282",
    "plugins.precision.precision:Precision.convert_input": "eefd5c948d7e",
    "plugins.precision.precision:Precision.optimizer_step": "23d46ba09e0a",
    "plugins.precision.precision:Precision._wrap_closure": "cda4db0304fb",
    "plugins.precision.precision:Precision._after_closure": "9cb08fca04c0",
    "trainer.connectors.logger_connector.logger_connector:_LoggerConnector.on_batch_end": "910e37278afb",
    # lean_between.py and lean.py, between two batches (done, on_advance_end, the logger
    # connector's steps);
    # properties by their getter, a setter as "<property>.fset"
    "loops.training_epoch_loop:_TrainingEpochLoop.done": "186fd961b231",
    "loops.training_epoch_loop:_TrainingEpochLoop._is_training_done": "4b3cc338294c",
    "loops.training_epoch_loop:_TrainingEpochLoop._is_validation_done": "490a6b2a8b5c",
    "loops.training_epoch_loop:_TrainingEpochLoop.global_step": "6c17de560ac6",
    "loops.training_epoch_loop:_TrainingEpochLoop._num_ready_batches_reached": "079d2d506e0c",
    "loops.training_epoch_loop:_TrainingEpochLoop._should_accumulate": "42ce6d2cb72b",
    "loops.training_epoch_loop:_TrainingEpochLoop._accumulated_batches_reached": "b84f6e62bcbd",
    "loops.training_epoch_loop:_TrainingEpochLoop.update_lr_schedulers": "22b3ea647a97",
    "loops.training_epoch_loop:_TrainingEpochLoop._update_learning_rates": "43eb2aa3b36b",
    "loops.training_epoch_loop:_TrainingEpochLoop._save_loggers_on_train_batch_end": "703d8cef542e",
    "loops.training_epoch_loop:_TrainingEpochLoop._on_before_fetch": "9bbdd63685ed",
    "loops.training_epoch_loop:_TrainingEpochLoop._on_after_fetch": "f0629f2d63a0",
    "loops.utilities:_is_max_limit_reached": "d1cef257a695",
    "loops.loop:_Loop.restarting.fset": "5d92dd513490",
    "loops.fit_loop:_FitLoop._results": "0cd2f46b4a15",
    "trainer.trainer:Trainer._results": "d4a6d8f00208",
    "trainer.trainer:Trainer._active_loop": "c0f17cd8403d",
    "trainer.trainer:Trainer.num_training_batches": "d8d1bf5c4440",
    "trainer.trainer:Trainer.received_sigterm": "c7c9d10e8fb9",
    "trainer.connectors.logger_connector.logger_connector:"
    "_LoggerConnector.update_train_step_metrics": "60aefb4bedf9",
    "trainer.connectors.logger_connector.logger_connector:"
    "_LoggerConnector.should_update_logs": "749ef0817358",
    # lean.py and lean_step.py, inlined per batch: the progress counters, the
    # manual-optimization step hooks,
    # the strategy hooks the base strategy leaves empty (skipped unless overridden)
    "loops.loop:_Loop.restarting": "3e06a0765969",
    "loops.training_epoch_loop:_TrainingEpochLoop.batch_idx": "f64696c91176",
    "loops.progress:_Progress.increment_ready": "37bc96c43ebb",
    "loops.progress:_Progress.increment_started": "c68d0430fb33",
    "loops.progress:_Progress.increment_processed": "e85e345d77ec",
    "loops.progress:_Progress.increment_completed": "a83c4c72ef16",
    "loops.fetchers:_PrefetchDataFetcher.__next__": "8ce98023bc8f",
    "loops.fetchers:_DataFetcher.__next__": "056d3ae9c282",
    "loops.fetchers:_DataFetcher.reset": "830b15b2a835",
    "utilities.combined_loader:CombinedLoader.__next__": "f3da7576dafb",
    "utilities.combined_loader:_MaxSizeCycle.__next__": "0e471de43029",
    "loops.optimization.manual:_ManualOptimization._on_before_step": "5d3ddb8c5b35",
    "loops.optimization.manual:_ManualOptimization._on_after_step": "3667cfef5f68",
    "strategies.strategy:Strategy.pre_backward": "f68bfe186db3",
    "strategies.strategy:Strategy.post_backward": "fd7ee0b8c419",
    "strategies.strategy:Strategy.post_training_step": "07708d2bfe40",
    "core.optimizer:LightningOptimizer.optimizer": "ab3eed3181a0",
    # lean_validation.py
    "loops.evaluation_loop:_EvaluationLoop._evaluation_step": "a2f5504c0b30",
    "loops.evaluation_loop:_EvaluationLoop._on_before_fetch": "75d2bc59a1e7",
    "loops.evaluation_loop:_EvaluationLoop._on_after_fetch": "319bf8faa493",
    "loops.evaluation_loop:_EvaluationLoop._build_kwargs": "e032b7157bda",
    "loops.evaluation_loop:_EvaluationLoop._build_step_args_from_hook_kwargs": "b5aa70cc7789",
    "loops.evaluation_loop:_EvaluationLoop._on_evaluation_end": "bfd8c6842e7c",
    "loops.evaluation_loop:_EvaluationLoop._on_evaluation_start": "83b9831a3856",
    "loops.evaluation_loop:_EvaluationLoop._on_evaluation_epoch_start": "f69c8f2231ae",
    "loops.evaluation_loop:_EvaluationLoop._on_evaluation_epoch_end": "0c6b5bb09fca",
    "loops.evaluation_loop:_EvaluationLoop._on_evaluation_model_eval": "f15bf5d0231d",
    "loops.evaluation_loop:_EvaluationLoop._store_dataloader_outputs": "6b5ea99630e4",
    "trainer.connectors.logger_connector.logger_connector:"
    "_LoggerConnector.update_eval_epoch_metrics": "cddb2873fc75",
    "trainer.connectors.logger_connector.logger_connector:_LoggerConnector.on_epoch_end": "2f8de9aa3568",
    "trainer.connectors.logger_connector.logger_connector:"
    "_LoggerConnector.epoch_end_reached": "234a054e5421",
    "trainer.connectors.logger_connector.logger_connector:_LoggerConnector.metrics.fget": "0e23b910d871",
    "loops.evaluation_loop:_EvaluationLoop.on_run_start": "f22589252609",
    # (calls loops.utilities._verify_dataloader_idx_requirement, whose only change 2.4.0 to
    # 2.6.6 is a type annotation: Tuple -> tuple)
    "loops.evaluation_loop:_EvaluationLoop._verify_dataloader_idx_requirement": "2f5fa122e76a",
    "trainer.connectors.logger_connector.logger_connector:_LoggerConnector.on_batch_start": "b86eeef7d7e3",
    "trainer.connectors.logger_connector.logger_connector:"
    "_LoggerConnector.update_eval_step_metrics": "c9a6aea0b920",
    "trainer.connectors.logger_connector.logger_connector:_LoggerConnector.reset_results": "ee8e971689ed",
    "trainer.connectors.logger_connector.result:_ResultCollection.metrics": "6a7f15d68406",
    "trainer.connectors.logger_connector.result:_ResultCollection.valid_items": "510dfc10b180",
    "trainer.connectors.logger_connector.result:_ResultCollection.reset": "8429e6fc269d",
    "strategies.strategy:Strategy.validation_step": "9a2c9936b512",
    "strategies.strategy:Strategy.test_step": "29f45b26add8",
    # lean_results.py
    "trainer.connectors.logger_connector.result:_ResultMetric.to": "efdc4d9910d9",
    "trainer.connectors.logger_connector.result:_ResultCollection.log": "c9a2646c6a97",
}


def fingerprint(source: str) -> str:
    """A short digest of a function's source text, blind to indentation, blank lines, comments
    and decorators (the same text in a wheel and from ``inspect.getsource`` digests alike)."""
    lines = [line.strip() for line in source.splitlines()]
    while lines and not lines[0].startswith(("def ", "async def ")):
        lines.pop(0)
    kept = "\n".join(line for line in lines if line and not line.startswith("#"))
    return hashlib.sha256(kept.encode()).hexdigest()[:12]


def fingerprint_of(name: str) -> str:
    """``fingerprint`` of the installed Lightning's ``"module:qualified.name"`` (under
    ``lightning.pytorch``; a property by its getter, its setter as ``"...name.fset"``)."""
    module_name, _, qualified = name.partition(":")
    found: Any = importlib.import_module(f"lightning.pytorch.{module_name}")
    for part in qualified.split("."):
        found = getattr(found, part)
    if isinstance(found, property):  # a property by its getter
        found = found.fget
    return fingerprint(inspect.getsource(found))


# What running Lightning's own loop costs, said once when the installed release has no row.
UNCOVERED_COST = (
    "about 1.5x the instructions per training step of the lean path (Lightning's per-batch "
    "hook dispatch, profiler and batch-transfer chain run in full)"
)


def shape_for(version: str) -> Optional[Shape]:
    """The row covering ``version``, or None when no row does (a newer or older release)."""
    wanted = Version(version)
    for row in TABLE:
        if Version(row.first) <= wanted <= Version(row.last):
            return row
    return None


SHAPE: Optional[Shape] = shape_for(lightning.__version__)
LEAN_ENV = "DET_LIGHTNING_LEAN"  # 0/false/no/off: every lean piece off (Lightning's own code)
_warned = False


def switched_off(*env_names: str) -> bool:
    """Whether one of ``env_names`` (or ``DET_LIGHTNING_LEAN``) turns the lean pieces off."""
    return any(
        os.environ.get(name, "1").strip().lower() in ("0", "false", "no", "off")
        for name in (*env_names, LEAN_ENV)
    )


def lean_allowed(*env_names: str) -> bool:
    """Whether a lean piece may run: the installed Lightning has a row and no environment
    variable turns it off. A release with no row warns once (``warn_uncovered``)."""
    if switched_off(*env_names):
        return False
    if SHAPE is None:
        warn_uncovered()
        return False
    return True


def warn_uncovered(version: str = lightning.__version__) -> None:
    """Says once per process (on rank zero) that ``version`` runs Lightning's own loop, and
    what it costs."""
    global _warned
    if _warned:
        return
    _warned = True
    rank_zero_warn(
        f"det_lightning has not checked Lightning {version}'s training loop (it covers "
        f"{TABLE[0].first} to {TABLE[-1].last}), so it runs Lightning's own loop and hook "
        f"dispatch: {UNCOVERED_COST}. Results are the same. For the lean path install "
        f"'lightning>={TABLE[0].first},<={TABLE[-1].last},!=2.6.2,!=2.6.3'.",
        category=UserWarning,
    )
