"""``ObjectStore``: a ``CheckpointStore`` at a URL (S3, GCS, Azure), through fsspec; and
``checkpoint_location``, which makes a store of either kind from a path or URL.

An object store holds one ``<uuid>/`` prefix per checkpoint, with the files a directory holds
(``_checkpoint``). It has no atomic rename, so a checkpoint is visible only once its marker
object, ``<uuid>/.complete`` (a copy of ``metadata.json``), exists::

    store.stage(uuid, partial, write)  # the local copy, in the cache directory (``staging()``)
    store.publish(uuid, local copy)    # every file, then <uuid>/.complete LAST
                                       #   (after the publish checks: ``_store``)
    store.complete()                   # checkpoints with a marker, nothing else
    store.fetch(uuid)                  # into the cache (via .<uuid>.<host>.<pid>.*.downloading,
                                       #   which the next download removes if that process
                                       #   died); reused when already there
    store.delete(uuid)                 # marked, the marker FIRST, then the other objects
    store.sweep()                      # <uuid>/ prefixes without a marker: what a killed
                                       #   upload or deletion left; marked checkpoints

Retention marks a checkpoint before deleting it (the object ``.<uuid>.unkept`` beside it) and
removes the mark once it is gone; ``sweep`` finishes a marked checkpoint's deletion that failed.
A publish the checks forbid removes what it had written (the prefix, without a marker, and the
local copy).

The local copies live in the cache directory (``_buckets.cache_dir()``) under
``checkpoints/<bucket>-<hash of the root URL>/``; reaching the bucket is ``_buckets``' part.
"""

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import pathlib
import shutil
import socket
import tempfile
import uuid as uuid_lib
from typing import (
    Any,
    Callable,
    Coroutine,
    Dict,
    Iterator,
    List,
    Optional,
    Sequence,
    Set,
    Tuple,
    Union,
)

from det_lightning import errors
from det_lightning._job_processes import pid_alive
from det_lightning.pytorch import _buckets
from det_lightning.pytorch import _checkpoint as ckpt
from det_lightning.pytorch._buckets import (
    SCHEMES,
    URL,
    Options,
    bounded,
    cache_dir,
    credentials_note,
    environment,
    filesystem,
    modified,
    refused,
    storage_options,
)
from det_lightning.pytorch._buckets import is_url as is_url  # earlier callers import them here
from det_lightning.pytorch._buckets import storage_url as storage_url
from det_lightning.pytorch._checkpoint import PARTIAL_SUFFIX
from det_lightning.pytorch._config_sections import CheckpointStorageConfig
from det_lightning.pytorch._local_store import (
    LocalStore,
    delete_atomically,
    finish_atomically,
    probe,
    remove_deletions,
    remove_partials,
)
from det_lightning.pytorch._store import CheckpointStore, raise_unless_may_publish

logger = logging.getLogger("det_lightning.pytorch")

# Files of one checkpoint uploaded or downloaded at once (an asynchronous filesystem: s3fs,
# gcsfs, adlfs): a checkpoint's code/ holds hundreds of small files, each a request of its own.
TRANSFER_CONCURRENCY = 16
MARKER = ".complete"  # <uuid>/.complete: written last; a checkpoint without it does not exist
# ckpt.OUTPUTS_MARKER, written first by ``outputs``, keeps ``sweep`` off a prefix of files that
# are not a checkpoint (a UUID-named prefix without MARKER is otherwise a killed upload)
OUTPUTS_MARKER = ckpt.OUTPUTS_MARKER
_KEPT: Set[str] = set()  # the OUTPUTS_MARKER keys this process wrote or saw
# .<uuid>.<host>.<pid>.<random>.downloading: a download in progress (``_download_folder``)
DOWNLOADING = ".downloading"
# Each file of an upload is given up after UPLOAD_GRACE_S plus its size at the rate below. An
# endpoint that stalls held an upload, and so its trial, for ever: botocore sends a PUT's body
# only after the server's "100 Continue", a wait no read timeout bounds (``_buckets``'
# PROBE_TIMEOUT_S bounds the probe's). Reads need no bound of ours: botocore's read timeout and
# retries end them.
UPLOAD_GRACE_S = 120.0
UPLOAD_MIN_RATE_ENV = "DET_LIGHTNING_UPLOAD_MIN_MBPS"  # MB/s; default 1
_UUID = ckpt.UUID_PATTERN


