"""Checkpoint roots on object stores (S3, GCS, Azure), through fsspec.

A checkpoint root is a local directory (a ``pathlib.Path``) or a URL (``RemoteRoot``); both
hold one ``<uuid>`` directory (prefix) per checkpoint with the same files. An object store has
no atomic rename, so a checkpoint under a URL is visible only once its marker object,
``<uuid>/.complete`` (a copy of ``metadata.json``), exists::

    write_atomically(root.staging(), uuid, write)   # the local copy, in the cache directory
    root.upload(uuid, local copy)                    # every file, then <uuid>/.complete LAST
                                                     #   (after the publish checks, below)
    root.complete()                                  # checkpoints with a marker, nothing else
    (root / uuid).download()                         # into the cache (via .<uuid>.*.downloading);
                                                     #   reused when already there
    root.delete(uuid)                                # the marker FIRST, then the other objects
    root.sweep()                                     # <uuid>/ prefixes without a marker: what a
                                                     #   killed upload or deletion left

Retention marks a checkpoint before deleting it (``.<uuid>.unkept`` beside it: a file, or an
object) and removes the mark once it is gone; ``sweep`` finishes a marked checkpoint's deletion
that failed (``delete_checkpoint``, ``sweep``).

The local copies live in ``$DET_LIGHTNING_CACHE_DIR`` (default ``~/.cache/det_lightning``)
under ``checkpoints/<hash of the root URL>/``. fsspec and the store's package (``s3fs``,
``gcsfs``, ``adlfs``: the extras ``s3``, ``gcs``, ``azure``) are imported only when a URL root
is used. The functions at the end take either kind of root.

A runner may lose the right to publish a run's checkpoints while it runs: a search's trial whose
worker lost its lease (another worker took the trial over, and resumes it from the checkpoints
there were then). It says so with ``publish_check(check)``: ``check()`` runs right before each
marker is written and before each deletion, and raises to forbid it. An upload it forbids
removes what it had written (the prefix, without a marker, and the local copy) and raises the
check's exception; so a stale owner never adds a checkpoint to the trial's root, nor deletes one
of it, once its right is found gone. (The API never imports the runner: the runner registers the
check.) One request remains between the check and the marker: a takeover in that moment still
publishes the checkpoint, which is complete and was trained before the takeover.
"""

import contextlib
import dataclasses
import datetime
import hashlib
import json
import logging
import os
import pathlib
import re
import shutil
import tempfile
import uuid as uuid_lib
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

from det_lightning import errors
from det_lightning.pytorch import _checkpoint as ckpt
from det_lightning.pytorch._checkpoint_write import (
    delete_atomically,
    mark_unkept,
    marked_unkept,
    remove_deletions,
    remove_partials,
    unmark_unkept,
)

logger = logging.getLogger("det_lightning.pytorch")

MARKER = ".complete"  # <uuid>/.complete: written last; a checkpoint without it does not exist
CACHE_DIR_ENV = "DET_LIGHTNING_CACHE_DIR"
DOWNLOADING = ".downloading"  # .<uuid>.<random>.downloading: a download in progress
# URL scheme: (fsspec protocol, package, det_lightning extra, checkpoint_storage type)
SCHEMES = {
    "s3": ("s3", "s3fs", "s3", "s3"),
    "gs": ("gcs", "gcsfs", "gcs", "gcs"),
    "gcs": ("gcs", "gcsfs", "gcs", "gcs"),
    "az": ("az", "adlfs", "azure", "azure"),
    "abfs": ("abfs", "adlfs", "azure", "azure"),
    "abfss": ("abfs", "adlfs", "azure", "azure"),
}
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$")
_UUID = ckpt.UUID_PATTERN
_FILESYSTEMS: Dict[Tuple[str, Tuple[Tuple[str, str], ...]], Any] = {}
# Called before a marker is written or a checkpoint deleted; raises to forbid it.
PublishCheck = Callable[[], None]
_PUBLISH_CHECKS: List[PublishCheck] = []


