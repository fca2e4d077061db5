"""``core.CheckpointContext`` in local mode: checkpoints in a directory or a bucket, written
atomically.

The layout is Determined's: ``<storage>/<storage_id>/`` holds the files the loop wrote plus
``metadata.json`` (the metadata given, as Determined writes it), in a directory (its shared_fs
storage) or under a bucket's prefix (its s3/gcs/azure storage). It is written through the
trainer's ``CheckpointStore``, so a checkpoint appears whole or not at all:

    directory   written into a hidden ``.<storage_id>.partial`` directory, renamed when complete
                (Determined's shared_fs storage writes straight into ``<storage_id>/``: a crash
                leaves a directory that looks whole); deleted by one rename
    bucket      written locally, uploaded, then its marker object ``<storage_id>/.complete`` LAST
                (a checkpoint without it is never listed); deleted marker first

With ``shard=True`` (``store_path``, ``upload``) every rank adds its files to one checkpoint,
published by the chief once all are in, or by nobody (``_shards``).

Reading a bucket's checkpoint (``restore_path``, ``download``, ``get_metadata``) downloads it
into a temporary directory, removed after, as Determined's cloud storage managers do.
"""

import contextlib
import json
import logging
import os
import pathlib
import shutil
import uuid
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

from det_lightning import errors
from det_lightning.core._distributed import DistributedContext
from det_lightning.core._modes import DownloadMode
from det_lightning.pytorch import _checkpoint_write as write
from det_lightning.pytorch import _local_store as atomic
from det_lightning.pytorch._checkpoint import METADATA_FILE, PARTIAL_SUFFIX, Listed
from det_lightning.pytorch._store import CheckpointStore

logger = logging.getLogger("det_lightning.core")

Selector = Optional[Callable[[str], bool]]


class _NodeShare:
    """Determined's ``LocalWorkersShareDownload`` among one node's ranks (its
    core/_checkpoint.py, 0.38.1): when any rank has a selector, the local chief offers each
    file's name, every rank answers whether its selector accepts it, and the chief fetches
    the file if any does. The chief then sends how it ended: a path, or the error that
    stopped it, which every rank raises.

    Beyond Determined: a rank whose selector raises answers with its error instead of
    leaving the chief waiting; the chief stops the download naming it, and that rank raises
    its own error once the chief has said it stopped.

    Every rank must make one (it is a collective), the chief then calls ``accepted`` for
    each name (the selector of its store's download, memoised) and ``finish`` once; the
    others call ``follow``."""

    def __init__(self, dist: DistributedContext, selector: Selector, doing: str) -> None:
        self._dist, self._selector, self._doing = dist, selector, doing
        self._offers = any(dist.allgather(selector is not None))
        self._answers: Dict[str, bool] = {}

    def accepted(self, name: str) -> bool:
        if name not in self._answers:
            accepted = True
            if self._offers:
                self._dist.broadcast_local(name)
                mine: Union[bool, Tuple[str, str]] = True
                raised: Optional[Exception] = None
                try:
                    mine = self._selector(name) if self._selector else True
                except Exception as e:  # the others answer first: keep the node paired
                    raised, mine = e, False
                answers = self._dist.gather_local(mine) or []
                if raised is not None:
                    raise raised
                for local_rank, answer in enumerate(answers):
                    if isinstance(answer, tuple):
                        kind, said = answer
                        raise errors.CheckpointStorageError(
                            f"The selector of local rank {local_rank} raised {kind} on "
                            f"{name!r}: {said}; no rank of this node has the checkpoint "
                            f"({self._doing})"
                        )
                accepted = any(answers)
            self._answers[name] = accepted
        return self._answers[name]

    def finish(self, path: str = "", failed: Optional[BaseException] = None) -> None:
        self._dist.broadcast_local(None)  # no more names
        outcome = (type(failed).__name__, str(failed)) if failed is not None else path
        self._dist.broadcast_local(outcome)

    def follow(self) -> str:
        raised: Optional[Exception] = None
        while (offered := self._dist.broadcast_local(None)) is not None:
            answer: Union[bool, Tuple[str, str]] = False
            if raised is None:
                try:
                    answer = self._selector(offered) if self._selector else True
                except Exception as e:  # told to the chief, raised here once it has stopped
                    raised, answer = e, (type(e).__name__, str(e))
            self._dist.gather_local(answer)
        outcome = self._dist.broadcast_local(None)
        if raised is not None:
            raise raised
        if isinstance(outcome, tuple):  # the chief's error, as the same class where it is ours
            kind, said = outcome
            error = getattr(errors, kind, None)
            if not (isinstance(error, type) and issubclass(error, Exception)):
                error = errors.CheckpointStorageError
            raise error(f"{said} (on this node's local chief, {self._doing})")
        return str(outcome)


