"""Mixed precision: Determined's AMP switches on Lightning's precision plugins.

Who does what::

    init(precision="bf16-mixed")    Lightning autocasts each training/validation step to bfloat16;
                                    nothing is scaled
    init(precision="16-mixed")      Lightning autocasts to float16; the context owns a GradScaler
                                    (use_amp()'s, or one made here) and uses it as use_amp() does
    context.experimental.use_amp()  the precision above that fits the device ("16-mixed" on a GPU,
                                    "bf16-mixed" on a CPU) unless init() chose one
    context.wrap_scaler(scaler)     the user's scaler, used as in Determined's manual recipe
                                    (scale the loss yourself, step_optimizer(scaler=...))

With a scaler the context keeps Determined's order, whatever Lightning's precision::

    context.backward(loss)          loss = scaler.scale(loss)        (use_amp / "16-mixed" only)
    context.step_optimizer(opt, clip_grads)
        scaler.unscale_(opt); clip_grads(params)                     (only when clipping)
        scaler.step(opt)                 # skipped on inf/NaN gradients: LR schedulers wait too
    after train_batch: scaler.update()   # once per batch (use_amp / "16-mixed" only)

So Lightning's plugin never scales a loss or steps the scaler itself (that would scale twice);
it owns autocast, and the scaler's state in Lightning checkpoints.
"""

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Set

import lightning.pytorch as pl
import torch
from lightning.pytorch.plugins.precision import MixedPrecision, Precision
from typing_extensions import override

from det_lightning.pytorch._lr_scheduler import LRScheduler

if TYPE_CHECKING:
    from det_lightning.pytorch._context import PyTorchTrialContext

_MIXED = {
    "16": "16-mixed",
    "16-mixed": "16-mixed",
    "bf16": "bf16-mixed",
    "bf16-mixed": "bf16-mixed",
}


class TrialPrecision(MixedPrecision):
    """Lightning's autocast for a trial whose context does the loss scaling.

    Args:
        precision: ``"16-mixed"`` or ``"bf16-mixed"``.
        device: the device type autocast applies to (``"cuda"``, ``"cpu"``).
        scaler: the context's ``GradScaler`` (``"16-mixed"`` only); kept here so Lightning
            checkpoints carry its state.
    """

    @override
    def pre_backward(  # type: ignore[override]
        self, tensor: torch.Tensor, module: pl.LightningModule
    ) -> torch.Tensor:
        # context.backward() has scaled the loss already (or the user has, with wrap_scaler).
        return Precision.pre_backward(self, tensor, module)

    @override
    def optimizer_step(  # type: ignore[override]
        self, optimizer: Any, model: Any, closure: Any, **kwargs: Any
    ) -> Any:
        # Reached only for steps without a scaler: step_optimizer() steps through the scaler
        # itself, so unscaling or updating here would happen twice.
        return Precision.optimizer_step(self, optimizer, model=model, closure=closure, **kwargs)


def mixed_precision(precision: Any) -> Optional[str]:
    """Lightning's name for a mixed precision setting, or None for any other setting.

    >>> mixed_precision(16), mixed_precision("bf16-mixed"), mixed_precision("32-true")
    ('16-mixed', 'bf16-mixed', None)
    """
    if precision is None:
        return None
    return _MIXED.get(str(precision))


def amp_precision(device_type: str) -> str:
    """The mixed precision ``use_amp()`` stands for on ``device_type``.

    >>> amp_precision("cuda"), amp_precision("cpu")
    ('16-mixed', 'bf16-mixed')
    """
    return "16-mixed" if device_type == "cuda" else "bf16-mixed"


def apply_precision(context: "PyTorchTrialContext", kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """``lightning.Trainer`` kwargs with the trial's precision as a :class:`TrialPrecision`.

    ``kwargs["precision"]`` (from ``init(precision=...)`` or ``Trainer(..., precision=...)``)
    wins over ``use_amp()``. A precision plugin the user passed wins over both: Lightning's
    ``MixedPrecision`` is taken over (its scaler becomes the context's), any other is kept.

    Raises:
        ValueError: ``"bf16-mixed"`` with a ``GradScaler`` from ``use_amp()``.
    """
    plugins: List[Any] = list(kwargs.get("plugins") or [])
    for i, plugin in enumerate(plugins):
        if isinstance(plugin, Precision):
            if type(plugin) is MixedPrecision:
                plugins[i] = _take_over(context, plugin)
            return {**kwargs, "plugins": plugins}
    requested = kwargs.get("precision")
    precision = mixed_precision(requested)
    if requested is None and context.engine.auto_amp:
        precision = amp_precision(context.device.type)
    if precision is None:
        return kwargs
    scaler = _scaler_for(context, precision)
    out = {k: v for k, v in kwargs.items() if k != "precision"}
    out["plugins"] = [
        *plugins,
        TrialPrecision(precision, context.device.type, scaler),  # type: ignore[arg-type]
    ]
    return out


def _scaler_for(context: "PyTorchTrialContext", precision: str) -> Optional[Any]:
    """The scaler Lightning's plugin should know about; creates the context's for "16-mixed"."""
    engine = context.engine
    if precision == "bf16-mixed":
        if engine.auto_amp and engine.scaler is not None:
            raise ValueError(
                "precision='bf16-mixed' does not scale losses, but context.experimental.use_amp() "
                "created a GradScaler for this GPU run. Use precision='16-mixed' (or leave "
                "precision unset) with use_amp(), or drop use_amp() for bfloat16."
            )
        return None  # a user's wrap_scaler() scaler stays the user's business
    if engine.scaler is None:
        # "16-mixed" means scaled losses; the context applies the scaler as use_amp() does.
        engine.scaler = torch.amp.GradScaler(context.device.type)
        engine.auto_amp = True
    return engine.scaler


def scheduler_waits(scheduler: Any, skipped: Set[int]) -> bool:
    """Whether a per-batch LR ``scheduler`` skips this batch because the scaler skipped its
    optimizer's step (an epoch still ended, so per-epoch schedulers step anyway)."""
    if scheduler._step_mode is LRScheduler.StepMode.STEP_EVERY_EPOCH:
        return False
    return id(getattr(scheduler._scheduler, "optimizer", None)) in skipped


def adopt_trainer_precision(trainer: pl.Trainer, context: "PyTorchTrialContext") -> None:
    """Under a user's ``lightning.Trainer``: its mixed precision, set up as ``apply_precision``
    does for ours (Lightning's scaler becomes the context's, used in Determined's order).

    Raises:
        ValueError: as ``apply_precision``.
    """
    plugin = trainer.strategy.precision_plugin
    if type(plugin) is MixedPrecision:
        trainer.strategy.precision_plugin = _take_over(context, plugin)


def _take_over(context: "PyTorchTrialContext", plugin: MixedPrecision) -> TrialPrecision:
    """A :class:`TrialPrecision` in place of Lightning's own, its scaler now the context's."""
    if plugin.scaler is not None and context.engine.scaler is None:
        context.engine.scaler = plugin.scaler
        context.engine.auto_amp = True
    scaler = _scaler_for(context, plugin.precision)
    return TrialPrecision(plugin.precision, plugin.device, scaler)  # type: ignore[arg-type]
