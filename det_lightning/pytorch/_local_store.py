"""``LocalStore``: checkpoints in a directory, and how a directory is written and emptied safely.

A checkpoint is written into ``.<uuid>.partial`` beside its final place and renamed when
complete, so a crash never leaves a directory that looks whole; the rename publishes it::

    write_atomically(root, uuid, write)       = begin_atomically, then finish_atomically
      root/.<uuid>.partial/                 write(partial): _checkpoint_write.write_files(...)
        state_dict.pth, lightning_state.pth, trial_state.pkl, load_data.json, metadata.json, code/
      fsync the files, [the publish checks], rename to root/<uuid>, fsync root
    remove_partials(root)                   what a crash left behind, before a resume

Deleting is the mirror image: the directory leaves its name in one rename, then its files go::

    delete_atomically(root, uuid)
      rename root/<uuid> to root/.<uuid>.deleting, fsync root, remove it
    remove_deletions(root)                  what a killed deletion left, when a run starts

Retention marks a checkpoint it gives up (``mark_unkept``: an empty ``.<uuid>.unkept`` beside
it) before deleting it, and removes the mark once the checkpoint is gone from its name; a
deletion that failed (the rename refused) leaves the checkpoint whole and marked, and the next
run in the directory deletes it (``CheckpointStore.sweep``). An object store (``_remote``)
stages its checkpoints with the same functions in its cache directory.
"""

import contextlib
import dataclasses
import errno
import functools
import logging
import os
import pathlib
import shutil
import tempfile
import uuid
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from det_lightning import errors
from det_lightning.pytorch import _checkpoint as ckpt
from det_lightning.pytorch._checkpoint import DELETING_SUFFIX, PARTIAL_SUFFIX, UNKEPT_SUFFIX
from det_lightning.pytorch._store import CheckpointStore, raise_unless_may_publish

logger = logging.getLogger("det_lightning.pytorch")

PROBE_BYTES = 4096


