"""``init()`` and ``Trainer``: check the arguments, build the adapters, run.

Lightning is imported only when ``fit()`` runs, so ``import det_lightning`` stays fast.
"""

import contextlib
import dataclasses
import logging
import os
import pathlib
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional

from det_lightning import errors
from det_lightning._env import CHECKPOINT_DIR_ENV, TEST_MODE_ENV, default_tensorboard_dir
from det_lightning._info import get_cluster_info
from det_lightning.core import DistributedContext
from det_lightning.pytorch import _launch
from det_lightning.pytorch._callback import PyTorchCallback
from det_lightning.pytorch._checkpoint_policy import POLICIES
from det_lightning.pytorch._config_sections import (
    CheckpointStorageConfig,
    ReproducibilityConfig,
    SearcherMetricConfig,
    trial_settings,
)
from det_lightning.pytorch._context import PyTorchTrialContext
from det_lightning.pytorch._determinism import apply_deterministic, wants_deterministic
from det_lightning.pytorch._lengths import Lengths
from det_lightning.pytorch._remote import checkpoint_location
from det_lightning.pytorch._result import FitArgs, FitResult, ProfilerConfig, TrainerOptions
from det_lightning.pytorch._seeds import seed_all
from det_lightning.pytorch._trial import PyTorchTrial
from det_lightning.pytorch._units import Batch, TrainUnit, check_max_length, check_period

if TYPE_CHECKING:
    import lightning.pytorch as pl  # never at run time: fit() imports the adapters

logger = logging.getLogger("det_lightning.pytorch")
core_logger = logging.getLogger("det_lightning.core")  # what Determined's core logs


@contextlib.contextmanager
def init(
    *,
    hparams: Optional[Dict[str, Any]] = None,
    exp_conf: Optional[Dict[str, Any]] = None,
    distributed: Optional[DistributedContext] = None,
    aggregation_frequency: int = 1,
    enable_tensorboard_logging: bool = True,
    accelerator: Optional[str] = None,
    devices: Any = None,
    num_nodes: Optional[int] = None,
    strategy: Any = None,
    precision: Any = None,
    deterministic: Optional[bool] = None,
) -> Iterator[PyTorchTrialContext]:
    """Creates the ``PyTorchTrialContext`` for a trial; use as ``with init(...) as context:``.

    Args:
        hparams: the trial's hyperparameters.
        exp_conf: the experiment configuration; ``reproducibility.experiment_seed`` seeds
            ``random``, numpy and torch here (and becomes ``get_trial_seed()``). Without it
            nothing is seeded, as in Determined's local mode. In a trial of a
            ``det-lightning experiment`` (``det.get_cluster_info()`` set) the trial's config
            is used instead and the trial's own seed seeds them, as on Determined's cluster.
        distributed: a ``core.DistributedContext`` for code that sets up torch.distributed itself
            (``DistributedContext.from_torch_distributed()`` under torchrun).
        aggregation_frequency: step the optimizers every this many batches.
        enable_tensorboard_logging: write metrics to TensorBoard.
        accelerator, devices, num_nodes, strategy, precision: Lightning's ``Trainer`` options
            (defaults: Lightning's own; see ``add_launch_arguments``). With several devices the
            processes start here: ``python train.py --devices 2`` re-runs the script for the
            second one, so ``context.distributed`` is right in the trial's ``__init__``.
        deterministic: deterministic algorithms only (``torch.use_deterministic_algorithms``,
            cuDNN without autotuning, ``CUBLAS_WORKSPACE_CONFIG``), set here before anything
            starts CUDA (ours; default: ``$DET_LIGHTNING_DETERMINISTIC``, else the config's
            ``reproducibility.deterministic``, else off).
    """
    if distributed is None:
        from det_lightning._relaunch import relaunch_if_first  # a leaf: no cost

        relaunch_if_first("pytorch.init()")
    hparams, exp_conf, seed = trial_settings(hparams, exp_conf)
    reproducibility = ReproducibilityConfig.from_exp_conf(exp_conf)
    wanted = wants_deterministic(deterministic, reproducibility, os.environ)
    if wanted:
        apply_deterministic()
    launched = _launch.start(
        {
            "accelerator": accelerator,
            "devices": devices,
            "num_nodes": num_nodes,
            "strategy": strategy,
            "precision": precision,
            # An explicit False reaches Lightning (which then turns the flags off); left
            # unsaid, Lightning leaves torch's flags as they are.
            "deterministic": wanted if deterministic is not None else (wanted or None),
        },
        distributed,
    )
    if seed is not None:
        seed_all(seed)
    context = PyTorchTrialContext(
        hparams=hparams,
        exp_conf=exp_conf,
        distributed=launched.distributed,
        aggregation_frequency=aggregation_frequency,
        enable_tensorboard_logging=enable_tensorboard_logging,
        trial_seed=seed,
        device=launched.device,
        tensorboard_path=default_tensorboard_dir(),
    )
    context.engine.launch_options = launched.options
    _ACTIVE_CONTEXTS.append(context)
    try:
        yield context
    except errors.InvalidHP as e:
        if isinstance(e, errors.InvalidHPExit):
            raise  # a nested init() already reported it
        # Determined's core.init() reports the early exit and exits 0 (core/_context.py).
        core_logger.info("report_early_exit(EarlyExitReason.INVALID_HP)")
        core_logger.info("InvalidHP detected during Trial init, converting InvalidHP to exit(0)")
        raise errors.InvalidHPExit(e.msg) from e
    finally:
        _ACTIVE_CONTEXTS.remove(context)
        context.engine.close_tensorboard_writer()


