"""The lean per-batch path: what Lightning runs between two ``train_batch`` calls, minus what a
``pytorch.Trainer`` run never uses.

Lightning's training-epoch loop and its backward/step chain are general: automatic optimization,
dataloader-iterator steps, restarts, profilers, precision plugins and strategies that change
each step. A ``TrialModule`` fit is one narrow case of them, and for that case most of the work
is calls that do nothing (hooks nobody overrides, a pass-through profiler entered for every
one of them, a signature inspection per batch, metrics recomputed when nothing was logged). Per
batch, Lightning (every release in ``versions.TABLE``, manual optimization; the steps that
differ between releases are marked with the release) against the lean path::

    Lightning's _TrainingEpochLoop.advance       lean advance (same order, same counters)
    ------------------------------------------   ---------------------------------------------
    SIGTERM flag broadcast (2.5.2 on, several     none: SignalWatcher agrees on stops
      ranks)
    next(data_fetcher), is_last_batch             same, without the pass-through profiler's
      (profiler start/stop around the fetch;        start and stop around the fetch; one loader
      fetcher -> combined loader -> mode            of known length: the four levels' counters
      iterator -> the loader's iterator)            and next(iterator) in one (_one_loader)
    convert_input, on_before_batch_transfer,      same; the plain precision plugin's
      batch_to_device (profiled strategy hook)      convert_input and module hooks the
                                                    TrialModule does not override are skipped
                                                    (they return the batch)
    increment_ready, logger on_batch_start        same
    on_train_batch_start: callbacks, module,      callbacks (hooks.py dispatch); module and
      strategy                                      strategy only where overridden
    -1 from the module: (2.6.0 on) mark the       same, as versions.SHAPE.marks_last_batch says
      last batch; processed; StopIteration
    increment_started; _build_kwargs (inspects    increment_started; (batch, batch_idx): the
      training_step's signature every batch)        TrialModule's fixed signature
    manual_optimization.run -> strategy hook ->   training_step called directly (one device),
      training_step (DDP: forward redirection,      or through the DDP wrapper's forward with
      patching forward with __setattr__)            forward shadowed in the module's __dict__
      context.backward -> manual_backward ->      strategy.pre_backward (DDP's flags set
        strategy.backward -> precision plugin       without nn.Module.__setattr__),
        pre/backward/post (profiled hooks)          on_before_backward, loss.backward,
                                                    on_after_backward, strategy.post_backward
                                                    (BackendFastPath)
      context.step_optimizer -> LightningOptimizer _on_before_step, optimizer.step(closure
        .step -> strategy -> precision ->           running on_before_optimizer_step),
        optimizer.step(wrapped closure)             _on_after_step
    increment_processed; LR schedulers (none      increment_processed (manual optimization
      under manual optimization)                    has no Lightning schedulers)
    on_train_batch_end: callbacks, module         callbacks; module only where overridden
    logger on_batch_end: recompute every logged   recomputed only when something was logged
      metric (progress bar: .item() each)           since the last recompute
    increment_completed, update_train_step_...    same

Between two batches (``done``, then ``advance``'s last step and ``on_advance_end``), Lightning
asks again, through property chains, what a manual-optimization fit already settles: whether
gradients accumulate (``_should_accumulate``, three times: never under manual optimization, which
Lightning allows only with ``accumulate_grad_batches=1``), whether a learning-rate scheduler
steps (Lightning steps none under manual optimization), which loop is active (``trainer.training``:
a string comparison of the stage's enum), and ``global_step`` through the module and strategy::

    Lightning                                    lean (same order, same results)
    ------------------------------------------   ---------------------------------------------
    done: _is_training_done (global_step via     the manual optimizer steps, max_batches and
      trainer.lightning_module, num_training_      is_last_batch read directly; anything else
      batches), _is_validation_done, should_stop   (should_stop, a restart): Lightning's done
    advance: val_loop.restarting = False (walks  only when the val loop (or a loop under it) is
      every attribute of the val loop)             restarting
    logger on_batch_start, update_train_step_     the same steps on this loop's own results,
      metrics (trainer._results, should_update_    while the stage is TRAINING (else
      logs through _active_loop)                   Lightning's)
    on_advance_end: validation if due (zero_grad  the same; the scheduler update (none under
      hook, val loop), update_lr_schedulers,       manual optimization) and the accumulation
      _batches_that_stepped += 1 unless            test (never accumulating) left out;
      accumulating, loggers saved on stop,         _skip_next_val (2.5.0 on) as
      SIGTERM                                      versions.SHAPE.skips_next_val says
Anything outside the narrow case (a restart, an iterator-style fetcher, a real profiler, a
precision plugin or strategy other than the plain ones, a Lightning release with no row in
``versions.TABLE``, ``DET_LIGHTNING_LEAN=0``) runs Lightning's own code, batch by batch.
``tests/integration/test_hooks.py`` traces every hook, counter and logged metric with and without
this path and requires them equal; its contract test fails when Lightning's code changes.
"""