@dataclasses.dataclass(frozen=True)
class ObjectStore(CheckpointStore):
    """Checkpoints (or one checkpoint: its address) at a URL such as ``s3://bucket/prefix``.

    Args:
        url: ``scheme://bucket/path``, without a trailing slash.
        options: the filesystem's keyword arguments (``endpoint_url``, ``key``, ...).

    >>> root = ObjectStore("s3://ckpts/run") / "trial-1"
    >>> str(root), root.name, str(root.parent), root.bucket
    ('s3://ckpts/run/trial-1', 'trial-1', 's3://ckpts/run', 'ckpts')
    """

    url: str
    options: Tuple[Tuple[str, str], ...] = ()

    def child(self, name: str) -> "ObjectStore":
        return ObjectStore(f"{self.url}/{str(name).strip('/')}", self.options)

    def __str__(self) -> str:
        return self.url

    @property
    def scheme(self) -> str:
        return self.url.split("://", 1)[0]

    @property
    def key(self) -> str:
        """The path fsspec takes: ``bucket/prefix``."""
        return self.url.split("://", 1)[1]

    @property
    def bucket(self) -> str:
        return self.key.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]

    @property
    def parent(self) -> "ObjectStore":
        return ObjectStore(self.url.rsplit("/", 1)[0], self.options)

    def options_for(self, scheme: str) -> Tuple[Tuple[str, str], ...]:
        return self.options if scheme == self.scheme else ()

    # ----- the filesystem -----------------------------------------------------------------
    def filesystem(self) -> Any:
        """The fsspec filesystem (one per scheme and options in this process).

        Raises:
            CheckpointStorageError: the store's package (an extra of det_lightning) is missing.
        """
        return filesystem(self.scheme, self.options, self.url)

    def environment(self) -> Dict[str, str]:
        return environment(self.options)

    def staging(self) -> pathlib.Path:
        digest = hashlib.sha256(self.url.encode()).hexdigest()[:16]
        return cache_dir() / "checkpoints" / f"{self.bucket}-{digest}"

    # ----- reading ------------------------------------------------------------------------
    def _children(self) -> Dict[str, Dict[str, Dict[str, Any]]]:
        """The objects under this root, by first path component, as ``{rel_path: info}``."""
        base = self.key + "/"
        groups: Dict[str, Dict[str, Dict[str, Any]]] = {}
        for path, info in self.filesystem().find(self.key, detail=True).items():
            if path.startswith(base):
                child, _, rest = path[len(base) :].partition("/")
                if rest:
                    groups.setdefault(child, {})[rest] = info
        return groups

    def complete(self) -> List[ckpt.Listed]:
        """The checkpoints under this root that have their marker and all their files."""
        return [listed for listed, missing in self._marked() if not missing]

    def damaged(self) -> List[Tuple[CheckpointStore, List[str]]]:
        """The checkpoints under this root with their marker but not all their files (deleted
        from the bucket since), each with what it lacks. Prefixes without a marker are
        unfinished uploads or deletions, which ``sweep`` removes: never listed."""
        return [(self / listed.name, missing) for listed, missing in self._marked() if missing]

    def _marked(self) -> List[Tuple[ckpt.Listed, List[str]]]:
        """The checkpoints with their marker (whose content is their ``metadata.json``), each
        with what it lacks (see ``ckpt.lacking``)."""
        fs = self.filesystem()
        found = []
        for child, files in self._children().items():
            if MARKER not in files:
                continue
            try:
                metadata = json.loads(fs.cat_file(f"{self.key}/{child}/{MARKER}"))
            except (OSError, ValueError):
                continue  # deleted meanwhile, or not ours
            if isinstance(metadata, dict):
                missing = ckpt.lacking(list(files), metadata)
                found.append((ckpt.Listed(child, metadata, modified(files[MARKER])), missing))
        return found

    def exists(self, uuid: str) -> bool:
        """Whether checkpoint ``uuid`` has its marker."""
        return self.child(uuid).is_complete()

    def is_complete(self) -> bool:
        """Whether this URL is a checkpoint with its marker."""
        return bool(self.filesystem().exists(f"{self.key}/{MARKER}"))

    def read_load_data(self, uuid: str) -> Dict[str, Any]:
        try:
            text = self.filesystem().cat_file(f"{self.key}/{uuid}/{ckpt.LOAD_DATA_FILE}")
            content = json.loads(text)
        except (OSError, ValueError):
            return {}
        return content if isinstance(content, dict) else {}

    def local_copy(self) -> pathlib.Path:
        """This checkpoint's local copy, downloaded into the cache unless already there.

        Raises:
            InvalidCheckpointException: there is no complete checkpoint at this URL.
        """
        if not self.is_complete():
            raise errors.InvalidCheckpointException(
                f"{self} is no complete checkpoint: it has no {MARKER} marker (missing, being "
                "written, or being deleted). Pass the URL of a checkpoint, <root>/<uuid>."
            )
        cache = self.parent.staging()
        local = cache / self.name
        if ckpt.is_complete(local):
            return local
        fs = self.filesystem()
        keys = [k for k in fs.find(self.key) if k != f"{self.key}/{MARKER}"]
        logger.info(f"downloading checkpoint {self} to {local}")
        cache.mkdir(parents=True, exist_ok=True)
        # A directory of this process's own, renamed when complete: several ranks of one
        # machine may download the same checkpoint at once, and the first rename wins.
        download = _download_folder(cache, self.name)
        try:
            targets = [download / key[len(self.key) + 1 :] for key in keys]
            for target in targets:
                target.parent.mkdir(parents=True, exist_ok=True)
            _transfer(fs, "get_file", [(key, str(t)) for key, t in zip(keys, targets)])
            os.replace(download, local)
        except OSError:
            if not ckpt.is_complete(local):
                raise
        finally:
            shutil.rmtree(download, ignore_errors=True)
        return local

    def folders(self) -> List[str]:
        """The prefixes directly under this root (one listing, not recursive).

        Raises:
            CheckpointStorageError: the bucket cannot be listed (naming the endpoint and
                credentials used).
        """
        try:
            entries = self.filesystem().ls(self.key, detail=True)
        except FileNotFoundError:
            return []
        except Exception as e:  # botocore's errors are no OSError
            raise errors.CheckpointStorageError(
                f"Cannot list {self}: {type(e).__name__}: {e}. "
                f"{credentials_note(self.scheme, self.options)}"
            ) from e
        names = {
            e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries if e["type"] == "directory"
        }
        return sorted(n for n in names if n and n[0] != ".")

    def read_once(self, name: str) -> Optional[bytes]:
        try:
            return bytes(self.filesystem().cat_file(f"{self.key}/{name}"))
        except FileNotFoundError:
            return None

    def published(self) -> List[ckpt.Listed]:
        """The checkpoints with their marker (whose content is their ``metadata.json``)."""
        return [listed for listed, _ in self._marked()]

    @contextlib.contextmanager
    def files_of(
        self, uuid: str, selector: Optional[Callable[[str], bool]] = None
    ) -> Iterator[pathlib.Path]:
        """Checkpoint ``uuid``'s objects that ``selector`` accepts (all when None; never the
        marker), downloaded into a temporary directory beside the local copies
        (``staging()``), removed after the block, as Determined's cloud storage managers'
        ``restore_path`` does."""
        fs, target = self.filesystem(), self.child(uuid)
        base = target.key + "/"
        names = [
            key[len(base) :]
            for key in fs.find(target.key)
            if key.startswith(base) and key[len(base) :] != MARKER
        ]
        wanted = [name for name in names if selector is None or selector(name)]
        local = _download_folder(self.staging(), uuid)
        try:
            for name in wanted:
                (local / name).parent.mkdir(parents=True, exist_ok=True)
            _transfer(fs, "get_file", [(base + name, str(local / name)) for name in wanted])
            yield local
        finally:
            shutil.rmtree(local, ignore_errors=True)

    # ----- writing and deleting -----------------------------------------------------------
    @contextlib.contextmanager
    def outputs(self, name: str) -> Iterator[pathlib.Path]:
        """A temporary folder in the cache, uploaded under ``<name>/`` when the block ends.
        The prefix's first folder gets ``.outputs`` first, which keeps ``sweep`` off it.

        Raises:
            CheckpointStorageError: the upload failed; the files are kept in a folder of the
                cache that no cleanup removes, named in the message.
        """
        fs = self.filesystem()
        top = name.strip("/").split("/")[0]
        keep = f"{self.key}/{top}/{OUTPUTS_MARKER}"
        if keep not in _KEPT:  # once per prefix and process, not once per block
            if not bounded(fs, "exists", keep):
                bounded(fs, "pipe_file", keep, b"")
            _KEPT.add(keep)
        self.staging().mkdir(parents=True, exist_ok=True)
        # Hidden and ``.partial``: what a killed process leaves is swept as a killed write's.
        local = pathlib.Path(
            tempfile.mkdtemp(prefix=".outputs-", suffix=PARTIAL_SUFFIX, dir=self.staging())
        )
        try:
            yield local
        except BaseException:
            shutil.rmtree(local, ignore_errors=True)  # the block failed: nothing to upload
            raise
        files = sorted(p for p in local.rglob("*") if p.is_file())
        target = self.child(name.strip("/"))
        pairs = [(str(f), f"{target.key}/{f.relative_to(local).as_posix()}") for f in files]
        try:
            _transfer(fs, "put_file", pairs, [upload_bound(f.stat().st_size) for f in files])
        except Exception as e:
            token = local.name[len(".outputs-") : -len(PARTIAL_SUFFIX)]
            kept = local.with_name(f"outputs-not-uploaded-{token}")
            local.rename(kept)  # out of the sweep's way (hidden .partial folders)
            raise errors.CheckpointStorageError(
                f"Uploading outputs to {target} failed: {type(e).__name__}: {e}. The files are "
                f"kept in {kept}. {credentials_note(self.scheme, self.options)}"
            ) from e
        shutil.rmtree(local, ignore_errors=True)

    def drop_staged(self, uuid: str) -> None:
        """The local copy ``stage`` wrote into the cache (the bucket holds the checkpoint)."""
        if (self.staging() / uuid).exists():
            delete_atomically(self.staging(), uuid)

    def stage(
        self, uuid: str, partial: pathlib.Path, write: Callable[[pathlib.Path], None]
    ) -> pathlib.Path:
        """The local copy only: ``publish`` uploads it."""
        return finish_atomically(self.staging(), uuid, partial, write)

    def publish(self, uuid: str, local: pathlib.Path) -> "ObjectStore":
        """Uploads the finished checkpoint directory ``local`` as ``<uuid>/``, marker last, if
        the publish checks allow it then.

        Raises:
            CheckpointStorageError: an upload failed (the unmarked objects are swept later).
            the publish check's exception: it forbade the marker; what the upload wrote and
                the local copy are removed.
        """
        fs = self.filesystem()
        target = self.child(uuid)
        files = sorted(p for p in local.rglob("*") if p.is_file())
        try:
            pairs = [(str(f), f"{target.key}/{f.relative_to(local).as_posix()}") for f in files]
            _transfer(fs, "put_file", pairs, [upload_bound(f.stat().st_size) for f in files])
        except Exception as e:
            raise self._upload_failed(local, target, e) from e
        try:
            raise_unless_may_publish()
        except BaseException as e:
            logger.warning(f"checkpoint {target} not published ({type(e).__name__}: {e})")
            self._withdraw(uuid)
            raise
        try:
            marker = local / ckpt.METADATA_FILE
            _transfer(fs, "put_file", [(str(marker), f"{target.key}/{MARKER}")], [UPLOAD_GRACE_S])
        except Exception as e:
            raise self._upload_failed(local, target, e) from e
        return target

    # ----- written by several processes ----------------------------------------------------
    def begin_shards(self, uuid: str) -> None:
        """Nothing to prepare: each process uploads its files under ``<uuid>/``, unmarked (a
        fresh UUID names no checkpoint: no request to ask)."""

    def shard_dir(self, uuid: str) -> None:
        """None: each process's files are uploaded (``put_shard``)."""
        return None

    def put_shard(self, uuid: str, source: pathlib.Path, paths: List[str]) -> None:
        """Uploads the files under ``<uuid>/`` (no marker: not a checkpoint yet)."""
        target = self.child(uuid)
        files = [source / relative for relative in paths]
        try:
            pairs = [(str(f), f"{target.key}/{r}") for f, r in zip(files, paths)]
            _transfer(
                self.filesystem(),
                "put_file",
                pairs,
                [upload_bound(f.stat().st_size) for f in files],
            )
        except Exception as e:
            raise self._upload_failed(source, target, e) from e

    def publish_shards(self, uuid: str, metadata: Dict[str, Any]) -> "ObjectStore":
        """Uploads ``metadata.json``, then the marker after the publish checks."""
        from det_lightning.pytorch._checkpoint_write import write_json

        self.staging().mkdir(parents=True, exist_ok=True)
        # Hidden and ``.partial``: what a killed process leaves is swept as a killed write's.
        local = pathlib.Path(
            tempfile.mkdtemp(prefix=f".{uuid}-", suffix=PARTIAL_SUFFIX, dir=self.staging())
        )
        try:
            write_json(local / ckpt.METADATA_FILE, metadata)
            return self.publish(uuid, local)
        except BaseException:
            self._remove_prefix(uuid)
            raise
        finally:
            shutil.rmtree(local, ignore_errors=True)

    def abandon_shards(self, uuid: str) -> None:
        self._remove_prefix(uuid)

    def _upload_failed(
        self, local: pathlib.Path, target: "ObjectStore", error: Exception
    ) -> errors.CheckpointStorageError:
        return errors.CheckpointStorageError(
            f"Uploading checkpoint {local} to {target} failed: {type(error).__name__}: {error}. "
            f"Training stopped; earlier checkpoints under {self} are kept. "
            f"{credentials_note(self.scheme, self.options)}"
        )

    def _withdraw(self, uuid: str) -> None:
        """Removes an unpublished checkpoint's objects (no marker: no reader ever saw it; a
        failure leaves them for ``sweep``) and its local copy."""
        self._remove_prefix(uuid)
        if (self.staging() / uuid).exists():
            delete_atomically(self.staging(), uuid)

    def write_once(self, name: str, data: bytes) -> None:
        """As one object, its upload bounded as a checkpoint file's (``upload_bound``).

        Raises:
            CheckpointStorageError: it could not be written (nothing was trained yet: the
                experiment's record is written before its first trial).
        """
        fs, key = self.filesystem(), f"{self.key}/{name}"
        try:
            if bounded(fs, "exists", key):  # a silent endpoint: PROBE_TIMEOUT_S
                return
            if not getattr(fs, "async_impl", False):
                fs.pipe_file(key, data)
                return
            from fsspec.asyn import sync

            pipe = fs._pipe_file(key, data)
            sync(fs.loop, _within, pipe, upload_bound(len(data)), f"{len(data)} bytes", key)
        except errors.CheckpointStorageError:
            raise
        except Exception as e:
            said = f"{type(e).__name__}: {e}"
            if _timed_out(e) and not isinstance(e, UploadStalled):
                said = f"the endpoint did not answer within {_buckets.PROBE_TIMEOUT_S:.0f} s"
            raise errors.CheckpointStorageError(
                f"Writing {self}/{name} failed: {said}. Nothing was trained. "
                f"{credentials_note(self.scheme, self.options)}"
            ) from e

    def set_file(self, name: str, data: Optional[bytes]) -> None:
        """One object, put or removed (S3 replaces an object at once for every reader).

        Raises:
            CheckpointStorageError: the bucket refused it or did not answer.
        """
        fs, key = self.filesystem(), f"{self.key}/{name}"
        try:
            if data is None:
                try:
                    bounded(fs, "rm_file", key)
                except FileNotFoundError:
                    pass
            else:
                bounded(fs, "pipe_file", key, data)
        except errors.CheckpointStorageError:
            raise
        except Exception as e:
            what = "Removing" if data is None else "Writing"
            raise errors.CheckpointStorageError(
                f"{what} {self}/{name} failed: {type(e).__name__}: {e}. "
                f"{credentials_note(self.scheme, self.options)}"
            ) from e

    def remove_all(self, last: Sequence[str] = ()) -> None:
        """In stages, each checked by listing what is left (S3 answers a many-key delete with
        200 and an error per refused key, and s3fs's ``rm`` does not raise): the checkpoints'
        markers (each checkpoint vanishes for every reader at once), the other objects of its
        subfolders, its own files, those named in ``last`` (``experiment.json``: until then the
        experiment is listed and can be deleted again)."""
        fs = self.filesystem()
        base = self.key + "/"
        try:
            found = [str(k) for k in fs.find(self.key)]
            nested = {k for k in found if "/" in k[len(base) :]}
            markers = {k for k in nested if k.rsplit("/", 1)[1] == MARKER}
            final = {f"{base}{name}" for name in last} & set(found)
            own = set(found) - nested - final
            for keys in (sorted(markers), sorted(nested - markers), sorted(own), sorted(final)):
                if not keys:
                    continue
                fs.rm(keys)
                left = set(keys) & {str(k) for k in fs.find(self.key)}
                if left:
                    raise errors.CheckpointStorageError(
                        f"Removing {self} failed: {len(left)} of {len(keys)} objects were "
                        f"not deleted (the first: {self.scheme}://{min(left)}); run it again "
                        f"to remove what is left. {credentials_note(self.scheme, self.options)}"
                    )
        except FileNotFoundError:
            return
        except errors.CheckpointStorageError:
            raise
        except Exception as e:
            raise errors.CheckpointStorageError(
                f"Removing {self} failed: {type(e).__name__}: {e}; run it again to remove "
                f"what is left. {credentials_note(self.scheme, self.options)}"
            ) from e

    def _remove(self, uuid: str) -> bool:
        """The marker first (the checkpoint vanishes for every reader at once), then its
        objects and the local copy."""
        target = self.child(uuid)
        if not self._remove_object(
            f"{target.key}/{MARKER}", f"Could not delete checkpoint {target}"
        ):
            return False
        self._withdraw(uuid)
        return True

    def _remove_object(self, key: str, failure: str) -> bool:
        """Removes the object ``key`` (one already gone counts); a failure is logged after
        ``failure``. Returns whether it is gone."""
        try:
            self.filesystem().rm_file(key)
        except FileNotFoundError:
            pass
        except Exception as e:
            logger.warning(f"{failure}: {e}")
            return False
        return True

    def mark_unkept(self, uuid: str) -> None:
        try:
            self.filesystem().pipe_file(f"{self.key}/.{uuid}{ckpt.UNKEPT_SUFFIX}", b"")
        except Exception as e:
            logger.warning(f"Could not mark checkpoint {self / uuid} for deletion: {e}")

    def unmark_unkept(self, uuid: str) -> None:
        mark = f"{self.key}/.{uuid}{ckpt.UNKEPT_SUFFIX}"
        self._remove_object(mark, f"Could not remove the deletion mark of {self / uuid}")

    def marked_unkept(self) -> List[str]:
        base, suffix = self.key + "/", ckpt.UNKEPT_SUFFIX
        names = [path[len(base) :] for path in self.filesystem().find(self.key)]
        return sorted(
            name[1 : -len(suffix)]
            for name in names
            if "/" not in name and name.startswith(".") and name.endswith(suffix)
        )

    def _remove_prefix(self, name: str) -> bool:
        fs, prefix = self.filesystem(), f"{self.key}/{name}"
        try:
            fs.rm(prefix, recursive=True)
            left = fs.find(prefix)  # s3fs's ``rm`` does not raise for a key S3 refused
            if left:
                raise PermissionError(f"{len(left)} objects were not deleted")
        except FileNotFoundError:
            pass
        except Exception as e:
            logger.warning(
                f"Could not remove {self / name} ({e}); it has no marker, so it is no "
                "checkpoint, and the next run under this root removes it again."
            )
            return False
        return True

    def _remove_leftovers(self) -> List[str]:
        """``<uuid>/`` prefixes without a marker (a killed upload or deletion) and the local
        copies' leftovers. Only UUID-named prefixes directly under this root are touched (never
        ``trial-<n>/`` or anything else)."""
        removed = []
        for child, files in self._children().items():
            if (
                MARKER not in files
                and OUTPUTS_MARKER not in files
                and _UUID.match(child)
                and self._remove_prefix(child)
            ):
                removed.append(str(self / child))
        remove_partials(self.staging())
        remove_deletions(self.staging())
        remove_stale_downloads(self.staging())
        return removed

    # ----- checks -------------------------------------------------------------------------
    def problem(self) -> Optional[str]:
        """A probe object first (the package, the bucket, the credentials): nothing is created
        locally unless that works."""
        return self._bucket_problem() or probe(self.staging())

    def _bucket_problem(self) -> Optional[str]:
        try:
            fs = self.filesystem()
        except errors.CheckpointStorageError as e:
            return str(e)
        unreachable = refused(self.scheme, self.options)
        if unreachable is not None:
            return (
                f"Cannot write checkpoints to {self}: {unreachable}. Nothing was trained. Fix "
                f"checkpoint_storage's endpoint_url (or AWS_ENDPOINT_URL_S3), or start the "
                f"server. {credentials_note(self.scheme, self.options)}"
            )
        probe_key = f"{self.key}/.det_lightning_probe_{uuid_lib.uuid4().hex}"
        try:
            bounded(fs, "pipe_file", probe_key, b"probe")
            bounded(fs, "rm_file", probe_key)
        except FileNotFoundError as e:
            return (
                f"Cannot write checkpoints to {self}: the bucket {self.bucket!r} does not exist "
                f"({e}). Nothing was trained. Create the bucket, or fix checkpoint_storage's "
                f"bucket / the checkpoint URL. {credentials_note(self.scheme, self.options)}"
            )
        except Exception as e:
            if _timed_out(e):
                return (
                    f"Cannot write checkpoints to {self}: the endpoint accepted a connection, "
                    "but writing and removing a small probe object did not finish within "
                    f"{_buckets.PROBE_TIMEOUT_S:g} s ({type(e).__name__}). Nothing was trained. "
                    "Check that checkpoint_storage's endpoint_url (or AWS_ENDPOINT_URL_S3) "
                    "names an S3 server, and that it is up. "
                    f"{credentials_note(self.scheme, self.options)}"
                )
            return (
                f"Cannot write checkpoints to {self}: {type(e).__name__}: {e}. Nothing was "
                f"trained. {credentials_note(self.scheme, self.options)}"
            )
        return None


