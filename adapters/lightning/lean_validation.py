"""The lean validation step: what Lightning's evaluation loop runs around each
``evaluate_batch``, minus what a ``pytorch.Trainer`` run never uses.

The same approach as the lean training path (``lean.py``), for the evaluation loop's per-batch
work. Per validation batch, Lightning (every release in ``versions.TABLE``; the functions
followed are the same in all of them) against the lean step::

    Lightning's _EvaluationLoop                  lean (same order, same counters)
    ------------------------------------------   ---------------------------------------------
    next(data_fetcher): profiler start/stop      the pass-through profiler's start and stop,
      around the fetch, each with a formatted      and the names formatted for them, skipped
      name (_on_before_fetch/_on_after_fetch)
    _evaluation_step:
    convert_input, on_before_batch_transfer,      same; module hooks the TrialModule does not
      batch_to_device (profiled strategy hook)      override are skipped (they return the batch)
    _build_kwargs (an OrderedDict per batch)      (batch, batch_idx): one dataloader
    increment_ready, logger on_batch_start        same; on_batch_start's steps on the loop's own
      (finds the results through trainer._results:  results (the trainer's, found once per pass)
      five properties and enum comparisons)
    on_validation_batch_start: callbacks,         callbacks (hooks.py dispatch); the module
      module                                        only where it overrides the hook
    increment_started                             same
    _build_step_args_from_hook_kwargs (inspects   the signature inspected once per step
      validation_step's signature every batch)
    strategy hook -> precision val_step_context   validation_step called directly (one device,
      -> validation_step                            plain precision: the context is empty);
                                                    Lightning's strategy hook otherwise
    increment_processed                           same
    on_validation_batch_end: callbacks, module    callbacks; module only where overridden
    logger on_batch_end: recompute every logged   recomputed (and the step metrics sent to the
      metric; update_eval_step_metrics:             loggers) only once something was logged
      recompute again, log the step metrics         in this pass: until then both are empty
    increment_completed, _has_run, the step       same
      count per dataloader, the SIGTERM check      (sanity checking: read once per pass)

Per pass, ``_verify_dataloader_idx_requirement`` (three signature inspections, which only ever
raise) runs again only when what it checks changed since it last passed: the module's three
hooks and whether several dataloaders run. The pass's start and end hooks (model eval, start,
epoch start and end, end) go to the callbacks as Lightning sends them, and to the module and the
strategy only where they override the hook (the base hooks do nothing; each dispatch was ~46
calls); the epoch's metrics are taken and the results reset on the pass's results, found once
per pass (Lightning's logger connector looks ``trainer._results`` up again each time).
``run``, ``on_run_end``, ``setup_data`` and ``reset`` stay Lightning's.
Anything outside the narrow case (several dataloaders, an iterator-style step, a real profiler,
a restart, a Lightning release with no row in ``versions.TABLE``, ``DET_LIGHTNING_LEAN=0`` or
``DET_LIGHTNING_LEAN_VALIDATION=0``) runs Lightning's own ``_evaluation_step``.
``tests/integration/test_hooks.py`` traces every hook, counter and logged metric with and
without it and requires them equal.
"""

from typing import Any, Dict, NamedTuple, Optional, Tuple

import lightning.pytorch as pl
from lightning.pytorch.loops.evaluation_loop import _EvaluationLoop
from lightning.pytorch.loops.fetchers import _PrefetchDataFetcher
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.strategies import SingleDeviceStrategy, Strategy
from lightning.pytorch.trainer import call
from lightning.pytorch.trainer.connectors.logger_connector.result import _ResultCollection
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.signature_utils import is_param_in_hook_signature

from det_lightning.adapters.lightning import log_count, versions
from det_lightning.adapters.lightning.calls import batch_stays, call_hook, overrides, plain_run

LEAN_VALIDATION_ENV = "DET_LIGHTNING_LEAN_VALIDATION"


def enabled() -> bool:
    """Whether the lean validation step may run: the installed Lightning has a row in
    ``versions.TABLE`` and neither ``DET_LIGHTNING_LEAN_VALIDATION`` nor ``DET_LIGHTNING_LEAN``
    turns it off."""
    return versions.lean_allowed(LEAN_VALIDATION_ENV)


def install(trainer: pl.Trainer) -> None:
    """Gives the evaluation loop ``trainer.fit`` validates with the lean step (when
    ``enabled()``)."""
    loop = trainer.fit_loop.epoch_loop.val_loop
    if enabled() and type(loop) is _EvaluationLoop:
        loop.__class__ = LeanEvaluationLoop