from collections import OrderedDict
from typing import Any, NamedTuple, Optional

import lightning.pytorch as pl
from lightning.pytorch.loops.fetchers import _PrefetchDataFetcher
from lightning.pytorch.loops.loop import _Loop
from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.strategies import Strategy
from lightning.pytorch.trainer import call
from lightning.pytorch.trainer.states import RunningStage
from lightning.pytorch.utilities.combined_loader import CombinedLoader, _MaxSizeCycle

from det_lightning.adapters.lightning import hooks, log_count, versions
from det_lightning.adapters.lightning.calls import (
    batch_stays,
    call_hook,
    overrides,
    plain_run,
)
from det_lightning.adapters.lightning.lean_between import BetweenBatchesLoop
from det_lightning.adapters.lightning.lean_step import STEP_DDP, manual_step, step_kind

LEAN_ENV = versions.LEAN_ENV


def enabled() -> bool:
    """Whether the lean path may run with the installed Lightning (a row of
    ``versions.TABLE``) and environment."""
    return versions.lean_allowed()


def install(trainer: pl.Trainer) -> None:
    """Gives ``trainer``'s training-epoch loop the lean ``advance`` (when ``enabled()``)."""
    loop = trainer.fit_loop.epoch_loop
    if enabled() and type(loop) is _TrainingEpochLoop:
        loop.__class__ = LeanTrainingEpochLoop


class _Plan(NamedTuple):
    """What the lean ``advance`` may skip for one module and strategy, worked out per epoch."""

    lean: bool  # the narrow case holds (else: Lightning's advance)
    converts_input: bool  # the precision plugin's convert_input may change the batch
    before_transfer: bool  # the module overrides on_before_batch_transfer
    to_device: bool  # strategy.batch_to_device may change the batch
    module_batch_start: bool  # the module overrides on_train_batch_start
    strategy_batch_start: bool  # the strategy overrides on_train_batch_start
    step: str  # how training_step is called: STEP_DIRECT, STEP_DDP, or
    # "" (Lightning's _ManualOptimization.run)
    post_training_step: bool  # the strategy overrides the (deprecated) post_training_step
    module_batch_end: bool  # the module overrides on_train_batch_end
    marks_last_batch: bool  # a skipped batch (-1) is marked the last one (versions.Shape)
    val_has_loops: bool  # the val loop holds loops of its own (restarting walks into them)


def _plan(trainer: pl.Trainer) -> _Plan:
    module, strategy = trainer.lightning_module, trainer.strategy
    lean = plain_run(trainer)
    val_loop = trainer.fit_loop.epoch_loop.val_loop
    return _Plan(
        lean=lean,
        converts_input=type(trainer.precision_plugin).convert_input is not Precision.convert_input,
        before_transfer=overrides(module, pl.LightningModule, "on_before_batch_transfer"),
        to_device=not batch_stays(module, strategy),
        module_batch_start=overrides(module, pl.LightningModule, "on_train_batch_start"),
        strategy_batch_start=overrides(strategy, Strategy, "on_train_batch_start"),
        step=step_kind(module, strategy, trainer),
        post_training_step=overrides(strategy, Strategy, "post_training_step"),
        module_batch_end=overrides(module, pl.LightningModule, "on_train_batch_end"),
        marks_last_batch=versions.SHAPE is not None and versions.SHAPE.marks_last_batch,
        val_has_loops=any(isinstance(value, _Loop) for value in vars(val_loop).values()),
    )


