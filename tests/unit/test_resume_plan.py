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
from det_lightning.pytorch._data_position import DataPosition
from det_lightning.pytorch._identity import RunIdentity
from det_lightning.pytorch._local_store import LocalStore, write_atomically

# The run the checkpoints below belong to: their load_data.json names no class.
RUN = RunIdentity(None, None)
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
    return write_atomically(
        root,
        uuid,
        lambda d: ckpt_write.write_files(
            d, state, trial_state, {"trial_type": "PyTorchTrial"}, code=[], code_skip=[]
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
    plan = plan_resume(requested, LocalStore(root), RUN)
    if not resumes:
        assert (
            plan == ResumePlan() and plan.first_batch == 0 and plan.data_position == DataPosition()
        )
        return
    assert (plan.path, plan.name, plan.first_batch) == (
        expected["path"],
        expected["name"],
        expected["first_batch"],
    )
    assert plan.trusted == expected.get("trusted", False)  # found by a scan: never trusted
    assert not plan.warm_start
    assert plan.state is not None and plan.state[ckpt.MODELS][0]["w"].item() == plan.first_batch
    # the data position continues
    assert plan.data_position == DataPosition(base_seed=11, pass_states=[[1, 2]])
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
    assert plan_resume("latest", LocalStore(root), RUN).path == kept
    assert not partial.exists()


def test_a_path_outside_the_root_is_trusted_and_continues(tmp_path: pathlib.Path) -> None:
    elsewhere = _ours(tmp_path / "elsewhere", "u9", 8)
    plan = plan_resume(str(elsewhere), LocalStore(tmp_path / "checkpoints"), RUN)
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
    plan = plan_resume(str(foreign), LocalStore(tmp_path / "checkpoints"), RUN)
    assert plan.warm_start and plan.path == foreign and plan.name == str(foreign)
    assert plan.first_batch == 0 and plan.trial_state == ckpt.new_trial_state()
    assert (
        plan.state is not None
        and ckpt.EXTRA not in plan.state
        and plan.data_position == DataPosition()
    )
    assert plan.state[ckpt.MODELS][0]["w"].item() == 9.0


def test_determineds_own_checkpoint_unpickles_only_when_named(tmp_path: pathlib.Path) -> None:
    named = _determineds(tmp_path / "from-determined")
    plan = plan_resume(str(named), LocalStore(tmp_path / "checkpoints"), RUN)
    assert plan.trusted and isinstance(plan.state[ckpt.RNG_STATE]["np_rng_state"][1], np.ndarray)
    assert plan.first_batch == 5 and plan.trial_state["last_ckpt"] == 5  # from metadata.json
    root = tmp_path / "checkpoints"
    _determineds(root / "found")
    with pytest.raises(errors.InvalidCheckpointException, match="weights_only"):
        plan_resume("latest", LocalStore(root), RUN)


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
        plan_resume("u1", LocalStore(root), RUN)


@pytest.mark.parametrize("requested", ["no-such-uuid", "/no/such/dir"])
def test_a_missing_checkpoint_says_what_to_pass(tmp_path: pathlib.Path, requested: str) -> None:
    expected = "Pass a checkpoint directory, a UUID under the checkpoint directory"
    with pytest.raises(errors.InvalidCheckpointException, match=expected):
        plan_resume(requested, LocalStore(tmp_path / "checkpoints"), RUN)


# ----- identities: `latest` never crosses runs -------------------------------------------------
def _of_run(root: pathlib.Path, uuid: str, batches: int, identity: RunIdentity) -> pathlib.Path:
    """A checkpoint ``batches`` into training, written by the run ``identity``."""
    path = _ours(root, uuid, batches)
    metadata = json.loads((path / ckpt.METADATA_FILE).read_text())
    metadata["det_lightning_identity"] = identity.to_metadata()
    (path / ckpt.METADATA_FILE).write_text(json.dumps(metadata))
    return path


def _before_identities(root: pathlib.Path, uuid: str, batches: int, hparams: Any) -> pathlib.Path:
    """A checkpoint as det_lightning wrote it before identities: load_data.json only."""
    path = _ours(root, uuid, batches)
    load_data = {"trial_type": "PyTorchTrial", "trial_cls_spec": "m:T", "hparams": hparams}
    (path / ckpt.LOAD_DATA_FILE).write_text(json.dumps(load_data))
    return path


def test_latest_passes_over_other_runs_and_says_so(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "exp-a" / "trial-1"
    mine = RunIdentity("m:T", {"lr": 0.1}, "exp-a", 1)
    _of_run(root, "other", 60, dataclasses.replace(mine, hparams={"lr": 0.5}))
    _of_run(root, "other-exp", 70, dataclasses.replace(mine, experiment_id="exp-b"))
    own = _of_run(root, "own", 20, mine)
    with caplog.at_level("INFO", logger="det_lightning.pytorch"):
        plan = plan_resume("latest", LocalStore(root), mine)
    assert plan.path == own and plan.first_batch == 20
    (line,) = [r.getMessage() for r in caplog.records if "passed over" in r.getMessage()]
    assert "2 checkpoint(s)" in line and 'other (hyperparameters {"lr": 0.5}' in line
    assert "other-exp (experiment exp-b, not exp-a)" in line
    # None of its own: a fresh start, never another run's checkpoint.
    assert plan_resume("latest", LocalStore(root), dataclasses.replace(mine, trial=2)).path is None


def test_checkpoints_of_the_layout_before_identities_stay_resumable(tmp_path: pathlib.Path) -> None:
    """``<root>/trial-1/<uuid>`` (no experiment id, no identity in metadata): a trial of an
    experiment in ``<root>/<id>/trial-1`` resumes from it when class and hparams match."""
    old = _before_identities(tmp_path / "trial-1", "old", 7, {"lr": 0.1})
    _before_identities(tmp_path / "trial-1", "old-other", 9, {"lr": 0.5})
    mine = RunIdentity("m:T", {"lr": 0.1}, "exp-a", 1)
    plan = plan_resume("latest", LocalStore(tmp_path / "exp-a" / "trial-1"), mine)
    assert plan.path == old and plan.first_batch == 7
    # `det-lightning run --resume` in the old directory itself.
    assert (
        plan_resume(
            "latest", LocalStore(tmp_path / "trial-1"), RunIdentity("m:T", {"lr": 0.1})
        ).path
        == old
    )


def test_a_named_checkpoint_of_another_run_is_refused_unless_warm_started(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    theirs = _before_identities(tmp_path, "theirs", 6, {"lr": 0.5})
    mine = RunIdentity("m:T", {"lr": 0.1})
    message = r'theirs was written by another run: hyperparameters \{"lr": 0.5\}, not \{"lr": 0.1\}'
    with pytest.raises(errors.InvalidCheckpointException, match=message + ".*WARM_START=1"):
        plan_resume(str(theirs), LocalStore(tmp_path), mine)
    monkeypatch.setenv("DET_LIGHTNING_ALLOW_WARM_START", "1")
    plan = plan_resume(str(theirs), LocalStore(tmp_path), mine)
    assert plan.warm_start and plan.first_batch == 0 and plan.path == theirs


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
    plan = plan_resume("latest", LocalStore(root), RUN)
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
    assert plan_resume("latest", LocalStore(root), RUN) == ResumePlan()
    (warning,) = [r for r in caplog.records if r.levelname == "WARNING"]
    assert f"{damaged} (no metadata.json)" in warning.message
    assert "STARTS FROM THE BEGINNING" in warning.message and "delete or move" in warning.message
    assert str(partial) not in warning.message and not partial.exists()
    assert "no complete checkpoint under" not in caplog.text  # the warning says it instead