# The contexts of the init() blocks running now, innermost last: Determined's TorchWriter() takes
# no arguments and finds its trial's TensorBoard run through it.
_ACTIVE_CONTEXTS: List[PyTorchTrialContext] = []


def active_context() -> Optional[PyTorchTrialContext]:
    """The context of the innermost ``init()`` block running now, if any."""
    return _ACTIVE_CONTEXTS[-1] if _ACTIVE_CONTEXTS else None


# Makes the callbacks that a command starting a trial adds to each of its fit()s, from the
# trial's context and the length fit() trains for (see ``fit_callbacks``).
MakeCallbacks = Callable[[PyTorchTrialContext, TrainUnit], Dict[str, PyTorchCallback]]
_FIT_CALLBACKS: List[MakeCallbacks] = []


@contextlib.contextmanager
def fit_callbacks(make: MakeCallbacks) -> Iterator[None]:
    """Inside the block, each ``fit()`` runs the callbacks ``make(context, max_length)`` returns
    beside the trial's own: how the command that starts a search's trial adds the search's
    reporter (``det_lightning._runner.search._child``) without the trainer knowing searches."""
    _FIT_CALLBACKS.append(make)
    try:
        yield
    finally:
        _FIT_CALLBACKS.remove(make)


def _add_callbacks(trial: PyTorchTrial, extra: Dict[str, PyTorchCallback]) -> None:
    """Runs ``extra`` beside the trial's own callbacks, leaving its class untouched (the
    checkpoint records the trial's class, which must stay the user's)."""
    own = trial.build_callbacks

    def build_callbacks() -> Dict[str, PyTorchCallback]:
        return {**own(), **extra}

    trial.build_callbacks = build_callbacks  # type: ignore[method-assign]