def _pass_hooks(stage: str) -> Tuple[str, ...]:
    return tuple(
        f"on_{stage}_{name}" for name in ("model_eval", "start", "epoch_start", "epoch_end", "end")
    )


# The hooks around a pass (model eval, start, epoch start and end, end), by trainer.testing.
_PASS_HOOKS = {False: _pass_hooks("validation"), True: _pass_hooks("test")}


class _Plan(NamedTuple):
    """What the lean step may skip for one module and strategy, worked out per pass."""

    lean: bool  # the narrow case holds (else: Lightning's _evaluation_step)
    quiet_profiler: bool  # the profiler is the pass-through one
    before_transfer: bool  # the module overrides on_before_batch_transfer
    to_device: bool  # strategy.batch_to_device may change the batch
    module_batch_start: bool  # the module overrides on_{validation,test}_batch_start
    direct_step: bool  # the step may be called directly (one device, plain precision)
    module_batch_end: bool  # the module overrides on_{validation,test}_batch_end
    start_hook: str
    step_hook: str
    end_hook: str
    sanity_checking: bool  # trainer.sanity_checking, the same all pass
    module: pl.LightningModule  # trainer.lightning_module and trainer.strategy, the same all pass
    strategy: Strategy
    results: Optional[_ResultCollection]  # trainer._results when it is this loop's (else None)
    pass_hooks: Tuple[str, ...]  # the pass's model-eval, start, epoch start/end and end hooks


def _plan(loop: "LeanEvaluationLoop") -> _Plan:
    trainer = loop.trainer
    module, strategy = trainer.lightning_module, trainer.strategy
    testing = trainer.testing
    prefix = "on_test_batch" if testing else "on_validation_batch"
    step_hook = "test_step" if testing else "validation_step"
    quiet = plain_run(trainer)
    lean = (
        quiet
        and loop.num_dataloaders == 1
        and type(loop._data_fetcher) is _PrefetchDataFetcher
        # Lightning leaves batch_idx out of a step that does not take it
        and loop.step_takes_batch_idx(getattr(module, step_hook))
    )
    results = trainer._results
    return _Plan(
        lean=lean,
        quiet_profiler=quiet,
        before_transfer=overrides(module, pl.LightningModule, "on_before_batch_transfer"),
        to_device=not batch_stays(module, strategy),
        module_batch_start=overrides(module, pl.LightningModule, f"{prefix}_start"),
        direct_step=(
            type(strategy) is SingleDeviceStrategy
            and strategy.model is module
            and type(trainer.precision_plugin) is Precision
        ),
        module_batch_end=overrides(module, pl.LightningModule, f"{prefix}_end"),
        start_hook=f"{prefix}_start",
        step_hook=step_hook,
        end_hook=f"{prefix}_end",
        sanity_checking=trainer.sanity_checking,
        module=module,
        strategy=strategy,
        results=results if results is loop._results else None,
        pass_hooks=_PASS_HOOKS[testing],
    )


