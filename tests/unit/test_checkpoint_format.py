"""The checkpoint format's pieces, without a Trainer: RNG state, model keys, files, atomic writes."""

import json
import logging
import pathlib
import pickle
import random
import sys
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from det_lightning import errors
from det_lightning.pytorch import _checkpoint as ckpt
from det_lightning.pytorch import _checkpoint_write as ckpt_write
from det_lightning.pytorch import _local_store as local_store
from det_lightning.pytorch import _state_dicts
from det_lightning.pytorch._code import MAX_CODE_FILE_BYTES, code_sources, copy_code

REPO = pathlib.Path(__file__).resolve().parents[2]


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))


# ----- RNG state ------------------------------------------------------------------------------
def test_rng_state_round_trips_through_a_weights_only_file(tmp_path: pathlib.Path) -> None:
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    state = _state_dicts.capture_rng_state()
    assert set(state) == {"cpu_rng_state", "np_rng_state", "random_rng_state"}  # no GPU here
    torch.save(state, tmp_path / "rng.pth")
    expected = (random.random(), np.random.rand(), torch.rand(1))
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    _state_dicts.restore_rng_state(torch.load(tmp_path / "rng.pth", weights_only=True))
    assert (random.random(), np.random.rand(), torch.rand(1)) == expected


def test_determined_numpy_rng_state_is_restored_and_made_weights_only_safe() -> None:
    np.random.seed(5)
    determined_style = {
        "cpu_rng_state": torch.random.get_rng_state(),
        "np_rng_state": np.random.get_state(),  # what Determined pickles: a numpy array inside
        "random_rng_state": random.getstate(),
    }
    expected = np.random.rand(3)
    safe = _state_dicts.safe_rng_state(determined_style)
    assert isinstance(safe["np_rng_state"][1], torch.Tensor)
    np.random.seed(0)
    _state_dicts.restore_rng_state(safe)
    assert np.array_equal(np.random.rand(3), expected)


# ----- models ---------------------------------------------------------------------------------
def test_data_parallel_models_save_plain_keys() -> None:
    model = _mlp()
    wrapped = nn.DataParallel(nn.DataParallel(model))
    assert list(wrapped.state_dict())[0].startswith("module.module.")
    assert _state_dicts.model_state_dicts([wrapped])[0].keys() == model.state_dict().keys()


def test_prefixed_weights_load_into_plain_and_wrapped_models() -> None:
    source = _mlp()
    prefixed = {f"module._orig_mod.{k}": v for k, v in source.state_dict().items()}
    for target in (_mlp(), nn.DataParallel(_mlp())):
        _state_dicts.load_models([target], {ckpt.MODELS: [prefixed]})
        for mine, theirs in zip(_state_dicts.plain_model(target).parameters(), source.parameters()):
            assert torch.equal(mine, theirs)


def test_a_model_whose_own_keys_start_with_module_keeps_them() -> None:
    class Holder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.module = nn.Linear(2, 2)

    source, target = Holder(), Holder()
    _state_dicts.load_models([target], {ckpt.MODELS: [source.state_dict()]})
    assert torch.equal(target.module.weight, source.module.weight)


def test_key_mismatch_names_the_keys() -> None:
    with pytest.raises(errors.InvalidCheckpointException, match=r"missing keys \['0.bias'"):
        _state_dicts.load_models([_mlp()], {ckpt.MODELS: [nn.Linear(3, 1).state_dict()]})
    with pytest.raises(errors.InvalidCheckpointException, match="size mismatch for 0.weight"):
        other = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 1))
        _state_dicts.load_models([_mlp()], {ckpt.MODELS: [other.state_dict()]})
    with pytest.raises(errors.InvalidCheckpointException, match="2 model state dicts"):
        _state_dicts.load_models([_mlp()], {ckpt.MODELS: [_mlp().state_dict()] * 2})


# ----- files ----------------------------------------------------------------------------------
def _write(directory: pathlib.Path, state: dict, batches: int = 7) -> None:
    trial_state = {**ckpt.new_trial_state(), "batches_trained": batches}
    ckpt_write.write_files(
        directory, state, trial_state, {"trial_type": "PyTorchTrial"}, code=[], code_skip=[]
    )


def test_written_files_follow_determined_layout(tmp_path: pathlib.Path) -> None:
    state = {ckpt.MODELS: [_mlp().state_dict()], ckpt.RNG_STATE: _state_dicts.capture_rng_state()}
    path = local_store.write_atomically(tmp_path, "abc", lambda d: _write(d, state))
    assert sorted(p.name for p in path.iterdir()) == [
        "code",
        "load_data.json",
        "metadata.json",
        "state_dict.pth",
        "trial_state.pkl",
    ]
    metadata = json.loads((path / "metadata.json").read_text())
    assert metadata["steps_completed"] == 7 and metadata["format"] == "pickle"
    assert metadata["framework"] == f"torch-{torch.__version__}"
    assert metadata["determined_version"] == "0.38.1"
    assert pickle.loads((path / "trial_state.pkl").read_bytes())["batches_trained"] == 7
    assert ckpt.read_state_dict(path).keys() == state.keys()  # weights_only loading


