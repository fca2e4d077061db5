"""``DataLoader``: a drop-in for torch's that the trainer turns into Determined's training order.

Determined's training order, which we reproduce batch for batch:

- one torch ``DataLoader`` iterator for the whole run, created once at the start of ``fit()``;
- its batch sampler repeats the user's batches pass after pass; with ``shuffle=True`` each pass
  draws a fresh seed from the global torch generator at the pass's first batch (torch's
  ``RandomSampler``), so a trial's dropout and the data order share one random stream;
- with several processes the repeated stream is dealt round-robin: rank ``r`` of ``N`` takes
  batches ``r, r+N, r+2N, ...``;
- an epoch is the training loader's length on the chief, in batches.

On top of that, :class:`ResumableBatchSampler` records how each pass was shuffled, so a run resumed
from a checkpoint taken mid-epoch continues with exactly the batch the interrupted run would have
trained next (Determined's local mode redraws the shuffle on resume and so diverges).
"""

import sys
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Union

import numpy as np
import torch
from torch.utils import data

from det_lightning.pytorch import samplers
from det_lightning.pytorch._to_device import copy_options as copy_options  # tests import these
from det_lightning.pytorch._to_device import pins_memory
from det_lightning.pytorch._to_device import to_device as to_device

_Array = Union[np.ndarray, torch.Tensor]
_Data = Union[Dict[str, _Array], Sequence[_Array], _Array]
TorchData = Union[Dict[str, torch.Tensor], Sequence[torch.Tensor], torch.Tensor]


def dataset_repro_error(fn: str, data_obj: Any) -> str:
    """Determined's message for a loader that is not a ``det.pytorch.DataLoader``."""
    return (
        f"{fn}() returned an instance of {type(data_obj).__name__}, which is not a subclass of "
        "det.pytorch.DataLoader. For most non-Iterable DataSets, det.pytorch.DataLoader is a "
        "drop-in replacement for torch.utils.data.DataLoader but which offers easy and "
        "transparent reproducibility (exact order, sharding across processes, exact resume). "
        "It is highly recommended that you use det.pytorch.DataLoader if possible. If not, you "
        "can disable this check by calling "
        "context.experimental.disable_dataset_reproducibility_checks() at some point in your "
        "trial's __init__() method; you are then responsible for shuffling, sharding and "
        "skipping yourself."
    )


