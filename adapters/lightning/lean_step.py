"""The lean optimization step: ``training_step``, ``manual_backward`` and
``LightningOptimizer.step()`` for a ``TrialModule`` fit, without the layers that change nothing
for a plain strategy (one device or DDP) and the plain precision plugin.

``lean.py``'s epoch loop calls ``manual_step`` for each batch (where ``step_kind`` allows);
``BackendFastPath`` is what ``context.backward`` and ``context.step_optimizer`` call (the
``TrialModule``'s backend picks it once per fit). What each follows in Lightning, and what it
leaves out, is in ``lean.py``'s table; every function followed has its fingerprint in
``versions.UNCHANGED``.
"""

from typing import Any, Dict, Optional

import lightning.pytorch as pl
import torch
from lightning.pytorch.core.optimizer import LightningOptimizer, do_nothing_closure
from lightning.pytorch.loops.optimization.manual import ManualResult
from lightning.pytorch.overrides.distributed import _find_tensors
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy, Strategy
from lightning.pytorch.strategies.ddp import _DDPForwardRedirection
from lightning.pytorch.trainer import call
from torch.nn.parallel import DistributedDataParallel
from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks

from det_lightning.adapters import profiler_labels
from det_lightning.adapters.lightning import hooks, versions
from det_lightning.adapters.lightning.calls import call_hook, overrides, plain_run, set_fx_name

STEP_DIRECT = "direct"  # strategy.training_step would just call module.training_step
STEP_DDP = "ddp"  # ... would route it through the DDP wrapper's forward (see _ddp_training_step)


def step_kind(module: pl.LightningModule, strategy: Strategy, trainer: pl.Trainer) -> str:
    """How the lean path may call ``training_step`` for this strategy: the plain precision
    plugin (no step context) on one device (a direct call) or under plain DDP (its forward
    redirection, reproduced); anything else is Lightning's (``""``)."""
    if type(trainer.precision_plugin) is not Precision:
        return ""
    if type(strategy) is SingleDeviceStrategy and strategy.model is module:
        return STEP_DIRECT
    if (
        type(strategy) is DDPStrategy
        and isinstance(strategy.model, DistributedDataParallel)
        and strategy.model.module is module
        and type(strategy._forward_redirection) is _DDPForwardRedirection
    ):
        return STEP_DDP
    return ""


def _ddp_training_step(
    strategy: Strategy, module: pl.LightningModule, batch: Any, batch_idx: int
) -> Any:
    """``DDPStrategy.training_step`` under manual optimization and the plain precision
    plugin: the call goes through the DDP wrapper's forward (its reducer bookkeeping, buffer
    broadcasts) into ``training_step``, as Lightning's ``_DDPForwardRedirection`` routes it,
    and the wrapper leaves the gradient reduction to ``manual_backward``, as that class's two
    hooks do. The module's ``forward`` is shadowed through its ``__dict__``, without
    ``nn.Module.__setattr__``. Follows ``Strategy.training_step``, ``_ForwardRedirection`` and
    ``_DDPForwardRedirection`` (lightning.pytorch.strategies), unchanged 2.4.0 to 2.6.6."""
    ddp: Any = strategy.model

    fields = ddp.__dict__  # (the flag's assignment, without nn.Module.__setattr__'s checks)

    def redirected(*args: Any) -> Any:
        del module.__dict__["forward"]  # the step may call the module's real forward
        output = module.training_step(*args)
        fields["require_backward_grad_sync"] = False
        return output

    module.__dict__["forward"] = redirected
    try:
        output = ddp(batch, batch_idx)
    finally:
        module.__dict__.pop("forward", None)
    fields["require_backward_grad_sync"] = True
    return output


def _prepare_for_backward(model: Any, loss: torch.Tensor) -> None:
    """``DDPStrategy.pre_backward`` under manual optimization: Lightning's
    ``prepare_for_backward`` (lightning.pytorch.overrides.distributed, unchanged 2.4.0 to
    2.6.6), its flag assigned without ``nn.Module.__setattr__`` (whose checks for a parameter,
    a module or a buffer cost more than the rest: a bool is none of them)."""
    if not isinstance(model, DistributedDataParallel):
        return
    fields = model.__dict__
    if torch.is_grad_enabled() and fields["require_backward_grad_sync"]:
        fields["require_forward_param_sync"] = True
        args = (
            list(_find_tensors(loss))
            if model.find_unused_parameters and not model.static_graph
            else []
        )
        reducer = model.reducer
        reducer._rebuild_buckets()
        reducer.prepare_for_backward(args)
    else:
        fields["require_forward_param_sync"] = False


