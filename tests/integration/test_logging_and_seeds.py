"""Where metrics go (Determined's log lines, TensorBoard through Lightning's logger, the
context's writer on the same run) and when init() seeds."""

import logging
import pathlib
import random

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from det_lightning import pytorch
from det_lightning.errors import InternalException
from tests.fixtures.run import run_trial


def scalars(run_dir: pathlib.Path) -> dict:
    found: dict = {}
    for events in run_dir.rglob("events.out.tfevents.*"):
        acc = EventAccumulator(str(events))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            found.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
    return found


def test_metrics_reach_tensorboard_and_the_log(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    tb_dir = tmp_path / "tb"
    caplog.set_level(logging.INFO, logger="det_lightning")
    trial, _ = run_trial(
        pytorch,
        "MLPTrial",
        {"lr": 0.01},
        trainer_kwargs={"tensorboard_dir": str(tb_dir)},
        max_length=pytorch.Batch(12),
        validation_period=pytorch.Batch(6),
        reporting_period=pytorch.Batch(4),
    )
    found = scalars(tb_dir)
    assert [step for step, _ in found["Determined/loss"]] == list(range(12))
    losses = [value for _, value in sorted(found["Determined/loss"])]
    assert losses == pytest.approx(trial.recorder.batch_losses, rel=1e-6)
    assert [step for step, _ in found["Determined/validation_loss"]] == [6, 12]
    lines = [r.getMessage() for r in caplog.records]
    # A training workload ends at every boundary of any kind, as in Determined.
    reported = [
        int(m.split("=")[1].split(",")[0])
        for m in lines
        if m.startswith("report_training_metrics(steps_completed=")
    ]
    assert reported == [4, 6, 8, 12]
    assert any(m.startswith("report_validation_metrics(steps_completed=12") for m in lines)
    assert any(m.startswith("saved checkpoint ") for m in lines)


def test_context_writer_writes_to_the_same_run(tmp_path: pathlib.Path) -> None:
    tb_dir = tmp_path / "tb"
    with pytorch.init(hparams={}) as context:
        from tests.fixtures.trials import make_trials

        trial = make_trials(pytorch)["MLPTrial"](context)
        trainer = pytorch.Trainer(trial, context, tensorboard_dir=str(tb_dir))
        trainer.fit(max_length=pytorch.Batch(2))
        assert context.get_tensorboard_path() == tb_dir
        context.get_tensorboard_writer().add_scalar("custom/metric", 1.5, 7)
    found = scalars(tb_dir)
    assert found["custom/metric"] == [(7, 1.5)]
    assert "Determined/loss" in found


def test_init_seeds_only_when_an_experiment_seed_is_configured() -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    with pytorch.init(hparams={}) as context:
        assert torch.equal(torch.rand(3), expected)  # untouched: the user's seeding stands
        with pytest.raises(InternalException, match="experiment_seed"):
            context.get_trial_seed()
    values = []
    for _ in range(2):
        torch.manual_seed(999)
        with pytorch.init(exp_conf={"reproducibility": {"experiment_seed": 7}}) as context:
            assert context.get_trial_seed() == 7
            values.append((torch.rand(1).item(), np.random.rand(), random.random()))
    assert values[0] == values[1]
    torch.manual_seed(7)
    assert values[0][0] == torch.rand(1).item()


def test_a_trial_of_an_experiment_is_seeded_with_its_trial_seed_whatever_the_script_passes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A script trial (``entrypoint: python3 train.py``) calls ``init(hparams=info.trial.hparams)``
    without ``exp_conf``; Determined's ``init()`` on a cluster takes the trial's config and
    seeds with the seed the master drew for the trial (``$DET_TRIAL_SEED``), not the
    experiment seed, so the trial's numbers repeat. Before, such a trial was unseeded; then
    seeded with the experiment seed."""
    from det_lightning._env import TRIAL_INFO_ENV
    from det_lightning._info import ClusterInfo, TrialInfo

    config = {"reproducibility": {"experiment_seed": 1673293593}, "name": "x"}
    info = ClusterInfo(TrialInfo(1, 0, {"lr": 0.1}, config, trial_seed=556896495))
    monkeypatch.setenv(TRIAL_INFO_ENV, info.to_environment())
    draws = []
    for passed in ({"hparams": {"lr": 0.1}}, {"hparams": {"lr": 0.1}, "exp_conf": {"name": "y"}}):
        torch.manual_seed(999)
        with pytorch.init(**passed) as context:  # type: ignore[arg-type]
            assert context.get_trial_seed() == 556896495
            assert context.get_experiment_config() == config
            assert context.get_hparams() == {"lr": 0.1}
            draws.append(torch.rand(1).item())
    torch.manual_seed(556896495)
    assert draws == [torch.rand(1).item()] * 2
    unseeded = ClusterInfo(TrialInfo(2, 0, {"lr": 0.1}, {"name": "x"}, trial_seed=12))
    monkeypatch.setenv(TRIAL_INFO_ENV, unseeded.to_environment())
    with pytorch.init() as context:  # no hyperparameters passed: the trial's; no exp. seed
        assert context.get_hparams() == {"lr": 0.1}
        assert context.get_trial_seed() == 12 == torch.initial_seed()


def test_bad_experiment_seed_is_refused() -> None:
    with pytest.raises(ValueError, match="experiment_seed.*int >= 0"):
        with pytorch.init(exp_conf={"reproducibility": {"experiment_seed": "abc"}}):
            pass
