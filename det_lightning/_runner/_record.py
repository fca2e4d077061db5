"""``experiment.json``: what the experiment in ``<checkpoint dir>/<experiment id>/`` is.

Written once, atomically, by the first run of the experiment (a rerun, or another worker, finds
it there and leaves it); the bookkeeping commands read it::

    {"id": "mnist-3f2a9c01de", "name": "mnist", "searcher": "adaptive_asha",
     "model_dir": "/home/me/mnist", "tensorboard_dir": "/home/me/tensorboard/mnist-3f2a9c01de",
     "storage": "postgresql://me:***@db:5432/search", "created": "2026-11-27T06:40:00+00:00",
     "config": {...}}

Beside it, the marks a client's ``cancel()``, ``kill()`` or ``pause()`` leaves, from any
process or machine: ``canceled.json`` while the experiment is canceled (its state is then
``CANCELED``, terminal, for every reader), ``paused.json`` while it is paused. The process that
runs it stops its trials with a checkpoint when it sees either (``search._interrupt``); a rerun
of its command (or ``activate()``) removes both and continues the experiment::

    {"canceled": "2026-11-29T10:40:00+00:00", "by": "kill"}
    {"paused": "2026-11-30T09:12:00+00:00", "by": "pause"}

And ``launch.json``, the launch flags, model directory and config of the command that last
(re)started it, which ``activate()`` continues it with::

    {"flags": ["--workers", "2", "--precision", "bf16-mixed"], "model_dir": "/home/me/mnist",
     "config": {...}, "started": "2026-11-30T09:20:00+00:00"}
"""

import datetime
import json
import pathlib
import urllib.parse
from typing import Any, Dict, List, Optional

from det_lightning._runner.plan import Plan, UsageError
from det_lightning.pytorch._store import CheckpointStore

RECORD_NAME = "experiment.json"
CANCEL_NAME = "canceled.json"
PAUSE_NAME = "paused.json"
LAUNCH_NAME = "launch.json"
_HIDDEN = ":***@"  # a database URL's password, as a record keeps it (shown_storage)


def experiment_record(plan: Plan) -> Dict[str, Any]:
    """The content of the plan's ``experiment.json``."""
    return {
        "id": plan.experiment_id,
        "name": plan.config.name,
        "searcher": plan.config.searcher_config.name,
        "model_dir": str(plan.model_dir),
        "tensorboard_dir": str(plan.tensorboard_root),  # for the client's delete()
        # Where its search is (None: the journal beside the checkpoints), a database's password
        # left out: a rerun given another storage is refused (search._storage).
        "storage": shown_storage(plan.storage),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "config": recorded_config(plan),
    }


def shown_storage(url: Optional[str]) -> Optional[str]:
    """A search's storage as an experiment's record keeps it and messages name it: a database
    URL without its password, a journal file's path made absolute; None for the journal beside
    the checkpoints (no ``--storage``).

    >>> shown_storage("postgresql://me:s3cret@db.example:5432/search")
    'postgresql://me:***@db.example:5432/search'
    >>> shown_storage("sqlite:////tmp/search.db"), shown_storage(None)
    ('sqlite:////tmp/search.db', None)
    """
    if not url:
        return None
    if "://" not in url:
        return str(pathlib.Path(url).resolve())
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    user = parts.netloc.rpartition("@")[0].partition(":")[0]
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}{_HIDDEN}{host}"))


def search_storage(record: Dict[str, Any], given: Optional[str]) -> Optional[str]:
    """The storage that holds the search of the experiment ``record`` describes: ``given``
    (``--storage``, ``Determined(storage=...)``) when the record names that storage, or names
    none (a record from before records did); else the record's own (None: the journal beside
    its checkpoints). Reading, continuing or deleting it in any other would find no search.

    >>> began = {"storage": "postgresql://me:***@db/search"}
    >>> search_storage(began, "postgresql://me:s3cret@db/search")
    'postgresql://me:s3cret@db/search'
    >>> search_storage({"storage": "sqlite:////srv/search.db"}, None)
    'sqlite:////srv/search.db'
    >>> search_storage({"storage": None}, "sqlite:////srv/other.db") is None  # its journal
    True

    Raises:
        ValueError: the record names a database whose password it left out, and ``given`` is
            not that database's URL (naming what to pass).
    """
    if "storage" not in record:
        return given
    began = record["storage"]
    if given is not None and shown_storage(given) == began:
        return given
    if began is not None and _HIDDEN in began:
        raise ValueError(
            f"experiment {record.get('id')}'s search is in {began}, whose password its record "
            "leaves out: give that URL, password included (--storage URL; in Python "
            "Determined(storage=URL))."
        )
    return None if began is None else str(began)


