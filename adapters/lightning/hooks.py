"""Lean callback-hook dispatch: Lightning calls only the callback hooks that someone overrides.

For every hook, before and after every batch, Lightning's ``call._call_callback_hooks`` formats a
debug message, asks each callback for ``state_key`` (a property that builds a string) and
enters the profiler, for every callback, even when the hook is ``Callback``'s empty default.
With the default (pass-through) profiler none of that has an effect. For the trainers
``pytorch.Trainer`` builds, the dispatch below calls exactly the callbacks whose hook is not the
empty default, in the same order, with the same ``_current_fx_name`` set on the module; a real
profiler, a Lightning release with no row in ``versions.TABLE`` or
``DET_LIGHTNING_LEAN_HOOKS=0`` gives Lightning's own dispatch back.
``tests/integration/test_hooks.py`` checks that a callback overriding every hook sees the same
calls and state either way, and that Lightning still dispatches through the function replaced
here.
"""

import threading
from typing import Any, Dict, FrozenSet, Iterable, List, Optional

from lightning.pytorch.callbacks import Callback, Checkpoint, EarlyStopping
from lightning.pytorch.profilers import PassThroughProfiler
from lightning.pytorch.trainer import call

from det_lightning.adapters.lightning import versions
from det_lightning.adapters.lightning.calls import set_fx_name

LEAN_HOOKS_ENV = "DET_LIGHTNING_LEAN_HOOKS"

_lightning_dispatch = call._call_callback_hooks
_PLAN = "_det_lightning_hook_plan"


def enabled() -> bool:
    """Whether the lean dispatch may be used: the installed Lightning has a row in
    ``versions.TABLE`` and neither ``DET_LIGHTNING_LEAN_HOOKS`` nor ``DET_LIGHTNING_LEAN``
    turns it off."""
    return versions.lean_allowed(LEAN_HOOKS_ENV)


_fits_using = 0  # fits between use_lean_dispatch and release, in this process
_install = threading.Lock()


def use_lean_dispatch(trainer: Any) -> None:
    """Marks ``trainer`` for the lean dispatch and installs it in Lightning's ``call`` module
    for as long as a fit uses it (``release`` takes it out after the last one)."""
    global _fits_using
    if not enabled():
        return
    setattr(trainer, _PLAN, {})
    with _install:
        _fits_using += 1
        call._call_callback_hooks = _lean_dispatch


def release(trainer: Any) -> None:
    """Ends ``trainer``'s use of the lean dispatch (its fit is over); after the last fit that
    used it, Lightning's own ``_call_callback_hooks`` is back in its module, so nothing of
    det_lightning stays in Lightning once no fit runs."""
    global _fits_using
    if getattr(trainer, _PLAN, None) is None:
        return
    setattr(trainer, _PLAN, None)
    with _install:
        _fits_using -= 1
        if _fits_using == 0 and call._call_callback_hooks is _lean_dispatch:
            call._call_callback_hooks = _lightning_dispatch


def in_use(trainer: Any) -> bool:
    """Whether ``trainer``'s callback hooks go through the lean dispatch (``use_lean_dispatch``
    marked it, and the dispatch is installed)."""
    return getattr(trainer, _PLAN, None) is not None and call._call_callback_hooks is _lean_dispatch


def overridden(callbacks: Iterable[Callback], hook_names: Iterable[str]) -> FrozenSet[str]:
    """Those of ``hook_names`` that some callback in ``callbacks`` overrides: the lean dispatch
    of any other calls nothing.

    >>> class Saver(Callback):
    ...     def on_after_backward(self, trainer, pl_module): pass
    >>> sorted(overridden([Callback(), Saver()], ["on_before_backward", "on_after_backward"]))
    ['on_after_backward']
    """
    return frozenset(name for name in hook_names if any(_overrides(cb, name) for cb in callbacks))


