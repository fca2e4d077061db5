"""Lightning internals the adapter relies on outside the per-batch path, each in one function.

Lightning's public API cannot express these; each is a private attribute or method, so each
lives here, named for what it does for us, and ``tests/integration/test_lightning_contract.py``
checks on every Lightning the suite runs on (CI: the lowest and the highest ``pyproject.toml``
allows; ``scripts/test-lightning-releases.sh``: one release of each row of ``versions.TABLE``)
that it still exists with the shape used here. Each is the same in every release of the table
(2.4.0 to 2.6.6) unless its note says otherwise. The per-batch path's internals are in
``lean.py`` (the lean loop, backward and step) and ``hooks.py`` (the callback dispatch)::

    answer_validation_checks   epoch_loop._should_check_val_fx      the schedule decides when
                                                                    to validate
    validate_now               epoch_loop.val_loop.run()            step-zero validation
    set_epoch_length           fit_loop.max_batches                 a resumed run's short epoch
    align_progress             epoch_progress, _batches_that_stepped, Lightning's counters after
                               optim_step_progress                  a resume
    batches_seen               fit_loop.total_batch_idx             a LightningTrial's step
    supersede_signals          _signal_connector.register_signal_   our SIGTERM handling, not
                               handlers, _broadcast_sigterm_tensor  Lightning's
    count_optimizer_step       LightningOptimizer._on_before_step/  global_step around a
                               _on_after_step                       GradScaler's step
    reruns_the_script          _SubprocessScriptLauncher            processes start in init()
    attached_trainer           LightningModule._trainer             is the module attached
                                                                    (the property raises)
    keep_on_device             Strategy.teardown, Strategy.         the trial's models and
                               _optimizers                          optimizer states stay on
                                                                    the device after a fit
"""

import contextlib
import types
from typing import Any, Callable, Iterator, Optional

import lightning.pytorch as pl


def answer_validation_checks(trainer: pl.Trainer, should_check: Callable[..., bool]) -> None:
    """Lightning asks ``should_check(data_fetcher)`` after each batch whether to validate.

    Replaces ``_TrainingEpochLoop._should_check_val_fx`` (its body changed in 2.6.0: time-based
    intervals; its call, ``self._should_check_val_fx(data_fetcher)``, did not)."""
    trainer.fit_loop.epoch_loop._should_check_val_fx = should_check  # type: ignore[method-assign]


def validate_now(trainer: pl.Trainer) -> None:
    """Runs Lightning's validation loop at once (its hooks, callbacks and loggers see it)."""
    trainer.validating = True
    trainer.fit_loop.epoch_loop.val_loop.run()
    trainer.training = True


def set_epoch_length(trainer: pl.Trainer, batches: int) -> None:
    """The length of the epoch starting now (the first one of a resumed run is shorter).
    ``_FitLoop.max_batches``: set in ``setup_data`` (whose body changed in 2.6.0 and 2.6.4; the
    attribute did not), read by the training-epoch loop."""
    trainer.fit_loop.max_batches = batches


def align_progress(trainer: pl.Trainer, epochs: int, batches: int, optimizer_steps: int) -> None:
    """Lightning's counters as a run that trained ``batches`` in ``epochs`` would have them:
    the epoch, the loggers' step and ``global_step``."""
    fit_loop = trainer.fit_loop
    for tracker in (fit_loop.epoch_progress.current, fit_loop.epoch_progress.total):
        for counter in ("ready", "started", "processed", "completed"):
            setattr(tracker, counter, epochs)
    fit_loop.epoch_loop._batches_that_stepped = batches
    fit_loop.epoch_loop.manual_optimization.optim_step_progress.total.completed = optimizer_steps


def batches_seen(trainer: pl.Trainer) -> int:
    """Batches Lightning's training loop has started, over all epochs."""
    return int(trainer.fit_loop.total_batch_idx)