def write_experiment_record(plan: Plan) -> None:
    """Writes ``experiment.json`` into the experiment's folder unless one is there: on disk
    through a temporary file linked into place (never overwriting), in a bucket as one object
    (``CheckpointStore.write_once``).

    Raises:
        UsageError: the folder cannot be made, naming it and the flag that moves it.
    """
    text = json.dumps(experiment_record(plan), indent=2, default=str)
    root = plan.checkpoint_root
    try:
        root.write_once(RECORD_NAME, text.encode())
    except OSError as e:
        raise UsageError(
            f"the experiment's record {root / RECORD_NAME} cannot be written in {root} "
            f"({e.strerror or e}); give a writable folder with --checkpoint-dir."
        ) from None


def read_record(folder: CheckpointStore) -> Optional[Dict[str, Any]]:
    """The ``experiment.json`` in the experiment's ``folder``; None when there is none, or it
    cannot be read or is not a record (a store's failure, a file damaged by hand)."""
    try:
        data = folder.read_once(RECORD_NAME)
        record = json.loads(data) if data is not None else None
    except (OSError, ValueError):  # a bucket's errors are OSErrors (CheckpointStorageError)
        return None
    return record if isinstance(record, dict) else None


def recorded_config(plan: Plan) -> Dict[str, Any]:
    """The plan's config as records keep it: as given, an unnamed experiment's random name
    left out, so that its id reads back."""
    return {k: v for k, v in plan.config.as_given.items() if v is not None or k != "name"}


def write_launch(plan: Plan, flags: List[str]) -> None:
    """Records the command that (re)started the plan's experiment: its launch flags
    (``--workers``, ``--devices``, ``--precision``, ...; not ``--storage``, which its record
    keeps), its model directory and its config (``--config`` overrides applied).
    ``activate()`` continues the experiment with them, as Determined's continued one with its
    resources. Replaced by each start: the latest command's.

    Raises:
        OSError: the folder cannot be written (``CheckpointStorageError`` for a bucket).
    """
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    launch = {
        "flags": flags,
        "model_dir": str(plan.model_dir),
        "config": recorded_config(plan),
        "started": now,
    }
    plan.checkpoint_root.set_file(LAUNCH_NAME, json.dumps(launch, default=str).encode())


def last_launch(folder: CheckpointStore) -> Dict[str, Any]:
    """What ``write_launch`` recorded in ``folder``; empty when nothing is (an experiment
    begun before launches were recorded, or a file that cannot be read)."""
    try:
        data = folder.read_once(LAUNCH_NAME)
        launch = json.loads(data) if data is not None else {}
    except Exception:  # any store's failure to read, or not JSON
        return {}
    return launch if isinstance(launch, dict) else {}


def launch_flags(folder: CheckpointStore) -> List[str]:
    """The launch flags of the command that last ran the experiment in ``folder`` (none when
    they were not recorded)."""
    flags = last_launch(folder).get("flags")
    return [str(f) for f in flags] if isinstance(flags, list) else []


def last_config(folder: CheckpointStore) -> Optional[Dict[str, Any]]:
    """The config the experiment in ``folder`` last ran with: its last launch's, else its
    record's; None for an experiment not begun (or whose files cannot be read)."""
    config = last_launch(folder).get("config")
    if not isinstance(config, dict):
        config = (read_record(folder) or {}).get("config")
    return config if isinstance(config, dict) else None


def config_changes(before: Any, after: Any, where: str = "") -> List[str]:
    """The dotted keys whose values differ between two configs (added and removed ones too).

    >>> config_changes({"a": 1, "b": {"c": 2, "d": 3}}, {"a": 1, "b": {"c": 5}, "e": 0})
    ['b.c', 'b.d', 'e']
    """
    if not isinstance(before, dict) or not isinstance(after, dict):
        return [] if before == after else [where or "(the whole config)"]
    changed = []
    for key in sorted(set(before) | set(after), key=str):
        path = f"{where}.{key}" if where else str(key)
        if key not in before or key not in after:
            changed.append(path)
        else:
            changed += config_changes(before[key], after[key], path)
    return changed


