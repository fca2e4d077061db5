"""TensorBoard on (Determined's default): the scalars det_lightning writes equal the real
Determined 0.38.1's, tag by tag, step by step and value by value."""

import pathlib
from typing import Dict, List, Tuple

import pytest
from determined import pytorch as det_pytorch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from det_lightning import pytorch as dl_pytorch
from tests.fixtures.run import run_trial


def scalars(root: pathlib.Path) -> Dict[str, List[Tuple[int, float]]]:
    found: Dict[str, List[Tuple[int, float]]] = {}
    for events in sorted(root.rglob("events.out.tfevents.*")):
        acc = EventAccumulator(str(events))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            found.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
    return {tag: sorted(values) for tag, values in found.items()}


@pytest.mark.parametrize("reporting", [1, 4])
def test_tensorboard_scalars_equal_determineds(
    isolated_run: pathlib.Path, tmp_path: pathlib.Path, reporting: int
) -> None:
    fit = dict(
        max_length=det_pytorch.Batch(10),
        validation_period=det_pytorch.Batch(5),
        reporting_period=det_pytorch.Batch(reporting),
    )
    # Determined writes its local runs under ./runs/<time>_<host> (a SummaryWriter's default).
    run_trial(det_pytorch, "MLPTrial", {"lr": 0.01}, **fit)
    theirs = scalars(isolated_run / "runs")
    ours_dir = tmp_path / "ours"
    run_trial(
        dl_pytorch,
        "MLPTrial",
        {"lr": 0.01},
        trainer_kwargs={"tensorboard_dir": str(ours_dir)},
        max_length=dl_pytorch.Batch(10),
        validation_period=dl_pytorch.Batch(5),
        reporting_period=dl_pytorch.Batch(reporting),
    )
    ours = scalars(ours_dir)
    assert theirs and "Determined/loss" in theirs and "Determined/validation_loss" in theirs
    determined_tags = {tag: v for tag, v in ours.items() if tag.startswith("Determined/")}
    assert determined_tags == theirs