class LeanEvaluationLoop(_EvaluationLoop):
    """Lightning's evaluation loop whose per-batch step takes the lean path when it can."""

    _lean_plan: Optional[_Plan] = None
    _lean_logged_at_start = -1
    _lean_log_count: log_count.LogCount  # the module's (set on run start)
    # What the last _verify_dataloader_idx_requirement that passed checked, and the step whose
    # signature was last inspected (with the answer): both the same pass after pass.
    _verified: Any = None
    _inspected: Tuple[Any, bool] = (None, False)

    def step_takes_batch_idx(self, step: Any) -> bool:
        """``is_param_in_hook_signature(step, "batch_idx", min_args=2)``, inspected again only
        for another step."""
        if self._inspected[0] != step:
            self._inspected = (step, is_param_in_hook_signature(step, "batch_idx", min_args=2))
        return self._inspected[1]

    def _verify_dataloader_idx_requirement(self) -> None:
        """Follows ``_EvaluationLoop._verify_dataloader_idx_requirement`` (unchanged 2.4.0 to
        2.6.6): Lightning's check, unless it passed last time for the same hooks, dataloader
        count and fetcher (it depends on nothing else and only ever raises)."""
        module = self.trainer.lightning_module
        names = (
            ("test_step", "on_test_batch_start", "on_test_batch_end")
            if self.trainer.testing
            else ("validation_step", "on_validation_batch_start", "on_validation_batch_end")
        )
        checked = (
            tuple(getattr(module, name) for name in names),
            self._is_sequential and self.num_dataloaders > 1,
            type(self._data_fetcher),
        )
        if checked != self._verified:
            super()._verify_dataloader_idx_requirement()
            self._verified = checked

    def on_run_start(self) -> None:
        self._lean_plan = _plan(self)
        # The pass's logged results were reset when the last pass ended (_on_evaluation_end), so
        # until something logs (log_count counts every self.log) the per-batch recompute finds
        # nothing; from the first log call on it is Lightning's again.
        count = self._lean_log_count = log_count.counter(self.trainer.lightning_module)
        logged = count.calls
        if not all(item.has_reset for item in self._results.values()):
            logged = -1  # never quiet
        self._lean_logged_at_start = logged
        super().on_run_start()

    def _pass_hook(self, index: int, strategy_too: bool, *args: Any, **kwargs: Any) -> bool:
        """Runs a pass's start or end hook (``_PASS_HOOKS[...][index]``) as Lightning does, the
        callbacks', then the module's and (``strategy_too``) the strategy's only where they
        override it (Lightning's base hooks do nothing); False, running nothing, outside the
        lean case."""
        plan = self._lean_plan
        if plan is None or not plan.quiet_profiler:
            return False
        hook = plan.pass_hooks[index]
        module, strategy = plan.module, plan.strategy
        call._call_callback_hooks(self.trainer, hook, *args, **kwargs)
        if overrides(module, pl.LightningModule, hook):
            call_hook(module, module, hook, *args, **kwargs)
        if strategy_too and overrides(strategy, Strategy, hook):
            call_hook(strategy, module, hook, *args, **kwargs)
        return True

    def _on_evaluation_model_eval(self) -> None:
        """Follows ``_EvaluationLoop._on_evaluation_model_eval`` (unchanged 2.4.0 to 2.6.6):
        the module's modes captured, then its eval hook (without the profiler's wrapping)."""
        plan = self._lean_plan
        if plan is None or not plan.quiet_profiler:
            super()._on_evaluation_model_eval()
            return
        self._module_mode.capture(plan.module)
        call_hook(plan.module, plan.module, plan.pass_hooks[0])

    def _on_evaluation_start(self, *args: Any, **kwargs: Any) -> None:
        """Follows ``_EvaluationLoop._on_evaluation_start`` (unchanged 2.4.0 to 2.6.6)."""
        if not self._pass_hook(1, True, *args, **kwargs):
            super()._on_evaluation_start(*args, **kwargs)

    def _on_evaluation_epoch_start(self, *args: Any, **kwargs: Any) -> None:
        """Follows ``_EvaluationLoop._on_evaluation_epoch_start`` (unchanged 2.4.0 to 2.6.6)."""
        if not self._pass_hook(2, False, *args, **kwargs):
            super()._on_evaluation_epoch_start(*args, **kwargs)

    def _on_evaluation_epoch_end(self) -> None:
        """Follows ``_EvaluationLoop._on_evaluation_epoch_end`` (unchanged 2.4.0 to 2.6.6),
        then ``_LoggerConnector.on_epoch_end`` on the pass's results."""
        if not self._pass_hook(3, False):
            super()._on_evaluation_epoch_end()
            return
        connector, results = self.trainer._logger_connector, self._own_results()
        if results is None:
            connector.on_epoch_end()
        else:
            assert connector._first_loop_iter is None
            _take_epoch_metrics(connector, results)
            connector._current_fx = None

    def _on_evaluation_end(self, *args: Any, **kwargs: Any) -> None:
        """Follows ``_EvaluationLoop._on_evaluation_end`` (unchanged 2.4.0 to 2.6.6), then
        ``_LoggerConnector.reset_results`` on the pass's results."""
        if self._pass_hook(4, True, *args, **kwargs):
            results = self._own_results()
            if results is None:
                self.trainer._logger_connector.reset_results()
            else:
                results.reset()
                vars(self.trainer._logger_connector).update(_first_loop_iter=None, _current_fx=None)
        else:
            super()._on_evaluation_end(*args, **kwargs)

    def _store_dataloader_outputs(self) -> None:
        """Follows ``_EvaluationLoop._store_dataloader_outputs`` with
        ``_LoggerConnector.epoch_end_reached`` and ``update_eval_epoch_metrics`` (unchanged
        2.4.0 to 2.6.6), on the pass's results."""
        results = self._own_results()
        if results is None:
            super()._store_dataloader_outputs()
            return
        connector = self.trainer._logger_connector
        connector._first_loop_iter = None
        plan = self._lean_plan
        assert plan is not None
        logged = {} if plan.sanity_checking else _take_epoch_metrics(connector, results)
        self._logged_outputs.append(logged)

    def _own_results(self) -> Optional[_ResultCollection]:
        """``trainer._results`` (this loop's, found once per pass), or None outside the lean
        case."""
        plan = self._lean_plan
        return plan.results if plan is not None and plan.quiet_profiler else None

    def _on_before_fetch(self) -> None:
        """Follows ``_EvaluationLoop._on_before_fetch`` (unchanged 2.4.0 to 2.6.6): a profiler
        action around each fetch, which the pass-through profiler ignores."""
        plan = self._lean_plan
        if plan is None or not plan.quiet_profiler:
            super()._on_before_fetch()

    def _on_after_fetch(self) -> None:
        """Follows ``_EvaluationLoop._on_after_fetch`` (unchanged 2.4.0 to 2.6.6)."""
        plan = self._lean_plan
        if plan is None or not plan.quiet_profiler:
            super()._on_after_fetch()

    def _evaluation_step(
        self, batch: Any, batch_idx: int, dataloader_idx: int, dataloader_iter: Any
    ) -> None:
        """Follows ``_EvaluationLoop._evaluation_step`` (unchanged 2.4.0 to 2.6.6) for one
        dataloader and a ``(batch, batch_idx)`` step."""
        plan = self._lean_plan
        if plan is None or not plan.lean or self.restarting or dataloader_iter is not None:
            super()._evaluation_step(batch, batch_idx, dataloader_idx, dataloader_iter)
            return
        trainer = self.trainer
        module = plan.module
        strategy = plan.strategy
        progress = self.batch_progress
        connector = trainer._logger_connector

        batch = trainer.precision_plugin.convert_input(batch)
        if plan.before_transfer:
            batch = module._on_before_batch_transfer(batch, dataloader_idx=dataloader_idx)
        if plan.to_device:
            batch = call_hook(
                strategy, module, "batch_to_device", batch, dataloader_idx=dataloader_idx
            )
        progress.increment_ready()
        results = plan.results
        if results is None:
            connector.on_batch_start(batch, None)  # one dataloader: no index in the hooks
        else:  # _LoggerConnector.on_batch_start on the results it would find
            first = connector._first_loop_iter
            if first is None:
                connector._first_loop_iter = True
            elif first is True:
                connector._first_loop_iter = False
            results.batch = batch
            results.batch_size = None
            results.dataloader_idx = None
        call._call_callback_hooks(trainer, plan.start_hook, batch, batch_idx)
        if plan.module_batch_start:
            call_hook(module, module, plan.start_hook, batch, batch_idx)
        progress.increment_started()
        if plan.direct_step:  # Strategy.validation_step: the plain precision's empty context
            output = call_hook(module, module, plan.step_hook, batch, batch_idx)
        else:
            output = call._call_strategy_hook(trainer, plan.step_hook, batch, batch_idx)
        progress.increment_processed()
        call._call_callback_hooks(trainer, plan.end_hook, output, batch, batch_idx)
        if plan.module_batch_end:
            call_hook(module, module, plan.end_hook, output, batch, batch_idx)
        quiet = self._lean_log_count.calls == self._lean_logged_at_start
        if quiet:  # nothing logged this pass: the recompute would find nothing
            results = self._results
            results.batch = None
            results.batch_size = None
        else:
            connector.on_batch_end()
        progress.increment_completed()
        if not plan.sanity_checking:
            self._has_run = True
            seen = self._seen_batches_per_dataloader
            if not quiet:
                connector.update_eval_step_metrics(seen[dataloader_idx])
            seen[dataloader_idx] += 1
        if not progress.is_last_batch and trainer.received_sigterm:
            raise SIGTERMException


def _take_epoch_metrics(connector: Any, results: _ResultCollection) -> Dict[str, Any]:
    """What ``_LoggerConnector.update_eval_epoch_metrics`` and ``on_epoch_end`` do with the
    epoch's metrics (``connector.metrics`` with the epoch's end reached: on_step False), on
    ``results``, ``trainer._results``; returns the logged ones."""
    metrics = results.metrics(False)
    connector._progress_bar_metrics.update(metrics["pbar"])
    connector._callback_metrics.update(metrics["callback"])
    connector._logged_metrics.update(metrics["log"])
    return metrics["log"]
