"""``LightningTrial``: a ``PyTorchTrial`` class as a ``LightningModule`` for your own Trainer.

    module = LightningTrial(MyTrial, hparams={"lr": 0.1, "global_batch_size": 32})
    trainer = lightning.Trainer(max_steps=100, val_check_interval=20,
                                callbacks=[ModelCheckpoint(monitor="validation_loss")])
    trainer.fit(module)
    trainer.validate(module); trainer.test(module); trainer.predict(module)

Lightning's settings decide what ``det_lightning.pytorch.Trainer.fit()``'s arguments would:
length (``max_epochs``, ``max_steps``), validation (``val_check_interval``,
``check_val_every_n_epoch``), checkpoints (``ModelCheckpoint``), reporting
(``log_every_n_steps``), devices, strategy and precision. The trial and its context are built in
``setup()``, once the Trainer knows this process's rank and device. The data order is Lightning's
(its distributed sampler shards with several devices); Determined's exact order and mid-epoch
resume are the Determined ``Trainer``'s.

===========================  ===============================================================
Lightning                    the trial
===========================  ===============================================================
``training_step``            ``train_batch(batch, epoch_idx, batch_idx)``: ``epoch_idx`` is
                             Lightning's epoch, ``batch_idx`` counts batches across epochs
``validation_step``          ``evaluate_batch`` (or ``evaluate_full_dataset`` once, chief only)
``test_step``                the same, on the validation loader (or the loader you pass)
``predict_step``             ``trial.predict_batch(batch, batch_idx)`` if the trial has one,
                             else its only model applied to the batch's inputs
===========================  ===============================================================
"""

import pathlib
from typing import Any, Dict, List, Optional, Type

import lightning.pytorch as pl
import torch
from lightning.pytorch.trainer.states import TrainerFn
from typing_extensions import override

from det_lightning.adapters import stateful
from det_lightning.adapters.callbacks import PyTorchCallbackBridge, TrialHooks
from det_lightning.adapters.data import WholeLoader, _check_plain_loader
from det_lightning.adapters.lightning import internals
from det_lightning.adapters.module import TrialModule, TrialSetup
from det_lightning.adapters.precision import adopt_trainer_precision
from det_lightning.adapters.profiler import TraceProfiler
from det_lightning.adapters.trial_checks import build_callbacks, check_trial
from det_lightning.adapters.trial_state import TrialProgress
from det_lightning.core import DistributedContext
from det_lightning.pytorch import _checkpoint as ckpt
from det_lightning.pytorch._config_sections import trial_settings
from det_lightning.pytorch._context import PyTorchTrialContext
from det_lightning.pytorch._data import DataLoader
from det_lightning.pytorch._dispatch import Dispatcher
from det_lightning.pytorch._seeds import seed_all
from det_lightning.pytorch._to_device import pins_memory
from det_lightning.pytorch._trial import PyTorchTrial

# Lightning checkpoints keep what Lightning itself does not save under this key.
TRIAL_STATE_KEY = "det_lightning_trial"
# The stateful slots that go there: Lightning's own checkpoint holds the models and optimizers,
# and the RNG state is left alone, as for any LightningModule.
NOT_IN_LIGHTNING = (ckpt.LR_SCHEDULERS, ckpt.CALLBACKS, ckpt.SCALER)


