"""``core.init()``: Determined's Core API in local mode (no master), for custom training loops.

As Determined 0.38.1 does without a cluster, ``init()`` builds a ``Context`` of local parts::

    with core.init() as core_context:                  # (torchrun: the process group too)
        core_context.distributed    rank, size, collectives (torchrun's env, or one process)
        core_context.checkpoint     store_path/restore_path/upload/download/get_metadata/delete
                                    in checkpoint_storage (a directory or a bucket), written
                                    atomically
        core_context.train          report_training_metrics/report_validation_metrics: the log
                                    and TensorBoard
        core_context.searcher       operations(): one operation of length 1
        core_context.preempt        should_preempt(): True after SIGTERM/SIGINT (Determined's
                                    local mode: never); leaving the block then exits 75
        core_context.info           None (no cluster)

``docs/notes/core-api.md`` lists what differs from Determined's local mode.
"""

import logging
import os
import pathlib
import types
from typing import TYPE_CHECKING, Any, Dict, Optional, Type, Union

from det_lightning import errors
from det_lightning._env import (
    CHECKPOINT_DIR_ENV,
    RESUME_ADVICE_ENV,
    SEARCH_ENV,
    default_tensorboard_dir,
)
from det_lightning.core._checkpoint import CheckpointContext
from det_lightning.core._distributed import DistributedContext, DummyDistributedContext
from det_lightning.core._modes import PreemptMode, TensorboardMode
from det_lightning.core._searcher import PreemptContext, SearcherContext
from det_lightning.core._train import TrainContext

if TYPE_CHECKING:
    from det_lightning.core._experimental import ExperimentalCoreContext
    from det_lightning.core._profiler import ProfilerContext
    from det_lightning.pytorch._store import CheckpointStore

logger = logging.getLogger("det_lightning.core")