class DataLoader:
    """Same arguments as ``torch.utils.data.DataLoader``; the trainer builds the real loader.

    Iterating it directly gives one plain pass, as a torch loader would.

    ``pin_memory`` (ours: Determined's default is ``False``): ``None``, the default, pins the
    batches the trainer loads when the trial's device is CUDA, so that ``context.to_device``'s
    non-blocking copies read page-locked memory; ``True`` or ``False`` is used as given.
    """

    def __init__(  # noqa: PLR0917  Determined's signature (torch's DataLoader's order)
        self,
        dataset: data.Dataset,
        batch_size: Optional[int] = 1,
        shuffle: bool = False,
        sampler: Optional[data.Sampler] = None,
        batch_sampler: Optional[data.Sampler] = None,
        num_workers: int = 0,
        collate_fn: Optional[Callable[[List[Any]], Any]] = None,
        pin_memory: Optional[bool] = None,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Optional[Callable[[int], None]] = None,
        multiprocessing_context: Any = None,
        generator: Any = None,
        *,
        prefetch_factor: Optional[int] = None,
        persistent_workers: bool = False,
    ) -> None:
        _check_loader_args(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle,
            sampler=sampler,
            batch_sampler=batch_sampler,
            num_workers=num_workers,
            drop_last=drop_last,
            timeout=timeout,
            prefetch_factor=prefetch_factor,
            persistent_workers=persistent_workers,
        )
        if sampler is None:
            sampler = (
                data.RandomSampler(dataset, generator=generator)  # type: ignore[arg-type]
                if shuffle
                else data.SequentialSampler(dataset)  # type: ignore[arg-type]
            )
        if batch_sampler is not None:
            batch_size, drop_last = None, False
        elif batch_size is not None:
            batch_sampler = data.BatchSampler(sampler, batch_size, drop_last)
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.generator = generator
        self.num_workers = num_workers
        self.prefetch_factor = 2 if num_workers > 0 and prefetch_factor is None else prefetch_factor
        self.pin_memory = pin_memory
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.persistent_workers = persistent_workers
        if collate_fn is None:
            collate_fn = data.default_collate if batch_sampler is not None else data.default_convert
        self.collate_fn = collate_fn

    def _torch_loader(
        self, batch_sampler: data.Sampler, device: Optional[torch.device] = None
    ) -> data.DataLoader:
        """A torch loader over ``batch_sampler``, pinned as ``pins_memory`` decides for
        ``device`` (the trial's; None: a loader iterated outside a trial)."""
        return data.DataLoader(
            self.dataset,
            batch_sampler=batch_sampler,
            num_workers=self.num_workers,
            collate_fn=self.collate_fn,
            pin_memory=pins_memory(self.pin_memory, device),
            timeout=self.timeout,
            worker_init_fn=self.worker_init_fn,
            multiprocessing_context=self.multiprocessing_context,
            generator=self.generator,
            prefetch_factor=self.prefetch_factor,
            persistent_workers=self.persistent_workers,
        )

    def get_data_loader(
        self, repeat: bool = False, skip: int = 0, num_replicas: int = 1, rank: int = 0
    ) -> data.DataLoader:
        """A torch loader over this one's batches: repeated, sharded and skipped as asked."""
        return self._torch_loader(
            adapt_batch_sampler(self.batch_sampler, repeat, skip, num_replicas, rank)
        )

    def __iter__(self) -> Iterator:
        return iter(self.get_data_loader())

    def __len__(self) -> int:
        assert self.batch_sampler is not None
        return len(self.batch_sampler)  # type: ignore[arg-type]


def _check_loader_args(
    dataset: Any,
    *,
    batch_size: Optional[int],
    shuffle: bool,
    sampler: Any,
    batch_sampler: Any,
    num_workers: int,
    drop_last: bool,
    timeout: float,
    prefetch_factor: Optional[int],
    persistent_workers: bool,
) -> None:
    if isinstance(dataset, data.IterableDataset):
        raise ValueError(
            "IterableDatasets are not supported through det.pytorch.DataLoader(): it cannot "
            "shuffle, shard or skip them. Return a torch.utils.data.DataLoader from the trial, "
            "call context.experimental.disable_dataset_reproducibility_checks() in __init__, and "
            "shard the dataset per rank yourself (see det_lightning.pytorch.samplers)."
        )
    if sampler is not None and shuffle:
        raise ValueError(
            "DataLoader(sampler=..., shuffle=True): sampler option is mutually exclusive with "
            "shuffle. Drop shuffle=True (the sampler decides the order) or drop the sampler."
        )
    if batch_sampler is not None and (
        batch_size != 1 or shuffle or sampler is not None or drop_last
    ):
        raise ValueError(
            "DataLoader(batch_sampler=...): batch_sampler option is mutually exclusive with "
            "batch_size, shuffle, sampler, and drop_last."
        )
    if batch_sampler is None and batch_size is None:
        raise ValueError(
            "DataLoader(batch_size=None) without a batch_sampler is not supported by "
            "det.pytorch.DataLoader: pass a batch_size or a batch_sampler."
        )
    if num_workers < 0:
        raise ValueError(
            "num_workers option should be non-negative; use num_workers=0 to disable "
            "multiprocessing."
        )
    if timeout < 0:
        raise ValueError("timeout option should be non-negative")
    if num_workers == 0 and prefetch_factor is not None:
        raise ValueError(
            "prefetch_factor option could only be specified in multiprocessing. Let "
            "num_workers > 0 to enable multiprocessing."
        )
    if prefetch_factor is not None and prefetch_factor < 0:
        raise ValueError("prefetch_factor option should be non-negative")
    if persistent_workers and num_workers == 0:
        raise ValueError("persistent_workers option needs num_workers > 0")


