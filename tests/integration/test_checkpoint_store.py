"""The ``CheckpointStore`` contract, run over every kind of store: a local directory and a
bucket on a real S3 endpoint (moto's server, ``tests/fixtures/object_store.py``), as Optuna runs
one storage suite over every storage (``tests/storages_tests/test_storages.py``).

Each kind brings the faults it really has: a deletion fails on a disk when a non-empty
``.<uuid>.deleting`` is in the rename's way (root ignores permissions), in a bucket when the
server refuses to delete the marker; a checkpoint is damaged by deleting one of its files; an
unwritable store is a directory under a regular file, or a bucket that does not exist.
"""

import contextlib
import pathlib
import uuid as uuid_lib
from typing import Dict, Iterator, List, Union

import pytest

from det_lightning import errors
from det_lightning.pytorch import _checkpoint as ckpt
from det_lightning.pytorch._checkpoint_write import write_files
from det_lightning.pytorch._local_store import LocalStore, begin_atomically
from det_lightning.pytorch._remote import MARKER, ObjectStore
from det_lightning.pytorch._store import CheckpointStore, publish_check
from tests.fixtures.object_store import S3

U1 = "0b7c8a3e-1111-4222-8333-944445555661"
U2 = "0b7c8a3e-1111-4222-8333-944445555662"
U3 = "0b7c8a3e-1111-4222-8333-944445555663"


class Directory:
    """A store in a directory, and its faults."""

    def __init__(self, tmp_path: pathlib.Path) -> None:
        self.tmp_path = tmp_path
        self.store = LocalStore(tmp_path / "root")

    def unwritable(self) -> CheckpointStore:
        (self.tmp_path / "a-file").write_text("")
        return LocalStore(self.tmp_path / "a-file" / "root")

    def remove_file(self, store: CheckpointStore, uuid: str, name: str) -> None:
        (pathlib.Path(str(store)) / uuid / name).unlink()

    def read(self, store: CheckpointStore, name: str) -> bytes:
        return (pathlib.Path(str(store)) / name).read_bytes()

    @contextlib.contextmanager
    def refusing_deletion(self, store: CheckpointStore, uuid: str) -> Iterator[None]:
        obstacle = pathlib.Path(str(store)) / f".{uuid}{ckpt.DELETING_SUFFIX}"
        (obstacle / "in-the-way").mkdir(parents=True)
        try:
            yield
        finally:
            (obstacle / "in-the-way").rmdir()
            obstacle.rmdir()


class Bucket:
    """A store in a bucket of moto's S3 server, and its faults."""

    def __init__(self, s3: S3) -> None:
        self.s3 = s3
        self.store = ObjectStore(s3.url("root"))

    def unwritable(self) -> CheckpointStore:
        return ObjectStore(f"s3://no-such-bucket-{uuid_lib.uuid4().hex[:8]}/root")

    def _key(self, store: CheckpointStore, name: str) -> str:
        return f"{str(store).split('://', 1)[1]}/{name}"

    def remove_file(self, store: CheckpointStore, uuid: str, name: str) -> None:
        self.s3.fs.rm_file(self._key(store, f"{uuid}/{name}"))

    def read(self, store: CheckpointStore, name: str) -> bytes:
        return bytes(self.s3.fs.cat_file(self._key(store, name)))

    @contextlib.contextmanager
    def refusing_deletion(self, store: CheckpointStore, uuid: str) -> Iterator[None]:
        with self.s3.refusing_deletes(f"{uuid}/{MARKER}") as refused:
            yield
        assert refused, "the server was never asked to delete the marker"


Kind = Union[Directory, Bucket]


