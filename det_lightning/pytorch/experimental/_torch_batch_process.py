"""``torch_batch_process``: Determined 0.38.1's batch inference
(``determined/pytorch/experimental/_torch_batch_process.py``), on the local Core API.

Every process of the job (one, or torchrun's) takes its shard of the dataset's batches, in
Determined's order (``DataLoader.get_data_loader(num_replicas=..., rank=...)``), and calls the
processor's ``process_batch`` on each. Every ``checkpoint_interval`` batches the processes agree
and the chief stores a checkpoint with Determined's files (``metadata.json`` with
``steps_completed`` and ``default_output_uuid``, ``batch_completed.json``); a trial that
resumes skips the batches it holds. Files written through ``context.upload_path()`` go to
``<checkpoint storage>/<default_output_uuid>/rank_<rank>/``, kept across resumes.

Beyond Determined:

* it runs outside an experiment too (``python batch.py``, torchrun), where Determined raised
  "torch_batch_process only runs on-cluster", and resumes there when asked
  (``$DET_LIGHTNING_LATEST_CHECKPOINT=latest``, ``det-lightning run --resume``) from the newest
  checkpoint of the same job (``metadata.json``'s ``det_lightning_batch_job``: the processor
  class and the file defining it, the dataset's length, the batch size, the processes);
* the reducers' state is carried in each checkpoint (``det_lightning_reducers.pt``), so the
  metrics reported at the end of a resumed run cover every batch, not only those after the
  resume;
* a SIGTERM (a scheduler's preemption) stops every process at the next checkpoint, as a
  master's preemption did, and the run resumes from there.
"""

import abc
import inspect
import json
import logging
import math
import os
import pathlib
import uuid
import warnings
from typing import Any, Dict, List, Optional, Set, Sized, Type

import torch
from torch import nn
from torch.utils import data

from det_lightning import core, errors
from det_lightning._env import LATEST_CHECKPOINT_ENV, RESUME_ADVICE_ENV
from det_lightning._info import get_cluster_info
from det_lightning.pytorch._data import DataLoader, adapt_batch_sampler
from det_lightning.pytorch._reducer import MetricReducer, ReducerRegistry, _SimpleReducer
from det_lightning.pytorch._to_device import to_device

logger = logging.getLogger("det_lightning.pytorch")

DEFAULT_BATCH_SIZE = 1
REDUCERS_FILE = "det_lightning_reducers.pt"  # the reducers' state at the checkpoint
JOB_KEY = "det_lightning_batch_job"  # in metadata.json: which job wrote it (_latest_of_job)


