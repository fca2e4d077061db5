"""The typed seams of one ``Trainer.fit()``: ``TrainerOptions`` (what ``Trainer(...)`` was
given), ``FitArgs`` (what the engine is asked to do, checked) and ``FitResult`` (what it did, for
code that runs trials: the experiment runner, a search), instead of dicts, attribute bags and
digging in the engine's objects."""

import dataclasses
import pathlib
from typing import Any, Dict, List, Mapping, Optional, Tuple

from det_lightning.pytorch._config_sections import CheckpointStorageConfig
from det_lightning.pytorch._launch_options import LaunchOptions
from det_lightning.pytorch._store import CheckpointStore
from det_lightning.pytorch._units import TrainUnit


@dataclasses.dataclass(frozen=True)
class ProfilerConfig:
    """``Trainer.configure_profiler``'s settings (Determined's deprecated profiler call)."""

    sync_timings: bool = True
    begin_on_batch: int = 0
    end_after_batch: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class TrainerOptions:
    """What ``det_lightning.pytorch.Trainer(...)`` was given beyond the trial and its context.

    Args:
        checkpoint_dir: where checkpoints go (a directory, or a URL: ``_store``).
        tensorboard_dir: where TensorBoard files go.
        default_root_dir: Lightning's ``default_root_dir``.
        callbacks: Lightning callbacks, run after the engine's own.
        loggers: Lightning loggers; None means a TensorBoard logger in ``tensorboard_dir`` (when
            the context enables TensorBoard logging), an empty tuple none.
        plugins: Lightning plugins.
        launch: the launch options ``init()`` resolved.
        lightning_kwargs: any other ``lightning.Trainer`` argument, passed as given.
        searcher_metric: the metric a ``checkpoint_policy="best"`` ranks checkpoints by.
        searcher_metric_configured: the experiment configuration names ``searcher.metric``.
        smaller_is_better: the searcher metric improves downwards.
        stop_on_nonfinite_loss: see ``Trainer``; None reads the environment.
        sync_checkpoints: see ``Trainer``; None reads the environment.
        checkpoint_storage: the experiment configuration's ``checkpoint_storage`` (retention).
        profiler: ``configure_profiler``'s settings, when it enabled the profiler.
    """

    checkpoint_dir: CheckpointStore
    tensorboard_dir: pathlib.Path
    default_root_dir: pathlib.Path
    callbacks: Tuple[Any, ...] = ()
    loggers: Optional[Tuple[Any, ...]] = None
    plugins: Tuple[Any, ...] = ()
    launch: LaunchOptions = LaunchOptions()
    lightning_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    searcher_metric: str = "validation_loss"
    searcher_metric_configured: bool = False
    smaller_is_better: bool = True
    stop_on_nonfinite_loss: Optional[bool] = None
    sync_checkpoints: Optional[bool] = None
    checkpoint_storage: CheckpointStorageConfig = CheckpointStorageConfig()
    profiler: Optional[ProfilerConfig] = None


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
        epochs_trained: epochs completed in total, counting those before a resume.
        seconds: the wall time of the ``fit()`` call.
    """

    batches_trained: int
    validations: Tuple[Dict[str, Any], ...]
    checkpoint_dir: CheckpointStore
    best_checkpoint: Optional[str] = None
    latest_checkpoint: Optional[str] = None
    stopped_early: bool = False
    epochs_trained: int = 0
    seconds: float = 0.0

    def last_metric(self, metric: str) -> Optional[float]:
        """The value ``metric`` took in this run's newest validation that reported it, or None.

        >>> FitResult(3, ({"loss": 2.0}, {"loss": 1.0}, {}), pathlib.Path("c")).last_metric("loss")
        1.0
        """
        values = self._values(metric)
        return values[-1] if values else None

    def best_metric(self, metric: str, smaller_is_better: bool) -> Optional[float]:
        """The best value ``metric`` took in this run's validations, or None.

        >>> r = FitResult(3, ({"loss": 2.0}, {"loss": 1.0}, {}), pathlib.Path("c"))
        >>> r.best_metric("loss", True), r.best_metric("loss", False), r.best_metric("x", True)
        (1.0, 2.0, None)
        """
        values = self._values(metric)
        if not values:
            return None
        return min(values) if smaller_is_better else max(values)

    def _values(self, metric: str) -> List[float]:
        return [float(v[metric]) for v in self.validations if metric in v]

    def reported_checkpoint(self) -> Optional[CheckpointStore]:
        """The checkpoint to report for this run: the best one, else the newest one."""
        uuid = self.best_checkpoint or self.latest_checkpoint
        return self.checkpoint_dir / uuid if uuid else None
