"""``CheckpointStore``: one interface for where checkpoints live, a directory or a bucket.

A store holds one ``<uuid>`` checkpoint (a directory, or a prefix of objects) per checkpoint,
with the same files (``_checkpoint``). ``_local_store.LocalStore`` is a directory,
``_remote.ObjectStore`` a URL (S3, GCS, Azure); ``_remote.checkpoint_location`` makes either from
a path or URL. Callers never ask which kind they hold::

    store.problem()                    before training: why nothing can be written there, or None
    partial = begin_atomically(store.staging(), uuid)   # the local directory written first
    store.stage(uuid, partial, write)  # the files, complete under staging()/<uuid>
    store.publish(uuid, local)         # visible to every reader at once, or not at all
    store.complete(), store.latest()   # published checkpoints only, never a half-written one
    store.damaged()                    # published, with files deleted since
    store.fetch(uuid)                  # a local directory with its files
    store.published()                  # every published checkpoint, a Core API loop's too
    store.files_of(uuid, selector)     # its files for a block (a bucket's: a temporary download)
    store.delete(uuid)                 # marked (.<uuid>.unkept), removed, unmarked
    store.sweep(spare)                 # what killed writes and failed deletions left
    store.begin_shards(uuid) ... store.publish_shards(uuid, metadata)   # written by many ranks
    store.outputs(name)                # files that are not a checkpoint, kept (never swept)
    store / "trial-3"                  # a namespace: a store of its own under this one
    store.folders(), store.read_once(name)   # its namespaces; a file write_once wrote

A child (``store / name``) is a store at ``<store>/<name>``: a namespace (an experiment's
``<root>/<experiment id>/trial-<n>``) whose checkpoints its parent never lists, or one
checkpoint's address (``store / uuid``, what ``latest()`` returns; ``local_copy()`` reads it).

A runner may lose the right to publish a run's checkpoints while it runs: a search's trial whose
worker lost its lease (another worker took the trial over, and resumes it from the checkpoints
there were then). It says so with ``publish_check(check)``: ``check()`` runs right before each
checkpoint becomes visible (a directory's rename, a bucket's marker) and before each deletion,
and raises to forbid it. A publish it forbids leaves nothing behind (no checkpoint, no local
copy) and raises the check's exception; so a stale owner never adds a checkpoint to the trial's
store, nor deletes one of it, once its right is found gone. (The API never imports the runner:
the runner registers the check.) One step remains between the check and the publish: a
takeover in that moment still publishes the checkpoint, which is complete and was trained
before the takeover.
"""

import abc
import contextlib
import pathlib
from typing import (
    Any,
    Callable,
    ContextManager,
    Dict,
    Iterator,
    List,
    Optional,
    Sequence,
    Tuple,
)

from det_lightning.pytorch import _checkpoint as ckpt
from det_lightning.pytorch._identity import IDENTITY_KEY, RunIdentity, saved_identity

# Called before a checkpoint is published or deleted; raises to forbid it.
PublishCheck = Callable[[], None]
_PUBLISH_CHECKS: List[PublishCheck] = []


@contextlib.contextmanager
def publish_check(check: PublishCheck) -> Iterator[None]:
    """Inside the block, ``check()`` runs in this process right before each checkpoint is
    published and before each checkpoint is deleted (any thread: the background writer's
    too); an exception it raises forbids that, and reaches the caller."""
    _PUBLISH_CHECKS.append(check)
    try:
        yield
    finally:
        _PUBLISH_CHECKS.remove(check)


def raise_unless_may_publish() -> None:
    """Runs the registered publish checks (see ``publish_check``), in order."""
    for check in list(_PUBLISH_CHECKS):
        check()