def manual_step(
    manual: Any,
    module: pl.LightningModule,
    strategy: Strategy,
    batch: Any,
    *,
    batch_idx: int,
    ddp: bool,
    post_training_step: bool,
) -> Any:
    """``_ManualOptimization.run`` for a ``step_kind`` the lean path reproduces: the
    optimizers count their steps into the loop's progress while ``training_step`` runs, as
    Lightning has them do. Follows ``_ManualOptimization.run`` (on_run_start, advance,
    on_run_end; lightning.pytorch.loops.optimization.manual), unchanged 2.4.0 to 2.6.6."""
    optimizers = strategy._lightning_optimizers
    for optimizer in optimizers:
        optimizer._on_before_step = manual._on_before_step
        optimizer._on_after_step = manual._on_after_step
    output: Any = {}
    try:
        if ddp:  # Lightning's _call_strategy_hook: the strategy's step, under the step's name
            previous = module._current_fx_name
            set_fx_name(module, "training_step")
            step_output = _ddp_training_step(strategy, module, batch, batch_idx)
            set_fx_name(module, previous)
        else:  # (call_hook, inlined: set_fx_name's assignment)
            fields = module.__dict__
            previous = fields["_current_fx_name"]
            fields["_current_fx_name"] = "training_step"
            step_output = module.training_step(batch, batch_idx)
            fields["_current_fx_name"] = previous
        del batch
        if post_training_step:  # (deprecated; the base strategy's does nothing)
            strategy.post_training_step()
        if step_output is None and manual.output_result_cls is ManualResult:
            output = {}  # what ManualResult makes of None (every release of the table)
        else:
            output = manual.output_result_cls.from_training_step_output(step_output).asdict()
    except StopIteration:  # Lightning's run() swallows it at this level too
        pass
    manual._restarting = False
    for optimizer in optimizers:
        optimizer._on_before_step = do_nothing_closure
        optimizer._on_after_step = do_nothing_closure
    return output


_FAST_PATH_HOOKS = ("on_before_backward", "on_after_backward", "on_before_optimizer_step")


