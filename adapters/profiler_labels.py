"""Torch's profiler labels, paid for only while a profiler records.

torch labels every ``Optimizer.step()``, every ``Optimizer.zero_grad()`` and every batch a
``DataLoader`` iterator yields with ``torch.autograd.profiler.record_function``. A label costs
about 4 µs of CPU whether a profiler records or not (two dispatcher calls and a script object):
three per training batch, about 13 µs of the 210 µs that the overhead-bound MLP step takes on
the 2-core machine, and more once the allocator is involved. Determined pays them on every
batch. While no profiler records (``recording()``, asked on every call), the training loop
calls what each labelled function calls, without the label::

    torch's labelled call       what runs here instead
    --------------------------  -----------------------------------------------------------------
    optimizer.step()            the step that torch's wrapper (Optimizer.profile_hook_step) wraps,
                                when no step hook is registered (the wrapper's only other work:
                                calling those hooks, and _optimizer_step_code, an empty function
                                for the profiler's Python tracer); where an LR scheduler wrapped
                                the optimizer's step (LRScheduler.__init__), first what its
                                wrapper does: ``optimizer._opt_called = True``
    optimizer.zero_grad()       ``p.grad = None`` for each parameter that has a gradient (what
                                set_to_none=True, the default, does), when the class keeps
                                torch's zero_grad
    next(loader_iterator)       ``iterator._next_data()``, counted as ``__next__`` counts it, for
                                map-style data (``__next__``'s only other work: a warning about an
                                iterable dataset's length)

Each applies only where the installed torch's function is one read here (its ``fingerprint`` in
``READ``); another torch, ``DET_LIGHTNING_LEAN=0`` or ``DET_LIGHTNING_LEAN_LABELS=0`` calls
torch's own. A profiler started mid-run (``context.set_profiler``, ``torch.profiler.profile``)
sees every label from its first step on: ``recording()`` reads torch's own switches.
"""

import functools
import importlib
import inspect
from typing import Any, Callable, Dict, FrozenSet, Optional

import torch
from torch.optim.optimizer import (
    Optimizer,
    _global_optimizer_post_hooks,
    _global_optimizer_pre_hooks,
)
from torch.utils.data.dataloader import _BaseDataLoaderIter, _DatasetKind

from det_lightning.adapters.lightning import versions

LABELS_ENV = "DET_LIGHTNING_LEAN_LABELS"  # 0/false/no/off: every label paid, as torch does

STEP = "torch.optim.optimizer:Optimizer.profile_hook_step"
SCHEDULED_STEP = "torch.optim.lr_scheduler:LRScheduler.__init__"
ZERO_GRAD = "torch.optim.optimizer:Optimizer.zero_grad"
NEXT = "torch.utils.data.dataloader:_BaseDataLoaderIter.__next__"

# The functions followed, by the fingerprints of the torch releases read (wheels' sources).
# 2.11.0 (the GPU image's torch) differs from 2.13.0 in STEP and SCHEDULED_STEP by a
# lint-suppression comment on the signature alone (D102, D107).
READ: Dict[str, FrozenSet[str]] = {
    STEP: frozenset({"025aa7b98306", "6dd3565e36bf"}),  # 2.13.0, 2.14.1; 2.11.0
    SCHEDULED_STEP: frozenset({"37676bc017fa", "77a16357950a"}),  # 2.13.0, 2.14.1; 2.11.0
    ZERO_GRAD: frozenset({"d8f8c317c527"}),  # 2.11.0, 2.13.0, 2.14.1
    NEXT: frozenset({"6e242e666e66"}),  # 2.11.0, 2.13.0, 2.14.1
}

_profiler_enabled: Callable[[], bool] = torch._C._autograd._profiler_enabled
_autograd_profiler: Any = torch.autograd.profiler


def recording() -> bool:
    """Whether a profiler records in this process: torch's thread's own switch (the Kineto and
    legacy profilers, on-demand tracing) or the flag its Python profilers set (any thread)."""
    return _profiler_enabled() or bool(getattr(_autograd_profiler, "_is_profiler_enabled", False))


def installed_fingerprint(name: str) -> Optional[str]:
    """``versions.fingerprint`` of the installed torch's ``name`` (``"module:qualified.name"``);
    None where its source cannot be read (a frozen build)."""
    module_name, _, qualified = name.partition(":")
    found: Any = importlib.import_module(module_name)
    for part in qualified.split("."):
        found = getattr(found, part)
    try:
        return versions.fingerprint(inspect.getsource(found))
    except (OSError, TypeError):
        return None