class BusyHooks:
    """Which of ``names`` to dispatch to ``trainer``'s callbacks, for a hot path that skips the
    dispatch of a hook nobody overrides (the lean dispatch would call nothing for it). The path
    reads ``busy`` while ``trainer.callbacks == seen``, else ``refresh()``'s answer::

        busy = hooks.busy if trainer.callbacks == hooks.seen else hooks.refresh()

    With the lean dispatch in use, ``overriding`` holds the callbacks it would call for each
    hook, in order (a hot path may call them itself, as ``_lean_dispatch`` does); without it
    (Lightning's dispatch runs the profiler for every hook) every hook is busy and
    ``overriding`` is None.
    """

    def __init__(self, trainer: Any, names: Iterable[str]) -> None:
        self.trainer = trainer
        self.names = tuple(names)
        self.seen: Optional[List[Callback]] = None
        self.busy: FrozenSet[str] = frozenset(self.names)
        self.overriding: Optional[Dict[str, List[Callback]]] = None

    def refresh(self) -> FrozenSet[str]:
        callbacks = self.trainer.callbacks
        self.seen = list(callbacks)
        if in_use(self.trainer):
            self.overriding = {
                name: [cb for cb in callbacks if _overrides(cb, name)] for name in self.names
            }
            self.busy = frozenset(name for name, found in self.overriding.items() if found)
        else:
            self.overriding = None
            self.busy = frozenset(self.names)
        return self.busy


def _overrides(callback: Callback, hook_name: str) -> bool:
    kind = type(callback)
    if kind.__getattribute__ is not object.__getattribute__ or hasattr(kind, "__getattr__"):
        return True  # hooks answered dynamically: call it as Lightning would
    if hook_name in getattr(callback, "__dict__", {}):  # a hook set on the instance
        return True
    return getattr(kind, hook_name, None) is not getattr(Callback, hook_name, None)


def _callbacks_for(
    trainer: Any, plan: Dict[Any, Any], key: Any, monitoring: Optional[bool]
) -> List[Callback]:
    """The callbacks overriding the hook ``key`` names (its name, or its name and
    ``monitoring``), worked out once for each list of callbacks."""
    callbacks = trainer.callbacks
    if plan.get("_callbacks") != callbacks:  # the list changed: forget what was worked out
        plan.clear()
        plan["_callbacks"] = list(callbacks)
    hook_name = key if monitoring is None else key[0]
    found = plan.get(key)
    if found is None:
        chosen = callbacks
        if monitoring is True:
            chosen = [cb for cb in chosen if isinstance(cb, (EarlyStopping, Checkpoint))]
        elif monitoring is False:
            chosen = [cb for cb in chosen if not isinstance(cb, (EarlyStopping, Checkpoint))]
        found = plan[key] = [cb for cb in chosen if _overrides(cb, hook_name)]
    return found


def _lean_dispatch(
    trainer: Any,
    hook_name: str,
    *args: Any,
    monitoring_callbacks: Optional[bool] = None,
    **kwargs: Any,
) -> None:
    """Follows ``lightning.pytorch.trainer.call._call_callback_hooks`` (the same in every
    release of ``versions.TABLE``, 2.4.0 to 2.6.6): the callbacks in ``trainer.callbacks``
    order, filtered by ``monitoring_callbacks``, with the module's ``_current_fx_name`` set to
    the hook; the pass-through profiler and the debug message it skips have no effect."""
    plan = getattr(trainer, _PLAN, None)
    if plan is None or type(trainer.profiler) is not PassThroughProfiler:
        _lightning_dispatch(
            trainer, hook_name, *args, monitoring_callbacks=monitoring_callbacks, **kwargs
        )
        return
    key = hook_name if monitoring_callbacks is None else (hook_name, monitoring_callbacks)
    callbacks = plan.get(key)
    if callbacks is None or plan["_callbacks"] != trainer.callbacks:  # not worked out yet
        callbacks = _callbacks_for(trainer, plan, key, monitoring_callbacks)
    if not callbacks:  # nothing runs, so nothing could see the hook name either
        return
    pl_module = trainer.lightning_module
    if pl_module is not None:
        previous = pl_module._current_fx_name
        set_fx_name(pl_module, hook_name)
    for callback in callbacks:
        getattr(callback, hook_name)(trainer, pl_module, *args, **kwargs)
    if pl_module is not None:
        set_fx_name(pl_module, previous)