def test_hyphenated_state_dict_name_is_accepted_on_read(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "checkpoints" / "u1"
    path.mkdir(parents=True)
    torch.save({ckpt.MODELS: []}, path / "state-dict.pth")
    assert ckpt.read_state_dict(path) == {ckpt.MODELS: []}
    ckpt_write.write_json(path / "metadata.json", {"steps_completed": 4})
    assert ckpt.latest_checkpoint(tmp_path / "checkpoints") == path


class _Opaque:
    pass


def test_objects_that_need_unpickling_are_refused_unless_asked(tmp_path: pathlib.Path) -> None:
    torch.save({ckpt.MODELS: [], "extra": _Opaque()}, tmp_path / "state_dict.pth")
    with pytest.raises(errors.InvalidCheckpointException, match="weights_only"):
        ckpt.read_state_dict(tmp_path)
    loaded = ckpt.read_state_dict(tmp_path, weights_only=False)
    assert isinstance(loaded["extra"], _Opaque)


def test_trial_state_pickle_may_not_build_objects(tmp_path: pathlib.Path) -> None:
    (tmp_path / "trial_state.pkl").write_bytes(pickle.dumps({"batches_trained": _Opaque()}))
    with pytest.raises(errors.InvalidCheckpointException, match="only plain data"):
        ckpt.read_trial_state(tmp_path)


def test_load_data_names_a_class_in_main_as_the_script(monkeypatch: pytest.MonkeyPatch) -> None:
    main = type(sys)("__main__")
    main.__file__ = "/somewhere/train_script.py"
    monkeypatch.setitem(sys.modules, "__main__", main)
    trial_cls = type("MyTrial", (), {"__module__": "__main__"})
    load_data = ckpt_write.make_load_data(trial_cls, {"lr": 1}, None)
    assert load_data["trial_cls_spec"] == "train_script:MyTrial"
    assert load_data["trial_in_main"] is True and load_data["is_trainer"] is True
    assert "trial_in_main" not in ckpt_write.make_load_data(_Opaque, {}, None)


# ----- code/ ----------------------------------------------------------------------------------
def _project(tmp_path: pathlib.Path) -> pathlib.Path:
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "pkg" / "__init__.py").write_text("")
    (project / "pkg" / "model.py").write_text("X = 1\n")
    (project / "pkg" / "weights.bin").write_bytes(b"0" * (MAX_CODE_FILE_BYTES + 1))
    (project / "pkg" / "checkpoints").mkdir()
    (project / "pkg" / "checkpoints" / "old").write_text("a checkpoint")
    (project / "pkg" / ".git").mkdir()
    return project


