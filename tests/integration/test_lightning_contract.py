"""Contract: the Lightning internals ``adapters/lightning/`` uses are still there, with the shape
they use, and the installed release is the one its row of ``versions.TABLE`` says. When a
Lightning release renames or reshapes one, this fails by name before a run misbehaves. CI runs
it on the lowest and the highest Lightning ``pyproject.toml`` allows;
``scripts/test-lightning-releases.sh`` on one release of each row."""

import inspect
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.core.optimizer import LightningOptimizer, do_nothing_closure
from lightning.pytorch.loops.fetchers import _PrefetchDataFetcher
from lightning.pytorch.loops.optimization.manual import _ManualOptimization
from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop
from lightning.pytorch.strategies import SingleDeviceStrategy, Strategy

from det_lightning.adapters.lightning import hooks, internals, lean, versions


@pytest.fixture
def trainer() -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )


def _parameters(fn: Any) -> list:
    return [p for p in inspect.signature(fn).parameters if p != "self"]


def test_the_loop_attributes_internals_sets_exist(trainer: pl.Trainer) -> None:
    fit_loop = trainer.fit_loop
    epoch_loop = fit_loop.epoch_loop
    assert _parameters(type(epoch_loop)._should_check_val_fx) == ["data_fetcher"]
    assert "self._should_check_val_fx(data_fetcher)" in inspect.getsource(type(epoch_loop))
    assert "    def run(self) -> " in inspect.getsource(type(epoch_loop.val_loop))  # no arguments
    assert "self.max_batches" in inspect.getsource(type(fit_loop))
    for tracker in (fit_loop.epoch_progress.current, fit_loop.epoch_progress.total):
        for counter in ("ready", "started", "processed", "completed"):
            assert isinstance(getattr(tracker, counter), int)
    assert isinstance(epoch_loop._batches_that_stepped, int)
    assert isinstance(epoch_loop.manual_optimization.optim_step_progress.total.completed, int)
    assert isinstance(fit_loop.total_batch_idx, int)


def test_align_progress_moves_the_counters_lightning_reads(trainer: pl.Trainer) -> None:
    internals.align_progress(trainer, epochs=3, batches=40, optimizer_steps=20)
    assert trainer.current_epoch == 3
    # global_step under manual optimization (the case the adapter runs):
    assert trainer.fit_loop.epoch_loop.manual_optimization.optim_step_progress.total.completed == 20
    assert trainer.fit_loop.epoch_loop._batches_that_stepped == 40


def test_signal_handling_can_be_taken_over(trainer: pl.Trainer) -> None:
    calls = []
    internals.supersede_signals(
        trainer, lambda: calls.append("handlers"), lambda: calls.append("broadcast")
    )
    trainer._signal_connector.register_signal_handlers()
    assert calls == ["handlers"]
    advance = inspect.getsource(_TrainingEpochLoop.advance)
    if hasattr(_TrainingEpochLoop, "_broadcast_sigterm_tensor"):  # Lightning >= 2.6
        assert "self._broadcast_sigterm_tensor()" in advance
        trainer.fit_loop.epoch_loop._broadcast_sigterm_tensor()
        assert calls == ["handlers", "broadcast"]


def test_an_optimizer_step_counts_through_the_step_hooks(trainer: pl.Trainer) -> None:
    assert "self._on_before_step()" in inspect.getsource(LightningOptimizer.step)
    assert "self._on_after_step()" in inspect.getsource(LightningOptimizer.step)
    optimizer = LightningOptimizer(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1))
    seen = []
    optimizer._on_before_step = lambda: seen.append("before")
    optimizer._on_after_step = lambda: seen.append("after")
    internals.count_optimizer_step(optimizer, lambda: seen.append("step"))
    assert seen == ["before", "step", "after"]


def test_several_devices_rerun_the_script() -> None:
    ddp = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    assert internals.reruns_the_script(ddp.strategy.launcher)
    spawn = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp_spawn",
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    assert not internals.reruns_the_script(spawn.strategy.launcher)


def test_what_the_lean_path_calls_is_there(trainer: pl.Trainer) -> None:
    """The lean path runs only on the releases its trace test covers; these are the names it
    calls, so a covered release that lost one fails here, not mid-run."""
    epoch_loop = trainer.fit_loop.epoch_loop
    for name in (
        "batch_progress",
        "val_loop",
        "manual_optimization",
        "_results",
        "_warning_cache",
        "batch_idx",
        "restarting",
    ):
        assert hasattr(epoch_loop, name), name
    for name in ("on_batch_start", "on_batch_end", "update_train_step_metrics"):
        assert callable(getattr(trainer._logger_connector, name)), name
    assert _parameters(_ManualOptimization._on_before_step) == []
    assert _parameters(_ManualOptimization._on_after_step) == []
    assert _ManualOptimization.output_result_cls.from_training_step_output(None).asdict() == {}
    assert callable(Strategy.post_training_step) and callable(Strategy.pre_backward)
    assert do_nothing_closure() is None
    assert "_PrefetchDataFetcher" in repr(_PrefetchDataFetcher)
    lean.install(trainer)
    assert type(trainer.fit_loop.epoch_loop) is lean.LeanTrainingEpochLoop