def _read_mark(folder: CheckpointStore, name: str) -> Optional[Dict[str, Any]]:
    """The mark ``name`` in ``folder``; None when it is not there (or not a mark).

    Raises:
        Exception: any store's failure to read (a bucket's own errors).
    """
    data = folder.read_once(name)
    mark = json.loads(data) if data is not None else None
    return mark if isinstance(mark, dict) else None


def cancel_mark(folder: CheckpointStore) -> Optional[Dict[str, Any]]:
    """The experiment's ``canceled.json`` (``folder``: the experiment's), or None when it is
    not canceled (or the mark cannot be read: the state then reads as it would without it)."""
    try:
        return _read_mark(folder, CANCEL_NAME)
    except Exception:
        return None


def stop_mark(folder: CheckpointStore) -> Optional[Dict[str, Any]]:
    """The mark that stops the experiment in ``folder``: its ``canceled.json``, else its
    ``paused.json`` (a cancel outranks a pause), else None; None also when either cannot be
    read (a pause is not taken for a cancel that could not be read: looked for again)."""
    try:
        canceled = _read_mark(folder, CANCEL_NAME)
        paused = _read_mark(folder, PAUSE_NAME) if canceled is None else None
    except Exception:  # any store's failure to read (a bucket's own errors)
        return None
    if canceled is not None:
        return canceled
    return {**paused, "by": "pause"} if paused is not None else None


def stopped_by(mark: Dict[str, Any]) -> str:
    """``kill``, ``cancel`` or ``pause``: the client's method that wrote ``mark``
    (``cancel`` for a cancel mark that does not say).

    >>> stopped_by({"by": "kill"}), stopped_by({}), stopped_by({"by": "pause"})
    ('kill', 'cancel', 'pause')
    """
    by = mark.get("by")
    return by if by in ("kill", "pause") else "cancel"


def stopped_at(mark: Dict[str, Any]) -> str:
    """When ``mark`` was written (UTC, ISO 8601).

    >>> stopped_at({"paused": "2026-11-30T09:12:00+00:00", "by": "pause"})
    '2026-11-30T09:12:00+00:00'
    """
    return str(mark.get("paused" if stopped_by(mark) == "pause" else "canceled", "?"))


def mark_stop(folder: CheckpointStore, by: str) -> None:
    """Records that the experiment in ``folder`` was canceled or paused (``by``: the client's
    method, ``cancel``, ``kill`` or ``pause``).

    Raises:
        OSError: the folder cannot be written (``CheckpointStorageError`` for a bucket).
    """
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    name, key = (PAUSE_NAME, "paused") if by == "pause" else (CANCEL_NAME, "canceled")
    folder.set_file(name, json.dumps({key: now, "by": by}).encode())


def clear_stop(folder: CheckpointStore) -> Optional[Dict[str, Any]]:
    """Removes the experiment's cancel and pause marks (a rerun continues the experiment);
    returns the mark that stopped it (``stop_mark``), or None. Both are removed even when
    neither could be read (a bucket that failed to answer once): a mark left there would stop
    the run that continues the experiment as soon as its watcher read it.

    Raises:
        OSError: the folder cannot be written (``CheckpointStorageError`` for a bucket).
    """
    mark = stop_mark(folder)
    folder.set_file(CANCEL_NAME, None)  # one that is not there counts as removed
    folder.set_file(PAUSE_NAME, None)
    return mark


__all__ = [
    "CANCEL_NAME",
    "LAUNCH_NAME",
    "PAUSE_NAME",
    "RECORD_NAME",
    "cancel_mark",
    "clear_stop",
    "config_changes",
    "experiment_record",
    "last_config",
    "last_launch",
    "launch_flags",
    "mark_stop",
    "read_record",
    "recorded_config",
    "search_storage",
    "shown_storage",
    "stop_mark",
    "stopped_at",
    "stopped_by",
    "write_experiment_record",
    "write_launch",
]
