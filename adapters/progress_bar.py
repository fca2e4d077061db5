"""The terminal while a trial trains: Lightning's progress bar, our log lines above it.

Lightning's TQDM bar redraws its line after every batch and reads the progress-bar metrics to
do so (each a tensor turned into a Python number: on a GPU, a host-device sync per batch). Log
lines written to the same terminal meanwhile start wherever the bar's line ended. For the runs
``pytorch.Trainer`` builds, the bar (``TrialProgressBar``)::

    per batch            moves the count; shows the metrics it showed last, unless something
                         was logged since (our reports log once per reporting period)
    while training       console log handlers (the root logger's, Lightning's, any) write
                         through tqdm.write: the bar is cleared, the line printed, the bar
                         drawn again below it (console.above_the_bar; no handler is added,
                         so each line still prints once)
    validation           Lightning's validation bar, below the training bar

A progress bar the user passes in ``callbacks`` is used as given.
"""

import contextlib
from typing import Any, Dict, List, Optional, Tuple

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar
from typing_extensions import override

from det_lightning.adapters.console import above_the_bar
from det_lightning.adapters.lightning import log_count


class TrialProgressBar(TQDMProgressBar):
    """Lightning's TQDM bar, with metrics refreshed when logged and log lines above it.

    Args:
        refresh_rate: redraw every this many batches.
        validation_metrics: validation metrics to show once reported (the searcher metric).
    """

    def __init__(self, refresh_rate: int = 1, validation_metrics: Tuple[str, ...] = ()) -> None:
        super().__init__(refresh_rate=refresh_rate)
        self.validation_metrics = validation_metrics
        self._shown: Dict[str, Any] = {}
        self._shown_after: Optional[int] = None
        self._redirect: Optional[contextlib.ExitStack] = None

    @override
    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> Dict[str, Any]:
        logged = log_count.counter(pl_module).calls
        if logged != self._shown_after:
            self._shown = super().get_metrics(trainer, pl_module)
            reported = trainer.callback_metrics
            for name in self.validation_metrics:
                if name in reported and name not in self._shown:
                    self._shown[name] = float(reported[name])  # once per log, not per batch
            self._shown_after = logged
        return self._shown

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        self._start_redirect()

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_end(trainer, pl_module)
        self._stop_redirect()

    @override
    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self._stop_redirect()

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._stop_redirect()

    def _start_redirect(self) -> None:
        if self._redirect is not None or not self.is_enabled:
            return
        stack = contextlib.ExitStack()
        stack.enter_context(above_the_bar())
        self._redirect = stack

    def _stop_redirect(self) -> None:
        stack, self._redirect = self._redirect, None
        if stack is not None:
            stack.close()


def with_progress_bar(
    callbacks: List[Any], enabled: bool, validation_metrics: Tuple[str, ...] = ()
) -> List[Any]:
    """``callbacks`` plus a ``TrialProgressBar`` when the bar is on and none is given."""
    if not enabled or any(isinstance(c, ProgressBar) for c in callbacks):
        return callbacks
    return [*callbacks, TrialProgressBar(validation_metrics=validation_metrics)]
