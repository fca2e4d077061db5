"""The experiment's closing table fits a 100-column terminal however long the checkpoint root
and the hyperparameters are, and still names what a user looks for in it."""

import uuid

import pytest

from det_lightning._runner import summary
from det_lightning._runner.summary import format_summary
from det_lightning._runner.trial import TrialResult

ROOT = "/home/someone/projects/a-rather-long-project-name/mnist_pytorch/checkpoints"


def _trials(count: int, status: str = "STOPPED_EARLY") -> list:
    hparams = {
        "global_batch_size": 64,
        "n_filters1": 32,
        "dropout1": 0.25,
        "optimizer": {"name": "adam", "momentum": 0.9, "weight_decay": 0.0001},
    }
    return [
        TrialResult(
            n,
            {**hparams, "learning_rate": 0.001 * n, "n_filters2": 16 * n, "dropout2": 0.05 * n},
            status,
            0.1 * n,
            f"{ROOT}/trial-{n}/{uuid.uuid4()}",
            batches=100 * n,
            rung=2,
        )
        for n in range(1, count + 1)
    ]


@pytest.mark.parametrize(
    "count, status", [(12, "STOPPED_EARLY"), (3, "COMPLETED"), (1, "INTERRUPTED")]
)
def test_the_summary_fits_100_columns(count: int, status: str) -> None:
    trials = _trials(count, status)
    text = format_summary(trials, "validation_loss", True, root=ROOT, wall_s=3725.0)
    lines = text.splitlines()
    assert all(len(line) <= 100 for line in lines if ROOT not in line), text
    assert lines.count(f"checkpoints under {ROOT}") == 1 and text.count(ROOT) == 1, text
    assert lines[-1] == "wall time 1 h 02 min 05 s"
    rows = [line for line in lines if line[:1].isdigit()]
    assert [row.split()[0] for row in rows] == [str(n) for n in range(1, count + 1)]
    for trial, row in zip(trials, rows):  # each row names its checkpoint by (part of) its UUID
        assert str(trial.checkpoint).rsplit("/", 1)[-1][:8] in row, text
    if count > 1:  # what varies stays in the rows; what every trial shares is said once
        assert "learning_rate=0.003" in text and text.count("global_batch_size=64") == 1, text
        assert "every trial: global_batch_size=64, n_filters1=32" in text, text


def test_a_wide_terminal_shows_checkpoints_relative_to_the_root() -> None:
    trials = _trials(2, "COMPLETED")
    text = format_summary(trials, "loss", True, root=ROOT, width=200)
    relative = str(trials[1].checkpoint)[len(ROOT) + 1 :]
    assert relative.startswith("trial-2/") and f"  {relative}" in text, text
    best = str(trials[0].checkpoint)[len(ROOT) + 1 :]
    assert f"checkpoints under {ROOT}\nbest: trial 1 (loss=0.1), checkpoint {best}" in text


def test_the_width_is_the_terminals_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdout.isatty", lambda: False)
    assert summary.terminal_width() == 100
