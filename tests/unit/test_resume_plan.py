"""``plan_resume``: one frozen plan from ``fit(latest_checkpoint=...)`` and the checkpoint root."""

import dataclasses
import json
import pathlib
import pickle
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np
import pytest
import torch

from det_lightning import errors
from det_lightning._env import LATEST_CHECKPOINT_ENV
from det_lightning.adapters.resume import ResumePlan, plan_resume
from det_lightning.pytorch import _checkpoint as ckpt
from det_lightning.pytorch import _checkpoint_write as ckpt_write

DATA = {"format": 1, "data": {"base_seed": 11, "pass_states": [[1, 2]]}}


def _ours(root: pathlib.Path, uuid: str, batches: int, trial_id: int = 0) -> pathlib.Path:
    """A complete checkpoint as ``pytorch.Trainer`` writes it, ``batches`` into training."""
    state = {ckpt.MODELS: [{"w": torch.tensor([float(batches)])}], ckpt.EXTRA: DATA}
    trial_state = {
        **ckpt.new_trial_state(),
        "trial_id": trial_id,
        "batches_trained": batches,
        "last_ckpt": batches,
        "epochs_trained": 1,
    }
    return ckpt_write.write_atomically(
        root,
        uuid,
        lambda d: ckpt_write.write_files(
            d, state, trial_state, {"trial_type": "PyTorchTrial"}, [], []
        ),
    )


def _determineds(directory: pathlib.Path) -> pathlib.Path:
    """A checkpoint as the real Determined writes it: numpy RNG state pickled, no
    ``det_lightning_version``, no trial_state.pkl (its batches only in metadata.json)."""
    directory.mkdir(parents=True)
    state = {
        ckpt.MODELS: [{"w": torch.ones(1)}],
        ckpt.RNG_STATE: {"np_rng_state": np.random.get_state()},
    }
    torch.save(state, str(directory / ckpt.STATE_DICT_FILE))
    (directory / ckpt.METADATA_FILE).write_text(json.dumps({"steps_completed": 5}))
    return directory


# A setup writes checkpoints under the root and returns what a plan that resumes should say.
def _nothing(root: pathlib.Path) -> Dict[str, Any]:
    return {}


def _two(root: pathlib.Path) -> Dict[str, Any]:
    _ours(root, "older", 3)
    newest = _ours(root, "newer", 6)
    return {"path": newest, "name": str(newest), "first_batch": 6}


def _uuid(root: pathlib.Path) -> Dict[str, Any]:
    _ours(root, "u1", 4)
    return {"path": root / "u1", "trusted": True, "name": "u1", "first_batch": 4}


