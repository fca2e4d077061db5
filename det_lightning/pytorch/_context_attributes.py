"""Determined's private ``PyTorchTrialContext`` attributes that public trials read.

Trials written for Determined reach for the context's underscored attributes: BYOL (Determined's
examples) reads ``_epoch_len`` in ``train_batch``; trials read ``_current_batch_idx`` in
``evaluate_full_dataset``; test harnesses set ``_exp_conf`` and ``_trial_seed``. det_lightning
keeps every attribute Determined 0.38.1's context sets, with Determined's meaning at the same
moments of a run, or refuses it naming what to use (``det_lightning/_refused_attributes.py``).
The state lives in ``context.engine`` and the context's own lists; these are views of it
(properties read only when a trial reads them: nothing runs per batch).
``tests/compat/test_context_attributes_parity.py`` compares them with the real Determined.
"""

from typing import TYPE_CHECKING, Any, Dict, Optional

import torch
from torch import nn

from det_lightning._refused_attributes import RefusedAttribute
from det_lightning.pytorch._config_sections import DebugConfig

if TYPE_CHECKING:
    from det_lightning.pytorch._engine_state import EngineState


class DeterminedAttributes:
    """Mixed into ``PyTorchTrialContext``: Determined's attribute names over det_lightning's
    state (``self.engine``, ``self.models``, ``self.device``, ``self._exp_conf``)."""

    engine: "EngineState"
    models: "list[nn.Module]"
    device: torch.device
    _exp_conf: Optional[Dict[str, Any]]
    _enable_tensorboard_logging: bool

    if TYPE_CHECKING:

        def get_tensorboard_writer(self) -> Any: ...  # the context's

    # Fixed in det_lightning: apex is refused, Horovod's knobs are ignored, and a trial always
    # runs under pytorch.Trainer (Determined's local Trainer sets the same values).
    _use_apex = False
    _managed_training = True
    _fp16_compression_default = False
    _average_aggregated_gradients_default = True
    _is_pre_trainer = False

    _core = RefusedAttribute("PyTorchTrialContext")
    _distributed_backend = RefusedAttribute("PyTorchTrialContext")
    _allgather_fn = RefusedAttribute("PyTorchTrialContext")
    _wrapped_reducers = RefusedAttribute("PyTorchTrialContext")
    _loss_ids = RefusedAttribute("PyTorchTrialContext")
    _last_backward_batch_idx = RefusedAttribute("PyTorchTrialContext")
    _last_tb_reset_ts = RefusedAttribute("PyTorchTrialContext")

    @property
    def _scaler(self) -> Any:  # Determined's test fixtures set it
        return self.engine.scaler

    @_scaler.setter
    def _scaler(self, scaler: Any) -> None:
        self.engine.scaler = scaler

    @property
    def _steps_completed(self) -> int:  # TrialContext.get_initial_batch() reads it
        return self.engine.steps_completed

    @_steps_completed.setter
    def _steps_completed(self, steps: int) -> None:
        self.engine.steps_completed = steps

    @property
    def _tbd_writer(self) -> Any:
        """The writer into the trial's TensorBoard run, or None: Determined's chief makes it at
        its first metrics report (with TensorBoard logging on) or when the trial asks
        (``get_tensorboard_writer()``). det_lightning reports through Lightning's logger into
        the same run, and makes this writer when read from the same moment on."""
        engine = self.engine
        if engine.tensorboard_writer is None and engine.metrics_reported:
            if self._enable_tensorboard_logging:
                return self.get_tensorboard_writer()
        return engine.tensorboard_writer

    @property
    def _epoch_len(self) -> Optional[int]:
        """Batches per epoch of the training loader (the chief's length, as every rank uses);
        None until ``fit()`` builds the training data."""
        return self.engine.epoch_len

    @_epoch_len.setter
    def _epoch_len(self, batches: Optional[int]) -> None:  # harnesses set it to call train_batch
        self.engine.epoch_len = batches

    @property
    def _current_batch_idx(self) -> Optional[int]:
        """The batch ``train_batch`` trains (kept through validation); None before training."""
        return self.engine.batch_idx

    @_current_batch_idx.setter
    def _current_batch_idx(self, idx: Optional[int]) -> None:
        self.engine.batch_idx = idx

    @property
    def _num_gpus(self) -> int:
        """The GPUs visible to this process when it trains on CUDA, else 0."""
        return torch.cuda.device_count() if self.device.type == "cuda" else 0

    @property
    def _debug_enabled(self) -> bool:
        return DebugConfig.from_exp_conf(self._exp_conf).debug

    @property
    def _wrapped_models(self) -> Dict[nn.Module, nn.Module]:
        """Each wrapped model to the model given to ``wrap_model`` (the same object here: DDP
        wraps the whole trial module, not each model)."""
        return {model: model for model in self.models}

    @property
    def _main_model(self) -> nn.Module:
        """A module holding the wrapped models as ``model_0``, ``model_1``, ... (Horovod
        broadcasts its ``state_dict()``)."""
        main = nn.Module()
        for i, model in enumerate(self.models):
            main.add_module(f"model_{i}", model)
        return main


__all__ = ["DeterminedAttributes"]