@functools.lru_cache(maxsize=None)
def unchanged(name: str) -> bool:
    """Whether the installed torch's ``name`` is one ``READ`` holds."""
    return installed_fingerprint(name) in READ[name]


def _no_step(*args: Any, **kwargs: Any) -> None:
    return None


def step_hooks(optimizer: Optimizer) -> bool:
    """Whether a step hook (the optimizer's own, or a global one) would see ``optimizer``'s
    step: torch's step wrapper calls them."""
    return bool(
        optimizer._optimizer_step_pre_hooks
        or optimizer._optimizer_step_post_hooks
        or _global_optimizer_pre_hooks
        or _global_optimizer_post_hooks
    )


class LabelFree:
    """What this fit runs without torch's labels; decided once, when it is made.

    Args:
        allowed: False turns every piece off (Lightning's own loop runs, or the environment
            says so); True leaves each to ``unchanged``.
    """

    def __init__(self, allowed: bool = True) -> None:
        allowed = allowed and not versions.switched_off(LABELS_ENV)
        self.steps = allowed and unchanged(STEP)
        # the code object of torch's step wrapper, which every wrapped step shares
        self._step_wrapper = Optimizer.profile_hook_step(_no_step).__code__ if self.steps else None
        self.scheduled_steps = self.steps and unchanged(SCHEDULED_STEP)
        self.zeroes = allowed and unchanged(ZERO_GRAD)
        self.fetches = allowed and unchanged(NEXT)

    def step(self, optimizer: Optimizer) -> Any:
        """``optimizer.step()``, without its label while no profiler records."""
        if step_hooks(optimizer):
            return optimizer.step()
        return self.step_without_hooks(optimizer)

    def step_without_hooks(self, optimizer: Optimizer) -> Any:
        """``step`` for a caller that found no step hook registered (``step_hooks``)."""
        wrapped = type(optimizer).step
        if (
            not self.steps
            or getattr(wrapped, "__code__", None) is not self._step_wrapper
            or recording()
        ):
            return optimizer.step()
        own = optimizer.__dict__.get("step")
        if own is not None:  # the instance's step replaced: follow only an LR scheduler's
            if not (
                self.scheduled_steps
                and getattr(own, "_wrapped_by_lr_sched", False)
                and getattr(own, "__wrapped__", None) is wrapped
            ):
                return optimizer.step()
            optimizer._opt_called = True  # type: ignore[attr-defined]
        return wrapped.__wrapped__(optimizer)  # type: ignore[attr-defined]

    def zero_grad(self, optimizer: Optimizer) -> None:
        """``optimizer.zero_grad()``, without its label while no profiler records."""
        if (
            not self.zeroes
            or type(optimizer).zero_grad is not Optimizer.zero_grad
            or "zero_grad" in optimizer.__dict__  # (replaced on the instance)
            or recording()
        ):
            optimizer.zero_grad()
            return
        for group in optimizer.param_groups:
            for parameter in group["params"]:
                if parameter.grad is not None:
                    parameter.grad = None

    def fetcher(self, iterator: Any) -> Callable[[], Any]:
        """``next(iterator)`` as a function; for a torch loader's iterator over map-style data,
        without its label while no profiler records."""
        if not (
            self.fetches
            and isinstance(iterator, _BaseDataLoaderIter)
            and type(iterator).__next__ is _BaseDataLoaderIter.__next__
            and iterator._dataset_kind == _DatasetKind.Map
        ):
            return iterator.__next__
        labelled = iterator.__next__
        next_data = iterator._next_data

        def fetch() -> Any:
            if iterator._sampler_iter is None or recording():
                return labelled()
            data: Any = next_data()
            iterator._num_yielded += 1
            return data

        return fetch


def report() -> str:
    """One line per function followed: read or not, with the installed torch's fingerprint
    (``scripts/gpu-check.sh`` logs it, so that a torch not read yet can be added to ``READ``)."""
    lines = [f"torch {torch.__version__}: profiler labels left out where read"]
    for name in READ:
        found = installed_fingerprint(name)
        state = "read" if found in READ[name] else "NOT READ (its labels stay)"
        lines.append(f"  {name}: {found or 'no source'} {state}")
    return "\n".join(lines)