class Context:
    """The Core API's parts (see the module docstring); build it with ``core.init()``."""

    def __init__(
        self,
        checkpoint: CheckpointContext,
        distributed: Optional[DistributedContext] = None,
        preempt: Optional[PreemptContext] = None,
        train: Optional[TrainContext] = None,
        *,
        searcher: Optional[SearcherContext] = None,
        info: Any = None,
        profiler: Optional["ProfilerContext"] = None,
    ) -> None:
        self.checkpoint = checkpoint
        self.distributed = distributed or DummyDistributedContext()
        self.preempt = preempt or PreemptContext(self.distributed)
        self.train = train or TrainContext(self.distributed, pathlib.Path("tensorboard"))
        self.searcher = searcher or SearcherContext(self.distributed)
        self._profiler = profiler
        self._experimental: Optional["ExperimentalCoreContext"] = None
        self.info = info
        self._owns_process_group = False
        # How to continue after a signal, where the code inside the block knows better than
        # this context (torch_batch_process resumes by itself when asked); None: the default.
        self.resume_advice: Optional[str] = None

    def start(self) -> None:
        self.preempt.start()

    def __enter__(self) -> "Context":
        self.start()
        return self

    @property
    def profiler(self) -> "ProfilerContext":
        """Samples system metrics into TensorBoard while on (``core._profiler``). It is made
        when first read, which keeps its module out of ``det-lightning --help``'s imports."""
        if self._profiler is None:
            from det_lightning.core._profiler import ProfilerContext

            self._profiler = ProfilerContext(self.distributed, self.train.get_tensorboard_path())
        return self._profiler

    @property
    def experimental(self) -> "ExperimentalCoreContext":
        """Links the task to a checkpoint or model version, which is recorded nowhere here,
        as in Determined's local mode (``core._experimental``)."""
        if self._experimental is None:
            from det_lightning.core._experimental import ExperimentalCoreContext

            self._experimental = ExperimentalCoreContext()
        return self._experimental

    def close(self, *_: Any) -> None:
        if self._profiler is not None:
            self._profiler.off()
        self.preempt.close()
        self.distributed.close()
        self.train.close()
        if self._owns_process_group:
            import torch.distributed as dist

            dist.destroy_process_group()
            self._owns_process_group = False

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_val: Optional[BaseException],
        exc_tb: Optional[types.TracebackType],
    ) -> None:
        self.close(exc_type, exc_val, exc_tb)
        if isinstance(exc_val, errors.InvalidHP):
            logger.info("InvalidHP detected during Trial init, converting InvalidHP to exit(0)")
            raise errors.InvalidHPExit(exc_val.msg) from exc_val
        if exc_val is None and self.preempt.preempted_by is not None:
            raise self._preempted(self.preempt.preempted_by)

    def _preempted(self, name: str) -> errors.TrialPreempted:
        """The loop returned after ``should_preempt()`` said a signal came: exit status 75
        (``errors.TrialPreempted``), naming the newest checkpoint and how to continue."""
        from det_lightning.core._checkpoint import newest_stored

        store = self.checkpoint.store
        newest = newest_stored(store) if self.distributed.rank == 0 else None
        where = str(store / newest.name) if newest else None
        saved = f"The last checkpoint is {where}." if where else "No checkpoint exists."
        # A search's advice (rerun it: the trial resumes, info.latest_checkpoint); outside
        # one, nothing hands the loop its checkpoint (get_cluster_info() is None).
        advice = self.resume_advice
        advice = advice or (
            os.environ.get(RESUME_ADVICE_ENV) if os.environ.get(SEARCH_ENV) else None
        )
        advice = advice or (
            "To continue, restore it when the loop starts again "
            "(core_context.checkpoint.restore_path)."
        )
        # A search's trial leaves its exit status to the command's last line (see adapters).
        status = (
            ""
            if os.environ.get(SEARCH_ENV)
            else f" Exiting with status {errors.TrialPreempted.EXIT_CODE}."
        )
        message = (
            f"Stopped by {name}: the loop returned at should_preempt(). {saved}{status} {advice}"
        )
        if self.distributed.rank == 0:
            logger.warning(message)  # the job's one line about it (the chief's)
        return errors.TrialPreempted(message, checkpoint=where, reported=True)


def init(
    *,
    distributed: Optional[DistributedContext] = None,
    checkpoint_storage: Optional[Union[str, Dict[str, Any]]] = None,
    preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
    tensorboard_mode: TensorboardMode = TensorboardMode.AUTO,
) -> Context:
    """A local Core API ``Context``; use it as ``with core.init() as core_context:``.

    Args:
        distributed: this process's ranks; default: torchrun's environment when ``WORLD_SIZE``
            is above 1 (the gloo process group is started if none is), else one process.
        checkpoint_storage: a directory (a path or ``file://`` URI), a bucket
            (``s3://bucket/prefix``, ``gs://...``, ``az://...``), or a dict shaped like an
            experiment config's ``checkpoint_storage`` (``type: s3`` with ``bucket``,
            ``prefix``, ``endpoint_url``, ``access_key``, ``secret_key``; ``gcs``; ``azure``;
            ``directory``); default ``$DET_LIGHTNING_CHECKPOINT_DIR``, else ``./checkpoints``.
        preempt_mode: who calls ``preempt.should_preempt()``.
        tensorboard_mode: ``AUTO`` writes reported metrics to TensorBoard.

    Raises:
        ValueError: a ``shared_fs`` storage dict (as Determined), or a dict naming no place.
        errors.CheckpointStorageError: a URI of a scheme no store here supports.
    """
    owns_group = False
    if distributed is None:
        from det_lightning._relaunch import relaunch_if_first

        relaunch_if_first("core.init()")
        distributed, owns_group = _distributed_from_env()
    if distributed.cross_size > 1 and distributed._node_group is None and _group_started():
        # allgather_local()/gather_local()/broadcast_local() need a group per node (every
        # rank calls init(): it is collective).
        from det_lightning.core._distributed import init_local_groups

        init_local_groups(distributed)
    store = _storage(checkpoint_storage)
    from det_lightning.core._search_hooks import best_validation, search_hook

    hook = search_hook() if distributed.rank == 0 else None  # only when a loop starts
    if os.environ.get(SEARCH_ENV) and distributed.rank == 0 and hook is None:
        logger.warning(
            "core.init() in a search's trial started outside det-lightning run: its "
            "validations reach the log and TensorBoard, not the search, which cannot rank it "
            "(docs/notes/core-api.md)."
        )
    if checkpoint_storage is None:
        logger.info(f"no storage_manager provided; storing checkpoints in {store}")
    context = Context(
        checkpoint=CheckpointContext(distributed, store),
        distributed=distributed,
        preempt=PreemptContext(
            distributed, preempt_mode, stop_requested=hook.stop_requested if hook else None
        ),
        train=TrainContext(
            distributed,
            default_tensorboard_dir(),
            tensorboard_mode,
            on_validation=hook.validation if hook else None,
            best_validation=hook.best_validation if hook else best_validation(),
        ),
        searcher=SearcherContext(distributed, (hook.length if hook else None) or 1),
    )
    context._owns_process_group = owns_group
    return context


