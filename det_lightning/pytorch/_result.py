"""The two typed seams of one ``Trainer.fit()``: ``FitArgs`` (what the engine is asked to do,
checked) and ``FitResult`` (what it did, for code that runs trials: the experiment runner, a
search), instead of dicts and digging in the engine's objects."""

import dataclasses
import pathlib
from typing import Any, Dict, Optional, Tuple

from det_lightning.pytorch._units import TrainUnit


@dataclasses.dataclass(frozen=True)
class FitArgs:
    """``Trainer.fit()``'s arguments, checked, as ``adapters.fit.run_fit`` receives them.

    ``latest_checkpoint`` is the user's string (a path, a UUID, ``"latest"`` or None); the
    engine resolves it into a resume plan and passes on ``dataclasses.replace``'d copies.
    """

    max_length: TrainUnit
    validation_period: Optional[TrainUnit] = None
    checkpoint_period: Optional[TrainUnit] = None
    reporting_period: Optional[TrainUnit] = None
    checkpoint_policy: str = "best"
    latest_checkpoint: Optional[str] = None
    step_zero_validation: bool = False
    test_mode: bool = False
    profiling_enabled: bool = False


@dataclasses.dataclass(frozen=True)
class FitResult:
    """The outcome of ``det_lightning.pytorch.Trainer.fit()``, kept as ``Trainer.result``.

    Args:
        batches_trained: batches trained in total, counting those before a resume.
        validations: every validation's metrics of this ``fit()``, oldest first.
        checkpoint_dir: where this run's checkpoints go.
        best_checkpoint: the UUID of the checkpoint with the best searcher metric, if any.
        latest_checkpoint: the UUID of this run's newest checkpoint, if any.
        stopped_early: training ended before ``max_length`` (a stop request or a callback).
    """

    batches_trained: int
    validations: Tuple[Dict[str, Any], ...]
    checkpoint_dir: pathlib.Path
    best_checkpoint: Optional[str] = None
    latest_checkpoint: Optional[str] = None
    stopped_early: bool = False

    def best_metric(self, metric: str, smaller_is_better: bool) -> Optional[float]:
        """The best value ``metric`` took in this run's validations, or None.

        >>> r = FitResult(3, ({"loss": 2.0}, {"loss": 1.0}, {}), pathlib.Path("c"))
        >>> r.best_metric("loss", True), r.best_metric("loss", False), r.best_metric("x", True)
        (1.0, 2.0, None)
        """
        values = [float(v[metric]) for v in self.validations if metric in v]
        if not values:
            return None
        return min(values) if smaller_is_better else max(values)

    def reported_checkpoint(self) -> Optional[pathlib.Path]:
        """The checkpoint to report for this run: the best one, else the newest one."""
        uuid = self.best_checkpoint or self.latest_checkpoint
        return self.checkpoint_dir / uuid if uuid else None