class CheckpointStore(abc.ABC):
    """Where checkpoints live: one ``<uuid>`` per checkpoint, published whole or not at all.

    Implementations are frozen values (equal when they name the same place, hashable).
    """

    # ----- addressing -----------------------------------------------------------------------
    @abc.abstractmethod
    def __str__(self) -> str:
        """The path or URL, as users write it."""

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """The last component of the path or URL."""

    @property
    @abc.abstractmethod
    def parent(self) -> "CheckpointStore":
        """The store this one is a child of."""

    @abc.abstractmethod
    def child(self, name: str) -> "CheckpointStore":
        """The store at ``<this>/<name>``: a namespace, or one checkpoint's address."""

    def __truediv__(self, name: str) -> "CheckpointStore":
        return self.child(name)

    def environment(self) -> Dict[str, str]:
        """The environment variables that give a child process this store's endpoint and keys
        (a command trial, which has no experiment config of its own)."""
        return {}

    def options_for(self, scheme: str) -> Tuple[Tuple[str, str], ...]:
        """The endpoint and keys a URL of ``scheme`` gets from this store (a checkpoint URL
        named beside it): its own when of that scheme, else none."""
        return ()

    # ----- reading --------------------------------------------------------------------------
    @abc.abstractmethod
    def complete(self) -> List[ckpt.Listed]:
        """The published checkpoints directly under this store that have all their files."""

    @abc.abstractmethod
    def damaged(self) -> List[Tuple["CheckpointStore", List[str]]]:
        """The published checkpoints that lack files (deleted since), each with what it lacks.
        What a killed write or deletion left is never listed (``sweep`` removes it)."""

    @abc.abstractmethod
    def exists(self, uuid: str) -> bool:
        """Whether a published checkpoint (complete or damaged) has the name ``uuid``."""

    @abc.abstractmethod
    def read_load_data(self, uuid: str) -> Dict[str, Any]:
        """``load_data.json`` of checkpoint ``uuid``, read in place ({} when unreadable)."""

    @abc.abstractmethod
    def local_copy(self) -> pathlib.Path:
        """This address's files on this machine: the directory itself (not checked: readers
        say what is missing), or a download into ``parent.staging()``.

        Raises:
            InvalidCheckpointException: a URL with no published checkpoint.
        """

    def fetch(self, uuid: str) -> pathlib.Path:
        """Checkpoint ``uuid``'s files on this machine (see ``local_copy``)."""
        return self.child(uuid).local_copy()

    @abc.abstractmethod
    def folders(self) -> List[str]:
        """The names of the folders directly under this store (namespaces, checkpoints),
        sorted; hidden ones (``.name``) left out."""

    @abc.abstractmethod
    def read_once(self, name: str) -> Optional[bytes]:
        """The file ``name`` directly in this store, as ``write_once`` wrote it; None when
        there is none.

        Raises:
            OSError: the store cannot be read.
        """

    @abc.abstractmethod
    def published(self) -> List[ckpt.Listed]:
        """Every published checkpoint directly under this store that has its
        ``metadata.json``, whatever its other files: a Core API loop's too, which ``complete``
        never lists (it holds no trial's files)."""

    @abc.abstractmethod
    def files_of(
        self, uuid: str, selector: Optional[Callable[[str], bool]] = None
    ) -> ContextManager[pathlib.Path]:
        """A local directory with published checkpoint ``uuid``'s files for the ``with`` block:
        the directory itself, or a download of the files ``selector`` accepts (by path within
        the checkpoint; all when None) into a temporary directory removed after the block."""

    @abc.abstractmethod
    def outputs(self, name: str) -> ContextManager[pathlib.Path]:
        """A local directory for the ``with`` block whose files go under ``<store>/<name>/``
        (``name`` a relative path), as files that are not a checkpoint (``torch_batch_process``'s
        ``upload_path()``): a directory's own folder, written in place, or a temporary folder
        uploaded when the block ends without an exception and removed either way. Files there
        before stay; one written again replaces the old. ``name``'s first folder is never listed
        as a checkpoint and never swept."""

    @abc.abstractmethod
    def drop_staged(self, uuid: str) -> None:
        """Removes the local copy ``stage`` left of published checkpoint ``uuid`` where the
        store keeps its files elsewhere (a bucket's cache); nothing for a directory."""

    @property
    def is_local(self) -> bool:
        """Whether this store is a directory on this machine."""
        return False

    def latest(self) -> Optional["CheckpointStore"]:
        """The complete checkpoint with the most batches trained (newest on ties), or None."""
        newest = ckpt.newest(self.complete())
        return None if newest is None else self.child(newest)

    def latest_of_run(self, identity: RunIdentity) -> Tuple[Optional["CheckpointStore"], List[str]]:
        """Like ``latest``, among the checkpoints ``identity`` may resume from (its own run's:
        ``_identity``); also the ones passed over, each as ``"<uuid> (<how it differs>)"``."""
        mine, passed = [], []
        for entry in self.complete():
            load_data = None if IDENTITY_KEY in entry.metadata else self.read_load_data(entry.name)
            differs = identity.mismatch(saved_identity(entry.metadata, load_data))
            if differs is None:
                mine.append(entry)
            else:
                passed.append(f"{entry.name} ({differs})")
        newest = ckpt.newest(mine)
        return (None if newest is None else self.child(newest)), sorted(passed)

    # ----- writing --------------------------------------------------------------------------
    @abc.abstractmethod
    def staging(self) -> pathlib.Path:
        """The local directory checkpoints are written into on this machine (and downloaded
        into to be read): the store itself, or a cache directory of a bucket's."""

    @abc.abstractmethod
    def stage(
        self, uuid: str, partial: pathlib.Path, write: Callable[[pathlib.Path], None]
    ) -> pathlib.Path:
        """Calls ``write(partial)`` (``partial``: ``begin_atomically(staging(), uuid)``) and
        renames the finished directory to ``staging()/<uuid>``, which it returns. On a local
        store that rename publishes the checkpoint, so the publish checks run right before it;
        on any failure nothing appears under ``uuid``."""

    @abc.abstractmethod
    def publish(self, uuid: str, local: pathlib.Path) -> "CheckpointStore":
        """Makes the finished directory ``local`` checkpoint ``uuid`` of this store, all at
        once, if the publish checks allow it; returns its address.

        Raises:
            CheckpointStorageError: the store failed (nothing of it is listed).
            the publish check's exception: it forbade the publish; nothing is left.
        """

    @abc.abstractmethod
    def write_once(self, name: str, data: bytes) -> None:
        """Writes ``data`` as the file ``name`` directly in this store unless it exists (a
        concurrent writer's copy wins).

        Raises:
            OSError: the store cannot be written.
        """

    @abc.abstractmethod
    def set_file(self, name: str, data: Optional[bytes]) -> None:
        """Writes ``data`` as the file ``name`` directly in this store, replacing what is
        there, at once for every reader (a file renamed into place, one object); removes the
        file when ``data`` is None (one that is gone already counts). For a small state
        another process reads with ``read_once``: an experiment's cancel.

        Raises:
            OSError: the store cannot be written (a bucket: ``CheckpointStorageError``).
        """

    @abc.abstractmethod
    def remove_all(self, last: Sequence[str] = ()) -> None:
        """Removes this store's folder with everything in it (an experiment's, deleted): on a
        disk at once (renamed to a hidden name, then removed); in a bucket the objects of its
        subfolders first, then its own files, the files named in ``last`` after all else, so
        that a removal that failed half way still shows what it was (``last``: its
        ``experiment.json``) and can be run again. A folder that is not there counts as
        removed.

        Raises:
            OSError: nothing could be removed, or (a bucket: ``CheckpointStorageError``) part
                of it was left.
        """

    # ----- one checkpoint written by several processes (Core API ``shard=True``) -------------
    # The chief calls begin_shards; each process writes into shard_dir (a directory every node
    # sees) or hands its files to put_shard (a bucket); the chief then calls publish_shards, or
    # abandon_shards when any process failed. Nothing is visible before publish_shards.
    @abc.abstractmethod
    def begin_shards(self, uuid: str) -> None:
        """Prepares the unpublished checkpoint ``uuid`` (the chief, before any process writes).

        Raises:
            FileExistsError: ``uuid`` exists already.
        """

    @abc.abstractmethod
    def shard_dir(self, uuid: str) -> Optional[pathlib.Path]:
        """The directory every process writes its files of checkpoint ``uuid`` straight into
        (a directory store: its partial directory); None where each process's files are
        copied in by ``put_shard`` (a bucket).

        Raises:
            errors.CheckpointStorageError: this process does not see the directory
                ``begin_shards`` made (the store is not on a filesystem every node shares).
        """

    @abc.abstractmethod
    def put_shard(self, uuid: str, source: pathlib.Path, paths: List[str]) -> None:
        """Adds the files ``paths`` (relative to ``source``, ``/``-separated) to the
        unpublished checkpoint ``uuid``.

        Raises:
            errors.CheckpointStorageError: they could not be written.
        """

    @abc.abstractmethod
    def publish_shards(self, uuid: str, metadata: Dict[str, Any]) -> "CheckpointStore":
        """Writes ``metadata.json`` and publishes checkpoint ``uuid`` with every file the
        processes added, all at once, if the publish checks allow it; returns its address.
        On any failure nothing is published and what was written is removed.

        Raises:
            errors.CheckpointStorageError: the store failed.
            the publish check's exception: it forbade the publish.
        """

    @abc.abstractmethod
    def abandon_shards(self, uuid: str) -> None:
        """Removes what the processes wrote of the unpublished checkpoint ``uuid`` (failures
        leave it for ``sweep``)."""

    # ----- deleting -------------------------------------------------------------------------
    def delete(self, uuid: str) -> bool:
        """Deletes checkpoint ``uuid`` if the publish checks allow it: it leaves its name at
        once (for every reader), then its files go; failures are logged. It is marked for
        deletion first and unmarked once gone, so a deletion that fails is finished by the next
        ``sweep``. Returns whether it is gone from its name.

        Raises:
            the publish check's exception: it forbade the deletion (nothing was deleted).
        """
        raise_unless_may_publish()
        self.mark_unkept(uuid)
        gone = self._remove(uuid)
        if gone:
            self.unmark_unkept(uuid)
        return gone

    def sweep(self, spare: Optional[str] = None) -> List[str]:
        """Finishes what earlier runs left here: killed writes and deletions, and checkpoints
        marked for deletion whose deletion failed, but for ``spare`` (the checkpoint this run
        resumes from: it stays marked, and this run's retention weighs it again). Returns what
        it removed. Safe when no other process writes this store: a marked checkpoint is one
        retention gave up for good."""
        removed = self._remove_leftovers()
        for uuid in self.marked_unkept():
            if not ckpt.UUID_PATTERN.match(uuid) or uuid == spare:
                continue
            if not self.exists(uuid):
                self.unmark_unkept(uuid)  # deleted, its mark left behind
            elif self.delete(uuid):
                removed.append(str(self.child(uuid)))
        return removed

    @abc.abstractmethod
    def mark_unkept(self, uuid: str) -> None:
        """Marks checkpoint ``uuid`` as given up by retention (``.<uuid>.unkept`` beside it,
        which no listing of checkpoints sees); a failure is logged."""

    @abc.abstractmethod
    def unmark_unkept(self, uuid: str) -> None:
        """Removes the mark of ``uuid`` (a failure is logged; ``sweep`` removes a mark whose
        checkpoint is gone)."""

    @abc.abstractmethod
    def marked_unkept(self) -> List[str]:
        """The names marked for deletion directly under this store, sorted."""

    @abc.abstractmethod
    def _remove(self, uuid: str) -> bool:
        """Removes checkpoint ``uuid``, from its name first; logs a failure. Returns whether
        it is gone from its name."""

    @abc.abstractmethod
    def _remove_leftovers(self) -> List[str]:
        """Removes what killed writes and deletions left; returns what it removed."""

    # ----- checks ---------------------------------------------------------------------------
    @abc.abstractmethod
    def problem(self) -> Optional[str]:
        """Why checkpoints cannot be written here (a probe is written and deleted, here and
        in ``staging()``), or None."""


__all__ = ["CheckpointStore", "PublishCheck", "publish_check", "raise_unless_may_publish"]