class Trainer:
    """Trains a ``PyTorchTrial`` on a ``lightning.Trainer``.

    Args:
        trial: the trial, built with ``context``.
        context: from ``det_lightning.pytorch.init()``.
        callbacks: Lightning callbacks, run beside the trial's ``PyTorchCallback`` objects.
        logger: Lightning logger(s); None means TensorBoard in ``tensorboard_dir``, False none.
        plugins: Lightning plugins.
        checkpoint_dir: where checkpoints go (default ``$DET_LIGHTNING_CHECKPOINT_DIR`` or
            ``./checkpoints``): a directory, or a URL (``s3://bucket/prefix``, ``gs://...``,
            ``az://...``; docs/howto/object-store.md).
        tensorboard_dir: where TensorBoard files go (default ``$DET_LIGHTNING_TENSORBOARD_DIR``
            or ``./tensorboard/<timestamp>``).
        stop_on_nonfinite_loss: stop (``errors.NonFiniteLossError``) at the reporting period in
            which the ``loss`` became NaN or infinite; default (None):
            ``$DET_LIGHTNING_STOP_ON_NONFINITE_LOSS=1`` stops, otherwise training goes on with a
            warning naming the batch, as Determined and Lightning do.
        sync_checkpoints: write each checkpoint in the training thread, which waits for it (as
            in Determined); default (None): ``$DET_LIGHTNING_SYNC_CHECKPOINTS=1`` does, otherwise
            training goes on while a background thread writes, fsyncs and renames it.
        **lightning_kwargs: any other ``lightning.Trainer`` argument (e.g. ``profiler``).
    """

    def __init__(
        self,
        trial: PyTorchTrial,
        context: PyTorchTrialContext,
        *,
        callbacks: Optional[List[Any]] = None,
        logger: Any = None,
        plugins: Optional[List[Any]] = None,
        checkpoint_dir: Optional[str] = None,
        tensorboard_dir: Optional[str] = None,
        stop_on_nonfinite_loss: Optional[bool] = None,
        sync_checkpoints: Optional[bool] = None,
        **lightning_kwargs: Any,
    ) -> None:
        if not isinstance(trial, PyTorchTrial):
            raise TypeError(
                f"Trainer(trial=...) expects a det_lightning.pytorch.PyTorchTrial, got "
                f"{type(trial).__name__}."
            )
        if not isinstance(context, PyTorchTrialContext):
            raise TypeError(
                "Trainer(context=...) expects the context from det_lightning.pytorch.init(), got "
                f"{type(context).__name__}."
            )
        self._trial = trial
        self._context = context
        if tensorboard_dir is not None:
            context.engine.tensorboard_path = pathlib.Path(tensorboard_dir)
        if logger is not None and logger is not False and not isinstance(logger, (list, tuple)):
            logger = [logger]
        searcher = SearcherMetricConfig.from_exp_conf(context.engine.exp_conf)
        # Read when training is set up, not when a context is made: loading a checkpoint
        # (CheckpointLoadContext) never needs it, as in Determined.
        storage = CheckpointStorageConfig.from_exp_conf(context.engine.exp_conf)
        self.result: Optional[FitResult] = None  # set by fit()
        self._lightning_trainer: Optional["pl.Trainer"] = None  # the last fit()'s
        self._options = TrainerOptions(
            checkpoint_dir=checkpoint_location(
                checkpoint_dir or os.environ.get(CHECKPOINT_DIR_ENV) or "checkpoints", storage
            ),
            tensorboard_dir=context.engine.tensorboard_path or default_tensorboard_dir(),
            default_root_dir=pathlib.Path.cwd(),
            callbacks=tuple(callbacks or ()),
            loggers=() if logger is False else None if logger is None else tuple(logger),
            plugins=tuple(plugins or ()),
            launch=context.engine.launch_options,
            lightning_kwargs=dict(lightning_kwargs),
            searcher_metric=searcher.metric,
            searcher_metric_configured=searcher.metric_configured,
            smaller_is_better=searcher.smaller_is_better,
            stop_on_nonfinite_loss=stop_on_nonfinite_loss,
            sync_checkpoints=sync_checkpoints,
            checkpoint_storage=storage,
        )

    def configure_profiler(
        self,
        sync_timings: bool = True,
        enabled: bool = False,
        begin_on_batch: int = 0,
        end_after_batch: Optional[int] = None,
    ) -> None:
        """Deprecated in Determined; use ``fit(..., profiling_enabled=True)``.

        With ``enabled=True``, ``fit()`` records system metrics and the time of each training
        batch from ``begin_on_batch`` to ``end_after_batch`` (waiting for the GPU before timing
        with ``sync_timings``) to the Lightning loggers.
        """
        logger.warning(
            "`trainer.configure_profiler` has been replaced with "
            "`fit(..., profiling_enabled=True)` and will be removed in a future release."
        )
        profiler = (
            ProfilerConfig(sync_timings, begin_on_batch, end_after_batch) if enabled else None
        )
        self._options = dataclasses.replace(self._options, profiler=profiler)

    def fit(  # noqa: PLR0917 (Determined's signature: its arguments may be positional)
        self,
        checkpoint_period: Optional[TrainUnit] = None,
        validation_period: Optional[TrainUnit] = None,
        max_length: Optional[TrainUnit] = None,
        reporting_period: TrainUnit = Batch(100),  # noqa: B008
        checkpoint_policy: str = "best",
        latest_checkpoint: Optional[str] = None,
        step_zero_validation: bool = False,
        test_mode: bool = False,
        profiling_enabled: bool = False,
    ) -> None:
        """Trains until ``max_length``, validating and checkpointing at the given periods.

        Unlike Determined's local mode, ``checkpoint_policy="best"`` is honoured: a validation
        triggers a checkpoint only when it improves ``searcher.metric`` (``validation_loss`` by
        default), and this run's superseded checkpoints are deleted once a newer one is complete.

        ``latest_checkpoint`` is a checkpoint directory, a UUID under ``checkpoint_dir``, or
        ``"latest"``; when it is None, ``$DET_LIGHTNING_LATEST_CHECKPOINT`` is used (with
        ``latest``, a first run that finds no checkpoint starts fresh), so a requeued job
        continues where it stopped. ``$DET_LIGHTNING_TEST_MODE=1`` turns ``test_mode`` on
        (``det-lightning check`` smoke-runs an unmodified script so).

        Raises:
            det_lightning.errors.TrialPreempted: after SIGTERM/SIGINT, once the current batch
                is trained and checkpointed and ``on_trial_shutdown`` ran. A ``SystemExit``:
                uncaught, the process exits with status 75. A second signal exits at once.
            det_lightning.errors.CheckpointStorageError: checkpoints cannot be written (checked
                before training, and on each save); earlier complete checkpoints are kept.
        """
        if max_length is None:  # on a cluster (a search's trial) the searcher sets the length
            max_length = searcher_length()
        if checkpoint_policy not in POLICIES:
            raise ValueError(
                f"fit(checkpoint_policy={checkpoint_policy!r}): expected one of "
                f"{', '.join(POLICIES)}."
            )
        if latest_checkpoint is not None and not isinstance(latest_checkpoint, (str, os.PathLike)):
            raise TypeError(
                f"fit(latest_checkpoint={latest_checkpoint!r}): expected a checkpoint path or UUID."
            )
        args = FitArgs(
            max_length=check_max_length(max_length),
            validation_period=check_period("validation_period", validation_period),
            checkpoint_period=check_period("checkpoint_period", checkpoint_period),
            reporting_period=check_period("reporting_period", reporting_period),
            checkpoint_policy=checkpoint_policy,
            latest_checkpoint=str(latest_checkpoint) if latest_checkpoint is not None else None,
            step_zero_validation=bool(step_zero_validation),
            test_mode=bool(test_mode) or os.environ.get(TEST_MODE_ENV) == "1",
            profiling_enabled=bool(profiling_enabled),
        )
        from det_lightning.adapters.fit import run_fit

        extra: Dict[str, PyTorchCallback] = {}
        for make in _FIT_CALLBACKS:  # a search's trial: its reporter
            extra.update(make(self._context, args.max_length))
        if extra:
            _add_callbacks(self._trial, extra)
        self.result, self._lightning_trainer = run_fit(
            self._trial, self._context, args, self._options
        )


def searcher_length() -> Optional[TrainUnit]:
    """The training length a search gives its trial (``searcher.max_time`` in ``time_metric``,
    or ``max_length``), as Determined's cluster does when ``fit()`` has no ``max_length``; None
    outside a search.

    >>> searcher_length() is None  # a local run: fit() then asks for max_length
    True
    """
    info = get_cluster_info()
    if info is None:
        return None
    return Lengths.from_config(info.trial.config).searcher_length(info.trial.hparams)