def test_the_ddp_training_step_the_lean_path_reproduces() -> None:
    """lean_step._ddp_training_step does what DDPStrategy.training_step does under manual
    optimization: the forward redirection through the DDP wrapper, then the reducer left to
    manual_backward (require_backward_grad_sync off inside, back on after)."""
    from lightning.pytorch.strategies.ddp import _DDPForwardRedirection

    step = inspect.getsource(Strategy.training_step)
    assert 'self._forward_redirection(self.model, self.lightning_module, "training_step"' in step
    assert "self.precision_plugin.train_step_context()" in step
    inner = inspect.getsource(_DDPForwardRedirection.on_after_inner_forward)
    outer = inspect.getsource(_DDPForwardRedirection.on_after_outer_forward)
    assert "wrapper_module.require_backward_grad_sync = False" in inner
    assert "wrapper_module.require_backward_grad_sync = True" in outer
    redirect = inspect.getsource(type(pl.strategies.DDPStrategy()._forward_redirection).__mro__[1])
    assert "original_module.forward = wrapped_forward" in redirect


def test_the_installed_release_is_the_one_its_row_describes() -> None:
    """The row for the installed Lightning names the advance it has (by fingerprint) and what
    that advance does differently: a SIGTERM broadcast, the last-batch mark on a skip."""
    import lightning

    shape = versions.SHAPE
    assert shape is not None, f"Lightning {lightning.__version__} has no row in versions.TABLE"
    assert versions.fingerprint_of("loops.training_epoch_loop:_TrainingEpochLoop.advance") == (
        shape.advance_digest
    ), f"_TrainingEpochLoop.advance is not {shape.advance}'s"
    advance = inspect.getsource(_TrainingEpochLoop.advance)
    assert ("self._broadcast_sigterm_tensor()" in advance) == shape.broadcasts_sigterm
    assert hasattr(_TrainingEpochLoop, "_broadcast_sigterm_tensor") == shape.broadcasts_sigterm
    assert ("increment_by(0, is_last_batch=True)" in advance) == shape.marks_last_batch
    assert versions.fingerprint_of(
        "loops.training_epoch_loop:_TrainingEpochLoop.on_advance_end"
    ) == (shape.advance_end_digest), "_TrainingEpochLoop.on_advance_end is not the row's"
    advance_end = inspect.getsource(_TrainingEpochLoop.on_advance_end)
    assert ("self._skip_next_val = False" in advance_end) == shape.skips_next_val


def test_the_functions_the_lean_pieces_mirror_are_the_ones_read() -> None:
    """Every function the lean modules and hooks.py follow is, in the installed Lightning, the text
    they were written against (the same in every row of the table)."""
    dispatch = "trainer.call:_call_callback_hooks"  # replaced in place while a fit runs
    assert (
        versions.fingerprint(inspect.getsource(hooks._lightning_dispatch))
        == (versions.UNCHANGED[dispatch])
    )
    changed = [
        name
        for name, digest in versions.UNCHANGED.items()
        if name != dispatch and versions.fingerprint_of(name) != digest
    ]
    assert changed == []


def test_attached_trainer_reads_the_module_trainer(trainer: pl.Trainer) -> None:
    module = pl.LightningModule()
    assert internals.attached_trainer(module) is None
    module.trainer = trainer
    assert internals.attached_trainer(module) is trainer


def test_a_strategy_teardown_moves_to_the_cpu_as_keep_on_device_expects() -> None:
    source = inspect.getsource(Strategy.teardown)
    assert "_optimizers_to_device(self.optimizers, " in source
    assert "self.lightning_module.cpu()" in source
    strategy = SingleDeviceStrategy(torch.device("cpu"))
    assert strategy._optimizers is strategy.optimizers  # the list teardown moves


def test_after_a_fit_the_models_and_optimizer_states_stay_where_they_trained(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Determined leaves ``trial.model`` and its optimizer's state on the device after
    ``Trainer.fit()``; Lightning's teardown would move both to the CPU. On the CPU the move is
    seen as calls: ``Module.cpu()`` on the trial's modules, and each parameter's optimizer
    state rebuilt (a new dict) by ``_optimizers_to_device``. ``tests/gpu`` checks the device."""
    from det_lightning import pytorch
    from tests.fixtures.trials import make_trials

    moved: list = []
    real_cpu = torch.nn.Module.cpu

    def recording_cpu(self: torch.nn.Module) -> torch.nn.Module:
        moved.append(type(self).__name__)
        return real_cpu(self)

    monkeypatch.setattr(torch.nn.Module, "cpu", recording_cpu)
    base = make_trials(pytorch)["MLPTrial"]
    states: dict = {}

    class Probe(base):  # type: ignore[misc, valid-type]
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            out = super().train_batch(batch, epoch_idx, batch_idx)
            states.update({id(p): self.opt.state[p] for p in self.model.parameters()})
            return out

    with pytorch.init(hparams={"lr": 0.01, "n": 32}) as context:
        trial = Probe(context)
        pytorch.Trainer(trial, context, logger=False).fit(
            max_length=pytorch.Batch(4), checkpoint_policy="none"
        )
    assert moved == []
    after = {id(p): trial.opt.state[p] for p in trial.model.parameters()}
    assert states and all("momentum_buffer" in s for s in states.values())
    assert all(after[k] is states[k] for k in states)
