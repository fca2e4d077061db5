"""det_lightning's local Core API (``core.init()``): what Determined's local mode has no
counterpart to compare with (atomic checkpoints, TensorBoard, refusals)."""

import logging
import pathlib
import re

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from det_lightning import core, errors
from det_lightning.pytorch._checkpoint import PARTIAL_SUFFIX


def test_a_failed_store_path_leaves_nothing(tmp_path: pathlib.Path) -> None:
    storage = tmp_path / "ckpt"
    with core.init(checkpoint_storage=str(storage)) as ctx:
        with pytest.raises(RuntimeError, match="disk full"):
            with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, _):
                (path / "model.txt").write_text("half")
                raise RuntimeError("disk full")
    assert list(storage.iterdir()) == []


def test_a_checkpoint_is_hidden_until_the_block_ends(tmp_path: pathlib.Path) -> None:
    storage = tmp_path / "ckpt"
    with core.init(checkpoint_storage=f"file://{storage}") as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, storage_id):
            assert path.name == f".{storage_id}{PARTIAL_SUFFIX}"
            assert not (storage / storage_id).exists()
        assert sorted(p.name for p in storage.iterdir()) == [storage_id]


def test_metrics_go_to_the_log_and_tensorboard(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("DET_LIGHTNING_TENSORBOARD_DIR", str(tmp_path / "tb"))
    caplog.set_level(logging.INFO, logger="det_lightning.core")
    with core.init(checkpoint_storage=str(tmp_path / "ckpt")) as ctx:
        ctx.train.report_training_metrics(2, {"loss": 0.5, "note": "text"})
        ctx.train.report_validation_metrics(2, {"validation_loss": 0.25})
        assert ctx.train.get_tensorboard_path() == tmp_path / "tb"
    assert "report_training_metrics(steps_completed=2, metrics={'loss': 0.5, 'note': 'text'})" in (
        caplog.text
    )
    (events,) = (tmp_path / "tb").glob("events.out.tfevents.*")
    acc = EventAccumulator(str(events))
    acc.Reload()
    assert sorted(acc.Tags()["scalars"]) == ["Determined/loss", "Determined/val_validation_loss"]
    assert [(e.step, e.value) for e in acc.Scalars("Determined/loss")] == [(2, 0.5)]


def test_manual_tensorboard_mode_writes_nothing(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DET_LIGHTNING_TENSORBOARD_DIR", str(tmp_path / "tb"))
    with core.init(
        checkpoint_storage=str(tmp_path), tensorboard_mode=core.TensorboardMode.MANUAL
    ) as ctx:
        ctx.train.report_training_metrics(1, {"loss": 1.0})
    assert not (tmp_path / "tb").exists()


@pytest.mark.parametrize(
    "storage, error, words",
    [
        ({"type": "s3", "secret_key": "hush"}, ValueError, "(type 's3'; keys secret_key, type)"),
        ({"type": "nfs", "path": "/x"}, ValueError, "give type s3 or gcs with a bucket"),
        ({"type": "directory"}, ValueError, "directory with a container_path"),
        ("ftp://host/ckpts", errors.CheckpointStorageError, "the scheme ftp:// is not supported"),
        (3, TypeError, "checkpoint_storage must be a string, dictionary, or None"),
    ],
)
def test_storage_naming_no_place_is_refused_naming_what_to_give(
    storage: object, error: type, words: str
) -> None:
    with pytest.raises(error, match=re.escape(words)) as info:
        core.init(checkpoint_storage=storage)  # type: ignore[arg-type]
    assert "hush" not in str(info.value)  # a secret given is never repeated


def test_a_directory_dict_and_a_file_uri_store_in_that_directory(tmp_path: pathlib.Path) -> None:
    for storage, directory in (
        ({"type": "directory", "container_path": str(tmp_path / "a")}, tmp_path / "a"),
        (f"file://{tmp_path / 'b'}", tmp_path / "b"),
    ):
        with core.init(checkpoint_storage=storage) as ctx:  # type: ignore[arg-type]
            with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, storage_id):
                (path / "x.txt").write_text("x")
        assert [p.name for p in directory.iterdir()] == [storage_id]
        assert (directory / storage_id / "x.txt").read_text() == "x"


def test_a_shared_fs_dict_is_refused_as_determined_does() -> None:
    with pytest.raises(ValueError, match="Use a string"):
        core.init(checkpoint_storage={"type": "shared_fs", "host_path": "/tmp"})


def test_a_sharded_checkpoint_in_one_process_is_published_whole(tmp_path: pathlib.Path) -> None:
    """``shard=True`` in one process: the chief's files and metadata, nothing partial left;
    an exception in the block leaves nothing."""
    ctx = core.init(checkpoint_storage=str(tmp_path / "store"))
    with ctx.checkpoint.store_path({"steps_completed": 2}, shard=True) as (path, storage_id):
        (path / "part.bin").write_bytes(b"1")
    with pytest.raises(ValueError, match="boom"):
        with ctx.checkpoint.store_path({"steps_completed": 3}, shard=True) as (path, _):
            (path / "part.bin").write_bytes(b"2")
            raise ValueError("boom")
    assert [p.name for p in (tmp_path / "store").iterdir()] == [storage_id]
    assert ctx.checkpoint.get_metadata(storage_id) == {"steps_completed": 2}
    with pytest.raises(RuntimeError, match="ckpt_dir has to be provided if selector"):
        ctx.checkpoint.upload(None, shard=True, selector=lambda _: True)
    assert [p.name for p in (tmp_path / "store").iterdir()] == [storage_id]


def test_a_rank_that_does_not_see_the_shared_directory_is_told_why(tmp_path: pathlib.Path) -> None:
    """A directory checkpoint several machines write must be on a filesystem each sees."""
    from det_lightning.pytorch._local_store import LocalStore

    with pytest.raises(errors.CheckpointStorageError, match="every machine shares"):
        LocalStore(tmp_path).shard_dir("0f9c1c7e-0000-4000-8000-000000000000")


def test_invalid_hp_exits_with_status_zero(tmp_path: pathlib.Path) -> None:
    with pytest.raises(SystemExit) as info:
        with core.init(checkpoint_storage=str(tmp_path)):
            raise errors.InvalidHP("lr too large")
    assert info.value.code == 0


def test_a_search_resumes_a_core_api_trial_from_its_newest_stored_checkpoint(
    tmp_path: pathlib.Path,
) -> None:
    """What a search gives a Core API trial it resumes as ``info.latest_checkpoint``: the
    newest checkpoint ``store_path`` finished (most ``steps_completed``), which a Trainer's
    ``latest`` never lists (it lacks a Trainer's files); ``restore_path`` reads it back."""
    from det_lightning import core
    from det_lightning._runner.trial import newest_checkpoint
    from det_lightning.pytorch._local_store import LocalStore

    trial_dir = tmp_path / "trial-1"
    with core.init(checkpoint_storage=str(trial_dir)) as context:
        for steps in (20, 10):  # written out of order: the most steps wins, not the newest
            with context.checkpoint.store_path({"steps_completed": steps}) as (path, _):
                (path / "state.txt").write_text(str(steps))
        with pytest.raises(RuntimeError, match="killed mid-write"):
            with context.checkpoint.store_path({"steps_completed": 99}) as (path, _):
                (path / "state.txt").write_text("partial")
                raise RuntimeError("killed mid-write")  # abandoned: nothing that counts
    store = LocalStore(trial_dir)
    assert store.latest() is None  # not a Trainer's checkpoint
    found = newest_checkpoint(store)
    assert found is not None
    with core.init(checkpoint_storage=str(trial_dir)) as context:
        with context.checkpoint.restore_path(str(found)) as path:
            assert (path / "state.txt").read_text() == "20"
    assert newest_checkpoint(LocalStore(tmp_path / "none")) is None