def _timed_out(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) is a timeout: botocore's ``ReadTimeoutError`` or
    ``ConnectTimeoutError``, a socket's or asyncio's."""
    seen: Optional[BaseException] = error
    while seen is not None:
        if isinstance(seen, TimeoutError) or type(seen).__name__.endswith("TimeoutError"):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def checkpoint_location(
    location: Union[str, "os.PathLike[str]", CheckpointStore],
    storage: Optional[CheckpointStorageConfig] = None,
    *,
    beside: Optional[CheckpointStore] = None,
) -> CheckpointStore:
    """The store at ``location``: a ``LocalStore`` for a path (made absolute), an
    ``ObjectStore`` for a URL, which gets its endpoint and keys from ``storage`` (the
    experiment's ``checkpoint_storage``) when that is of the URL's type, else from ``beside`` (a
    store the URL was named beside) when that is of its scheme.

    Raises:
        CheckpointStorageError: a URL of a scheme no object store here supports.

    >>> checkpoint_location("s3://b/p/", CheckpointStorageConfig(type="s3",
    ...     bucket="b", endpoint_url="http://127.0.0.1:9000"))
    ObjectStore(url='s3://b/p', options=(('endpoint_url', 'http://127.0.0.1:9000'),))
    >>> checkpoint_location("/ckpts/run")
    LocalStore(path=PosixPath('/ckpts/run'))
    """
    if isinstance(location, CheckpointStore):
        return location
    match = URL.match(str(location))
    if match is None:
        return LocalStore(pathlib.Path(os.path.abspath(os.path.expanduser(str(location)))))
    scheme, rest = match.group(1).lower(), match.group(2).strip("/")
    if scheme not in SCHEMES:
        raise errors.CheckpointStorageError(
            f"Checkpoint location {location!s}: the scheme {scheme}:// is not supported. Use a "
            "local directory, s3://bucket/prefix, gs://bucket/prefix or az://container/prefix."
        )
    if not rest:
        raise errors.CheckpointStorageError(
            f"Checkpoint location {location!s} names no bucket; use {scheme}://bucket/prefix."
        )
    options: Options = ()
    if storage is not None and storage.type == SCHEMES[scheme][3]:  # its endpoint and keys
        options = storage_options(scheme, storage)
    if not options and beside is not None:
        options = beside.options_for(scheme)
    return ObjectStore(f"{scheme}://{rest}", options)


def _download_folder(cache: pathlib.Path, name: str) -> pathlib.Path:
    """A new folder in ``cache`` to download checkpoint ``name`` into, named after this
    machine and process (``.<name>.<host>.<pid>.<random>.downloading``) so that a later
    download finds it if this process dies mid-way (``remove_stale_downloads``)."""
    cache.mkdir(parents=True, exist_ok=True)
    remove_stale_downloads(cache)
    prefix = f".{name}.{socket.gethostname()}.{os.getpid()}."
    return pathlib.Path(tempfile.mkdtemp(prefix=prefix, suffix=DOWNLOADING, dir=cache))


def remove_stale_downloads(cache: pathlib.Path) -> List[pathlib.Path]:
    """Removes the download folders in ``cache`` whose process, on this machine, is gone
    (killed mid-download: they can be the size of a checkpoint); returns them. Another
    machine's (a cache on a shared disk), a live process's, and an unnamed one stay."""
    removed = []
    host = socket.gethostname()
    for entry in cache.iterdir() if cache.is_dir() else []:
        name = entry.name
        if not (name.startswith(".") and name.endswith(DOWNLOADING)):
            continue
        head, pid, _ = (name[1 : -len(DOWNLOADING)].rsplit(".", 2) + ["", ""])[:3]
        if head.partition(".")[2] != host or not pid.isdigit() or pid_alive(int(pid)):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


class UploadStalled(RuntimeError):
    """A file of a checkpoint was not uploaded within its bound (``upload_bound``). Not a
    ``TimeoutError``, which fsspec's ``sync`` would turn into a bare ``FSTimeoutError``."""


def upload_bound(size: int, environ: Optional[Dict[str, str]] = None) -> float:
    """Seconds an upload of ``size`` bytes may take: ``UPLOAD_GRACE_S`` plus the size at
    ``$DET_LIGHTNING_UPLOAD_MIN_MBPS`` MB/s (default 1).

    >>> upload_bound(0, {}), upload_bound(10**9, {}), upload_bound(10**9, {UPLOAD_MIN_RATE_ENV: "10"})
    (120.0, 1120.0, 220.0)

    Raises:
        CheckpointStorageError: the variable is not a number above 0.
    """
    given = (os.environ if environ is None else environ).get(UPLOAD_MIN_RATE_ENV) or "1"
    try:
        rate = float(given)
    except ValueError:
        rate = 0.0
    if not rate > 0:
        raise errors.CheckpointStorageError(
            f"${UPLOAD_MIN_RATE_ENV}={given!r} is not a number of MB/s above 0 (the slowest "
            "upload rate before a checkpoint's upload is given up). Nothing was uploaded."
        )
    return UPLOAD_GRACE_S + size / (rate * 1e6)


def _transfer(
    fs: Any, method: str, pairs: List[Tuple[str, str]], bounds: Optional[List[float]] = None
) -> None:
    """``fs.<method>(source, destination)`` for each pair (``put_file``, ``get_file``):
    ``TRANSFER_CONCURRENCY`` at once where ``fs`` is asynchronous (fsspec's ``_put_file`` on
    its own event loop), one after another elsewhere. The first failure cancels the transfers
    in flight and is raised once they have stopped; transfers not yet begun never start.
    ``bounds``: seconds each may take (asynchronous filesystems), else ``UploadStalled``."""
    if not getattr(fs, "async_impl", False):
        for source, destination in pairs:
            getattr(fs, method)(source, destination)
        return
    from fsspec.asyn import sync

    limits = bounds if bounds is not None else [None] * len(pairs)
    sync(fs.loop, _transfer_all, getattr(fs, f"_{method}"), pairs, limits)


async def _within(
    transfer: Coroutine[Any, Any, Any], bound: Optional[float], source: str, destination: str
) -> None:
    """Awaits ``transfer`` (``source`` to ``destination``), cancelled after ``bound`` seconds
    (None: no bound) with ``UploadStalled``. Not ``wait_for``: a timeout the transfer raises
    itself (a read's) stays its own."""
    task = asyncio.ensure_future(transfer)
    try:
        done, _ = await asyncio.wait({task}, timeout=bound)
    except asyncio.CancelledError:  # another file failed: this one stops too
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise
    if not done:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise UploadStalled(
            f"{source} was not uploaded to {destination} within {bound:.0f} s (the endpoint "
            f"stalled, or the link is slower than ${UPLOAD_MIN_RATE_ENV} MB/s, default 1; set "
            "it lower for a slow link)"
        )
    task.result()


async def _transfer_all(
    call: Callable[..., Any], pairs: List[Tuple[str, str]], bounds: List[Optional[float]]
) -> None:
    slots = asyncio.Semaphore(TRANSFER_CONCURRENCY)

    async def one(source: str, destination: str, bound: Optional[float]) -> None:
        async with slots:
            await _within(call(source, destination), bound, source, destination)

    tasks = [asyncio.ensure_future(one(*pair, bound)) for pair, bound in zip(pairs, bounds)]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