class BackendFastPath:
    """``manual_backward`` and ``LightningOptimizer.step()`` without the layers that change
    nothing for a plain strategy (single device or DDP) and the plain precision plugin.

    ``applies(trainer)`` decides once per fit; each call then does what Lightning's chain does,
    in its order: the same hooks (callbacks through the dispatch, the module's where it
    overrides them), the strategy's pre/post backward (DDP's ``prepare_for_backward``), the
    optimizer's progress counters, ``on_before_optimizer_step`` inside ``optimizer.step``.

    ``backward`` follows ``LightningModule.manual_backward`` -> ``Strategy.backward`` ->
    ``Precision.pre_backward/backward/post_backward``; ``step`` follows
    ``LightningOptimizer.step`` -> ``Strategy.optimizer_step`` -> ``Precision.optimizer_step``
    and ``_after_closure``: all unchanged 2.4.0 to 2.6.6 (``DDPStrategy.post_backward``, added
    in 2.6.0, is called as Lightning calls it).
    """

    def __init__(
        self, trainer: pl.Trainer, labels: Optional[profiler_labels.LabelFree] = None
    ) -> None:
        self.trainer: Any = trainer  # (its callbacks attribute is set untyped, by a connector)
        self.module = module = trainer.lightning_module
        self.strategy = strategy = trainer.strategy
        self.module_hooks = {
            name for name in _FAST_PATH_HOOKS if overrides(module, pl.LightningModule, name)
        }
        # The base strategy's pre/post backward do nothing (a single device's): not called, and
        # post_backward's detached loss not made.
        self.pre_backward = overrides(strategy, Strategy, "pre_backward")
        # DDP's (manual optimization: prepare the reducer), done here when it is DDPStrategy's
        self.ddp_pre_backward = (
            self.pre_backward and type(strategy).pre_backward is DDPStrategy.pre_backward
        )
        self.post_backward = overrides(strategy, Strategy, "post_backward")
        # With the lean dispatch, a hook no callback overrides is not dispatched (nothing runs).
        self.watch = hooks.BusyHooks(trainer, _FAST_PATH_HOOKS)
        # The manual-optimization loop's step hooks, which the step inlines (the optimizer's
        # step counters; the pass-through profiler's start and stop do nothing).
        manual = trainer.fit_loop.epoch_loop.manual_optimization
        self.manual_hooks = (manual._on_before_step, manual._on_after_step)
        self.optim_step_progress = manual.optim_step_progress
        self._closure_optional: Dict[type, bool] = {}  # _closure_optional_kind, per class
        # optimizer.step() without torch's profiler label while no profiler records
        self.labels = labels if labels is not None else profiler_labels.LabelFree()

    @staticmethod
    def applies(trainer: pl.Trainer) -> bool:
        if not versions.lean_allowed() or not plain_run(trainer):
            return False
        strategy = trainer.strategy
        module = trainer.lightning_module
        plain_strategy = type(strategy) in (SingleDeviceStrategy, DDPStrategy)
        averaging = getattr(strategy, "_model_averager", None) is not None
        return (
            plain_strategy
            and not averaging
            and type(trainer.precision_plugin) is Precision
            and type(strategy).backward is Strategy.backward
            and not overrides(module, pl.LightningModule, "backward")
            and not overrides(module, pl.LightningModule, "manual_backward")
        )

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        trainer, module, strategy, watch = self.trainer, self.module, self.strategy, self.watch
        if self.ddp_pre_backward:
            _prepare_for_backward(strategy.model, loss)
        elif self.pre_backward:
            strategy.pre_backward(loss)
        busy = watch.busy if trainer.callbacks == watch.seen else watch.refresh()
        if "on_before_backward" in busy:
            call._call_callback_hooks(trainer, "on_before_backward", loss)
        if "on_before_backward" in self.module_hooks:
            call_hook(module, module, "on_before_backward", loss)
        loss.backward(*args, **kwargs)
        detached = loss.detach() if self.post_backward else None
        busy = watch.busy if trainer.callbacks == watch.seen else watch.refresh()
        if "on_after_backward" in busy:
            call._call_callback_hooks(trainer, "on_after_backward")
        if "on_after_backward" in self.module_hooks:
            call_hook(module, module, "on_after_backward")
        if self.post_backward:
            strategy.post_backward(detached)  # type: ignore[arg-type]

    def step(self, lightning_optimizer: LightningOptimizer) -> Optional[Any]:
        # LightningOptimizer makes a subclass per optimizer class ("LightningSGD"); a step
        # replaced anywhere in it takes Lightning's path.
        if type(lightning_optimizer).step is not LightningOptimizer.step:
            return lightning_optimizer.step()
        trainer, module, watch = self.trainer, self.module, self.watch
        optimizer = lightning_optimizer._optimizer  # (the optimizer property's value)
        hooked = "on_before_optimizer_step" in self.module_hooks
        busy = watch.busy if trainer.callbacks == watch.seen else watch.refresh()
        before, after = lightning_optimizer._on_before_step, lightning_optimizer._on_after_step
        inline = before == self.manual_hooks[0] and after == self.manual_hooks[1]
        if inline:  # _ManualOptimization._on_before_step: increment_ready, profiler start
            counts = self.optim_step_progress
            counts.total.ready += 1
            counts.current.ready += 1
        else:
            before()
        plain = self._closure_optional.get(type(optimizer))
        if plain is None:
            plain = self._closure_optional[type(optimizer)] = _closure_optional_kind(
                type(optimizer)
            )
        if (
            not hooked
            and "on_before_optimizer_step" not in busy
            and plain
            and not (  # (profiler_labels.step_hooks, inlined)
                optimizer._optimizer_step_pre_hooks
                or optimizer._optimizer_step_post_hooks
                or _global_optimizer_pre_hooks
                or _global_optimizer_post_hooks
            )
        ):
            # Lightning's closure would run no hook: the step without one, as Determined
            # steps (an optimizer of torch.optim skips a closure of None).
            output = self.labels.step_without_hooks(optimizer)
        else:

            def closure() -> None:  # Lightning's do-nothing closure, then _after_closure's hooks
                busy = watch.busy if trainer.callbacks == watch.seen else watch.refresh()
                if "on_before_optimizer_step" in busy:
                    call._call_callback_hooks(trainer, "on_before_optimizer_step", optimizer)
                if hooked:
                    call_hook(module, module, "on_before_optimizer_step", optimizer)
                # Lightning clips gradients here only under automatic optimization.

            output = optimizer.step(closure=closure)  # type: ignore[arg-type]
        if inline:  # _ManualOptimization._on_after_step: profiler stop, increment_completed
            counts.total.completed += 1
            counts.current.completed += 1
        else:
            after()
        return output


def _closure_optional(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer.step()`` does what ``optimizer.step(closure=<returns None>)`` does:
    one of torch.optim's own classes other than LBFGS (which needs its closure's loss), with no
    step hooks (they see the step's arguments)."""
    return _closure_optional_kind(type(optimizer)) and not profiler_labels.step_hooks(optimizer)


def _closure_optional_kind(kind: type) -> bool:
    """Whether ``kind``'s step skips a closure of None: torch.optim's own optimizers but LBFGS."""
    return kind.__module__.startswith("torch.optim.") and kind is not torch.optim.LBFGS