class LightningTrial(TrialModule):
    """A ``PyTorchTrial`` class trained by your own ``lightning.Trainer``.

    Args:
        trial_class: the ``PyTorchTrial`` subclass; built in ``setup()`` with the context.
        hparams: the trial's hyperparameters (``context.get_hparams()``).
        exp_conf: the experiment configuration (``reproducibility.experiment_seed`` seeds
            ``random``, numpy and torch before the trial is built, as ``init()`` does). In a
            trial of a ``det-lightning experiment`` search, as with ``init()``: the trial's
            config and seed, and its hyperparameters unless ``hparams`` is given.
        aggregation_frequency: step the optimizers every this many batches.

    Raises:
        TypeError: ``trial_class`` is not a ``PyTorchTrial`` subclass.
    """

    def __init__(
        self,
        trial_class: Type[PyTorchTrial],
        hparams: Optional[Dict[str, Any]] = None,
        exp_conf: Optional[Dict[str, Any]] = None,
        aggregation_frequency: int = 1,
    ) -> None:
        if not (isinstance(trial_class, type) and issubclass(trial_class, PyTorchTrial)):
            raise TypeError(
                f"LightningTrial(trial_class={trial_class!r}): expected a PyTorchTrial subclass "
                "(the class itself, not an instance); it is built in setup() with its context."
            )
        # TrialModule.__init__ needs the built trial; that happens in setup().
        pl.LightningModule.__init__(self)
        self.automatic_optimization = False
        self.trial_class = trial_class
        given, self.exp_conf, self.trial_seed = trial_settings(hparams, exp_conf)
        self.trial_hparams = dict(given or {})
        self.aggregation_frequency = aggregation_frequency
        self.bridge = PyTorchCallbackBridge(self)
        self.trial_hooks = TrialHooks(self, determined_logging=False)
        self.trace_profiler = TraceProfiler(self)
        self._built = False

    # ----- building -------------------------------------------------------------------------
    @override
    def setup(self, stage: str) -> None:
        if self._built:
            return
        context = self._build_context()
        trial = self.trial_class(context)
        adopt_trainer_precision(self.trainer, context)
        if stage == TrainerFn.FITTING:
            check_trial(trial, context)
        self.bind_trial(
            TrialSetup(trial, context, Dispatcher(build_callbacks(trial)), TrialProgress())
        )
        self._built = True

    def _build_context(self) -> PyTorchTrialContext:
        trainer = self.trainer
        seed = self.trial_seed
        if seed is not None:
            seed_all(seed)
        distributed = DistributedContext(
            rank=trainer.global_rank,
            size=trainer.world_size,
            local_rank=trainer.local_rank,
            local_size=max(trainer.num_devices, trainer.local_rank + 1),
            cross_rank=trainer.node_rank,
            cross_size=trainer.num_nodes,
        )
        return PyTorchTrialContext(
            hparams=self.trial_hparams,
            exp_conf=self.exp_conf,
            distributed=distributed,
            aggregation_frequency=self.aggregation_frequency,
            trial_seed=seed,
            device=trainer.strategy.root_device,
            tensorboard_path=_tensorboard_dir(trainer),
        )

    @override
    def configure_callbacks(self) -> List[pl.Callback]:
        trainer = internals.attached_trainer(self)
        # Trainer.callbacks is public, but assigned in Lightning's callback connector: undeclared.
        if trainer is not None and self.bridge in trainer.callbacks:  # type: ignore[attr-defined]
            return []  # a later validate()/test() on the same Trainer: attached already
        return [self.trial_hooks, self.bridge, self.trace_profiler]

    # ----- data -----------------------------------------------------------------------------
    @override
    def train_dataloader(self) -> Any:
        return self._torch_loader(self.trial.build_training_data_loader(), "build_training")

    @override
    def val_dataloader(self) -> Any:
        loader = self._torch_loader(self.trial.build_validation_data_loader(), "build_validation")
        if self.evaluates_batches:
            return loader
        # evaluate_full_dataset gets the whole loader as one "batch"; only the chief evaluates,
        # but every rank runs the (empty) step so the validation hooks stay collective.
        return WholeLoader(loader if self.context.distributed.rank == 0 else None)

    @override
    def test_dataloader(self) -> Any:
        return self.val_dataloader()

    @override
    def predict_dataloader(self) -> Any:
        return self._torch_loader(self.trial.build_validation_data_loader(), "build_validation")

    def _torch_loader(self, loader: Any, fn: str) -> Any:
        """One pass of ``loader``; with several devices Lightning's sampler shards it."""
        if isinstance(loader, DataLoader):
            return _as_torch_loader(loader, self.context.device)
        _check_plain_loader(self.context, f"{fn}_data_loader", loader)
        return loader

    # ----- steps ----------------------------------------------------------------------------
    @override
    def test_step(self, batch: Any, batch_idx: int) -> Optional[Dict[str, Any]]:
        return self.validation_step(batch, batch_idx)

    @override
    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        if self._auto_to_device:
            batch = self.context.to_device(batch)
        predict_batch = getattr(self.trial, "predict_batch", None)
        if predict_batch is not None:
            return predict_batch(batch=batch, batch_idx=batch_idx)
        if len(self.context.models) != 1:
            raise NotImplementedError(
                f"trainer.predict(): {type(self.trial).__name__} wraps "
                f"{len(self.context.models)} models, so which one predicts is unclear. Define "
                "predict_batch(self, batch, batch_idx) on the trial to return its predictions."
            )
        inputs = batch[0] if isinstance(batch, (list, tuple)) else batch
        return self.context.models[0](inputs)

    # ----- checkpoints ----------------------------------------------------------------------
    @override
    def on_save_checkpoint(self, checkpoint: Dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint[TRIAL_STATE_KEY] = stateful.save(self._slots_not_in_lightning())
        self.det_hooks.on_checkpoint_save_start(checkpoint)

    def _slots_not_in_lightning(self) -> List[stateful.Slot]:
        """What Lightning's checkpoint lacks: schedulers, callbacks and scaler of the trial."""
        slots = stateful.trial_slots(self.context, self.det_callbacks)
        return [slot for slot in slots if slot.key in NOT_IN_LIGHTNING]

    @override
    def on_load_checkpoint(self, checkpoint: Dict[str, Any]) -> None:
        trial_state = checkpoint.get(ckpt.LIGHTNING_TRIAL_STATE_KEY)
        if self.trainer.state.fn == TrainerFn.FITTING:
            batches = trial_state["batches_trained"] if trial_state else 0
            self.bridge.start_trial(batches, str(self.trainer.ckpt_path))
        self.det_hooks.on_checkpoint_load_start(checkpoint)
        if trial_state:
            self.progress.restore(trial_state)
        # Silent where Lightning's checkpoint lacks a slot (a run without a GradScaler).
        saved = checkpoint.get(TRIAL_STATE_KEY, {})
        stateful.restore(self._slots_not_in_lightning(), saved, warn=False)


def _as_torch_loader(loader: DataLoader, device: torch.device) -> torch.utils.data.DataLoader:
    """The torch loader ``loader`` describes, built from its ``batch_size``/``sampler`` (not a
    batch sampler) so that Lightning can re-create it with its distributed sampler."""
    if loader.batch_size is None:  # the user's own batch sampler: Lightning must cope with it
        return loader._torch_loader(loader.batch_sampler, device)  # type: ignore[arg-type]
    return torch.utils.data.DataLoader(
        loader.dataset,
        batch_size=loader.batch_size,
        sampler=loader.sampler,
        drop_last=loader.drop_last,
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        pin_memory=pins_memory(loader.pin_memory, device),
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        multiprocessing_context=loader.multiprocessing_context,
        generator=loader.generator,
        prefetch_factor=loader.prefetch_factor,
        persistent_workers=loader.persistent_workers,
    )


def _tensorboard_dir(trainer: pl.Trainer) -> pathlib.Path:
    """Where ``context.get_tensorboard_path()`` points: the logger's run directory if it has
    one, else ``<default_root_dir>/tensorboard``."""
    log_dir = getattr(trainer.logger, "log_dir", None) if trainer.logger is not None else None
    return pathlib.Path(log_dir or pathlib.Path(trainer.default_root_dir) / "tensorboard")
