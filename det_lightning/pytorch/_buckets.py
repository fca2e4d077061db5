"""Reaching a bucket (``s3://bucket/prefix``), whatever it holds: ``_remote.ObjectStore`` lays
checkpoints out on what this module opens.

The schemes supported and the package each needs; the URL of a ``checkpoint_storage`` section;
the fsspec options from that section and from boto's environment names, and the environment
that passes them on; the fsspec filesystem (fsspec and the scheme's package, ``s3fs``,
``gcsfs``, ``adlfs``: the extras ``s3``, ``gcs``, ``azure``, are imported only when a URL is
used); whether an S3 endpoint refuses connections (said at once, not after the retries); the
note on which credentials were tried that every storage error ends with; an
object's modification time; and the cache directory the local copies live in.
"""

import datetime
import os
import pathlib
import re
import socket
import urllib.parse
from typing import Any, Dict, Optional, Tuple, Union

from det_lightning import errors
from det_lightning.pytorch._config_sections import CheckpointStorageConfig

CACHE_DIR_ENV = "DET_LIGHTNING_CACHE_DIR"
# URL scheme: (fsspec protocol, package, det_lightning extra, checkpoint_storage type)
SCHEMES = {
    "s3": ("s3", "s3fs", "s3", "s3"),
    "gs": ("gcs", "gcsfs", "gcs", "gcs"),
    "gcs": ("gcs", "gcsfs", "gcs", "gcs"),
    "az": ("az", "adlfs", "azure", "azure"),
    "abfs": ("abfs", "adlfs", "azure", "azure"),
    "abfss": ("abfs", "adlfs", "azure", "azure"),
}
URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$")  # (scheme, the rest)

Options = Tuple[Tuple[str, str], ...]
_FILESYSTEMS: Dict[Tuple[str, Options], Any] = {}


def is_url(location: Union[str, "os.PathLike[str]"]) -> bool:
    """Whether ``location`` is a URL (``s3://...``) rather than a local path.

    >>> is_url("s3://b/p"), is_url("/tmp/c"), is_url("gs://b")
    (True, False, True)
    """
    return bool(URL.match(str(location)))


def storage_url(storage: CheckpointStorageConfig) -> Optional[str]:
    """The URL of a ``checkpoint_storage`` section of type s3, gcs or azure (else None).

    >>> storage_url(CheckpointStorageConfig(type="s3", bucket="ckpts", prefix="runs/a"))
    's3://ckpts/runs/a'
    """
    scheme = {"s3": "s3", "gcs": "gs", "azure": "az"}.get(storage.type or "")
    if scheme is None:
        return None
    bucket = storage.container if scheme == "az" else storage.bucket
    prefix = os.path.normpath(storage.prefix or "").lstrip("/")
    if prefix.split("/")[0] == "..":
        raise errors.InvalidConfigException(
            f"checkpoint_storage.prefix {storage.prefix!r} must not leave the bucket."
        )
    return f"{scheme}://{bucket}" + ("" if prefix in ("", ".") else f"/{prefix}")


def storage_options(scheme: str, storage: CheckpointStorageConfig) -> Options:
    """The fsspec keyword arguments for ``checkpoint_storage`` (Determined's keys)."""
    options: Dict[str, str] = {}
    if scheme == "s3":
        if storage.endpoint_url:
            options["endpoint_url"] = storage.endpoint_url
        if storage.access_key and storage.secret_key:
            options["key"], options["secret"] = storage.access_key, storage.secret_key
    elif SCHEMES[scheme][3] == "azure":
        if storage.connection_string:
            options["connection_string"] = storage.connection_string
        if storage.credential:
            options["credential"] = storage.credential
        if storage.account_url:
            options["account_name"] = storage.account_url.split("//")[-1].split(".")[0]
    return tuple(sorted(options.items()))


def effective_options(scheme: str, options: Options) -> Options:
    """``options``, plus the S3 endpoint boto's environment names (``AWS_ENDPOINT_URL_S3``,
    ``AWS_ENDPOINT_URL``) when the configuration gives none, read now."""
    effective = dict(options)
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if scheme == "s3" and "endpoint_url" not in effective and endpoint:
        effective["endpoint_url"] = endpoint
    return tuple(sorted(effective.items()))


def filesystem(scheme: str, options: Options, url: str) -> Any:
    """The fsspec filesystem of ``scheme`` with ``options`` (one per scheme and options in
    this process); ``url``: what it is opened for, named in the error.

    Raises:
        CheckpointStorageError: the scheme's package (an extra of det_lightning) is missing.
    """
    cache_key = (scheme, effective_options(scheme, options))
    if cache_key not in _FILESYSTEMS:
        protocol, package, extra, _ = SCHEMES[scheme]
        try:
            import fsspec

            # No listing cache: other processes (another machine) change the root.
            fs = fsspec.filesystem(protocol, use_listings_cache=False, **dict(cache_key[1]))
        except ImportError as e:
            raise errors.CheckpointStorageError(
                f"Checkpoints at {url} need {package} (and fsspec), which are not installed "
                f"({e}). Install them with: pip install 'det_lightning[{extra}]'. Nothing "
                "was written."
            ) from e
        _FILESYSTEMS[cache_key] = fs
    return _FILESYSTEMS[cache_key]


