"""The trial's data loaders as Lightning sees them.

Lightning iterates its train dataloader once per epoch. Determined keeps one iterator for the
whole run (its random draws happen once, not once per epoch), so Lightning gets an
:class:`EpochView`: each ``iter()`` yields the next epoch's batches from the one underlying
iterator. Its ``len()`` is the batches left in the current epoch, which is how a run resumed
mid-epoch finishes that epoch and then continues with whole ones. Lightning's own distributed
sampler injection is off (``use_distributed_sampler=False``): our batch sampler shards.
"""

import dataclasses
import itertools
import logging
import sys
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, Optional

import torch
from torch.utils import data

from det_lightning.adapters.profiler_labels import LabelFree
from det_lightning.pytorch._data import (
    DataLoader,
    ResumableBatchSampler,
    adapt_batch_sampler,
    dataset_repro_error,
    loader_length,
)

if TYPE_CHECKING:
    from det_lightning.pytorch._context import PyTorchTrialContext
    from det_lightning.pytorch._data_position import DataPosition
    from det_lightning.pytorch._trial import PyTorchTrial

logger = logging.getLogger("det_lightning.pytorch")


class EpochView:
    """One Determined epoch per ``iter()``, drawn from a single run-long iterator.

    Args:
        loader: the iterable to draw batches from (a torch DataLoader).
        epoch_len: batches per epoch.
        start_batch: batches already trained (when resuming).
        repeats: whether ``loader`` repeats forever (ours) or must be re-iterated per pass
            (a plain torch loader the user returned).
    """

    def __init__(self, loader: Any, epoch_len: int, start_batch: int, repeats: bool) -> None:
        self.loader = loader
        self.epoch_len = epoch_len
        self.position = start_batch
        self._repeats = repeats
        self._iterator: Optional[Iterator] = None
        self._fetch: Callable[[], Any] = _not_started
        self._labels = LabelFree()  # (decided once per view: the environment as the fit starts)

    def start(self) -> None:
        """Creates the run's iterator, where Determined creates its own (before restoring)."""
        self._iterator = iter(self.loader)
        self._fetch = self._labels.fetcher(self._iterator)

    def __len__(self) -> int:
        return self.epoch_len - self.position % self.epoch_len

    def __iter__(self) -> Iterator:
        if self._iterator is None:
            self.start()
        for _ in range(len(self)):
            try:
                batch = self._fetch()  # next(self._iterator), without torch's profiler label
            except StopIteration:
                if self._repeats:  # (a repeating loader never ends)
                    raise
                batch = self._next_pass()
            self.position += 1
            yield batch

    def _next_pass(self) -> Any:
        """The first batch of a plain loader's next pass, once its iterator ended."""
        self._iterator = iter(self.loader)  # a plain loader ended its pass: start the next
        self._fetch = self._labels.fetcher(self._iterator)  # (without the label, as the first)
        try:
            return self._fetch()
        except StopIteration:
            raise RuntimeError("The training data loader yields no batches.") from None

    def shutdown(self) -> None:
        """Ends worker processes now rather than at garbage collection."""
        self._iterator = None
        self._fetch = _not_started


def _not_started() -> Any:
    raise RuntimeError("EpochView: no iterator (start() not called, or shut down)")


def build_training_view(
    trial: "PyTorchTrial",
    context: "PyTorchTrialContext",
    start_batch: int,
    pass_states: Optional[Dict[int, Any]],
    *,
    base_seed: Optional[int],
    pass_starts: Optional[Dict[int, int]] = None,
) -> "tuple[EpochView, Optional[ResumableBatchSampler]]":
    """The training loader in Determined's order, plus the sampler whose state checkpoints keep."""
    dist = context.distributed
    loader = trial.build_training_data_loader()
    if isinstance(loader, DataLoader):
        assert loader.batch_sampler is not None
        sampler = ResumableBatchSampler(
            loader.batch_sampler,
            dist.size,
            dist.rank,
            start_batch,
            pass_states=pass_states,
            base_seed=base_seed,
            pass_starts=pass_starts,
        )
        epoch_len = dist.broadcast(len(sampler))
        torch_loader = loader._torch_loader(sampler, context.device)
        return EpochView(torch_loader, epoch_len, start_batch, repeats=True), sampler
    _check_plain_loader(context, "build_training_data_loader", loader)
    epoch_len = dist.broadcast(loader_length(loader))
    if epoch_len == 0:
        raise ValueError(
            "The training data loader yields no batches: build_training_data_loader() returned "
            f"an empty {type(loader).__name__}."
        )
    passes = _PlainPasses(loader, start_batch, epoch_len)
    return EpochView(passes, epoch_len, start_batch, repeats=False), None


@dataclasses.dataclass(frozen=True)
class TrainingData:
    """The training data of one fit.

    Attributes:
        view: what Lightning iterates; its ``epoch_len`` is the epoch length, computed once.
        sampler: the batch sampler whose state checkpoints keep (None: a plain torch loader).
        base_seed: the seed the passes' shuffles derive from with several processes (None:
            one process, which shuffles from its own generator).
    """

    view: EpochView
    sampler: Optional[ResumableBatchSampler]
    base_seed: Optional[int]