@contextlib.contextmanager
def publish_check(check: PublishCheck) -> Iterator[None]:
    """Inside the block, ``check()`` runs in this process right before each checkpoint marker
    is written and before each checkpoint is deleted (any thread: the background writer's
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


@dataclasses.dataclass(frozen=True)
class RemoteRoot:
    """A checkpoint root (or one checkpoint) at a URL such as ``s3://bucket/prefix``.

    Args:
        url: ``scheme://bucket/path``, without a trailing slash.
        options: the filesystem's keyword arguments (``endpoint_url``, ``key``, ...).

    >>> root = RemoteRoot("s3://ckpts/run") / "trial-1"
    >>> str(root), root.name, str(root.parent), root.bucket
    ('s3://ckpts/run/trial-1', 'trial-1', 's3://ckpts/run', 'ckpts')
    """

    url: str
    options: Tuple[Tuple[str, str], ...] = ()

    def __truediv__(self, name: str) -> "RemoteRoot":
        return RemoteRoot(f"{self.url}/{str(name).strip('/')}", self.options)

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
    def parent(self) -> "RemoteRoot":
        return RemoteRoot(self.url.rsplit("/", 1)[0], self.options)

    # ----- the filesystem -----------------------------------------------------------------
    def filesystem(self) -> Any:
        """The fsspec filesystem (one per scheme and options in this process).

        Raises:
            CheckpointStorageError: the store's package (an extra of det_lightning) is missing.
        """
        options = self.effective_options()
        cache_key = (self.scheme, options)
        if cache_key not in _FILESYSTEMS:
            protocol, package, extra, _ = SCHEMES[self.scheme]
            try:
                import fsspec

                # No listing cache: other processes (another machine) change the root.
                fs = fsspec.filesystem(protocol, use_listings_cache=False, **dict(options))
            except ImportError as e:
                raise errors.CheckpointStorageError(
                    f"Checkpoints at {self} need {package} (and fsspec), which are not installed "
                    f"({e}). Install them with: pip install 'det_lightning[{extra}]'. Nothing "
                    "was written."
                ) from e
            _FILESYSTEMS[cache_key] = fs
        return _FILESYSTEMS[cache_key]

    def effective_options(self) -> Tuple[Tuple[str, str], ...]:
        """``options``, plus the S3 endpoint boto's environment names (``AWS_ENDPOINT_URL_S3``,
        ``AWS_ENDPOINT_URL``) when the configuration gives none, read now."""
        options = dict(self.options)
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if self.scheme == "s3" and "endpoint_url" not in options and endpoint:
            options["endpoint_url"] = endpoint
        return tuple(sorted(options.items()))

    def environment(self) -> Dict[str, str]:
        """The environment variables that give a child process this root's endpoint and keys
        (a command trial, which has no experiment config of its own)."""
        names = {
            "endpoint_url": "AWS_ENDPOINT_URL_S3",
            "key": "AWS_ACCESS_KEY_ID",
            "secret": "AWS_SECRET_ACCESS_KEY",
            "connection_string": "AZURE_STORAGE_CONNECTION_STRING",
        }
        return {names[k]: v for k, v in self.options if k in names}

    def staging(self) -> pathlib.Path:
        """The local directory holding copies of this root's checkpoints (written here first,
        downloaded here to be read)."""
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

    def damaged(self) -> List[Tuple["RemoteRoot", List[str]]]:
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
                found.append((ckpt.Listed(child, metadata, _mtime(files[MARKER])), missing))
        return found

    def is_complete(self) -> bool:
        """Whether this URL is a checkpoint with its marker."""
        return bool(self.filesystem().exists(f"{self.key}/{MARKER}"))

    def download(self) -> pathlib.Path:
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
        download = pathlib.Path(
            tempfile.mkdtemp(prefix=f".{self.name}.", suffix=DOWNLOADING, dir=cache)
        )
        try:
            for key in keys:
                target = download / key[len(self.key) + 1 :]
                target.parent.mkdir(parents=True, exist_ok=True)
                fs.get_file(key, str(target))
            os.replace(download, local)
        except OSError:
            if not ckpt.is_complete(local):
                raise
        finally:
            shutil.rmtree(download, ignore_errors=True)
        return local

    # ----- writing and deleting -----------------------------------------------------------
    def upload(self, uuid: str, local: pathlib.Path) -> "RemoteRoot":
        """Uploads the finished checkpoint directory ``local`` as ``<uuid>/``, marker last, if
        the publish checks allow it then.

        Raises:
            CheckpointStorageError: an upload failed (the unmarked objects are swept later).
            the publish check's exception: it forbade the marker; what the upload wrote and
                the local copy are removed.
        """
        fs = self.filesystem()
        target = self / uuid
        try:
            for file in sorted(p for p in local.rglob("*") if p.is_file()):
                fs.put_file(str(file), f"{target.key}/{file.relative_to(local).as_posix()}")
        except Exception as e:
            raise self._upload_failed(local, target, e) from e
        try:
            raise_unless_may_publish()
        except BaseException as e:
            logger.warning(f"checkpoint {target} not published ({type(e).__name__}: {e})")
            self._withdraw(uuid)
            raise
        try:
            fs.pipe_file(f"{target.key}/{MARKER}", (local / ckpt.METADATA_FILE).read_bytes())
        except Exception as e:
            raise self._upload_failed(local, target, e) from e
        return target

    def _upload_failed(
        self, local: pathlib.Path, target: "RemoteRoot", error: Exception
    ) -> errors.CheckpointStorageError:
        return errors.CheckpointStorageError(
            f"Uploading checkpoint {local} to {target} failed: {type(error).__name__}: {error}. "
            f"Training stopped; earlier checkpoints under {self} are kept. "
            f"{self.credentials_note()}"
        )

    def _withdraw(self, uuid: str) -> None:
        """Removes an unpublished checkpoint's objects (no marker: no reader ever saw it; a
        failure leaves them for ``sweep``) and its local copy."""
        self._remove_prefix(uuid)
        if (self.staging() / uuid).exists():
            delete_atomically(self.staging(), uuid)

    def delete(self, uuid: str) -> bool:
        """Deletes checkpoint ``uuid``: its marker first (it vanishes for every reader at
        once), then its objects and the local copy. Failures are logged, never raised."""
        target = self / uuid
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
        """Marks checkpoint ``uuid`` as given up by retention (the object ``.<uuid>.unkept``
        beside it, which no listing of checkpoints sees); a failure is logged."""
        try:
            self.filesystem().pipe_file(f"{self.key}/.{uuid}{ckpt.UNKEPT_SUFFIX}", b"")
        except Exception as e:
            logger.warning(f"Could not mark checkpoint {self / uuid} for deletion: {e}")

    def unmark_unkept(self, uuid: str) -> None:
        """Removes the mark of checkpoint ``uuid`` (a failure is logged; the next run removes
        a mark whose checkpoint is gone)."""
        mark = f"{self.key}/.{uuid}{ckpt.UNKEPT_SUFFIX}"
        self._remove_object(mark, f"Could not remove the deletion mark of {self / uuid}")

    def marked_unkept(self) -> List[str]:
        """The names retention marked for deletion directly under this root, sorted."""
        base, suffix = self.key + "/", ckpt.UNKEPT_SUFFIX
        names = [path[len(base) :] for path in self.filesystem().find(self.key)]
        return sorted(
            name[1 : -len(suffix)]
            for name in names
            if "/" not in name and name.startswith(".") and name.endswith(suffix)
        )

    def _remove_prefix(self, name: str) -> bool:
        try:
            self.filesystem().rm(f"{self.key}/{name}", recursive=True)
        except FileNotFoundError:
            pass
        except Exception as e:
            logger.warning(
                f"Could not remove {self / name} ({e}); it has no marker, so it is no "
                "checkpoint, and the next run under this root removes it again."
            )
            return False
        return True

    def sweep(self) -> List[str]:
        """Removes ``<uuid>/`` prefixes without a marker (a killed upload or deletion) and the
        local copies' leftovers; returns what it removed. Only UUID-named prefixes directly
        under this root are touched (never ``trial-<n>/`` or anything else)."""
        removed = []
        for child, files in self._children().items():
            if MARKER not in files and _UUID.match(child) and self._remove_prefix(child):
                removed.append(str(self / child))
        remove_partials(self.staging())
        remove_deletions(self.staging())
        return removed

    # ----- checks -------------------------------------------------------------------------
    def problem(self) -> Optional[str]:
        """Why checkpoints cannot be written here (a probe object is written and deleted), or
        None. Nothing is created locally."""
        try:
            fs = self.filesystem()
        except errors.CheckpointStorageError as e:
            return str(e)
        probe = f"{self.key}/.det_lightning_probe_{uuid_lib.uuid4().hex}"
        try:
            fs.pipe_file(probe, b"probe")
            fs.rm_file(probe)
        except FileNotFoundError as e:
            return (
                f"Cannot write checkpoints to {self}: the bucket {self.bucket!r} does not exist "
                f"({e}). Nothing was trained. Create the bucket, or fix checkpoint_storage's "
                f"bucket / the checkpoint URL. {self.credentials_note()}"
            )
        except Exception as e:
            return (
                f"Cannot write checkpoints to {self}: {type(e).__name__}: {e}. Nothing was "
                f"trained. {self.credentials_note()}"
            )
        return None

    def credentials_note(self) -> str:
        """Which endpoint and credentials were used, for error messages (no secrets)."""
        options = dict(self.effective_options())
        if self.scheme != "s3":
            return (
                f"Credentials: {'checkpoint_storage' if options else 'the default chain'} "
                f"of {SCHEMES[self.scheme][1]}."
            )
        endpoint = options.get("endpoint_url") or "AWS's default endpoint"
        if "key" in options:
            tried = "checkpoint_storage's access_key/secret_key"
        elif os.environ.get("AWS_ACCESS_KEY_ID"):
            tried = "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY from the environment"
        else:
            tried = (
                "boto's default chain (AWS_PROFILE, ~/.aws/credentials, instance role); "
                "AWS_ACCESS_KEY_ID is not set"
            )
        return f"Endpoint: {endpoint}; credentials tried: {tried}."


def _mtime(info: Dict[str, Any]) -> float:
    """An object's modification time from fsspec's info (its key varies by store)."""
    for key in ("LastModified", "last_modified", "updated", "mtime"):
        value = info.get(key)
        if isinstance(value, datetime.datetime):
            return value.timestamp()
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return 0.0


def cache_dir() -> pathlib.Path:
    """``$DET_LIGHTNING_CACHE_DIR``, else ``$XDG_CACHE_HOME/det_lightning`` or
    ``~/.cache/det_lightning``."""
    configured = os.environ.get(CACHE_DIR_ENV)
    if configured:
        return pathlib.Path(configured).expanduser().absolute()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return pathlib.Path(base).expanduser().absolute() / "det_lightning"


# ----- either kind of root ------------------------------------------------------------------
CheckpointRoot = Union[pathlib.Path, RemoteRoot]


def is_url(location: Any) -> bool:
    """Whether ``location`` is a URL (``s3://...``) rather than a local path.

    >>> is_url("s3://b/p"), is_url("/tmp/c"), is_url("gs://b")
    (True, False, True)
    """
    return isinstance(location, RemoteRoot) or bool(_URL.match(str(location)))


def checkpoint_location(
    location: Union[str, "os.PathLike[str]", RemoteRoot],
    exp_conf: Optional[Dict[str, Any]] = None,
) -> CheckpointRoot:
    """A local path (made absolute) or a ``RemoteRoot``; a URL gets its endpoint and keys from
    ``exp_conf["checkpoint_storage"]`` when that is of the URL's type.

    Raises:
        CheckpointStorageError: a URL of a scheme no object store here supports.

    >>> checkpoint_location("s3://b/p/", {"checkpoint_storage": {"type": "s3",
    ...     "bucket": "b", "endpoint_url": "http://127.0.0.1:9000"}})
    RemoteRoot(url='s3://b/p', options=(('endpoint_url', 'http://127.0.0.1:9000'),))
    """
    if isinstance(location, RemoteRoot):
        return location
    match = _URL.match(str(location))
    if match is None:
        return pathlib.Path(os.path.abspath(os.path.expanduser(str(location))))
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
    storage = (exp_conf or {}).get("checkpoint_storage") or {}
    same_type = storage.get("type") == SCHEMES[scheme][3]
    return RemoteRoot(f"{scheme}://{rest}", _options(scheme, storage if same_type else {}))


def _options(scheme: str, storage: Dict[str, Any]) -> Tuple[Tuple[str, str], ...]:
    """The fsspec keyword arguments for ``checkpoint_storage`` (Determined's keys)."""
    options: Dict[str, str] = {}
    if scheme == "s3":
        if storage.get("endpoint_url"):
            options["endpoint_url"] = storage["endpoint_url"]
        if storage.get("access_key") and storage.get("secret_key"):
            options["key"], options["secret"] = storage["access_key"], storage["secret_key"]
    elif SCHEMES[scheme][3] == "azure":
        for key in ("connection_string", "credential"):
            if storage.get(key):
                options[key] = storage[key]
        if storage.get("account_url"):
            options["account_name"] = storage["account_url"].split("//")[-1].split(".")[0]
    return tuple(sorted(options.items()))


def storage_url(storage: Dict[str, Any]) -> Optional[str]:
    """The URL of a ``checkpoint_storage`` section of type s3, gcs or azure (else None).

    >>> storage_url({"type": "s3", "bucket": "ckpts", "prefix": "runs/a"})
    's3://ckpts/runs/a'
    """
    scheme = {"s3": "s3", "gcs": "gs", "azure": "az"}.get(storage.get("type", ""))
    if scheme is None:
        return None
    bucket = storage.get("container") if scheme == "az" else storage.get("bucket")
    prefix = os.path.normpath(storage.get("prefix") or "").lstrip("/")
    if prefix.split("/")[0] == "..":
        raise errors.InvalidConfigException(
            f"checkpoint_storage.prefix {storage.get('prefix')!r} must not leave the bucket."
        )
    return f"{scheme}://{bucket}" + ("" if prefix in ("", ".") else f"/{prefix}")


def local_dir(root: CheckpointRoot) -> pathlib.Path:
    """Where checkpoints of ``root`` are written on this machine: the root itself, or its
    local copies' directory for a URL."""
    return root.staging() if isinstance(root, RemoteRoot) else root


def list_damaged(root: CheckpointRoot) -> List[Tuple[CheckpointRoot, List[str]]]:
    """The checkpoints under ``root``, either kind, that lack files, with what each lacks."""
    if isinstance(root, RemoteRoot):
        return list(root.damaged())
    return list(ckpt.damaged_local(root))


def list_complete(root: CheckpointRoot) -> List[ckpt.Listed]:
    """The complete checkpoints under ``root``, either kind."""
    return root.complete() if isinstance(root, RemoteRoot) else ckpt.list_local(root)


def delete_checkpoint(root: CheckpointRoot, uuid: str) -> bool:
    """Deletes checkpoint ``uuid`` under ``root`` (see ``delete_atomically`` and
    ``RemoteRoot.delete``) if the publish checks allow it; failures are logged. It is marked
    for deletion first and unmarked once gone, so a deletion that fails is finished by the next
    run under ``root`` (``sweep``). Returns whether it is gone from its name.

    Raises:
        the publish check's exception: it forbade the deletion (nothing was deleted).
    """
    raise_unless_may_publish()
    if isinstance(root, RemoteRoot):
        root.mark_unkept(uuid)
        gone = root.delete(uuid)
    else:
        mark_unkept(root, uuid)
        gone = delete_atomically(root, uuid)
    if gone:
        _unmark(root, uuid)
    return gone


def _unmark(root: CheckpointRoot, uuid: str) -> None:
    if isinstance(root, RemoteRoot):
        root.unmark_unkept(uuid)
    else:
        unmark_unkept(root, uuid)


def sweep(root: CheckpointRoot, spare: Optional[str] = None) -> List[str]:
    """What earlier runs left under ``root``: unfinished deletions (locally), unmarked
    checkpoint prefixes (a URL), and checkpoints retention marked for deletion whose deletion
    failed, but for ``spare`` (the checkpoint this run resumes from: it stays marked, and this
    run's retention weighs it again). Returns what it removed. Always safe when no other
    process writes this root: a marked checkpoint is one retention gave up for good."""
    if isinstance(root, RemoteRoot):
        removed = root.sweep()
        marked = root.marked_unkept()
    else:
        removed = [str(p) for p in remove_deletions(root)]
        marked = marked_unkept(root)
    for uuid in [name for name in marked if _UUID.match(name) and name != spare]:
        target = root / uuid
        exists = target.is_complete() if isinstance(target, RemoteRoot) else target.exists()
        if not exists:
            _unmark(root, uuid)  # deleted, its mark left behind
        elif delete_checkpoint(root, uuid):
            removed.append(str(target))
    return removed


def local_copy(location: CheckpointRoot) -> pathlib.Path:
    """A checkpoint's local directory: the path itself, or its download."""
    return location.download() if isinstance(location, RemoteRoot) else location
