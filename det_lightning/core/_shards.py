"""One checkpoint written by several processes: Determined's ``upload(shard=True)`` and
``store_path(shard=True)``, on the checkpoint store's shard interface (``CheckpointStore``:
``begin_shards``, ``shard_dir``, ``put_shard``, ``publish_shards``, ``abandon_shards``).

Every rank calls, in step: each call is a series of collectives. The chief picks the storage
id; the metadata the ranks give is merged by Determined's rules (``merge_metadata``); the chief
publishes the checkpoint whole, or nothing appears::

    directory   store_path: every rank writes straight into the one partial directory (the
                store must be a filesystem every machine shares, as Determined's shared_fs);
                upload: each rank copies its files there
    bucket      each rank uploads its files under ``<id>/``, unmarked; the chief uploads
                metadata.json, then the marker
    both        a file several ranks hold is written once, by the lowest rank, when their
                contents agree, and is an error naming the ranks when they differ (before
                anything is written); the chief writes metadata.json and publishes last

A failure on any rank (an exception in a ``store_path`` block, a failed copy or upload, a
conflict) is agreed on by every rank at the next collective: the unpublished checkpoint is
removed and every rank raises, the failing rank its own exception, the others a
``ShardsFailed`` naming it. So one rank's error never leaves the others waiting.
"""

import hashlib
import os
import pathlib
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple

from det_lightning.core._distributed import DistributedContext
from det_lightning.pytorch._checkpoint import METADATA_FILE
from det_lightning.pytorch._store import CheckpointStore

Selector = Optional[Callable[[str], bool]]
Resources = Dict[str, int]  # relative path (a directory's ends with "/") -> size


class ShardsFailed(RuntimeError):
    """Another rank failed while a checkpoint was written by several processes; nothing was
    published."""


def merge_metadata(
    all_metadata: List[Dict[str, Any]],
) -> Tuple[Dict[str, Any], Dict[str, List[int]]]:
    """The ranks' metadata merged, and the conflicts: ``{"/key/sub": [ranks]}``.

    As Determined's: dictionaries under one key merge; any other key given by several ranks
    must have one value (a conflict lists every rank that gave the key, the agreeing ones too).

    >>> merge_metadata([{"a": 1, "d": {"c": 1}}, {"b": 2, "d": {"e": 2}}])
    ({'a': 1, 'd': {'c': 1, 'e': 2}, 'b': 2}, {})
    >>> merge_metadata([{"a": [1]}, {"a": [1]}, {"a": [2]}])[1]
    {'/a': [0, 1, 2]}
    """
    merged: Dict[str, Any] = {}
    conflicts: Dict[str, List[int]] = {}
    givers: Dict[str, List[int]] = {}

    def merge(into: Dict[str, Any], given: Dict[str, Any], rank: int, above: str) -> None:
        for key, value in given.items():
            full = f"{above}/{key}"
            givers.setdefault(full, []).append(rank)
            if isinstance(value, dict) and isinstance(into.get(key, {}), dict):
                merge(into.setdefault(key, {}), value, rank, full)
            elif key in into and into[key] != value:
                conflicts.setdefault(full, list(givers[full][:-1])).append(rank)
            else:
                into[key] = value

    for rank, metadata in enumerate(all_metadata):
        merge(merged, metadata, rank, "")
    return merged, conflicts


def merge_resources(all_resources: List[Resources]) -> Tuple[Resources, Dict[str, List[int]]]:
    """Every rank's files and directories together, and the conflicts: the files several
    ranks give, or a name one gives as a file and another as a directory (Determined's
    ``merge_resources``).

    >>> merge_resources([{"a/": 0, "a/x": 1}, {"a/": 0, "a/y": 2, "a/x": 1}])[1]
    {'a/x': [0, 1]}
    """
    merged: Resources = {}
    files = set()
    givers: Dict[str, List[int]] = {}
    for rank, resources in enumerate(all_resources):
        for name, size in resources.items():
            if not name.endswith("/"):
                files.add(name)
            givers.setdefault(name.rstrip("/"), []).append(rank)
            merged[name] = size
    conflicts = {name: givers[name] for name in sorted(files) if len(givers[name]) > 1}
    return merged, conflicts