def build_training_data(
    trial: "PyTorchTrial",
    context: "PyTorchTrialContext",
    start_batch: int,
    position: "DataPosition",
) -> TrainingData:
    """The training data, from ``position`` (a resumed run's sampler states and seed; empty
    on a fresh start) and ``start_batch`` on."""
    base_seed = shared_seed(context, position)
    view, sampler = build_training_view(
        trial,
        context,
        start_batch,
        position.pass_states,
        base_seed=base_seed,
        pass_starts=position.pass_starts,
    )
    return TrainingData(view, sampler, base_seed)


def shared_seed(context: "PyTorchTrialContext", position: "DataPosition") -> Optional[int]:
    """With several processes every rank must shuffle alike: derive pass seeds from the chief's
    initial torch seed (no draw, so the chief's random stream is untouched); a resumed run
    keeps its checkpoint's."""
    if position.base_seed is not None:
        return position.base_seed
    if context.distributed.size == 1:
        return None
    return int(context.distributed.broadcast(torch.initial_seed()))


class _PlainPasses:
    """Iterates a plain loader, skipping the batches of the current pass already trained."""

    def __init__(self, loader: Any, start_batch: int, epoch_len: int) -> None:
        self._loader = loader
        self._skip = start_batch % epoch_len if epoch_len != sys.maxsize else start_batch

    def __iter__(self) -> Iterator:
        iterator = iter(self._loader)
        if self._skip:
            logger.warning(
                f"Resuming mid-epoch with a plain torch DataLoader: replaying and discarding "
                f"{self._skip} batches. The order is exact only if the loader's order is "
                "deterministic; det_lightning.pytorch.DataLoader resumes exactly."
            )
            iterator = itertools.islice(iterator, self._skip, None)
            self._skip = 0
        return iterator


def build_validation_loader(
    trial: "PyTorchTrial", context: "PyTorchTrialContext", evaluate_batch: bool
) -> Any:
    """The validation loader: sharded for ``evaluate_batch``; whole, on the chief, for
    ``evaluate_full_dataset`` (other ranks get one empty step: Lightning rejects a loader of
    length zero, and every rank must reach the validation hooks that reduce across ranks)."""
    dist = context.distributed
    loader = trial.build_validation_data_loader()
    if not evaluate_batch and dist.rank != 0:
        return WholeLoader(None)
    if isinstance(loader, DataLoader):
        replicas, rank = (dist.size, dist.rank) if evaluate_batch else (1, 0)
        sampler = adapt_batch_sampler(loader.batch_sampler, num_replicas=replicas, rank=rank)
        torch_loader = loader._torch_loader(sampler, context.device)
    else:
        _check_plain_loader(context, "build_validation_data_loader", loader)
        torch_loader = loader
    if evaluate_batch and dist.size == 1 and loader_length(torch_loader) == 0:
        raise RuntimeError(
            "validation_loader is empty: build_validation_data_loader() yields no batches."
        )
    # evaluate_full_dataset gets the loader itself, once per validation.
    return torch_loader if evaluate_batch else WholeLoader(torch_loader)


class HooksFirst:
    """A validation loader whose iterator is made only after ``begin()`` ran.

    Determined calls ``on_validation_start`` and ``on_validation_epoch_start`` before
    ``iter(validation_loader)``, which draws a seed from the global torch generator; Lightning's
    evaluation loop makes the iterator (and fetches a first batch) before its hooks. Iterating
    this runs ``begin`` (``TrialHooks.begin_validation``) first, so a callback's random draws
    come where Determined makes them.
    """

    def __init__(self, loader: Any, begin: Callable[[], None]) -> None:
        self.loader = loader
        self.begin = begin

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator:
        # A generator: Lightning calls iter() once while setting up, only to check the loader
        # is iterable, and never takes a batch from that one.
        self.begin()
        fetch = LabelFree().fetcher(iter(self.loader))  # (without torch's profiler label)
        while True:
            try:
                batch = fetch()
            except StopIteration:
                return
            yield batch


class WholeLoader:
    """A dataloader of one "batch": the whole validation loader (None on non-chief ranks).

    A plain ``[loader]`` would not do: Lightning reads a list as several dataloaders.
    """

    def __init__(self, loader: Optional[Any]) -> None:
        self.loader = loader

    def __len__(self) -> int:
        return 1

    def __iter__(self) -> Iterator:
        return iter([self.loader])


def _check_plain_loader(context: "PyTorchTrialContext", fn: str, loader: Any) -> None:
    if loader is None:
        raise TypeError(
            f"{fn}() returned None: it must return a det_lightning.pytorch.DataLoader (or, with "
            "reproducibility checks disabled, a torch.utils.data.DataLoader)."
        )
    if not context.engine.data_repro_checks_disabled:
        raise RuntimeError(dataset_repro_error(fn, loader))
    if not isinstance(loader, (data.DataLoader, list, tuple)) and not hasattr(loader, "__iter__"):
        raise TypeError(
            f"{fn}() returned an instance of {type(loader).__name__}, which is not iterable."
        )