class TorchBatchProcessorContext:
    """What a ``TorchBatchProcessor`` gets: the device, reducers, metrics, and a folder of
    outputs in the checkpoint storage.

    Args:
        core_context: the job's ``core.Context``.
        storage_path: this process's folder of outputs (``<output uuid>/rank_<rank>``).
    """

    def __init__(self, core_context: core.Context, storage_path: str) -> None:
        self._core_context = core_context
        self._distributed = core_context.distributed
        self.device = get_default_device(core_context)
        self._tensorboard_path = core_context.train.get_tensorboard_path()
        self._storage_path = storage_path
        self._use_default_storage = False
        self._hparams: Optional[Dict[str, Any]] = None
        self._batch_reducers = ReducerRegistry(core_context.distributed.allgather)
        self._to_device_warned_types: Set[Type] = set()

    def get_hparams(self) -> Dict[str, Any]:
        """The trial's hyperparameters.

        Raises:
            RuntimeError: outside an experiment, where there are none.
        """
        if self._hparams is None:
            info = get_cluster_info()
            if info is None or info.trial is None:
                raise RuntimeError(
                    "get_hparams() needs a trial, which has hyperparameters: run the script as "
                    "the entrypoint of `det-lightning experiment config.yaml .` (Determined "
                    "raised here outside a cluster too)"
                )
            self._hparams = dict(info.trial.hparams)
        return self._hparams

    def wrap_reducer(
        self,
        reducer: Any,
        name: Optional[str] = None,
        for_training: bool = True,
        for_validation: bool = True,
    ) -> MetricReducer:
        """Registers a reducer (a function of every value given, or a ``MetricReducer``): its
        metric is reduced across processes and reported as a validation metric at the end."""
        return self._batch_reducers.wrap_reducer(reducer, name, for_training, for_validation)

    def reset_reducers(self) -> None:
        self._batch_reducers.reset_reducers()

    def to_device(self, data: Any, warned_types: Optional[Set[Type]] = None) -> Any:
        """Moves tensors (and numpy arrays) in nested containers to ``self.device``."""
        warned = self._to_device_warned_types if warned_types is None else warned_types
        return to_device(data, self.device, warned)

    def get_tensorboard_path(self) -> Any:
        """The folder for TensorBoard files (a ``torch.profiler`` trace handler's, say)."""
        return self._tensorboard_path

    def prepare_model_for_inference(self, model: nn.Module) -> nn.Module:
        """Puts ``model`` in eval mode on ``self.device``."""
        model.eval()
        model.to(self.device)
        return model

    def upload_path(self) -> Any:
        """A context manager yielding a folder whose files go to
        ``<checkpoint storage>/<output uuid>/rank_<rank>/`` (a directory's, written in place;
        a bucket's, uploaded when the block ends)."""
        self._use_default_storage = True
        return self._core_context.checkpoint.store.outputs(self._storage_path)

    def report_metrics(self, group: str, steps_completed: int, metrics: Dict[str, Any]) -> None:
        """Reports ``metrics`` under ``group`` (see ``core_context.train.report_metrics``)."""
        self._core_context.train.report_metrics(
            group=group, steps_completed=steps_completed, metrics=metrics
        )

    def report_task_using_model_version(self, model_version: Any) -> None:
        """Recorded nowhere: there is no model registry here (``core_context.experimental``;
        the first call says so in the log)."""
        self._core_context.experimental.report_task_using_model_version(model_version)

    def report_task_using_checkpoint(self, checkpoint: Any) -> None:
        """Recorded nowhere (see ``report_task_using_model_version``)."""
        self._core_context.experimental.report_task_using_checkpoint(checkpoint)

    def get_distributed_rank(self) -> int:
        """This process's rank in the job."""
        return int(self._core_context.distributed.get_rank())

    def get_distributed_size(self) -> int:
        """The number of processes in the job."""
        return int(self._core_context.distributed.get_size())


def get_default_device(core_context: core.Context) -> torch.device:
    """``cuda:<local rank>`` where CUDA is available, else the CPU."""
    if torch.cuda.device_count() == 0:
        return torch.device("cpu")
    return torch.device("cuda", core_context.distributed.local_rank)


class TorchBatchProcessor(metaclass=abc.ABCMeta):
    """The user's processing: built once per process with the context, then called on each
    batch of the process's shard (``__init__`` and ``process_batch`` must be defined)."""

    @abc.abstractmethod
    def __init__(self, context: TorchBatchProcessorContext) -> None:
        """Set up what processing needs (the model, say) here."""

    @abc.abstractmethod
    def process_batch(self, batch: Any, batch_idx: int) -> None:
        """Processes one batch; ``batch_idx`` counts this process's batches from 0."""

    def on_checkpoint_start(self) -> None:  # noqa: B027 - optional, as in Determined
        """Called right before each checkpoint (flush what ``process_batch`` buffered)."""

    def on_finish(self) -> None:  # noqa: B027 - optional, as in Determined
        """Called once the shard is done."""


def _initialize_default_inference_context(
    distributed_context: Optional[core.DistributedContext],
) -> core.Context:
    # WorkersAskChief: every process stops at the same checkpoint (Determined's choice too).
    return core.init(distributed=distributed_context, preempt_mode=core.PreemptMode.WorkersAskChief)


def _validate_dataloader_kwargs(
    dataloader_kwargs: Dict[str, Any], batch_size: Optional[int]
) -> None:
    if dataloader_kwargs.get("shuffle"):
        raise ValueError("'shuffle' must be false for accurate sharding and checkpointing")
    if "sampler" in dataloader_kwargs:
        raise ValueError(
            "Please remove 'sampler' arg as we will initialize a sampler automatically."
        )
    if "batch_sampler" in dataloader_kwargs:
        raise ValueError(
            "Please remove 'batch_sampler' arg as we will initialize a batch_sampler automatically."
        )
    if batch_size is not None and "batch_size" in dataloader_kwargs:
        raise ValueError("batch_size is passed into torch_batch_process and dataloader_kwargs")


