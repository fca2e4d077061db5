"""What ``fit()`` checks of the user's trial before it trains: the API it is written for, the
objects its ``__init__`` wrapped, and what ``build_callbacks()`` returned. Both front ends
(``fit.run_fit`` and ``lightning_module.LightningTrial``) run these checks."""

import warnings
from typing import Dict

from det_lightning import errors
from det_lightning.pytorch._callback import PyTorchCallback
from det_lightning.pytorch._context import PyTorchTrialContext
from det_lightning.pytorch._trial import PyTorchTrial, is_overridden, pre_012_api


def check_trial(trial: PyTorchTrial, context: PyTorchTrialContext) -> None:
    legacy = pre_012_api(type(trial))
    if legacy:
        raise errors.InvalidExperimentException(
            f"{type(trial).__name__} is written for Determined's PyTorchTrial API before 0.12 "
            f"({', '.join(legacy)}). Since 0.12 the trial builds its objects in "
            "__init__(self, context): self.model = context.wrap_model(...), self.opt = "
            "context.wrap_optimizer(...); train_batch(self, batch, epoch_idx, batch_idx) calls "
            "context.backward(loss) and context.step_optimizer(self.opt) and returns its "
            "metrics; evaluate_batch(self, batch) uses self.model."
        )
    if not context.models:
        raise errors.InvalidExperimentException(
            "Must have at least one model. This might be caused by not wrapping your model with "
            "wrap_model()."
        )
    if not context.optimizers:
        raise errors.InvalidExperimentException(
            "Must have at least one optimizer. This might be caused by not wrapping your "
            "optimizer with wrap_optimizer()."
        )
    if is_overridden(trial, "evaluate_batch") == is_overridden(trial, "evaluate_full_dataset"):
        raise errors.InvalidExperimentException(
            "Please define exactly one of: `evaluate_batch()` or `evaluate_full_dataset()`. For "
            "most use cases `evaluate_batch()` is recommended because it can be parallelized "
            "across all devices."
        )


def build_callbacks(trial: PyTorchTrial) -> Dict[str, PyTorchCallback]:
    callbacks = trial.build_callbacks()
    if not isinstance(callbacks, dict):
        raise TypeError(
            f"build_callbacks() returned a {type(callbacks).__name__}; it must return a dict of "
            "names to PyTorchCallback objects."
        )
    for name, callback in callbacks.items():
        if not isinstance(callback, PyTorchCallback):
            raise TypeError(
                f"build_callbacks()[{name!r}] is a {type(callback).__name__}, not a "
                "PyTorchCallback. Pass Lightning callbacks to Trainer(..., callbacks=[...])."
            )
        if type(callback).on_checkpoint_end is not PyTorchCallback.on_checkpoint_end:
            warnings.warn(
                "The on_checkpoint_end callback is deprecated, please use on_checkpoint_write_end "
                "instead.",
                FutureWarning,
                stacklevel=3,
            )
    return callbacks
