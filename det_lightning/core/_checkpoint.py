"""``core.CheckpointContext`` in local mode: checkpoints in a directory, written atomically.

The layout is Determined's local (shared_fs) one: ``<storage>/<storage_id>/`` holds the files
the loop wrote plus ``metadata.json`` (the metadata given, as Determined writes it). Unlike
Determined's shared_fs storage, which writes straight into ``<storage_id>/``, a checkpoint is
written into a hidden ``.<storage_id>.partial`` directory and renamed when complete
(``pytorch/_local_store.py``), so a crash never leaves a directory that looks whole, and a
deletion takes the name away in one rename.
"""

import contextlib
import json
import logging
import os
import pathlib
import shutil
import uuid
from typing import Any, Callable, Dict, Iterator, Optional, Tuple, Union

from det_lightning import errors
from det_lightning.core._distributed import DistributedContext
from det_lightning.core._modes import DownloadMode
from det_lightning.pytorch import _checkpoint_write as write
from det_lightning.pytorch import _local_store as atomic
from det_lightning.pytorch._checkpoint import METADATA_FILE

logger = logging.getLogger("det_lightning.core")

Selector = Optional[Callable[[str], bool]]


class CheckpointContext:
    """Stores and restores checkpoints under ``base_path``.

    Args:
        dist: this process's rank information.
        base_path: the checkpoint storage directory.
    """

    def __init__(self, dist: DistributedContext, base_path: pathlib.Path) -> None:
        self._dist = dist
        self._base_path = pathlib.Path(base_path)

    def _require_chief(self, call: str) -> None:
        if self._dist.rank != 0:
            raise RuntimeError(
                f"cannot call CheckpointContext.{call}(shard=False) from non-chief worker "
                f"(rank={self._dist.rank})"
            )

    def _check_shard(self, call: str, shard: bool) -> None:
        if shard and self._dist.size > 1:
            raise NotImplementedError(
                f"{call}(shard=True) across {self._dist.size} processes is not provided by "
                "det_lightning's local Core API: gather what each rank saves to the chief "
                "(core_context.distributed.gather) and call it with shard=False there."
            )

    @contextlib.contextmanager
    def store_path(
        self, metadata: Optional[Dict[str, Any]] = None, *, shard: bool = False
    ) -> Iterator[Tuple[pathlib.Path, str]]:
        """Yields ``(path, storage_id)``: write the checkpoint into ``path``; it appears under
        ``storage_id``, with ``metadata.json``, when the block ends without an exception."""
        self._check_shard("store_path", shard)
        self._require_chief("store_path")
        storage_id = str(uuid.uuid4())
        partial = atomic.begin_atomically(self._base_path, storage_id)
        try:
            yield partial, storage_id
        except BaseException:
            atomic.abandon_partial(partial)
            raise
        atomic.finish_atomically(
            self._base_path,
            storage_id,
            partial,
            lambda path: write.write_json(path / METADATA_FILE, metadata or {}),
        )
        logger.info(f"saved checkpoint {storage_id}")

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
        ``ckpt_dir``."""
        self._check_shard("upload", shard)
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

    def _existing(self, storage_id: str) -> pathlib.Path:
        path = self._base_path / storage_id
        if not path.is_dir():
            raise errors.CheckpointNotFound(f"Did not find checkpoint {path} in local storage")
        return path

    def download(
        self,
        storage_id: str,
        ckpt_dir: Union[str, os.PathLike],
        download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload,
        *,
        selector: Selector = None,
    ) -> None:
        """Copies checkpoint ``storage_id`` (the paths ``selector`` accepts) into ``ckpt_dir``."""
        DownloadMode(download_mode)
        _copy_selected(self._existing(storage_id), pathlib.Path(ckpt_dir), selector)

    @contextlib.contextmanager
    def restore_path(
        self,
        storage_id: str,
        download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload,
        *,
        selector: Selector = None,
    ) -> Iterator[pathlib.Path]:
        """Yields the checkpoint's directory (local storage: nothing is downloaded)."""
        DownloadMode(download_mode)
        yield self._existing(storage_id)

    def get_metadata(self, storage_id: str) -> Dict[str, Any]:
        """The checkpoint's ``metadata.json`` (Determined's local mode raises
        NotImplementedError here; its cluster mode returns the metadata)."""
        return dict(json.loads((self._existing(storage_id) / METADATA_FILE).read_text()))

    def delete(self, storage_id: str) -> None:
        """Deletes checkpoint ``storage_id``; its name goes in one rename."""
        self._existing(storage_id)
        if not atomic.delete_atomically(self._base_path, storage_id):
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


def newest_stored(base_path: pathlib.Path) -> Optional[str]:
    """The ``storage_id`` of the newest checkpoint ``store_path``/``upload`` finished under
    ``base_path`` (the most ``steps_completed`` in its metadata, else the latest written), or
    None: what a search gives a Core API trial it resumes as ``info.latest_checkpoint``."""
    found = []
    for path in base_path.iterdir() if base_path.is_dir() else []:
        if path.name.startswith(".") or not (path / METADATA_FILE).is_file():
            continue
        try:
            steps = json.loads((path / METADATA_FILE).read_text()).get("steps_completed")
        except (OSError, ValueError, AttributeError):
            steps = None
        rank = steps if isinstance(steps, int) and not isinstance(steps, bool) else -1
        found.append((rank, path.stat().st_mtime, path.name))
    return max(found)[2] if found else None


__all__ = ["CheckpointContext", "DummyCheckpointContext", "newest_stored"]