class CheckpointContext:
    """Stores and restores checkpoints in ``store``.

    Args:
        dist: this process's rank information.
        store: where checkpoints live: a directory (a path) or a bucket's prefix (a
            ``CheckpointStore``, ``pytorch._remote.checkpoint_location``).
    """

    def __init__(
        self, dist: DistributedContext, store: Union[pathlib.Path, str, CheckpointStore]
    ) -> None:
        from det_lightning.pytorch._remote import checkpoint_location

        self._dist = dist
        self._store = checkpoint_location(store)

    @property
    def store(self) -> CheckpointStore:
        """Where this context's checkpoints live."""
        return self._store

    def _require_chief(self, call: str) -> None:
        if self._dist.rank != 0:
            raise RuntimeError(
                f"cannot call CheckpointContext.{call}(shard=False) from non-chief worker "
                f"(rank={self._dist.rank})"
            )

    @contextlib.contextmanager
    def store_path(
        self, metadata: Optional[Dict[str, Any]] = None, *, shard: bool = False
    ) -> Iterator[Tuple[pathlib.Path, str]]:
        """Yields ``(path, storage_id)``: write the checkpoint into ``path``; it appears under
        ``storage_id``, with ``metadata.json``, when the block ends without an exception.

        With ``shard=True`` every rank must call it, as in Determined: each writes its files
        into ``path`` (the store's partial directory on a shared filesystem; a directory the
        ranks of a machine share, for a bucket); the metadata the ranks give is merged; the
        checkpoint appears once every rank's block ended, or, if any raised, not at all."""
        if shard:
            with self._store_path_sharded(metadata) as yielded:
                yield yielded
            return
        self._require_chief("store_path")
        storage_id = str(uuid.uuid4())
        partial = atomic.begin_atomically(self._store.staging(), storage_id)
        try:
            yield partial, storage_id
        except BaseException:
            atomic.abandon_partial(partial)
            raise
        local = self._store.stage(
            storage_id, partial, lambda path: write.write_json(path / METADATA_FILE, metadata or {})
        )
        try:
            self._store.publish(storage_id, local)
        finally:
            self._store.drop_staged(storage_id)  # a bucket's local copy, uploaded or not
        logger.info(f"saved checkpoint {storage_id}")

    @contextlib.contextmanager
    def _store_path_sharded(
        self, metadata: Optional[Dict[str, Any]]
    ) -> Iterator[Tuple[pathlib.Path, str]]:
        from det_lightning.core._shards import ShardedWrite  # its collectives: only when called

        sharded = ShardedWrite(self._dist, self._store, "store_path")
        sharded.begin()
        path = sharded.shard_dir()
        direct = path is not None
        if path is None:  # a bucket: the ranks of a machine write into one local directory
            path = self._store.staging() / f".{sharded.storage_id}{PARTIAL_SUFFIX}"
            path.mkdir(parents=True, exist_ok=True)
        try:
            failed: Optional[BaseException] = None
            try:
                yield path, sharded.storage_id
            except BaseException as e:
                failed = e
            sharded.finish(metadata, path, copy=not direct, failed=failed)
        finally:
            if not direct:
                atomic.abandon_partial(path)
        logger.info(f"saved checkpoint {sharded.storage_id}")

    def upload(
        self,
        ckpt_dir: Optional[Union[str, os.PathLike]],
        metadata: Optional[Dict[str, Any]] = None,
        *,
        shard: bool = False,
        selector: Selector = None,
    ) -> str:
        """Copies ``ckpt_dir`` (the paths ``selector`` accepts) into a new checkpoint and returns
        its ``storage_id``. As in Determined, ``metadata.json`` is also written into
        ``ckpt_dir``.

        With ``shard=True`` every rank must call it (a rank with nothing to add passes
        ``ckpt_dir=None``): the checkpoint holds every rank's files, a file several ranks hold
        once (an error when their contents differ), and their metadata merged; it appears once
        all are in, or not at all."""
        if shard:
            problem = None
            if selector is not None and ckpt_dir is None:
                problem = "ckpt_dir has to be provided if selector is not None"
            from det_lightning.core._shards import ShardedWrite

            sharded = ShardedWrite(self._dist, self._store, "upload")
            sharded.begin(problem)
            source = None if ckpt_dir is None else pathlib.Path(ckpt_dir)
            storage_id = sharded.finish(metadata, source, selector, copy=True)
            logger.info(f"saved checkpoint {storage_id}")
            return storage_id
        self._require_chief("upload")
        if ckpt_dir is None:
            raise RuntimeError(
                "cannot call .upload(ckpt_dir=None, shard=False), which would result in doing "
                "nothing at all"
            )
        source = pathlib.Path(ckpt_dir)
        write.write_json(source / METADATA_FILE, metadata or {})
        with self.store_path(metadata) as (path, storage_id):
            _copy_selected(source, path, selector)
        return storage_id

    def _located(self, storage_id: str) -> Tuple[CheckpointStore, str]:
        """The store holding checkpoint ``storage_id`` and its name there: this context's, or,
        for a path or URL (what a search gives as ``info.latest_checkpoint``), its parent.

        Raises:
            errors.CheckpointNotFound: no checkpoint of that name is published there.
        """
        store, name = self._store, storage_id
        if "/" in storage_id:
            from det_lightning.pytorch._remote import checkpoint_location

            located = checkpoint_location(storage_id, beside=self._store)
            store, name = located.parent, located.name
        if not name or not store.exists(name):
            where = " in local storage" if store.is_local else ""
            raise errors.CheckpointNotFound(f"Did not find checkpoint {store / name}{where}")
        return store, name

    @contextlib.contextmanager
    def _files(self, storage_id: str, selector: Selector = None) -> Iterator[pathlib.Path]:
        store, name = self._located(storage_id)
        with store.files_of(name, selector) as path:
            yield path

    def download(
        self,
        storage_id: str,
        ckpt_dir: Union[str, os.PathLike],
        download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload,
        *,
        selector: Selector = None,
    ) -> None:
        """Copies checkpoint ``storage_id`` (the paths ``selector`` accepts) into ``ckpt_dir``.

        With several processes and ``LocalWorkersShareDownload`` (the default), every rank
        must call it, as in Determined: each node's local chief copies every file some rank
        of the node's ``selector`` accepts, once, and every rank returns when it is there
        (ranks copying into one folder at once would read each other's half-written files).
        When the chief fails, every rank of the node raises."""
        mode = DownloadMode(download_mode)
        target = pathlib.Path(ckpt_dir)
        if mode == DownloadMode.NoSharedDownload or self._dist.size == 1:
            with self._files(storage_id, selector) as path:
                _copy_selected(path, target, selector)
            return
        share = _NodeShare(self._dist, selector, f"downloading into {target}")
        if self._dist.local_rank != 0:
            share.follow()
            return
        try:
            with self._files(storage_id, share.accepted) as path:
                _copy_selected(path, target, share.accepted)
        except BaseException as e:
            share.finish(failed=e)
            raise
        share.finish()

    @contextlib.contextmanager
    def restore_path(
        self,
        storage_id: str,
        download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload,
        *,
        selector: Selector = None,
    ) -> Iterator[pathlib.Path]:
        """Yields the checkpoint's directory: a directory's own (nothing is copied), or a
        bucket's checkpoint downloaded (the files ``selector`` accepts) into a temporary
        directory, removed when the block ends.

        With several processes and ``LocalWorkersShareDownload`` (the default), every rank
        must call it, as in Determined: a bucket's checkpoint is downloaded once per node, by
        its local chief, holding every file some rank's ``selector`` accepts, and removed once
        every rank of the node has left the block."""
        mode = DownloadMode(download_mode)
        store, name = self._located(storage_id)
        shared = mode == DownloadMode.LocalWorkersShareDownload and self._dist.size > 1
        if not shared or store.is_local:
            with store.files_of(name, selector) as path:
                yield path
            return
        share = _NodeShare(self._dist, selector, f"downloading checkpoint {storage_id}")
        if self._dist.local_rank == 0:
            with contextlib.ExitStack() as downloaded:
                try:
                    path = downloaded.enter_context(store.files_of(name, share.accepted))
                except BaseException as e:
                    share.finish(failed=e)
                    raise
                share.finish(str(path))
                try:
                    yield path
                finally:
                    self._dist.gather_local(None)  # every rank of the node is done with it
        else:
            path = pathlib.Path(share.follow())
            try:
                yield path
            finally:
                self._dist.gather_local(None)

    def get_metadata(self, storage_id: str) -> Dict[str, Any]:
        """The checkpoint's ``metadata.json`` (Determined's local mode raises
        NotImplementedError here; its cluster mode returns the metadata)."""
        with self._files(storage_id, lambda name: name == METADATA_FILE) as path:
            return dict(json.loads((path / METADATA_FILE).read_text()))

    def delete(self, storage_id: str) -> None:
        """Deletes checkpoint ``storage_id``; its name goes at once (a directory's in one
        rename, a bucket's marker first)."""
        store, name = self._located(storage_id)
        if not store.delete(name):
            raise errors.CheckpointStorageError(f"could not delete checkpoint {storage_id}")
        logger.info(f"deleted checkpoint {storage_id}")


def _copy_selected(source: pathlib.Path, target: pathlib.Path, selector: Selector) -> None:
    """Copies the files of ``source`` whose relative path ``selector`` accepts (all if None)."""
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source).as_posix()
        if path.is_dir() or (selector is not None and not selector(relative)):
            continue
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target / relative)


DummyCheckpointContext = CheckpointContext


def newest_stored(
    store: CheckpointStore, published: Optional[List[Listed]] = None
) -> Optional[Listed]:
    """The newest checkpoint ``store_path``/``upload`` finished in ``store`` (the most
    ``steps_completed`` in its metadata, else the latest written), or None: what a search gives
    a Core API trial it resumes as ``info.latest_checkpoint``. ``published``: the entries of
    ``store.published()`` to choose among (default: all)."""
    found = []
    for entry in store.published() if published is None else published:
        steps = entry.metadata.get("steps_completed")
        rank = steps if isinstance(steps, int) and not isinstance(steps, bool) else -1
        found.append((rank, entry.mtime, entry.name, entry))
    return max(found)[3] if found else None


__all__ = ["CheckpointContext", "DummyCheckpointContext", "newest_stored"]