def test_code_holds_the_package_without_checkpoints_or_large_files(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    project = _project(tmp_path)
    dest = tmp_path / "code"
    with caplog.at_level(logging.WARNING, "det_lightning.pytorch"):
        copy_code([(project / "pkg", "pkg")], dest, [project / "pkg" / "checkpoints"])
    copied = sorted(str(p.relative_to(dest)) for p in dest.rglob("*"))
    assert copied == ["pkg", "pkg/__init__.py", "pkg/model.py"]
    assert "weights.bin" in caplog.text and "Not copied" in caplog.text


def test_code_leaves_out_experiments_and_empty_folders_in_the_model_dir(
    tmp_path: pathlib.Path,
) -> None:
    """``det-lightning experiment const.yaml .`` keeps its experiments under
    ``./checkpoints/<id>/`` (``experiment.json``, ``search.journal``, its locks) and
    TensorBoard runs under ``./tensorboard/<id>/trial-<n>/``, empty until the first event:
    none of it is code (a new-user audit found both in every checkpoint's ``code/``)."""
    project = tmp_path / "project"
    experiment = project / "checkpoints" / "mnist-0123456789"
    (experiment / "trial-1").mkdir(parents=True)
    (experiment / "experiment.json").write_text("{}")
    (experiment / "search.journal").write_text("")
    (experiment / "search.journal.create.lock").write_text("")
    (project / "tensorboard" / "mnist-0123456789" / "trial-1").mkdir(parents=True)
    (project / "configs").mkdir()
    (project / "configs" / "experiment.json").write_text("{}")  # a user's file of that name
    (project / "model_def.py").write_text("X = 1\n")
    dest = tmp_path / "code"
    copy_code([(project, "")], dest, [])
    copied = sorted(str(p.relative_to(dest)) for p in dest.rglob("*"))
    assert copied == ["configs", "configs/experiment.json", "model_def.py"]


def test_code_sources_are_the_top_level_package_or_the_module_directory(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert code_sources(_Opaque) == [(REPO / "tests", "tests")]
    (tmp_path / "solo_trial_module.py").write_text("class Trial:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import solo_trial_module  # type: ignore[import-not-found]

    monkeypatch.delitem(sys.modules, "solo_trial_module")
    assert code_sources(solo_trial_module.Trial) == []  # no longer importable as such
    monkeypatch.setitem(sys.modules, "solo_trial_module", solo_trial_module)
    assert code_sources(solo_trial_module.Trial) == [(tmp_path.resolve(), "")]
    assert code_sources(int) == []  # a builtin has no source


# ----- atomic writes --------------------------------------------------------------------------
def test_a_failed_write_leaves_nothing(tmp_path: pathlib.Path) -> None:
    tmp_path = tmp_path / "checkpoints"

    def fail(directory: pathlib.Path) -> None:
        _write(directory, {ckpt.MODELS: []})
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        local_store.write_atomically(tmp_path, "u1", fail)
    assert list(tmp_path.iterdir()) == []


def test_an_existing_checkpoint_is_never_overwritten(tmp_path: pathlib.Path) -> None:
    tmp_path = tmp_path / "checkpoints"
    first = local_store.write_atomically(tmp_path, "u1", lambda d: _write(d, {ckpt.MODELS: []}, 3))
    before = (first / "state_dict.pth").read_bytes()
    with pytest.raises(FileExistsError):
        local_store.write_atomically(tmp_path, "u1", lambda d: _write(d, {ckpt.MODELS: [1]}, 9))
    assert (first / "state_dict.pth").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["u1"]


def test_code_of_a_class_claiming_a_stdlib_module_copies_one_file_at_most() -> None:
    """A class built with type(...) under ABCMeta reports its module as `abc`: code/ must not
    copy the standard library."""
    import abc as abc_module

    from det_lightning.pytorch._code import code_sources

    odd = abc_module.ABCMeta("Odd", (), {})
    assert odd.__module__ == "abc"
    sources = code_sources(odd)
    assert all(source.is_file() for source, _ in sources), sources


class _Payload:
    """Unpickling this runs code: it creates a marker file."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (open, (self.marker, "w"))


def test_a_found_checkpoint_pretending_to_be_determined_never_unpickles(
    tmp_path: "pathlib.Path",
) -> None:
    import json

    import pytest
    import torch

    from det_lightning import errors
    from det_lightning.adapters.resume import plan_resume
    from det_lightning.pytorch._identity import RunIdentity
    from det_lightning.pytorch._local_store import LocalStore

    RUN = RunIdentity(None, None)

    root = tmp_path / "checkpoints"
    fake = root / "0000-fake"
    fake.mkdir(parents=True)
    marker = tmp_path / "pwned"
    torch.save({"models_state_dict": [_Payload(str(marker))]}, str(fake / "state_dict.pth"))
    (fake / "metadata.json").write_text(json.dumps({"steps_completed": 99}))  # "Determined's"
    with pytest.raises(errors.InvalidCheckpointException, match="0000-fake.*weights_only"):
        plan_resume("latest", LocalStore(root), RUN)  # found, so not trusted
    assert not marker.exists()


def test_deleting_takes_the_name_away_in_one_rename_then_removes_the_files(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "checkpoints"
    local_store.write_atomically(root, "u1", lambda d: _write(d, {ckpt.MODELS: []}, 3))
    seen = []
    real_rmtree = local_store.shutil.rmtree

    def rmtree(path: Any) -> None:
        seen.append((pathlib.Path(path).name, (root / "u1").exists()))
        real_rmtree(path)

    monkeypatch.setattr(local_store.shutil, "rmtree", rmtree)
    assert local_store.delete_atomically(root, "u1")
    assert seen == [(".u1" + ckpt.DELETING_SUFFIX, False)]  # gone from its name before removal
    assert list(root.iterdir()) == []


def test_a_failed_deletion_is_logged_not_swallowed_and_not_raised(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "checkpoints"
    root.mkdir()
    assert not local_store.delete_atomically(root, "missing")
    assert "Could not delete checkpoint" in caplog.text and "missing" in caplog.text

    local_store.write_atomically(root, "u2", lambda d: _write(d, {ckpt.MODELS: []}, 3))

    def refuse(path: Any) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(local_store.shutil, "rmtree", refuse)
    caplog.clear()
    assert local_store.delete_atomically(root, "u2")  # gone from its name all the same
    assert "Permission denied" in caplog.text and "next run" in caplog.text
    assert ckpt.latest_checkpoint(root) is None
    monkeypatch.undo()
    (hidden,) = local_store.remove_deletions(root)  # what the next run does
    assert hidden.name == ".u2" + ckpt.DELETING_SUFFIX and list(root.iterdir()) == []


def test_sweeping_leftovers_leaves_checkpoints_and_partials_being_written(
    tmp_path: pathlib.Path,
) -> None:
    root = tmp_path / "checkpoints"
    local_store.write_atomically(root, "kept", lambda d: _write(d, {ckpt.MODELS: []}, 3))
    (root / (".gone" + ckpt.DELETING_SUFFIX) / "code").mkdir(parents=True)
    (root / (".new" + ckpt.PARTIAL_SUFFIX)).mkdir()
    assert [p.name for p in local_store.remove_deletions(root)] == [".gone.deleting"]
    assert sorted(p.name for p in root.iterdir()) == [".new.partial", "kept"]