@dataclasses.dataclass(frozen=True)
class LocalStore(CheckpointStore):
    """Checkpoints in the directory ``path`` (absolute), one ``<uuid>/`` directory each.

    >>> store = LocalStore(pathlib.Path("/ckpts/exp")) / "trial-1"
    >>> str(store), store.name, str(store.parent), os.fspath(store)
    ('/ckpts/exp/trial-1', 'trial-1', '/ckpts/exp', '/ckpts/exp/trial-1')
    """

    path: pathlib.Path

    def __str__(self) -> str:
        return str(self.path)

    def __fspath__(self) -> str:
        return str(self.path)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def parent(self) -> "LocalStore":
        return LocalStore(self.path.parent)

    def child(self, name: str) -> "LocalStore":
        return LocalStore(self.path / name)

    # ----- reading --------------------------------------------------------------------------
    def complete(self) -> List[ckpt.Listed]:
        return ckpt.list_local(self.path)

    def damaged(self) -> List[Tuple[CheckpointStore, List[str]]]:
        return [(self.child(p.name), missing) for p, missing in ckpt.damaged_local(self.path)]

    def exists(self, uuid: str) -> bool:
        path = self.path / uuid
        return path.exists() and not (path / ckpt.OUTPUTS_MARKER).exists()

    def read_load_data(self, uuid: str) -> Dict[str, Any]:
        return ckpt.read_load_data(self.path, uuid)

    def local_copy(self) -> pathlib.Path:
        return self.path

    def folders(self) -> List[str]:
        if not self.path.is_dir():
            return []
        return sorted(p.name for p in self.path.iterdir() if p.is_dir() and p.name[0] != ".")

    def read_once(self, name: str) -> Optional[bytes]:
        try:
            return (self.path / name).read_bytes()
        except FileNotFoundError:
            return None

    def published(self) -> List[ckpt.Listed]:
        found = []
        for path in sorted(self.path.iterdir()) if self.path.is_dir() else []:
            if path.name.startswith(".") or not (path / ckpt.METADATA_FILE).is_file():
                continue
            found.append(ckpt.Listed(path.name, ckpt.read_metadata(path), path.stat().st_mtime))
        return found

    @contextlib.contextmanager
    def files_of(
        self, uuid: str, selector: Optional[Callable[[str], bool]] = None
    ) -> Iterator[pathlib.Path]:
        """The checkpoint's own directory (``selector`` is not needed: nothing is copied)."""
        yield self.path / uuid

    @contextlib.contextmanager
    def outputs(self, name: str) -> Iterator[pathlib.Path]:
        """The folder itself: files are written in place (its first folder marked
        ``.outputs``: never listed as a damaged checkpoint)."""
        path = self.path / name
        path.mkdir(parents=True, exist_ok=True)
        (self.path / name.strip("/").split("/")[0] / ckpt.OUTPUTS_MARKER).touch()
        yield path

    def drop_staged(self, uuid: str) -> None:
        """Nothing: the staged directory is the checkpoint."""

    @property
    def is_local(self) -> bool:
        return True

    # ----- writing --------------------------------------------------------------------------
    def staging(self) -> pathlib.Path:
        return self.path

    def stage(
        self, uuid: str, partial: pathlib.Path, write: Callable[[pathlib.Path], None]
    ) -> pathlib.Path:
        return finish_atomically(
            self.path, uuid, partial, write, before_rename=raise_unless_may_publish
        )

    def publish(self, uuid: str, local: pathlib.Path) -> "LocalStore":
        """A directory ``stage`` renamed into place is published already; any other is copied
        in the same way (into a partial directory, renamed after the publish checks)."""
        if local != self.path / uuid:
            copy = functools.partial(shutil.copytree, local, dirs_exist_ok=True)
            self.stage(uuid, begin_atomically(self.path, uuid), copy)
        return self.child(uuid)

    def write_once(self, name: str, data: bytes) -> None:
        """Through a hidden copy linked into place (never overwriting)."""
        self.path.mkdir(parents=True, exist_ok=True)
        if (self.path / name).exists():
            return
        partial = _written_beside(self.path / name, data)
        try:
            os.link(partial, self.path / name)  # fails if another process wrote it first
        except FileExistsError:
            pass
        finally:
            partial.unlink()
        _fsync_dir(self.path)

    def set_file(self, name: str, data: Optional[bytes]) -> None:
        """A hidden copy renamed over ``name`` (``replace_file``)."""
        if data is None:
            (self.path / name).unlink(missing_ok=True)
            return
        self.path.mkdir(parents=True, exist_ok=True)
        replace_file(self.path / name, data)

    def remove_all(self, last: Sequence[str] = ()) -> None:
        hidden = self.path.with_name(f".{self.path.name}{DELETING_SUFFIX}")
        try:
            os.replace(self.path, hidden)  # gone from its name for every reader at once
        except FileNotFoundError:
            return
        _fsync_dir(self.path.parent)
        try:
            shutil.rmtree(hidden)
        except OSError as e:
            raise OSError(
                f"{self.path} is deleted (renamed to {hidden}), but not all of its files could "
                f"be removed ({e}): remove {hidden} by hand."
            ) from e

    # ----- written by several processes ------------------------------------------------------
    def _shard_partial(self, uuid: str) -> pathlib.Path:
        return self.path / f".{uuid}{PARTIAL_SUFFIX}"

    def begin_shards(self, uuid: str) -> None:
        begin_atomically(self.path, uuid)

    def shard_dir(self, uuid: str) -> pathlib.Path:
        """The partial directory ``begin_shards`` made, which every process writes into."""
        partial = self._shard_partial(uuid)
        if not partial.is_dir():
            raise errors.CheckpointStorageError(
                f"This process does not see {partial}, which the chief made for checkpoint "
                f"{uuid}: a checkpoint several machines write together must be in a directory "
                "every machine shares (Determined's shared_fs), or in a bucket. Point "
                "checkpoint_storage at a shared filesystem or a bucket. Nothing was published."
            )
        return partial

    def put_shard(self, uuid: str, source: pathlib.Path, paths: List[str]) -> None:
        """Copies the files into the partial directory, each fsynced."""
        partial = self.shard_dir(uuid)
        try:
            for relative in paths:
                (partial / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source / relative, partial / relative)
                with open(partial / relative, "rb") as f:
                    os.fsync(f.fileno())
        except OSError as e:
            raise errors.CheckpointStorageError(
                f"Copying {source} into checkpoint {uuid} under {self.path} failed: "
                f"{describe_os_error(e)}. Nothing was published."
            ) from e

    def publish_shards(self, uuid: str, metadata: Dict[str, Any]) -> "LocalStore":
        """Writes ``metadata.json``, fsyncs every file, and renames the partial directory into
        place after the publish checks."""
        from det_lightning.pytorch._checkpoint_write import write_json

        def finish(partial: pathlib.Path) -> None:
            write_json(partial / ckpt.METADATA_FILE, metadata)
            for path in partial.rglob("*"):
                if path.is_file():
                    with open(path, "rb") as f:
                        os.fsync(f.fileno())

        partial = self.shard_dir(uuid)
        finish_atomically(self.path, uuid, partial, finish, before_rename=raise_unless_may_publish)
        return self.child(uuid)

    def abandon_shards(self, uuid: str) -> None:
        abandon_partial(self._shard_partial(uuid))

    # ----- deleting -------------------------------------------------------------------------
    def mark_unkept(self, uuid: str) -> None:
        mark_unkept(self.path, uuid)

    def unmark_unkept(self, uuid: str) -> None:
        unmark_unkept(self.path, uuid)

    def marked_unkept(self) -> List[str]:
        return marked_unkept(self.path)

    def _remove(self, uuid: str) -> bool:
        return delete_atomically(self.path, uuid)

    def _remove_leftovers(self) -> List[str]:
        return [str(p) for p in remove_deletions(self.path)]

    # ----- checks ---------------------------------------------------------------------------
    def problem(self) -> Optional[str]:
        return probe(self.path)