Setup = Callable[[pathlib.Path], Dict[str, Any]]
CASES: Dict[str, Tuple[Optional[str], Optional[str], Setup, bool]] = {
    # name: (latest_checkpoint, $DET_LIGHTNING_LATEST_CHECKPOINT, setup, resumes)
    "none": (None, None, _nothing, False),
    "none, the variable blank": (None, " ", _nothing, False),
    "none, a checkpoint there": (None, None, _two, False),  # only "latest" looks for one
    "latest, no checkpoint yet": ("latest", None, _nothing, False),
    "latest from the variable, no checkpoint yet": (None, "latest", _nothing, False),
    "latest, two checkpoints": ("latest", None, _two, True),
    "latest from the variable, two checkpoints": (None, "latest", _two, True),
    "a UUID under the root": ("u1", None, _uuid, True),
    "a UUID from the variable": (None, "u1", _uuid, True),
    "the argument before the variable": ("u1", "latest", _uuid, True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_plan_for(case: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    requested, variable, setup, resumes = CASES[case]
    root = tmp_path / "checkpoints"
    if variable is None:
        monkeypatch.delenv(LATEST_CHECKPOINT_ENV, raising=False)
    else:
        monkeypatch.setenv(LATEST_CHECKPOINT_ENV, variable)
    expected = setup(root)
    plan = plan_resume(requested, root)
    if not resumes:
        assert plan == ResumePlan() and plan.first_batch == 0 and plan.data_state == {}
        return
    assert (plan.path, plan.name, plan.first_batch) == (
        expected["path"],
        expected["name"],
        expected["first_batch"],
    )
    assert plan.trusted == expected.get("trusted", False)  # found by a scan: never trusted
    assert not plan.warm_start
    assert plan.state is not None and plan.state[ckpt.MODELS][0]["w"].item() == plan.first_batch
    assert plan.data_state == DATA["data"]  # the data position continues
    assert plan.trial_state["epochs_trained"] == 1


def test_the_plan_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        ResumePlan().path = pathlib.Path("x")  # type: ignore[misc]


def test_latest_deletes_partial_checkpoints_and_ignores_them(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "checkpoints"
    kept = _ours(root, "kept", 2)
    partial = root / f".crashed{ckpt.PARTIAL_SUFFIX}"
    partial.mkdir()
    (partial / ckpt.STATE_DICT_FILE).write_bytes(b"half")
    assert plan_resume("latest", root).path == kept
    assert not partial.exists()


def test_a_path_outside_the_root_is_trusted_and_continues(tmp_path: pathlib.Path) -> None:
    elsewhere = _ours(tmp_path / "elsewhere", "u9", 8)
    plan = plan_resume(str(elsewhere), tmp_path / "checkpoints")
    assert (plan.path, plan.trusted, plan.name, plan.warm_start) == (
        elsewhere,
        True,
        str(elsewhere),
        False,
    )
    assert plan.first_batch == 8


def test_another_trials_checkpoint_is_a_warm_start(tmp_path: pathlib.Path) -> None:
    """Determined's rule: a cluster trial's checkpoint gives weights, optimizer and callback
    state, and training starts at batch 0 with a fresh data order."""
    foreign = _ours(tmp_path / "cluster", "t62", 9, trial_id=62)
    plan = plan_resume(str(foreign), tmp_path / "checkpoints")
    assert plan.warm_start and plan.path == foreign and plan.name == str(foreign)
    assert plan.first_batch == 0 and plan.trial_state == ckpt.new_trial_state()
    assert plan.state is not None and ckpt.EXTRA not in plan.state and plan.data_state == {}
    assert plan.state[ckpt.MODELS][0]["w"].item() == 9.0


def test_determineds_own_checkpoint_unpickles_only_when_named(tmp_path: pathlib.Path) -> None:
    named = _determineds(tmp_path / "from-determined")
    plan = plan_resume(str(named), tmp_path / "checkpoints")
    assert plan.trusted and isinstance(plan.state[ckpt.RNG_STATE]["np_rng_state"][1], np.ndarray)
    assert plan.first_batch == 5 and plan.trial_state["last_ckpt"] == 5  # from metadata.json
    root = tmp_path / "checkpoints"
    _determineds(root / "found")
    with pytest.raises(errors.InvalidCheckpointException, match="weights_only"):
        plan_resume("latest", root)


def _truncate_state_dict(path: pathlib.Path) -> None:
    data = (path / ckpt.STATE_DICT_FILE).read_bytes()
    (path / ckpt.STATE_DICT_FILE).write_bytes(data[: len(data) // 2])


def _objects_in_trial_state(path: pathlib.Path) -> None:
    (path / ckpt.TRIAL_STATE_FILE).write_bytes(pickle.dumps({"batches_trained": pathlib.Path()}))


@pytest.mark.parametrize(
    "damage, message",
    [
        (_truncate_state_dict, "truncated or damaged.*Resume from an earlier checkpoint"),
        (
            lambda path: (path / ckpt.TRIAL_STATE_FILE).write_bytes(b"\x80garbage"),
            "damaged; resume from an earlier one",
        ),
        (_objects_in_trial_state, "only plain data is accepted"),
    ],
)
def test_a_damaged_checkpoint_names_the_fix(
    tmp_path: pathlib.Path, damage: Callable[[pathlib.Path], None], message: str
) -> None:
    root = tmp_path / "checkpoints"
    damage(_ours(root, "u1", 3))
    with pytest.raises(errors.InvalidCheckpointException, match=message):
        plan_resume("u1", root)


@pytest.mark.parametrize("requested", ["no-such-uuid", "/no/such/dir"])
def test_a_missing_checkpoint_says_what_to_pass(tmp_path: pathlib.Path, requested: str) -> None:
    expected = "Pass a checkpoint directory, a UUID under the checkpoint directory"
    with pytest.raises(errors.InvalidCheckpointException, match=expected):
        plan_resume(requested, tmp_path / "checkpoints")


UUIDS = ("0a7c8a3e-1111-4222-8333-944445555601", "0a7c8a3e-1111-4222-8333-944445555602")


@pytest.mark.parametrize(
    "deleted", [ckpt.METADATA_FILE, ckpt.STATE_DICT_FILE, ckpt.TRIAL_STATE_FILE]
)
def test_latest_names_a_damaged_newest_checkpoint_and_resumes_the_one_before(
    deleted: str, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "checkpoints"
    older = _ours(root, UUIDS[0], 3)
    newest = _ours(root, UUIDS[1], 6)
    (newest / deleted).unlink()
    plan = plan_resume("latest", root)
    assert (plan.path, plan.first_batch) == (older, 3)
    (warning,) = [r for r in caplog.records if r.levelname == "WARNING"]
    assert f"{newest} (no {deleted})" in warning.message, warning.message
    assert f"Resuming from {older}, the newest complete checkpoint" in warning.message
    assert newest.is_dir()  # nothing a user had is deleted


def test_latest_with_only_damaged_checkpoints_says_it_starts_over(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "checkpoints"
    damaged = _ours(root, UUIDS[0], 3)
    (damaged / ckpt.METADATA_FILE).unlink()
    partial = root / f".{UUIDS[1]}{ckpt.PARTIAL_SUFFIX}"  # an unfinished write: cleaned
    partial.mkdir()
    assert plan_resume("latest", root) == ResumePlan()
    (warning,) = [r for r in caplog.records if r.levelname == "WARNING"]
    assert f"{damaged} (no metadata.json)" in warning.message
    assert "STARTS FROM THE BEGINNING" in warning.message and "delete or move" in warning.message
    assert str(partial) not in warning.message and not partial.exists()
    assert "no complete checkpoint under" not in caplog.text  # the warning says it instead