class LeanTrainingEpochLoop(BetweenBatchesLoop):
    """Lightning's training-epoch loop whose ``advance`` takes the lean path when it can (and
    ``done`` and ``on_advance_end``: ``lean_between.BetweenBatchesLoop``)."""

    _lean_logged_seen = -1
    _lean_log_count: log_count.LogCount  # the module's (set on run start)
    _lean_plan: Optional[_Plan] = None
    _lean_hooks: Optional[hooks.BusyHooks] = None
    _lean_combined: Any = None  # the one training loader's CombinedLoader (see _one_loader)
    _lean_cycle: Any = None  # ... and its epoch's iterator, when the fetch may be inlined

    def on_run_start(self, data_fetcher: Any) -> None:
        trainer = self.trainer
        self._lean_plan = _plan(trainer)
        # the module and strategy (the same all epoch), read once rather than through
        # trainer.lightning_module's chain of properties before every batch
        self._lean_module = trainer.lightning_module
        self._lean_strategy = trainer.strategy
        self._lean_hooks = hooks.BusyHooks(trainer, ("on_train_batch_start", "on_train_batch_end"))
        self._lean_log_count = log_count.counter(self._lean_module)
        super().on_run_start(data_fetcher)  # (makes this epoch's iterator, when it does)
        self._lean_combined, self._lean_cycle = _one_loader(data_fetcher)

    def _on_before_fetch(self) -> None:
        """Follows ``_TrainingEpochLoop._on_before_fetch`` (unchanged 2.4.0 to 2.6.6): a
        profiler action around each fetch, with a name formatted for it, which the
        pass-through profiler of a lean run ignores."""
        plan = self._lean_plan
        if plan is None or not plan.lean:
            super()._on_before_fetch()

    def _on_after_fetch(self) -> None:
        """Follows ``_TrainingEpochLoop._on_after_fetch`` (unchanged 2.4.0 to 2.6.6)."""
        plan = self._lean_plan
        if plan is None or not plan.lean:
            super()._on_after_fetch()

    def advance(self, data_fetcher: Any) -> None:
        """Follows ``_TrainingEpochLoop.advance`` of the release ``versions.SHAPE.advance``
        names (2.4.0, 2.5.0, 2.5.2 or 2.6.0; the differences: the module docstring's table)."""
        plan = self._lean_plan
        if (
            plan is None
            or not plan.lean
            or self._restarting  # (the restarting property's value)
            or type(data_fetcher) is not _PrefetchDataFetcher
        ):
            super().advance(data_fetcher)
            return
        trainer: Any = self.trainer  # (its callbacks attribute is set untyped, by a connector)
        module = self._lean_module
        strategy = self._lean_strategy
        watch = self._lean_hooks
        assert watch is not None
        progress = self.batch_progress
        # (progress.increment_*(), inlined: the batch progress always has every counter)
        total: Any = progress.total  # (_ProcessedTracker: every counter)
        current: Any = progress.current
        val_loop = self.val_loop
        if val_loop._restarting or plan.val_has_loops:  # else the setter would change nothing
            val_loop.restarting = False

        cycle = self._lean_cycle
        if (
            cycle is not None
            and self._lean_combined._iterator is cycle
            and not data_fetcher.batches
        ):
            # next(data_fetcher) for one loader of known length: _PrefetchDataFetcher.__next__
            # (nothing prefetched), _DataFetcher.__next__ (the profiler calls are the lean
            # _on_before_fetch/_on_after_fetch: nothing), CombinedLoader.__next__ (the batch
            # itself: its spec is a leaf) and _MaxSizeCycle.__next__ (one iterator) in one
            if data_fetcher.done:
                raise StopIteration
            try:
                batch = next(cycle.iterators[0])
            except StopIteration:
                cycle._consumed[0] = True
                data_fetcher.done = True
                raise
            cycle._idx += 1
            fetched = data_fetcher.fetched = data_fetcher.fetched + 1
            data_fetcher.done = fetched >= data_fetcher.length  # type: ignore[operator] # (set)
        else:
            batch, _, __ = next(data_fetcher)
        batch_idx = current.ready  # self.batch_idx + 1
        progress.is_last_batch = data_fetcher.done
        if plan.converts_input:  # (the plain plugin's returns the batch)
            batch = trainer.precision_plugin.convert_input(batch)
        if plan.before_transfer:
            batch = module._on_before_batch_transfer(batch, dataloader_idx=0)
        if plan.to_device:
            batch = call_hook(strategy, module, "batch_to_device", batch, dataloader_idx=0)
        total.ready += 1
        current.ready += 1
        connector = trainer._logger_connector
        if trainer.state.stage is RunningStage.TRAINING:
            # _LoggerConnector.on_batch_start, on the results trainer._results finds in training
            first = connector._first_loop_iter
            if first is None:
                connector._first_loop_iter = True
            elif first is True:
                connector._first_loop_iter = False
            results = self._results
            results.batch = batch
            results.batch_size = None
            results.dataloader_idx = None
        else:
            connector.on_batch_start(batch)

        output: Any = None
        skip_rest = False
        if batch is None:
            self._warning_cache.warn(
                "train_dataloader yielded None. If this was on purpose, ignore this warning..."
            )
        else:
            busy = watch.busy if trainer.callbacks == watch.seen else watch.refresh()
            if "on_train_batch_start" in busy:
                _callback_hooks(watch, trainer, module, "on_train_batch_start", batch, batch_idx)
            response = None
            if plan.module_batch_start:
                response = call_hook(module, module, "on_train_batch_start", batch, batch_idx)
            if plan.strategy_batch_start:
                call_hook(strategy, module, "on_train_batch_start", batch, batch_idx)
            skip_rest = response == -1
            if skip_rest:
                if plan.marks_last_batch:
                    progress.increment_by(0, is_last_batch=True)
            else:
                total.started += 1
                current.started += 1
                if plan.step:
                    output = manual_step(
                        self.manual_optimization,
                        module,
                        strategy,
                        batch,
                        batch_idx=batch_idx,
                        ddp=plan.step == STEP_DDP,
                        post_training_step=plan.post_training_step,
                    )
                else:
                    output = self.manual_optimization.run(
                        OrderedDict(batch=batch, batch_idx=batch_idx)
                    )
        total.processed += 1
        current.processed += 1
        if skip_rest:
            raise StopIteration

        busy = watch.busy if trainer.callbacks == watch.seen else watch.refresh()
        if "on_train_batch_end" in busy:
            if watch.overriding is None:
                call._call_callback_hooks(trainer, "on_train_batch_end", output, batch, batch_idx)
            else:  # (_callback_hooks, inlined for the one hook most fits have a callback for)
                fields = module.__dict__
                previous = fields["_current_fx_name"]
                fields["_current_fx_name"] = "on_train_batch_end"
                for callback in watch.overriding["on_train_batch_end"]:
                    callback.on_train_batch_end(trainer, module, output, batch, batch_idx)
                fields["_current_fx_name"] = previous
        if plan.module_batch_end:
            call_hook(module, module, "on_train_batch_end", output, batch, batch_idx)
        logged = self._lean_log_count.calls
        if logged != self._lean_logged_seen:
            connector.on_batch_end()
            self._lean_logged_seen = logged
        else:  # nothing logged since the last recompute: only let go of the batch
            results = self._results
            results.batch = None
            results.batch_size = None
        total.completed += 1
        current.completed += 1
        if trainer.state.stage is RunningStage.TRAINING:
            # _LoggerConnector.update_train_step_metrics under manual optimization, with
            # should_update_logs for the fit loop (the active loop in training)
            # (attributes Lightning's Trainer sets in its set-up, untyped)
            every = trainer.log_every_n_steps  # type: ignore[attr-defined]
            if (
                every != 0
                and ((self._batches_that_stepped + 1) % every == 0 or trainer.should_stop)
            ) or trainer.fast_dev_run:  # type: ignore[attr-defined]
                connector.log_metrics(connector.metrics["log"])
        else:
            connector.update_train_step_metrics()