def _validate_iterate_length(iterate_length: Optional[int], times_iterate: int) -> int:
    if iterate_length is None:
        return times_iterate
    if iterate_length <= 0:
        warnings.warn(
            f"iterate_length {iterate_length} is not valid. "
            f"Ignoring this argument and iterate over entire dataset once",
            stacklevel=3,
        )
        return times_iterate
    if iterate_length > times_iterate:
        warnings.warn(
            f"iterate_length {iterate_length} exceeds sharded dataset length. "
            f"Ignoring this argument and iterate over entire dataset once",
            stacklevel=3,
        )
        return times_iterate
    return iterate_length


class _Carried:
    """The reducers' state kept in the checkpoints: per reducer, the ``per_slot_reduce()``
    values that ``cross_slot_reduce`` combines. The last ``size`` of them are this run's
    processes'; earlier ones (a run with another number of processes, or a ``MetricReducer``,
    whose state cannot be put back) are passed as extra slots, which any correct reducer
    combines as it combines processes (each slot holds disjoint batches)."""

    def __init__(self, registry: ReducerRegistry, size: int, rank: int) -> None:
        self.registry, self.size, self.rank = registry, size, rank
        self.extra: List[List[Any]] = [[] for _ in registry.wrapped]

    def signature(self) -> List[str]:
        return [f"{type(w.reducer).__name__}:{w.name}" for w in self.registry.wrapped]

    def restore(self, saved: Dict[str, Any]) -> None:
        if saved.get("reducers") != self.signature():
            logger.warning(
                f"The checkpoint's reducers ({saved.get('reducers')}) are not this run's "
                f"({self.signature()}): the metrics at the end cover only the batches from "
                "here on"
            )
            return
        same_size = saved.get("size") == self.size
        for i, wrapped in enumerate(self.registry.wrapped):
            slots = list(saved["slots"][i])
            if same_size and isinstance(wrapped.reducer, _SimpleReducer):
                wrapped.reducer.values = list(slots[-self.size + self.rank])
                slots = slots[: -self.size]
            self.extra[i] = slots

    def snapshot(self, gathered: List[List[Any]]) -> Dict[str, Any]:
        slots = [self.extra[i] + [g[i] for g in gathered] for i in range(len(self.extra))]
        return {"reducers": self.signature(), "size": self.size, "slots": slots}

    def metrics(self, gathered: List[List[Any]]) -> Dict[str, Any]:
        """Each reducer's metric over the carried slots and ``gathered`` (this run's)."""
        metrics: Dict[str, Any] = {}
        for i, wrapped in enumerate(self.registry.wrapped):
            slots = [[s] for s in self.extra[i]] + [[g[i]] for g in gathered]
            metrics.update(self.registry.cross_slot(slots, [wrapped]))
        return metrics


def _checkpoint(
    core_context: core.Context,
    steps_completed: int,
    output_uuid: str,
    carried: _Carried,
    *,
    job: Dict[str, Any],
) -> None:
    """Every process says how far it got (and its reducers' state); the chief stores a
    checkpoint at the least of them, as Determined's ``_synchronize_and_checkpoint``."""
    dist = core_context.distributed
    mine = carried.registry.per_slot() if carried.registry.wrapped else []
    gathered = dist.gather((steps_completed, mine))
    if gathered is None:
        return
    steps = min(g[0] for g in gathered)
    metadata = {"steps_completed": steps, "default_output_uuid": output_uuid, JOB_KEY: job}
    with core_context.checkpoint.store_path(metadata) as (path, _):
        (path / "batch_completed.json").write_text(f'{{"batch_completed": {steps}}}')
        if carried.registry.wrapped:
            try:
                torch.save(carried.snapshot([g[1] for g in gathered]), path / REDUCERS_FILE)
            except Exception as e:  # noqa: BLE001 - the metrics only lose the carried part
                (path / REDUCERS_FILE).unlink(missing_ok=True)
                logger.warning(
                    f"The reducers' state could not be saved ({type(e).__name__}: {e}): a "
                    "resumed run's metrics will cover only the batches after the resume"
                )


def _defined_in(cls: type) -> Optional[str]:
    """The file that defines ``cls``, absolute: two scripts' ``__main__.Job`` classes are
    different jobs (None where there is no file: a notebook, an interactive session)."""
    try:
        return str(pathlib.Path(inspect.getfile(cls)).resolve())
    except (TypeError, OSError):
        return None


