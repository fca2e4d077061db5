"""Where validations, checkpoints and LR steps land, and which batches are trained in which
order: the same under det_lightning as under the real Determined 0.38.1."""

from typing import Any, Dict

import pytest
from determined import pytorch as det_pytorch

from det_lightning import pytorch as dl_pytorch
from tests.fixtures.run import run_trial

pytestmark = pytest.mark.interop

# n=60 records in batches of 8: 8 batches per epoch, the last one short.
PERIODS = {
    "epoch-validation-batch-checkpoint": dict(
        max_length="Epoch(3)", validation_period="Epoch(1)", checkpoint_period="Batch(5)"
    ),
    "validation-crossing-epochs": dict(
        max_length="Batch(23)", validation_period="Batch(6)", checkpoint_period="Epoch(2)"
    ),
    "container-periods": dict(
        max_length="Batch(20)",
        validation_period="Batch([2, 9, 16])",
        checkpoint_period="Batch([9, 13])",
    ),
    "epoch-containers": dict(
        max_length="Epoch(4)", validation_period="Epoch([1, 3])", checkpoint_period="Epoch(2)"
    ),
    "step-zero-and-test-mode": dict(
        max_length="Epoch(2)",
        validation_period="Batch(4)",
        step_zero_validation="True",
        test_mode="True",
    ),
}


def _run(api: Any, periods: Dict[str, str], hparams: Dict[str, Any]) -> Any:
    kwargs = {k: eval(v, {"Batch": api.Batch, "Epoch": api.Epoch}) for k, v in periods.items()}
    trial, _ = run_trial(
        api, "MLPTrial", {"n": 60, "lr": 0.01, **hparams}, seed=5, checkpoint_policy="all", **kwargs
    )
    return trial


@pytest.mark.parametrize("name", sorted(PERIODS))
def test_validations_and_checkpoints_land_on_the_same_batches(name: str) -> None:
    theirs = _run(det_pytorch, PERIODS[name], {})
    ours = _run(dl_pytorch, PERIODS[name], {})
    assert ours.recorder.events == theirs.recorder.events
    assert ours.recorder.events, "the schedule produced no events at all"
    assert ours.seen == theirs.seen


def test_shuffled_batch_order_over_three_epochs_matches() -> None:
    periods = {"max_length": "Epoch(3)"}
    theirs = _run(det_pytorch, periods, {"shuffle": True})
    ours = _run(dl_pytorch, periods, {"shuffle": True})
    assert len(ours.seen) == 24
    assert ours.seen == theirs.seen
    totals = [sum(ours.seen[i * 8 : (i + 1) * 8]) for i in range(3)]
    assert totals[0] == pytest.approx(totals[1], abs=1e-3)  # every record once per epoch
    assert totals[0] == pytest.approx(totals[2], abs=1e-3)
    assert ours.seen[:8] != ours.seen[8:16]  # and reshuffled each pass


@pytest.mark.parametrize(
    "step_mode,frequency,aggregation",
    [
        ("STEP_EVERY_BATCH", 1, 1),
        ("STEP_EVERY_BATCH", 3, 1),
        ("STEP_EVERY_BATCH", 2, 4),
        ("STEP_EVERY_EPOCH", 1, 1),
        ("STEP_EVERY_EPOCH", 2, 3),
        ("STEP_EVERY_OPTIMIZER_STEP", 2, 1),
        ("STEP_EVERY_OPTIMIZER_STEP", 1, 2),
        ("MANUAL_STEP", 1, 1),
    ],
)
def test_lr_scheduler_steps_like_determined(
    step_mode: str, frequency: int, aggregation: int
) -> None:
    hparams = {"step_mode": step_mode, "frequency": frequency}
    results = []
    for api in (det_pytorch, dl_pytorch):
        trial, _ = run_trial(
            api,
            "MLPTrial",
            {"n": 60, "lr": 0.01, **hparams},
            seed=5,
            init_kwargs={"aggregation_frequency": aggregation},
            max_length=api.Batch(20),
        )
        results.append(trial.lrs)
    theirs, ours = results
    assert ours == theirs
    if step_mode != "MANUAL_STEP":
        assert ours[-1] < ours[0]  # the scheduler did step
    else:
        assert len(set(ours)) == 1


def test_worker_processes_give_determineds_order() -> None:
    periods = {"max_length": "Epoch(3)", "validation_period": "Batch(5)"}
    theirs = _run(det_pytorch, periods, {"shuffle": True, "num_workers": 2})
    ours = _run(dl_pytorch, periods, {"shuffle": True, "num_workers": 2})
    assert len(ours.seen) == 24
    assert ours.seen == theirs.seen
    assert ours.recorder.batch_losses == theirs.recorder.batch_losses