# The probe before training (``_remote.ObjectStore.problem``: one small object written and
# removed) gives up after PROBE_TIMEOUT_S in all. Left to botocore's and s3fs's defaults, an S3
# endpoint that accepts connections but never answers held the start for over 13 minutes
# without a word: botocore sends a PUT's body only after the server's "100 Continue", a wait
# that no read timeout bounds (aiohttp), within s3fs's 5 retries of botocore's 5 attempts.
# The probe runs on the process's one filesystem (``filesystem``): a second botocore client
# per trial would cost each trial's start its construction.
PROBE_TIMEOUT_S = 30.0


def bounded(fs: Any, method: str, *args: Any) -> Any:
    """``fs.<method>(*args)``, given up after ``PROBE_TIMEOUT_S`` (fsspec's ``FSTimeoutError``,
    a ``TimeoutError``) for an asynchronous filesystem (s3fs, gcsfs, adlfs)."""
    coroutine = getattr(fs, f"_{method}", None)
    if getattr(fs, "async_impl", False) and coroutine is not None:
        from fsspec.asyn import sync

        return sync(fs.loop, coroutine, *args, timeout=PROBE_TIMEOUT_S)
    return getattr(fs, method)(*args)


def environment(options: Options) -> Dict[str, str]:
    """The environment variables that give another process (a trial's) the same endpoint and
    keys as ``options``.

    >>> environment((("endpoint_url", "http://127.0.0.1:9000"), ("region", "x")))
    {'AWS_ENDPOINT_URL_S3': 'http://127.0.0.1:9000'}
    """
    names = {
        "endpoint_url": "AWS_ENDPOINT_URL_S3",
        "key": "AWS_ACCESS_KEY_ID",
        "secret": "AWS_SECRET_ACCESS_KEY",
        "connection_string": "AZURE_STORAGE_CONNECTION_STRING",
    }
    return {names[k]: v for k, v in options if k in names}


def credentials_note(scheme: str, options: Options) -> str:
    """Which endpoint and credentials were used, for error messages (no secrets)."""
    effective = dict(effective_options(scheme, options))
    if scheme != "s3":
        return (
            f"Credentials: {'checkpoint_storage' if effective else 'the default chain'} "
            f"of {SCHEMES[scheme][1]}."
        )
    endpoint = effective.get("endpoint_url") or "AWS's default endpoint"
    if "key" in effective:
        tried = "checkpoint_storage's access_key/secret_key"
    elif os.environ.get("AWS_ACCESS_KEY_ID"):
        tried = "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY from the environment"
    else:
        tried = (
            "boto's default chain (AWS_PROFILE, ~/.aws/credentials, instance role); "
            "AWS_ACCESS_KEY_ID is not set"
        )
    return f"Endpoint: {endpoint}; credentials tried: {tried}."


def refused(scheme: str, options: Options, timeout: float = 5.0) -> Optional[str]:
    """Why the configured S3 endpoint cannot be reached at all, or None: nothing accepts a
    connection at its host and port, or its host name does not resolve. Both are definite, so
    they are said at once; botocore and s3fs would retry them for about 8 s first. A slow or
    timed-out connection is left to those retries (None), as is AWS's own endpoint.

    >>> refused("s3", (("endpoint_url", "http://127.0.0.1:9"),))  # discard: nothing listens
    'nothing accepts connections at http://127.0.0.1:9 (ConnectionRefusedError)'
    >>> refused("gs", ()) is None
    True
    """
    endpoint = dict(effective_options(scheme, options)).get("endpoint_url")
    if scheme != "s3" or not endpoint:
        return None
    url = urllib.parse.urlsplit(endpoint)
    if url.hostname is None:
        return None
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
        with socket.create_connection((url.hostname, port), timeout=timeout):
            return None
    except ConnectionRefusedError as e:
        return f"nothing accepts connections at {endpoint} ({type(e).__name__})"
    except socket.gaierror as e:
        if e.errno == socket.EAI_NONAME:  # not EAI_AGAIN: a resolver's hiccup passes
            return f"the host of {endpoint} does not resolve ({e})"
        return None
    except (OSError, ValueError):  # a timeout, a network hiccup, a bad port: the retries say
        return None


def cache_dir() -> pathlib.Path:
    """``$DET_LIGHTNING_CACHE_DIR``, else ``$XDG_CACHE_HOME/det_lightning`` or
    ``~/.cache/det_lightning``."""
    configured = os.environ.get(CACHE_DIR_ENV)
    if configured:
        return pathlib.Path(configured).expanduser().absolute()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return pathlib.Path(base).expanduser().absolute() / "det_lightning"


def modified(info: Dict[str, Any]) -> float:
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