def _latest_of_job(core_context: core.Context, job: Dict[str, Any]) -> Optional[str]:
    """Outside an experiment, where ``$DET_LIGHTNING_LATEST_CHECKPOINT`` asks for one: a
    checkpoint named there, or for ``latest`` the newest one this job wrote into the storage
    (the same processor class in the same file, dataset length, batch size and number of
    processes: another job's, or this one's sharded another way, would skip the wrong
    batches). The chief looks; every process gets its answer."""
    wanted = os.environ.get(LATEST_CHECKPOINT_ENV)
    if not wanted or wanted != "latest":
        return wanted or None
    dist = core_context.distributed
    found: Optional[str] = None
    if dist.rank == 0:
        entries = core_context.checkpoint.store.published()
        mine = [e for e in entries if e.metadata.get(JOB_KEY) == job]
        if mine:
            found = max(mine, key=lambda e: (e.metadata.get("steps_completed", 0), e.mtime)).name
            logger.info(f"resuming from {found}, this job's newest checkpoint")
        else:
            others = [
                e.name for e in sorted(entries, key=lambda e: e.mtime) if JOB_KEY in e.metadata
            ]
            if others:  # asked to resume, and what is there is not this job's: say so
                logger.warning(
                    f"No checkpoint of this job yet: starting from the first batch. Passed "
                    f"over {len(others)} checkpoints of other jobs (another processor class or "
                    f"file, dataset length, batch size or number of processes; the newest: "
                    f"{others[-1]}); to resume one of them, set {LATEST_CHECKPOINT_ENV} to "
                    "its name."
                )
            else:
                logger.info("no checkpoint of this job yet: starting from the first batch")
    return dist.broadcast(found)


def _reduce_metrics(
    context: TorchBatchProcessorContext,
    core_context: core.Context,
    carried: _Carried,
    steps_completed: int,
) -> None:
    if not context._batch_reducers.wrapped:
        return
    gathered = core_context.distributed.gather(context._batch_reducers.per_slot())
    if gathered is not None:
        metrics = carried.metrics(gathered)
        core_context.train.report_validation_metrics(
            steps_completed=steps_completed, metrics=metrics
        )


