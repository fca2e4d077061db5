"""A custom ``batch_sampler`` that yields more (or fewer) batches than its ``len()`` says is
followed as Determined follows it: every batch it yields, pass after pass, with epochs counted
by ``len()``. Determined's word-language-model example has such a sampler (``len()`` 7, yields 8).
A resume from a checkpoint taken anywhere continues with exactly the next batch."""

import pathlib
from typing import Any, Dict, Iterator, List

import pytest
import torch
from determined import pytorch as det_pytorch
from torch.utils.data import Sampler

from det_lightning import pytorch as dl_pytorch
from tests.fixtures.trials import make_trials, regression_data, seed_everything

pytestmark = pytest.mark.interop


class UnevenSampler(Sampler):
    """Shuffled batches of 8 over 64 records; pass ``p`` yields ``len() + extra[p % 3]``
    batches (repeating its first ones): longer, equal and shorter passes in turn."""

    EXTRA = (1, 0, -2)

    def __init__(self) -> None:
        self.passes = 0

    def __len__(self) -> int:
        return 7

    def __iter__(self) -> Iterator[List[int]]:
        order = torch.randperm(64).tolist()  # the global generator, as a shuffled loader draws
        batches = [order[i : i + 8] for i in range(0, 64, 8)]
        count = 7 + self.EXTRA[self.passes % 3]
        self.passes += 1
        for i in range(count):
            yield batches[i % 8]


def _trial_class(api: Any) -> Any:
    base = make_trials(api)["MLPTrial"]

    class UnevenTrial(base):  # type: ignore[misc, valid-type]
        def build_training_data_loader(self) -> Any:
            return api.DataLoader(regression_data(64), batch_sampler=UnevenSampler())

        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            self.epochs.append(epoch_idx)
            return super().train_batch(batch, epoch_idx, batch_idx)

    return UnevenTrial


def _fit(api: Any, seed: int = 5, **fit_kwargs: Any) -> Any:
    seed_everything(seed)
    with api.init(hparams={"lr": 0.01, "dropout": 0.0}) as context:
        trial = _trial_class(api)(context)
        trial.epochs = []
        api.Trainer(trial, context).fit(checkpoint_policy="none", **fit_kwargs)
    return trial


def test_every_batch_the_sampler_yields_is_trained_as_in_determined() -> None:
    theirs = _fit(det_pytorch, max_length=det_pytorch.Batch(24))
    ours = _fit(dl_pytorch, max_length=dl_pytorch.Batch(24))
    assert ours.seen == theirs.seen
    assert ours.epochs == theirs.epochs == [b // 7 for b in range(24)]
    assert ours.recorder.batch_losses == theirs.recorder.batch_losses


class WordModelSampler(Sampler):
    """Like the word-language-model example's ``BatchSamp``: no randomness, and a ``len()``
    that is not what it yields (8 batches of 8 over 64 records)."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[List[int]]:
        for start in range(0, 64, 8):
            yield list(range(start, start + 8))


def _fit_deterministic(
    length: int, checkpoint_dir: pathlib.Path, seed: int = 5, **fit_kwargs: Any
) -> Any:
    base = make_trials(dl_pytorch)["MLPTrial"]

    class Trial(base):  # type: ignore[misc, valid-type]
        def build_training_data_loader(self) -> Any:
            return dl_pytorch.DataLoader(
                regression_data(64), batch_sampler=WordModelSampler(length)
            )

    seed_everything(seed)
    with dl_pytorch.init(hparams={"lr": 0.01}) as context:
        trial = Trial(context)
        dl_pytorch.Trainer(trial, context, checkpoint_dir=str(checkpoint_dir)).fit(
            checkpoint_policy="none", **fit_kwargs
        )
    return trial


@pytest.mark.parametrize("length", [7, 9])  # the sampler yields 8: longer, then shorter
@pytest.mark.parametrize("stop_at", [5, 7, 8, 11, 16])
def test_resume_anywhere_continues_with_the_next_batch(
    length: int, stop_at: int, tmp_path: pathlib.Path
) -> None:
    common: Dict[str, Any] = dict(validation_period=dl_pytorch.Batch(stop_at))
    straight = _fit_deterministic(
        length, tmp_path / "straight", max_length=dl_pytorch.Batch(24), **common
    )
    assert len(set(straight.seen[:8])) == 8 and straight.seen[8:16] == straight.seen[:8]
    split = tmp_path / "split"
    first = _fit_deterministic(length, split, max_length=dl_pytorch.Batch(stop_at), **common)
    [checkpoint] = [p for p in split.iterdir() if not p.name.startswith(".")]
    resumed = _fit_deterministic(
        length,
        tmp_path / "resumed",
        seed=99,
        max_length=dl_pytorch.Batch(24),
        latest_checkpoint=str(checkpoint),
        **common,
    )
    assert first.seen + resumed.seen == straight.seen
    for a, b in zip(resumed.model.parameters(), straight.model.parameters()):
        assert torch.equal(a, b)