class ResumableBatchSampler(data.Sampler):
    """Determined's training order (repeat, shard, skip) that can resume mid-pass exactly.

    The user's batch sampler is repeated pass after pass into one continuous stream, whatever
    each pass yields (a sampler may yield more or fewer batches than its ``len()``, as
    Determined's word-language-model example does); rank ``r`` of ``N`` takes stream items
    ``r, r+N, ...``. To resume, the checkpoint keeps how each pass was shuffled and where in the
    stream each pass began, so the replay skips to exactly the next batch. (Replaying a pass
    assumes it yields the same batches again: true of torch's samplers, shuffled or not, and of
    any sampler without randomness; a custom sampler that shuffles with the global generator or
    carries state from pass to pass resumes at the right position with the draws it makes then.)

    Args:
        batch_sampler: the user's batch sampler (one pass).
        num_replicas, rank: this process's shard.
        start_batch: batches this rank already trained (the skip).
        pass_states: how earlier passes were shuffled, from a checkpoint (see ``state()``).
        base_seed: with several processes, pass ``p`` is shuffled with a seed derived from
            ``base_seed`` and ``p`` instead of a draw from each process's global generator, so
            every rank uses the same permutation and the shards stay disjoint.
        pass_starts: where in the stream passes began, from a checkpoint (see ``starts()``);
            without it (older checkpoints) every pass is taken to yield ``len()`` batches.
    """

    def __init__(
        self,
        batch_sampler: data.Sampler,
        num_replicas: int = 1,
        rank: int = 0,
        start_batch: int = 0,
        *,
        pass_states: Optional[Dict[int, Any]] = None,
        base_seed: Optional[int] = None,
        pass_starts: Optional[Dict[int, int]] = None,
    ) -> None:
        self._batches = batch_sampler
        self._pass_len = len(batch_sampler)  # type: ignore[arg-type]
        if self._pass_len == 0:
            raise ValueError(
                "The training data loader yields no batches (its dataset is empty, or smaller "
                "than one batch with drop_last=True)."
            )
        self._replicas = num_replicas
        self._rank = rank
        self._start = start_batch
        self._states: Dict[int, Any] = dict(pass_states or {})
        self._starts: Dict[int, int] = {int(p): int(s) for p, s in (pass_starts or {}).items()}
        self._base_seed = base_seed
        self._random = _find_random_sampler(batch_sampler)

    def __len__(self) -> int:
        """Batches per epoch for this rank, as Determined's sharded sampler counts them."""
        full, extra = divmod(self._pass_len, self._replicas)
        return full + int(extra > self._rank)

    def _locate(self, position: int) -> "tuple[int, int]":
        """``(pass, its first stream index)`` of the pass that holds stream index ``position``,
        as far as the recorded pass starts tell; unrecorded passes are ``len()`` long."""
        known = [p for p, start in self._starts.items() if start <= position]
        if known:
            last = max(known)
            return last, self._starts[last]
        pass_idx = position // self._pass_len
        return pass_idx, pass_idx * self._pass_len

    def state(self, next_batch: int) -> Dict[int, Any]:
        """The pass states a resume at local batch ``next_batch`` needs (current and later)."""
        first_needed, _ = self._locate(next_batch * self._replicas + self._rank)
        return {p: s for p, s in self._states.items() if p >= first_needed}

    def starts(self, next_batch: int) -> Dict[int, int]:
        """Where the passes a resume at local batch ``next_batch`` needs began in the stream."""
        first_needed, _ = self._locate(next_batch * self._replicas + self._rank)
        return {p: s for p, s in self._starts.items() if p >= first_needed}

    def __iter__(self) -> Iterator[List[int]]:
        wanted = self._start * self._replicas + self._rank  # next stream index this rank takes
        pass_idx, index = self._locate(wanted)
        while True:
            self._starts[pass_idx] = index
            first = index
            for batch in self._one_pass(pass_idx):
                if index == wanted:
                    yield batch
                    wanted += self._replicas
                index += 1
            if index == first:
                raise ValueError(
                    f"The training batch sampler yielded no batches in pass {pass_idx} (its "
                    f"len() is {self._pass_len}); every pass must yield at least one batch."
                )
            pass_idx += 1

    def _one_pass(self, pass_idx: int) -> Iterator[List[int]]:
        sampler = self._random
        if sampler is None:
            yield from self._batches  # type: ignore[misc]
            return
        own_generator = sampler.generator
        state = self._states.get(pass_idx)
        if own_generator is not None:
            if state is None:
                state = own_generator.get_state()
            own_generator.set_state(state)
            self._states[pass_idx] = state
            yield from self._batches  # type: ignore[misc]
            return
        if state is None:
            state = self._draw_seed(pass_idx)
            self._states[pass_idx] = state
        sampler.generator = torch.Generator().manual_seed(int(state))
        try:
            yield from self._batches  # type: ignore[misc]
        finally:
            sampler.generator = None

    def _draw_seed(self, pass_idx: int) -> int:
        if self._base_seed is None:
            # Exactly the draw torch's RandomSampler makes at the start of a pass.
            return int(torch.empty((), dtype=torch.int64).random_().item())
        derived = torch.Generator().manual_seed((self._base_seed + 7919 * pass_idx) % (2**63))
        return int(torch.empty((), dtype=torch.int64).random_(generator=derived).item())