def torch_batch_process(  # noqa: PLR0917  Determined's signature
    batch_processor_cls: Type[TorchBatchProcessor],
    dataset: data.Dataset,
    batch_size: Optional[int] = None,
    max_batches: Optional[int] = None,
    checkpoint_interval: int = 5,
    dataloader_kwargs: Optional[Dict[str, Any]] = None,
    distributed_context: Optional[core.DistributedContext] = None,
) -> None:
    """Shards ``dataset`` across the job's processes and calls ``batch_processor_cls``'s
    ``process_batch`` on each batch of this process's shard.

    Args:
        batch_processor_cls: a ``TorchBatchProcessor`` subclass, built once per process.
        dataset: a map-style dataset (``__len__`` and ``__getitem__``), in a fixed order.
        batch_size: items per batch (default: ``dataloader_kwargs``'s, else 1).
        max_batches: at most this many batches per process.
        checkpoint_interval: checkpoint the progress every this many batches.
        dataloader_kwargs: more ``DataLoader`` arguments (not ``shuffle``, ``sampler``,
            ``batch_sampler``).
        distributed_context: the processes (default: torchrun's, or one).
    """
    with _initialize_default_inference_context(distributed_context) as core_context:
        if checkpoint_interval <= 0:
            raise ValueError("checkpoint_interval should be a positive integer")
        dataloader_kwargs = dict(dataloader_kwargs or {})
        _validate_dataloader_kwargs(dataloader_kwargs, batch_size)
        if batch_size is None:
            batch_size = dataloader_kwargs.pop("batch_size", DEFAULT_BATCH_SIZE)
        if not isinstance(dataset, Sized):
            raise TypeError(
                f"Dataset must implement __len__(): torch_batch_process shards a map-style "
                f"dataset by index, and {type(dataset).__name__} has no length"
            )
        dataset_len = len(dataset)
        dist = core_context.distributed
        rank, total_worker = dist.get_rank(), dist.get_size()
        info = get_cluster_info()
        job = {
            "processor": f"{batch_processor_cls.__module__}.{batch_processor_cls.__qualname__}",
            "defined_in": _defined_in(batch_processor_cls),
            "dataset_length": dataset_len,
            "batch_size": batch_size,
            "processes": total_worker,
        }
        if info is not None:
            latest_checkpoint = info.latest_checkpoint  # the trial's own, as the runner keeps it
        else:
            latest_checkpoint = _latest_of_job(core_context, job)
            core_context.resume_advice = os.environ.get(RESUME_ADVICE_ENV) or (
                f"To continue, run it again with {LATEST_CHECKPOINT_ENV}=latest "
                "(what `det-lightning run --resume` sets): it goes on from that checkpoint."
            )

        output_uuid = dist.broadcast(str(uuid.uuid4()) if rank == 0 else None)
        skip = 0
        saved_reducers: Optional[Dict[str, Any]] = None
        if latest_checkpoint is not None:
            with core_context.checkpoint.restore_path(latest_checkpoint) as path:
                metadata = json.loads((path / "metadata.json").read_text())
                if "default_output_uuid" not in metadata:
                    raise errors.InvalidCheckpointException(
                        f"Checkpoint {latest_checkpoint} was not written by torch_batch_process "
                        "(its metadata.json has no default_output_uuid): start the job as a "
                        "new trial, or resume it from one of its own checkpoints"
                    )
                skip = metadata["steps_completed"]
                output_uuid = metadata["default_output_uuid"]
                if (path / REDUCERS_FILE).exists():
                    # Written by this trial's own earlier run (its latest checkpoint): the
                    # reducers' values, which may be any picklable object, as they are
                    # gathered across processes.
                    saved_reducers = torch.load(
                        path / REDUCERS_FILE, map_location="cpu", weights_only=False
                    )
            logger.info(f"Previous run completed {skip} steps")

        context = TorchBatchProcessorContext(core_context, f"{output_uuid}/rank_{rank}")
        processor = batch_processor_cls(context=context)  # type: ignore[call-arg]
        carried = _Carried(context._batch_reducers, total_worker, rank)
        if saved_reducers is not None:
            carried.restore(saved_reducers)

        loader = DataLoader(
            dataset=dataset, batch_size=batch_size, shuffle=False, **dataloader_kwargs
        )
        assert loader.batch_sampler is not None
        batches = loader._torch_loader(
            adapt_batch_sampler(loader.batch_sampler, False, skip, total_worker, rank),
            context.device,
        )
        op = core.DummySearcherOperation(1, True) if rank == 0 else None
        # Asked once before the first batch: a SIGTERM from here on stops the job at its next
        # checkpoint (a signal before a loop has ever asked does what it did before: ends it).
        if core_context.preempt.should_preempt():
            return
        iterator = iter(batches)
        # Every process runs the same number of iterations (the last may have no batch), so
        # none waits at a checkpoint another never reaches (Determined's reasoning).
        per_worker = math.ceil(dataset_len / batch_size / total_worker)
        iterate_length = _validate_iterate_length(max_batches, per_worker)

        last_checkpoint_idx = -1
        batch_idx = skip
        steps_completed = skip
        for batch_idx in range(skip, iterate_length):
            batch = next(iterator, None)
            if batch is not None:
                processor.process_batch(batch=batch, batch_idx=batch_idx)
            steps_completed = batch_idx + 1
            if steps_completed % checkpoint_interval == 0:
                logger.info(f"Completed steps:  {steps_completed} and checkpointing")
                processor.on_checkpoint_start()
                _checkpoint(core_context, steps_completed, output_uuid, carried, job=job)
                last_checkpoint_idx = batch_idx
                if op is not None:
                    done = steps_completed * total_worker * batch_size
                    op.report_progress(min(1.0, done / max(dataset_len, 1)))
                if core_context.preempt.should_preempt():
                    _reduce_metrics(context, core_context, carried, steps_completed)
                    return

        if batch_idx > last_checkpoint_idx:
            processor.on_checkpoint_start()
            logger.info(f"Completed steps:  {steps_completed} and checkpointing")
            _checkpoint(core_context, iterate_length, output_uuid, carried, job=job)
        _reduce_metrics(context, core_context, carried, steps_completed)
        processor.on_finish()
        if rank == 0 and context._use_default_storage:
            where = core_context.checkpoint.store / output_uuid
            logger.info(f"Files stored with default paths are at: {where}")
        dist.gather(None)  # every process is done
        if op is not None:
            op.report_completed(1)