def list_resources(root: pathlib.Path, selector: Selector) -> Resources:
    """The files and directories under ``root`` that ``selector`` accepts (all when None), as
    Determined lists them; the top level's ``metadata.json`` is left out (the chief writes
    the merged one)."""
    found: Resources = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if relative == METADATA_FILE:
            continue
        name = relative + "/" if path.is_dir() else relative
        if selector is None or selector(name):
            found[name] = 0 if path.is_dir() else path.stat().st_size
    return found


def _said(error: Optional[BaseException]) -> Optional[str]:
    return None if error is None else f"{type(error).__name__}: {error}"


class ShardedWrite:
    """One checkpoint the ranks of ``dist`` write together into ``store``. Every method is
    collective: every rank calls it, in the same order.

    Args:
        dist: the ranks.
        store: where the checkpoint goes.
        call: the API call, for messages (``"upload"``, ``"store_path"``).
    """

    def __init__(self, dist: DistributedContext, store: CheckpointStore, call: str) -> None:
        self._dist = dist
        self._store = store
        self._call = call
        self.storage_id = ""

    def begin(self, problem: Optional[str] = None) -> None:
        """The chief picks the storage id and prepares the store; every rank learns the id,
        and every rank's ``problem`` (its bad input): any raises on every rank."""
        failed: Optional[BaseException] = None if problem is None else RuntimeError(problem)
        if self._dist.rank == 0 and failed is None:
            self.storage_id = str(uuid.uuid4())
            try:
                self._store.begin_shards(self.storage_id)
            except Exception as e:
                failed = e
        gathered = self._dist.allgather((_said(failed), self.storage_id))
        self.storage_id = gathered[0][1]
        self._agree([said for said, _ in gathered], failed)

    def shard_dir(self) -> Optional[pathlib.Path]:
        """The directory each rank writes into for ``store_path``: the store's own (a shared
        directory), else None; a rank that does not see it fails every rank."""
        found: Optional[pathlib.Path] = None
        failed: Optional[BaseException] = None
        try:
            found = self._store.shard_dir(self.storage_id)
        except Exception as e:
            failed = e
        self._agree(self._dist.allgather(_said(failed)), failed)
        return found

    def finish(
        self,
        metadata: Optional[Dict[str, Any]],
        source: Optional[pathlib.Path] = None,
        selector: Selector = None,
        *,
        copy: bool,
        failed: Optional[BaseException] = None,
    ) -> str:
        """Merges the ranks' ``metadata``; with ``copy``, puts each rank's files of ``source``
        (those ``selector`` accepts; one rank per directory several share, unless it has a
        selector) into the checkpoint; publishes it. ``failed``: this rank's error so far.
        Returns the storage id, on every rank.

        Raises:
            RuntimeError: conflicting files or metadata, or no rank gave a ``source``
                (Determined's messages).
            ShardsFailed: another rank failed.
        """
        identity = None
        if copy and source is not None and failed is None:
            try:
                st = os.stat(source)
                identity = (st.st_dev, st.st_ino)
            except OSError as e:
                failed = e
        gathered = self._dist.allgather((_said(failed), identity, metadata or {}))
        self._agree([g[0] for g in gathered], failed)
        merged, clashes = merge_metadata([g[2] for g in gathered])
        if clashes:
            self._refuse(clashes, "metadata")
        if copy:
            self._copy(source, selector, [g[1] for g in gathered], merged)
        if self._dist.rank == 0:
            try:
                self._store.publish_shards(self.storage_id, merged)
            except BaseException as e:
                failed = e
        said = self._dist.broadcast(_said(failed))
        if said is not None:
            if failed is not None:
                raise failed
            raise ShardsFailed(
                f"{self._call}(shard=True): the chief could not publish checkpoint "
                f"{self.storage_id} ({said}); nothing was published."
            )
        return self.storage_id

    def _copy(
        self,
        source: Optional[pathlib.Path],
        selector: Selector,
        identities: List[Any],
        merged: Dict[str, Any],
    ) -> None:
        """Each rank's files into the checkpoint: the lowest rank of those sharing a
        directory lists it (every rank with a selector lists its own choice)."""
        givers = [rank for rank, identity in enumerate(identities) if identity is not None]
        if not givers:
            self._abandon()
            raise RuntimeError(
                f"cannot call .{self._call}(ckpt_dir=None, shard=True), from all ranks; at "
                "least one rank must have a valid ckpt_dir"
            )
        rank, mine = self._dist.rank, identities[self._dist.rank]
        wants = mine is not None and (selector is not None or identities.index(mine) == rank)
        resources: Resources = {}
        failed: Optional[BaseException] = None
        try:
            if wants and source is not None:
                resources = list_resources(source, selector)
                if rank == givers[0]:  # as Determined: the metadata goes into its ckpt_dir
                    from det_lightning.pytorch._checkpoint_write import write_json

                    write_json(source / METADATA_FILE, merged)
        except Exception as e:
            failed = e
        gathered = self._dist.allgather((_said(failed), resources))
        self._agree([g[0] for g in gathered], failed)
        _, clashes = merge_resources([g[1] for g in gathered])
        if clashes:
            digests = self._dist.allgather(
                {name: _digest(source, name) for name in clashes if name in resources}
            )
            differ = {
                name: ranks
                for name, ranks in clashes.items()
                if len({d[name] for d in digests if name in d}) > 1
            }
            if differ:
                self._refuse(differ, "files")
        files = [
            name
            for name in resources
            if not name.endswith("/") and (name not in clashes or min(clashes[name]) == rank)
        ]
        try:
            if files and source is not None:
                self._store.put_shard(self.storage_id, source, files)
        except Exception as e:
            failed = e
        self._agree(self._dist.allgather(_said(failed)), failed)

    def _agree(self, problems: List[Optional[str]], failed: Optional[BaseException]) -> None:
        """When any rank had a problem: the unpublished checkpoint is removed, and every rank
        raises (its own error, or ``ShardsFailed`` naming the first rank that failed)."""
        if not any(problems):
            return
        self._abandon()
        if failed is not None:
            raise failed
        rank, said = next((r, p) for r, p in enumerate(problems) if p)
        raise ShardsFailed(
            f"{self._call}(shard=True) stopped on rank {self._dist.rank}: rank {rank} failed "
            f"({said}); checkpoint {self.storage_id or '(no id yet)'} was not published."
        )

    def _refuse(self, clashes: Dict[str, List[int]], kind: str) -> None:
        self._abandon()
        if self._dist.rank > 0:  # the whole list once, on the chief (as Determined)
            raise RuntimeError(f"refusing to upload with {kind} conflicts: {clashes}")
        lines = [f"    {name} uploaded by ranks {ranks}" for name, ranks in sorted(clashes.items())]
        raise RuntimeError(f"refusing to upload with {kind} conflicts:\n" + "\n".join(lines))

    def _abandon(self) -> None:
        if self._dist.rank == 0 and self.storage_id:
            self._store.abandon_shards(self.storage_id)


def _digest(source: Optional[pathlib.Path], name: str) -> str:
    """The file's MD5 (how Determined compares two ranks' copies); a directory, or a file that
    cannot be read, gets a text no file's digest equals."""
    if source is None:
        return "no directory"
    path = source / name
    if path.is_dir():
        return "this is a directory"
    digest = hashlib.md5(usedforsecurity=False)
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError as e:
        return f"unreadable ({e})"
    return digest.hexdigest()
