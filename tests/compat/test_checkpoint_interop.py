"""Checkpoints cross between det_lightning and the real Determined 0.38.1, both ways."""

import json
import pathlib
import pickle
from typing import Any, Dict

import pytest
import torch
from determined import pytorch as det_pytorch

from det_lightning import pytorch as dl_pytorch
from det_lightning.pytorch import _checkpoint as ckpt
from tests.fixtures.run import run_trial
from tests.fixtures.trials import make_trials, regression_data

pytestmark = pytest.mark.interop

HPARAMS = {"lr": 0.01, "dropout": 0.3}


def by_steps(root: pathlib.Path) -> Dict[int, pathlib.Path]:
    return {
        json.loads((path / "metadata.json").read_text())["steps_completed"]: path
        for path in root.iterdir()
        if not path.name.startswith(".")
    }


def load_in_determined(path: pathlib.Path, ours: Any) -> Any:
    """Our checkpoint ``path`` loaded by the real Determined, which predicts what ``ours``
    (the trial that wrote it, as trained) does."""
    theirs: Any = det_pytorch.load_trial_from_checkpoint_path(
        str(path), trial_class=make_trials(det_pytorch)["MLPTrial"]
    )
    x = regression_data(16, seed=5).tensors[0]
    ours.model.eval(), theirs.model.eval()
    with torch.no_grad():
        assert torch.equal(theirs.model(x), ours.model(x))
    return theirs


