"""A pure function from ``fit()``'s situation to ``lightning.Trainer`` keyword arguments."""

import os
import sys
from typing import Any, Dict, List, Mapping, Optional, TextIO, Tuple

from det_lightning.adapters.progress_bar import with_progress_bar


def lightning_trainer_kwargs(
    *,
    launch: Dict[str, Any],
    callbacks: List[Any],
    loggers: List[Any],
    plugins: List[Any],
    default_root_dir: str,
    test_mode: bool,
    epoch_len: int = 1 << 30,
    user_kwargs: Optional[Dict[str, Any]] = None,
    bar_metrics: Tuple[str, ...] = (),
) -> Dict[str, Any]:
    """Keyword arguments for the ``lightning.Trainer`` that runs a trial.

    ``bar_metrics``: validation metrics the progress bar shows once reported.

    The loop limits are infinite: the schedule stops training itself (Determined counts batches
    across epochs, with periods Lightning cannot express), and it decides when to validate.

    >>> kw = lightning_trainer_kwargs(launch={}, callbacks=[], loggers=[], plugins=[],
    ...                               default_root_dir=".", test_mode=True, epoch_len=8)
    >>> kw["max_epochs"], kw["limit_val_batches"], kw["use_distributed_sampler"]
    (-1, 1, False)
    """
    has_model_checkpoint = any(
        type(c).__name__ == "ModelCheckpoint" or hasattr(c, "monitor") and hasattr(c, "dirpath")
        for c in callbacks
    )
    kwargs: Dict[str, Any] = {
        "max_epochs": -1,
        "max_steps": -1,
        "num_sanity_val_steps": 0,
        "check_val_every_n_epoch": None,
        "val_check_interval": 1,
        "use_distributed_sampler": False,
        "enable_checkpointing": has_model_checkpoint,
        "enable_model_summary": False,
        "inference_mode": False,  # Determined validates under no_grad, not inference_mode
        "callbacks": callbacks,
        "logger": loggers if loggers else False,
        "plugins": plugins,
        "default_root_dir": default_root_dir,
        "enable_progress_bar": progress_bar_default(sys.stderr, os.environ),
        # We log ourselves, once per reporting period; Lightning's own per-step logging only
        # needs to stay within an epoch (it warns otherwise).
        "log_every_n_steps": max(1, min(epoch_len, 50)),
    }
    if test_mode:
        kwargs["limit_val_batches"] = 1
    kwargs.update({k: v for k, v in launch.items() if v is not None})
    kwargs.update(user_kwargs or {})
    kwargs["callbacks"] = with_progress_bar(
        list(kwargs["callbacks"]), kwargs["enable_progress_bar"], bar_metrics
    )
    return kwargs


def progress_bar_default(stream: TextIO, environ: Mapping[str, str]) -> bool:
    """Lightning's progress bar in a terminal; not in CI (``CI`` set) or redirected output.

    >>> import io
    >>> progress_bar_default(io.StringIO(), {})
    False
    """
    ci = environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
    return stream.isatty() and not ci