# ----- the writability probe ------------------------------------------------------------------
def probe(root: pathlib.Path) -> Optional[str]:
    """Why files cannot be created in ``root`` (created if missing), or None."""
    failure = write_probe(root)
    if failure is None:
        return None
    return (
        f"Cannot write checkpoints to {root}: {describe_os_error(failure)}. Nothing was "
        "trained. Point Trainer(checkpoint_dir=...) or $DET_LIGHTNING_CHECKPOINT_DIR at a "
        "directory this process can create files in."
    )


def write_probe(root: pathlib.Path) -> Optional[OSError]:
    """Creates ``root`` if missing, writes and fsyncs a probe file there and deletes it;
    returns what failed, or None."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=".det_lightning_probe_", dir=root)
        try:
            if os.write(fd, b"\0" * PROBE_BYTES) < PROBE_BYTES:
                raise OSError(errno.ENOSPC, "short write (disk full or file-size limit)", name)
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(name)
    except OSError as e:
        return e
    return None


def describe_os_error(error: OSError) -> str:
    """``Kind: reason (file)``, for messages."""
    reason = error.strerror or str(error)
    target = f" ({error.filename})" if error.filename else ""
    return f"{type(error).__name__}: {reason}{target}"


# ----- atomic writing and deleting -----------------------------------------------------------
def write_atomically(
    root: pathlib.Path, uuid: str, write: Callable[[pathlib.Path], None]
) -> pathlib.Path:
    """Calls ``write(tmp_dir)`` and renames the finished directory to ``root/uuid``.

    Raises:
        FileExistsError: ``root/uuid`` exists already (it is left alone).
    """
    return finish_atomically(root, uuid, begin_atomically(root, uuid), write)


def begin_atomically(root: pathlib.Path, uuid: str) -> pathlib.Path:
    """Makes the hidden directory ``root/.<uuid>.partial`` a checkpoint is written into.

    Raises:
        FileExistsError: ``root/uuid`` (or its partial directory) exists already.
    """
    root.mkdir(parents=True, exist_ok=True)
    final = root / uuid
    partial = root / f".{uuid}{PARTIAL_SUFFIX}"
    if final.exists() or partial.exists():
        raise FileExistsError(f"Checkpoint {final} already exists; not overwriting it.")
    partial.mkdir()
    return partial


def finish_atomically(
    root: pathlib.Path,
    uuid: str,
    partial: pathlib.Path,
    write: Callable[[pathlib.Path], None],
    *,
    before_rename: Optional[Callable[[], None]] = None,
) -> pathlib.Path:
    """Calls ``write(partial)``, fsyncs its files, calls ``before_rename()`` (an exception it
    raises forbids the checkpoint), renames it to ``root/uuid`` and fsyncs ``root``; on any
    failure ``partial`` is removed and nothing appears under ``uuid``."""
    try:
        write(partial)
        _fsync_tree(partial)
        if before_rename is not None:
            before_rename()
        os.replace(partial, root / uuid)
    except BaseException:
        abandon_partial(partial)
        raise
    _fsync_dir(root)
    return root / uuid


def abandon_partial(partial: pathlib.Path) -> None:
    """Removes a partial directory whose write failed or never started."""
    shutil.rmtree(partial, ignore_errors=True)


def _fsync_tree(path: pathlib.Path) -> None:
    for entry in path.iterdir():
        if entry.is_file() and entry.suffix in (".pth", ".pkl", ".json"):
            with open(entry, "rb") as f:
                os.fsync(f.fileno())


def _written_beside(path: pathlib.Path, data: bytes) -> pathlib.Path:
    """``data`` in a new hidden file beside ``path``, on disk (fsync), in the umask's mode as
    any file the user writes (a temporary file's 0600 kept a record from the team sharing the
    folder). A failed write (a full disk) leaves no file."""
    partial = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    try:
        with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return partial


def replace_file(path: pathlib.Path, data: bytes) -> None:
    """Writes ``data`` as ``path``, replacing what is there at once for every reader (a hidden
    copy renamed over it): a reader, a crash or a full disk never leaves it half written, and
    nothing else is left beside it. Its folder must exist.

    Raises:
        OSError: it could not be written (what was there is unchanged).
    """
    partial = _written_beside(path, data)
    try:
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    _fsync_dir(path.parent)


def _fsync_dir(path: pathlib.Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems cannot fsync a directory; the rename is still atomic
    finally:
        os.close(fd)


def remove_partials(root: pathlib.Path) -> List[pathlib.Path]:
    """Deletes unfinished checkpoint directories a crash left behind; returns them."""
    return _remove_hidden(root, PARTIAL_SUFFIX)


def remove_deletions(root: pathlib.Path) -> List[pathlib.Path]:
    """Finishes deletions a killed process left (``.<uuid>.deleting``); returns them.

    Always safe, also while another process uses ``root``: such a directory never becomes a
    checkpoint again, and two processes removing it at once both succeed.
    """
    return _remove_hidden(root, DELETING_SUFFIX)


def _remove_hidden(root: pathlib.Path, suffix: str) -> List[pathlib.Path]:
    removed = []
    if root.is_dir():
        for entry in root.iterdir():
            if entry.name.startswith(".") and entry.name.endswith(suffix):
                if _remove_tree(entry):
                    removed.append(entry)
    return removed


def delete_atomically(root: pathlib.Path, uuid: str) -> bool:
    """Deletes the checkpoint ``root/uuid``: one rename takes it from its name (``latest``,
    ``load_trial_from_checkpoint_path`` and a sync script never see it half deleted), then its
    files are removed. A failure is logged with its cause, never raised: losing a checkpoint
    that retention gave up must not stop training. Returns whether it is gone from its name.
    """
    final = root / uuid
    hidden = root / f".{uuid}{DELETING_SUFFIX}"
    try:
        os.replace(final, hidden)
    except OSError as e:
        logger.warning(f"Could not delete checkpoint {final}: {e}")
        return False
    _fsync_dir(root)
    _remove_tree(hidden)
    return True


def mark_unkept(root: pathlib.Path, uuid: str) -> None:
    """Marks ``root/uuid`` as given up by retention, before it is deleted. A mark that cannot
    be written is logged: the deletion is tried all the same, only a failed one is then not
    finished by the next run."""
    try:
        _unkept_mark(root, uuid).touch()
    except OSError as e:
        logger.warning(f"Could not mark checkpoint {root / uuid} for deletion: {e}")


def unmark_unkept(root: pathlib.Path, uuid: str) -> None:
    """Removes the mark of ``root/uuid`` once it is gone from its name (a mark left behind is
    removed by the next run, which finds no checkpoint of that name)."""
    try:
        _unkept_mark(root, uuid).unlink(missing_ok=True)
    except OSError as e:
        logger.warning(f"Could not remove {_unkept_mark(root, uuid)}: {e}")


def marked_unkept(root: pathlib.Path) -> List[str]:
    """The names retention marked for deletion in ``root`` (``mark_unkept``), sorted."""
    if not root.is_dir():
        return []
    return sorted(
        entry.name[1 : -len(UNKEPT_SUFFIX)]
        for entry in root.iterdir()
        if entry.name.startswith(".") and entry.name.endswith(UNKEPT_SUFFIX)
    )


def _unkept_mark(root: pathlib.Path, uuid: str) -> pathlib.Path:
    return root / f".{uuid}{UNKEPT_SUFFIX}"


def _remove_tree(path: pathlib.Path) -> bool:
    """Removes ``path``; a failure (other than it being gone already) is logged."""
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        pass  # another process finished it
    except OSError as e:
        logger.warning(
            f"Could not remove {path} ({e}); it is hidden and no checkpoint, and the next run "
            f"in {path.parent} removes it again."
        )
        return False
    return True