def _find_random_sampler(batch_sampler: Any) -> Optional[data.RandomSampler]:
    """The ``RandomSampler`` behind a torch ``BatchSampler``, if that is what shuffles."""
    sampler = getattr(batch_sampler, "sampler", None)
    if type(batch_sampler) is data.BatchSampler and type(sampler) is data.RandomSampler:
        return sampler
    return None


def adapt_batch_sampler(  # noqa: PLR0917  Determined's signature
    batch_sampler: Any, repeat: bool = False, skip: int = 0, num_replicas: int = 1, rank: int = 0
) -> Any:
    """Determined's wrapping of a batch sampler: repeated forever (``repeat``), sharded across
    ``num_replicas`` ranks, then the first ``skip`` (sharded) batches skipped.

    >>> from torch.utils.data import BatchSampler, SequentialSampler
    >>> base = BatchSampler(SequentialSampler(range(8)), 2, drop_last=False)
    >>> list(adapt_batch_sampler(base, skip=1, num_replicas=2, rank=1))
    [[6, 7]]
    """
    if repeat:
        batch_sampler = samplers.RepeatBatchSampler(batch_sampler)
    if num_replicas > 1:
        batch_sampler = samplers.DistributedBatchSampler(batch_sampler, num_replicas, rank)
    if skip > 0:  # counted in the batches this rank sees, so after sharding
        batch_sampler = samplers.SkipBatchSampler(batch_sampler, skip)
    return batch_sampler


def data_length(data: _Data) -> int:
    """Records in a batch: the length of the first tensor/array of a dict, list or tuple."""
    if isinstance(data, (np.ndarray, torch.Tensor)):
        return len(data)
    if isinstance(data, (dict, list, tuple)):
        if len(data) == 0:
            raise ValueError(
                f"PyTorchTrial must have at least one np.ndarray or torch.Tensor in its "
                f"{type(data).__name__} of inputs; got an empty one. Override "
                "get_batch_length(batch) for custom batch types."
            )
        first = next(iter(data.values())) if isinstance(data, dict) else data[0]
        return len(first)
    raise TypeError(
        f"Data of incorrect type: {type(data).__name__}. Override the trial's "
        "get_batch_length(batch) to count the records of a custom batch type."
    )


def loader_length(loader: Any) -> int:
    """``len(loader)``, or ``sys.maxsize`` when it has none (an IterableDataset), as Determined."""
    try:
        return len(loader)
    except TypeError:
        return sys.maxsize