@pytest.fixture(params=["directory", "bucket"])
def kind(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Kind:
    if request.param == "directory":
        return Directory(tmp_path)
    return Bucket(request.getfixturevalue("s3_server"))


def _prepare(directory: pathlib.Path, steps: int) -> None:
    """A checkpoint's files (``steps`` batches trained) in ``directory``, one of them nested."""
    trial_state = {**ckpt.new_trial_state(), "batches_trained": steps}
    load_data = {"trial_type": "PyTorchTrial", "hparams": {"lr": 0.1}}
    write_files(directory, {ckpt.MODELS: []}, trial_state, load_data, code=[], code_skip=[])
    (directory / ckpt.CODE_DIR / "model_def.py").write_text(f"STEPS = {steps}\n")


def save(store: CheckpointStore, uuid: str, steps: int) -> CheckpointStore:
    """Writes and publishes a checkpoint as training does: staged, then published."""
    partial = begin_atomically(store.staging(), uuid)
    local = store.stage(uuid, partial, lambda d: _prepare(d, steps))
    return store.publish(uuid, local)


def names(store: CheckpointStore) -> List[str]:
    return sorted(c.name for c in store.complete())


def files(directory: pathlib.Path) -> Dict[str, bytes]:
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in directory.rglob("*")
        if p.is_file()
    }


class Refused(Exception):
    pass


def refuse() -> None:
    raise Refused("taken over by another worker")


# ----- publishing ------------------------------------------------------------------------------
def test_publish_makes_a_checkpoint_visible_all_at_once(kind: Kind) -> None:
    store, seen = kind.store, []
    with publish_check(lambda: seen.append(names(store))):
        address = save(store, U1, 3)
    assert seen == [[]]  # the check ran once, its files all written, and nobody listed it
    assert names(store) == [U1] and store.exists(U1)
    assert address == store / U1 and str(address) == f"{store}/{U1}"


def test_a_failed_write_is_never_listed_and_leaves_nothing(kind: Kind) -> None:
    store = kind.store

    def fails_halfway(directory: pathlib.Path) -> None:
        (directory / ckpt.STATE_DICT_FILE).write_bytes(b"half")
        (directory / ckpt.METADATA_FILE).write_text('{"steps_completed": 99}')
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        store.stage(U1, begin_atomically(store.staging(), U1), fails_halfway)
    assert names(store) == [] and store.damaged() == [] and not store.exists(U1)
    assert list(store.staging().iterdir()) == []  # no partial directory left
    assert store.latest() is None


def test_latest_is_the_checkpoint_with_the_most_batches(kind: Kind) -> None:
    store = kind.store
    assert store.latest() is None
    for uuid, steps in ((U1, 3), (U2, 9), (U3, 5)):
        save(store, uuid, steps)
    assert store.latest() == store / U2