def _group_started() -> bool:
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_initialized())


def _distributed_from_env() -> "tuple[DistributedContext, bool]":
    """torchrun's ranks (and a gloo group if none was started), or one process."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return DummyDistributedContext(), False
    import torch.distributed as dist

    started = not dist.is_initialized()
    if started:
        dist.init_process_group("gloo")
    return DistributedContext.from_torch_distributed(), started


def _storage(checkpoint_storage: Optional[Union[str, Dict[str, Any]]]) -> "CheckpointStore":
    """Where ``core.init(checkpoint_storage=...)`` stores checkpoints, as Determined reads it:
    a directory path, a ``file://``, ``s3://``, ``gs://`` or ``az://`` URI, or a dict shaped
    like an experiment config's ``checkpoint_storage`` (not ``shared_fs``); None: the
    checkpoint directory (``$DET_LIGHTNING_CHECKPOINT_DIR``, else ``./checkpoints``)."""
    from det_lightning.pytorch._buckets import storage_url
    from det_lightning.pytorch._config_sections import CheckpointStorageConfig
    from det_lightning.pytorch._remote import checkpoint_location

    if checkpoint_storage is None:
        return checkpoint_location(os.environ.get(CHECKPOINT_DIR_ENV) or "checkpoints")
    if isinstance(checkpoint_storage, dict):
        kind = checkpoint_storage.get("type")
        if kind == "shared_fs":
            raise ValueError(
                "Cannot configure a shared_fs checkpoint storage with a dictionary. Use a string "
                "or a configuration file."
            )
        config = CheckpointStorageConfig.from_exp_conf({"checkpoint_storage": checkpoint_storage})
        if kind == "directory" and config.container_path:
            return checkpoint_location(config.container_path)
        place = config.container if kind == "azure" else config.bucket
        url = storage_url(config) if kind in ("s3", "gcs", "azure") and place else None
        if url is None:
            given = ", ".join(sorted(checkpoint_storage))  # names only: never a secret
            raise ValueError(
                f"checkpoint_storage (type {kind!r}; keys {given}) names no place: give type "
                "s3 or gcs with a bucket, azure with a container, or directory with a "
                "container_path (or pass a path or URI string)."
            )
        return checkpoint_location(url, config)
    if not isinstance(checkpoint_storage, str):
        raise TypeError("checkpoint_storage must be a string, dictionary, or None")
    scheme, sep, rest = checkpoint_storage.partition("://")
    if sep and scheme.lower() == "file":
        return checkpoint_location(rest)
    return checkpoint_location(checkpoint_storage)


__all__ = ["Context", "init"]