def _one_loader(data_fetcher: Any) -> "tuple[Any, Any]":
    """``(combined loader, its iterator)`` when ``next(data_fetcher)`` may be inlined (the
    lean ``advance``): a ``_PrefetchDataFetcher`` of known length (it prefetches nothing) over
    a ``CombinedLoader`` of one loader, not a collection of them, iterated in the
    ``max_size_cycle`` mode training uses; else ``(None, None)``. Follows
    ``_PrefetchDataFetcher.__next__``, ``_DataFetcher.__next__`` (lightning.pytorch.loops.
    fetchers), ``CombinedLoader.__next__`` and ``_MaxSizeCycle.__next__`` (lightning.pytorch.
    utilities.combined_loader), unchanged 2.4.0 to 2.6.6."""
    fetcher: Any = data_fetcher
    if type(fetcher) is not _PrefetchDataFetcher or fetcher.length is None:
        return None, None
    combined: Any = fetcher._combined_loader
    if type(combined) is not CombinedLoader or not combined._spec.is_leaf():
        return None, None  # (not a leaf: a dict or list of loaders, whose batches are collections)
    cycle: Any = combined._iterator
    if type(cycle) is not _MaxSizeCycle or len(cycle.iterators) != 1:
        return None, None
    if fetcher.iterator is not combined:
        return None, None
    return combined, cycle


def _callback_hooks(
    watch: hooks.BusyHooks, trainer: pl.Trainer, module: pl.LightningModule, name: str, *args: Any
) -> None:
    """``call._call_callback_hooks(trainer, name, *args)`` for a hook in ``watch.busy``: the
    lean dispatch's loop over the callbacks it would call (``watch.overriding``), or the
    dispatch itself when it is not in use."""
    overriding = watch.overriding
    if overriding is None:
        call._call_callback_hooks(trainer, name, *args)
        return
    fields = module.__dict__  # (set_fx_name's assignment)
    previous = fields["_current_fx_name"]
    fields["_current_fx_name"] = name
    for callback in overriding[name]:
        getattr(callback, name)(trainer, module, *args)
    fields["_current_fx_name"] = previous