def supersede_signals(
    trainer: pl.Trainer, no_handlers: Callable[[], None], no_broadcast: Callable[[], None]
) -> None:
    """Keeps Lightning from installing its SIGTERM handler and (2.5.2 on,
    ``versions.Shape.broadcasts_sigterm``) from broadcasting its SIGTERM flag before every
    batch; ``no_handlers``/``no_broadcast`` run instead. Replaces
    ``_SignalConnector.register_signal_handlers`` and
    ``_TrainingEpochLoop._broadcast_sigterm_tensor``."""
    connector = getattr(trainer, "_signal_connector", None)
    if connector is None or not hasattr(connector, "register_signal_handlers"):
        raise RuntimeError(
            "This Lightning version has no Trainer._signal_connector.register_signal_handlers; "
            "det_lightning cannot take over its SIGTERM handling."
        )
    # setattr: replacing a bound method on one instance, which mypy refuses as an assignment.
    setattr(connector, "register_signal_handlers", no_handlers)  # noqa: B010
    epoch_loop = trainer.fit_loop.epoch_loop
    if hasattr(epoch_loop, "_broadcast_sigterm_tensor"):
        setattr(epoch_loop, "_broadcast_sigterm_tensor", no_broadcast)  # noqa: B010


def count_optimizer_step(lightning_optimizer: Any, step: Callable[[], Any]) -> None:
    """Runs ``step`` (a GradScaler's) counted as ``lightning_optimizer.step()`` counts one:
    follows ``LightningOptimizer.step``'s ``_on_before_step``/``_on_after_step`` calls."""
    lightning_optimizer._on_before_step()
    step()
    lightning_optimizer._on_after_step()


def reruns_the_script(launcher: Any) -> bool:
    """Whether ``launcher`` starts the other processes by running the script again (so every
    process builds the trial), as ``python train.py --devices N`` needs."""
    from lightning.pytorch.strategies.launchers import _SubprocessScriptLauncher

    return isinstance(launcher, _SubprocessScriptLauncher)


def attached_trainer(module: pl.LightningModule) -> Optional[pl.Trainer]:
    """The Trainer ``module`` is attached to, or None (``LightningModule.trainer`` raises when
    there is none; ``_trainer`` is what it reads)."""
    return module._trainer


def keep_on_device(trainer: pl.Trainer) -> None:
    """After this trainer's fit (however it ends) the module and the optimizers' states stay on
    the device they trained on, as Determined leaves them: ``trial.model`` is still the CUDA
    model after ``Trainer.fit()``, and a second fit or an evaluation by hand moves nothing.

    ``Strategy.teardown`` (every strategy's ends in it) moves both to the CPU:
    ``_optimizers_to_device(self.optimizers, cpu)`` then ``self.lightning_module.cpu()``. Its
    other steps (the precision plugin's, the accelerator's, the checkpoint IO's teardown; a DDP
    wrapper taken off) still run: this strategy's teardown runs its own class's with no
    optimizers to move and a module whose ``cpu()`` keeps it where it is."""
    strategy = trainer.strategy
    # setattr: replacing a bound method on one instance, which mypy refuses as an assignment.
    setattr(strategy, "teardown", types.MethodType(_teardown_kept_on_device, strategy))  # noqa: B010


def _teardown_kept_on_device(strategy: Any) -> None:
    optimizers, strategy._optimizers = strategy._optimizers, []
    try:
        with _cpu_moves_nothing(strategy.lightning_module):
            type(strategy).teardown(strategy)
    finally:
        strategy._optimizers = optimizers


@contextlib.contextmanager
def _cpu_moves_nothing(module: Optional[pl.LightningModule]) -> Iterator[None]:
    if module is None:
        yield
        return
    # An instance attribute shadows LightningModule.cpu for this module alone, for this while.
    object.__setattr__(module, "cpu", lambda: module)
    try:
        yield
    finally:
        object.__delattr__(module, "cpu")