def test_fetch_gives_a_local_copy_with_the_same_files(
    kind: Kind, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepared = tmp_path / "prepared"
    prepared.mkdir()
    _prepare(prepared, 4)
    address = kind.store.publish(U1, prepared)  # a directory of its own: copied in
    monkeypatch.setenv("DET_LIGHTNING_CACHE_DIR", str(tmp_path / "machine-b"))  # another machine
    fetched = kind.store.fetch(U1)
    assert fetched != prepared and files(fetched) == files(prepared)
    assert "code/model_def.py" in files(fetched)
    assert address.local_copy() == fetched


def test_write_once_never_overwrites(kind: Kind) -> None:
    kind.store.write_once("experiment.json", b"first")
    kind.store.write_once("experiment.json", b"second")
    assert kind.read(kind.store, "experiment.json") == b"first"
    assert names(kind.store) == []  # a file beside the checkpoints is none of them


def test_set_file_replaces_and_removes_a_small_file(kind: Kind) -> None:
    """An experiment's cancel mark: written, replaced, removed, each at once for a reader;
    never one of the checkpoints, removing it twice is no error."""
    store = kind.store
    save(store, U1, 3)
    assert store.read_once("canceled.json") is None
    store.set_file("canceled.json", b"first")
    assert store.read_once("canceled.json") == b"first"
    store.set_file("canceled.json", b"second")
    assert kind.read(store, "canceled.json") == b"second"
    assert names(store) == [U1] and store.folders() == [U1]  # none of the checkpoints
    store.set_file("canceled.json", None)
    store.set_file("canceled.json", None)  # gone already: counts
    assert store.read_once("canceled.json") is None and names(store) == [U1]
    if isinstance(kind, Directory):  # no temporary file left beside it
        assert sorted(p.name for p in pathlib.Path(str(store)).iterdir()) == [U1]


def test_remove_all_removes_a_namespace_and_leaves_its_siblings(kind: Kind) -> None:
    """An experiment's folder, deleted: its trials' checkpoints and its own files go, nothing
    of it is listed after, and another experiment beside it is untouched."""
    mine, theirs = kind.store / "exp-a", kind.store / "exp-b"
    for store in (mine, theirs):
        store.write_once("experiment.json", b"{}")
        save(store / "trial-1", U1, 3)
        save(store / "trial-2", U2, 5)
    mine.remove_all()
    assert kind.store.folders() == ["exp-b"] and mine.read_once("experiment.json") is None
    assert names(mine / "trial-1") == [] and mine.folders() == []
    assert names(theirs / "trial-1") == [U1] and names(theirs / "trial-2") == [U2]
    mine.remove_all()  # gone already: counts
    if isinstance(kind, Directory):  # gone at once, nothing hidden left
        assert [p.name for p in pathlib.Path(str(kind.store)).iterdir()] == ["exp-b"]


@pytest.mark.parametrize("refused", [f"/{MARKER}", "/model_def.py", "/canceled.json"])
def test_a_bucket_removal_refused_half_way_shows_no_half_checkpoint(
    s3_server: S3, refused: str
) -> None:
    """A bucket policy denies deleting some objects: S3 answers a many-key delete with 200 and
    an error per refused key, and s3fs's ``rm`` does not raise. ``remove_all`` checks what is
    left after each stage and raises; the markers go first, so every checkpoint is whole (its
    marker refused) or listed by no one (a file refused), the experiment's record (``last``)
    stays until the end, also when one of its other own files is refused, and a second run
    finishes the removal."""
    mine = ObjectStore(s3_server.url("root")) / "exp-a"
    mine.write_once("experiment.json", b"{}")
    mine.set_file("canceled.json", b"{}")
    save(mine / "trial-1", U1, 3)
    save(mine / "trial-2", U2, 5)
    with s3_server.refusing_deletes(refused) as paths:
        with pytest.raises(errors.CheckpointStorageError, match="run it again"):
            mine.remove_all(last=["experiment.json"])
    assert paths, "the server was never asked to delete them"
    assert mine.read_once("experiment.json") == b"{}"  # still listed: it can be deleted again
    whole = refused == f"/{MARKER}"
    assert names(mine / "trial-1") == ([U1] if whole else [])
    assert names(mine / "trial-2") == ([U2] if whole else [])
    if not whole:  # nothing of either checkpoint is read as one
        assert (mine / "trial-1").damaged() == [] and (mine / "trial-1").latest() is None
    mine.remove_all(last=["experiment.json"])
    assert s3_server.keys("root") == []


def test_set_file_in_an_unwritable_store_raises(kind: Kind) -> None:
    with pytest.raises(OSError):
        kind.unwritable().set_file("canceled.json", b"{}")


def test_a_record_is_readable_as_the_umask_allows(tmp_path: pathlib.Path) -> None:
    """``experiment.json`` in a shared folder: readable by the team, as any file the user
    writes there (it was 0600, a temporary file's mode, so another user's
    ``det-lightning experiment list`` could not read it)."""
    import os

    store = LocalStore(tmp_path / "shared")
    previous = os.umask(0o022)
    try:
        store.write_once("experiment.json", b"{}")
    finally:
        os.umask(previous)
    assert (tmp_path / "shared" / "experiment.json").stat().st_mode & 0o777 == 0o644
    assert [p.name for p in (tmp_path / "shared").iterdir()] == ["experiment.json"]


def test_a_small_file_that_cannot_be_written_leaves_what_was_there(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk when the record or the cancel mark is flushed: the call raises, the file
    is as it was (or still absent), and no hidden copy is left beside it."""
    import errno
    import os

    store = LocalStore(tmp_path / "experiment")
    store.set_file("canceled.json", b"first")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        store.set_file("canceled.json", b"second")
    with pytest.raises(OSError, match="No space left"):
        store.write_once("experiment.json", b"{}")
    monkeypatch.undo()
    assert store.read_once("canceled.json") == b"first"
    assert sorted(p.name for p in (tmp_path / "experiment").iterdir()) == ["canceled.json"]


# ----- deleting and sweeping ------------------------------------------------------------------
def test_delete_removes_the_checkpoint_and_its_mark(kind: Kind) -> None:
    store = kind.store
    save(store, U1, 3)
    save(store, U2, 6)
    assert store.delete(U1)
    assert names(store) == [U2] and not store.exists(U1)
    assert store.marked_unkept() == []  # marked, then unmarked once gone
    assert not (store.staging() / U1).exists()  # no local copy of it either
    assert store.sweep() == []  # nothing left over


def test_a_failed_deletion_stays_marked_and_the_next_sweep_finishes_it(kind: Kind) -> None:
    store = kind.store
    save(store, U1, 3)
    with kind.refusing_deletion(store, U1):
        assert not store.delete(U1)
    assert names(store) == [U1] and store.latest() == store / U1  # whole and readable
    assert store.marked_unkept() == [U1]
    assert store.sweep() == [str(store / U1)]
    assert names(store) == [] and store.marked_unkept() == []
    assert store.sweep() == []


def test_a_killed_upload_the_bucket_will_not_delete_is_not_reported_removed(
    s3_server: S3, tmp_path: pathlib.Path
) -> None:
    """``sweep`` returns what it removed: a killed upload (objects, no marker) of which S3
    refused a key in a many-key delete (200, s3fs does not raise) stays, is not reported, and
    the next sweep removes it."""
    store = ObjectStore(s3_server.url("root"))
    (tmp_path / "shard").mkdir()
    for name in ("a.bin", "b.bin"):
        (tmp_path / "shard" / name).write_bytes(b"x")
    store.put_shard(U3, tmp_path / "shard", ["a.bin", "b.bin"])
    with s3_server.refusing_deletes("/b.bin") as refused:
        assert store.sweep() == []
    assert refused and s3_server.keys("root") == [f"{U3}/b.bin"]
    assert store.sweep() == [str(store / U3)] and s3_server.keys("root") == []


def test_sweep_spares_the_checkpoint_this_run_resumes_from(kind: Kind) -> None:
    store = kind.store
    save(store, U1, 3)
    save(store, U2, 6)
    for uuid in (U1, U2):
        with kind.refusing_deletion(store, uuid):
            assert not store.delete(uuid)
    assert store.sweep(spare=U1) == [str(store / U2)]
    assert names(store) == [U1] and store.marked_unkept() == [U1]  # weighed again by this run


def test_a_damaged_checkpoint_is_reported_and_never_listed(kind: Kind) -> None:
    store = kind.store
    save(store, U1, 3)
    save(store, U2, 9)
    kind.remove_file(store, U2, ckpt.STATE_DICT_FILE)
    assert store.damaged() == [(store / U2, [ckpt.STATE_DICT_FILE])]
    assert names(store) == [U1] and store.latest() == store / U1
    assert store.exists(U2)  # still under its name: a sweep leaves it to the user
    assert store.sweep() == [] and store.exists(U2)


# ----- namespaces -----------------------------------------------------------------------------
def test_namespaces_never_see_each_others_checkpoints(kind: Kind) -> None:
    root = kind.store
    a, b = root / "exp-a" / "trial-1", root / "exp-b" / "trial-1"
    assert str(a) == f"{root}/exp-a/trial-1" and a.parent.parent == root
    save(a, U1, 3)
    save(b, U2, 6)
    assert names(a) == [U1] and names(b) == [U2]
    assert a.latest() == a / U1 and b.latest() == b / U2
    assert not b.exists(U1) and not a.exists(U2)
    assert names(root) == [] and names(root / "exp-a") == [] and root.damaged() == []
    assert root.sweep() == [] and b.sweep() == []  # neither touches the other's
    assert names(a) == [U1] and names(b) == [U2]


# ----- checks ---------------------------------------------------------------------------------
def test_preflight_names_an_unwritable_store_and_creates_nothing_here(kind: Kind) -> None:
    assert kind.store.problem() is None
    assert names(kind.store) == [] and kind.store.sweep() == []  # the probe left nothing
    bad = kind.unwritable()
    problem = bad.problem()
    assert problem is not None and f"Cannot write checkpoints to {bad}" in problem, problem
    assert not bad.staging().exists()


def test_a_publish_check_forbids_publishing_and_nothing_is_left(kind: Kind) -> None:
    store = kind.store
    with publish_check(refuse), pytest.raises(Refused):
        save(store, U1, 3)
    assert names(store) == [] and store.damaged() == [] and not store.exists(U1)
    assert list(store.staging().iterdir()) == []  # no local copy, no partial directory
    assert store.sweep() == []  # and nothing for the next run to clean up


def test_a_publish_check_forbids_deleting_and_nothing_is_marked(kind: Kind) -> None:
    store = kind.store
    save(store, U1, 3)
    with publish_check(refuse), pytest.raises(Refused):
        store.delete(U1)
    assert names(store) == [U1] and store.marked_unkept() == []


# ----- files that are not a checkpoint ---------------------------------------------------------
def test_outputs_stay_beside_checkpoints_never_listed_never_swept(kind: Kind) -> None:
    """``torch_batch_process``'s ``upload_path()``: ``<output uuid>/rank_<r>/`` files, added to
    by later blocks. A bucket's UUID-named prefix without a checkpoint's marker is otherwise
    a killed upload, which ``sweep`` removes (U3 here)."""
    store = kind.store
    save(store, U1, 3)
    with store.outputs(f"{U2}/rank_0") as path:
        (path / "a.json").write_text("1")
        (path / "sub").mkdir()
        (path / "sub" / "b.txt").write_text("2")
    with store.outputs(f"{U2}/rank_0") as path:  # a later block replaces and adds
        (path / "a.json").write_text("one")
    with store.outputs(f"{U2}/rank_1") as path:
        (path / "c.json").write_text("3")
    source = store.staging() / "shard"
    source.mkdir(parents=True)
    (source / "x.bin").write_bytes(b"x")
    store.begin_shards(U3)
    store.put_shard(U3, source, ["x.bin"])  # unmarked: a killed upload in a bucket
    assert names(store) == [U1] and store.damaged() == [] and not store.exists(U2)
    assert store.sweep() == ([str(store / U3)] if isinstance(kind, Bucket) else [])
    assert kind.read(store, f"{U2}/rank_0/a.json") == b"one"
    assert kind.read(store, f"{U2}/rank_0/sub/b.txt") == b"2"
    assert kind.read(store, f"{U2}/rank_1/c.json") == b"3"
    assert not [p for p in store.staging().iterdir() if p.name.startswith(".outputs-")]


def test_outputs_of_a_block_that_raises_leave_no_temporary_folder(kind: Kind) -> None:
    store = kind.store
    with pytest.raises(ValueError, match="stopped"), store.outputs(f"{U2}/rank_0") as path:
        (path / "a.json").write_text("1")
        raise ValueError("stopped")
    assert not [p for p in store.staging().iterdir() if p.name.startswith(".outputs-")]
    assert names(store) == []


def test_outputs_a_bucket_refuses_are_kept_locally_and_named(s3_server: S3) -> None:
    store = ObjectStore(s3_server.url("root"))
    with pytest.raises(errors.CheckpointStorageError, match="kept in") as failed:
        with s3_server.refusing("PUT", "b.json"), store.outputs(f"{U2}/rank_0") as path:
            (path / "a.json").write_text("1")
            (path / "b.json").write_text("2")
    (kept,) = [p for p in store.staging().iterdir() if p.name.startswith("outputs-not-uploaded-")]
    assert str(kept) in str(failed.value)
    assert sorted(p.name for p in kept.iterdir()) == ["a.json", "b.json"]
    store.sweep()
    assert kept.exists()  # the cleanup of killed writes leaves it