def test_determined_loads_our_checkpoint_with_weights_only_loading(
    monkeypatch: pytest.MonkeyPatch, checkpoint_dir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """Determined's ``load_trial_from_checkpoint_path`` calls ``torch.load`` without
    ``weights_only``, which torch >= 2.6 reads as ``weights_only=True``: with the test suite's
    override removed, our checkpoint loads anyway, and predicts what our trained trial does."""
    monkeypatch.delenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")
    ours, _ = run_trial(
        dl_pytorch, "MLPTrial", HPARAMS, max_length=dl_pytorch.Batch(10), checkpoint_policy="none"
    )
    [path] = by_steps(checkpoint_dir).values()
    theirs = load_in_determined(path, ours)
    assert theirs.context.get_hparams() == HPARAMS

    # The same loader refuses a file that needs unpickling: it really is weights_only.
    torch.save({"models_state_dict": [{}], "opaque": pathlib.Path("x")}, path / "state_dict.pth")
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        det_pytorch.load_trial_from_checkpoint_path(
            str(path), trial_class=make_trials(det_pytorch)["MLPTrial"]
        )


class QuietMLPTrial(make_trials(dl_pytorch)["MLPTrial"]):  # type: ignore[misc]
    """The fixture trial without its recorder (a callback on on_checkpoint_write_end, which
    keeps writes in the training thread): its checkpoints are written in the background."""

    def build_callbacks(self) -> Dict[str, Any]:
        return {}


def test_determined_loads_a_checkpoint_written_in_the_background(
    monkeypatch: pytest.MonkeyPatch,
    checkpoint_dir: pathlib.Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.delenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")
    with caplog.at_level("INFO"), dl_pytorch.init(hparams=dict(HPARAMS)) as context:
        ours = QuietMLPTrial(context)
        dl_pytorch.Trainer(ours, context, logger=False).fit(
            max_length=dl_pytorch.Batch(10),
            checkpoint_period=dl_pytorch.Batch(4),
            checkpoint_policy="none",
        )
    assert "written in the training thread" not in caplog.text
    last = by_steps(checkpoint_dir)[10]
    load_in_determined(last, ours)


def _storage(isolated_run: pathlib.Path) -> pathlib.Path:
    return isolated_run.parent / "determined-storage" / "determined"


def _run(api: Any, seed: int = 11, **fit_kwargs: Any) -> Any:
    trial, _ = run_trial(
        api,
        "MLPTrial",
        HPARAMS,
        seed=seed,
        max_length=api.Batch(16),
        checkpoint_period=api.Batch(8),
        checkpoint_policy="none",
        **fit_kwargs,
    )
    return trial


def test_a_real_determined_checkpoint_resumes_under_det_lightning(
    isolated_run: pathlib.Path,
) -> None:
    """The real Determined trains MLPTrial (shuffled, dropout, momentum; 8 batches an epoch)
    for 16 batches, checkpointing at batch 8. We resume from that checkpoint under another seed
    and train the same batches 8-15, with the same losses and final weights.

    Why this schedule: Determined's local mode restarts its data stream on resume (a new
    iterator from batch 0, with the restored trial state) and has no record of how a pass was
    shuffled. At an epoch boundary that is still well-defined: the restarted stream's first pass
    draws its shuffle seed from the restored generator, exactly where the straight run drew the
    second pass's seed. Mid-epoch, Determined's own resume would replay the epoch's first batches
    instead. We read no data-order state from its checkpoint (it has none), so our resume draws
    the seed at the same point. Determined's own resume from the checkpoint is run as well, to
    show that its semantics give the same answer here.
    """
    straight = _run(det_pytorch)
    path = by_steps(_storage(isolated_run))[8]
    assert "det_lightning_version" not in json.loads((path / "metadata.json").read_text())

    ours = _run(dl_pytorch, seed=99, latest_checkpoint=str(path))
    assert len(ours.seen) == 8 and ours.seen == straight.seen[8:]
    assert ours.recorder.batch_losses == straight.recorder.batch_losses[8:]
    for mine, real in zip(ours.model.parameters(), straight.model.parameters()):
        assert torch.equal(mine, real)

    with pytest.warns(UserWarning, match="TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"):
        their_resume = _run(det_pytorch, seed=99, latest_checkpoint=path.name)
    assert their_resume.seen == straight.seen[8:]
    for mine, real in zip(ours.model.parameters(), their_resume.model.parameters()):
        assert torch.equal(mine, real)


def test_a_real_determined_checkpoint_converts_to_a_lightning_checkpoint(
    isolated_run: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """Its ``state_dict.pth`` pickles numpy RNG state, so conversion needs ``trust=True``; the
    ``.ckpt`` written loads with ``weights_only=True`` and exports back to the same weights."""
    straight = _run(det_pytorch)
    path = by_steps(_storage(isolated_run))[16]
    with pytest.raises(ValueError, match="weights_only"):
        dl_pytorch.to_lightning_checkpoint(path, tmp_path / "refused.ckpt")
    out = dl_pytorch.to_lightning_checkpoint(path, tmp_path / "theirs.ckpt", trust=True)
    content = torch.load(out, weights_only=True)
    assert content["global_step"] == 16
    exported = dl_pytorch.export_lightning_checkpoint(out, tmp_path / "exported")
    weights = ckpt.read_state_dict(exported)["models_state_dict"][0]
    assert weights.keys() == straight.model.state_dict().keys()
    for name, real in straight.model.state_dict().items():
        assert torch.equal(weights[name], real)
    # Determined writes hparams=None without an experiment config; the export keeps that.
    assert json.loads((exported / "load_data.json").read_text())["hparams"] is None


def test_the_real_determineds_writer_left_open_is_closed_in_the_tests_directory() -> None:
    """Determined's local mode leaves its SummaryWriter open on ``runs/...`` relative to the
    working directory; the suite's teardown closes it before the directory changes (its
    background flush would otherwise fail in whatever test runs next)."""
    from tests.fixtures.writers import close_open_writers

    trial, _ = run_trial(
        det_pytorch, "MLPTrial", HPARAMS, max_length=det_pytorch.Batch(2), checkpoint_policy="none"
    )
    writer = trial.context._tbd_writer
    assert writer is not None and writer.file_writer is not None  # left open by Determined
    assert close_open_writers() >= 1
    assert writer.file_writer is None
    assert list(pathlib.Path("runs").rglob("events.out.tfevents.*"))
