"""The calls the lean pieces (``lean*.py``, ``hooks.py``) share: a hook
call as Lightning's ``call`` module makes it under the pass-through profiler, and the checks of
what a module or strategy overrides."""

import inspect
from typing import Any, Optional

import lightning.pytorch as pl
from lightning.pytorch.profilers import PassThroughProfiler
from lightning.pytorch.strategies import Strategy


def overrides(obj: Any, base: type, name: str) -> bool:
    """Whether ``obj`` replaces ``base``'s ``name`` (in its class or on the instance)."""
    return getattr(type(obj), name) is not getattr(base, name) or name in vars(obj)


def set_fx_name(module: pl.LightningModule, name: Optional[str]) -> None:
    """Sets ``module._current_fx_name`` without ``nn.Module.__setattr__``'s search of the
    parameter, buffer and submodule tables (it is a plain attribute; Lightning sets it around
    every hook, a third of what a dispatch of nothing cost)."""
    module.__dict__["_current_fx_name"] = name


def call_hook(owner: Any, module: pl.LightningModule, name: str, *args: Any, **kwargs: Any) -> Any:
    """``owner.<name>(...)`` with ``module._current_fx_name`` set meanwhile: Lightning's
    ``_call_lightning_module_hook`` (owner: the module) or ``_call_strategy_hook`` (owner: the
    strategy) under the pass-through profiler.

    Follows ``lightning.pytorch.trainer.call._call_lightning_module_hook`` and
    ``_call_strategy_hook``, the same in every release of ``versions.TABLE`` (2.4.0 to 2.6.6)."""
    previous = module._current_fx_name
    set_fx_name(module, name)
    output = getattr(owner, name)(*args, **kwargs)
    set_fx_name(module, previous)
    return output


def _hands_back(self: Any, batch: Any, device: Any, dataloader_idx: int) -> Any:
    return batch


def returns_batch(hook: Any) -> bool:
    """Whether ``hook`` (a ``transfer_batch_to_device``, bound or not) is ``return batch`` and
    nothing else: the same bytecode as a function of the hook's four parameters that returns
    its second. No marker on the module is needed, and a hook that does anything more is not
    taken for one.

    >>> class Keeps:
    ...     def transfer_batch_to_device(self, batch, device, dataloader_idx):
    ...         # a comment, or a docstring, is no code
    ...         return batch
    >>> class Moves:
    ...     def transfer_batch_to_device(self, batch, device, dataloader_idx):
    ...         return batch.to(device)
    >>> returns_batch(Keeps().transfer_batch_to_device), returns_batch(Moves.transfer_batch_to_device)
    (True, False)
    """
    function = getattr(hook, "__func__", hook)
    code, plain = getattr(function, "__code__", None), _hands_back.__code__
    return (
        code is not None
        and code.co_code == plain.co_code
        and code.co_argcount == plain.co_argcount
        and code.co_kwonlyargcount == 0
        and not code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
    )


def plain_run(trainer: pl.Trainer) -> bool:
    """The setting every lean piece assumes: manual optimization, no real profiler."""
    module = trainer.lightning_module
    return (
        module is not None
        and not module.automatic_optimization
        and type(getattr(trainer, "profiler", None)) is PassThroughProfiler
    )


def batch_stays(module: pl.LightningModule, strategy: Strategy) -> bool:
    """Whether ``strategy.batch_to_device`` would hand the batch back unchanged: the module's
    ``transfer_batch_to_device`` is ``return batch`` (``TrialModule``'s: the context moves
    batches) and nothing overrides the rest of the chain. Follows ``Strategy.batch_to_device``
    and ``LightningModule._apply_batch_transfer_handler``, unchanged 2.4.0 to 2.6.6."""
    return (
        returns_batch(getattr(module, "transfer_batch_to_device", None))
        and not overrides(module, pl.LightningModule, "on_after_batch_transfer")
        and type(strategy).batch_to_device is Strategy.batch_to_device
    )
