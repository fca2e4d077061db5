"""``experiment.json``: what the experiment in ``<checkpoint dir>/<experiment id>/`` is.

Written once, atomically, by the first run of the experiment (a rerun, or another worker, finds
it there and leaves it); the bookkeeping commands read it::

    {"id": "mnist-3f2a9c01de", "name": "mnist", "searcher": "adaptive_asha",
     "model_dir": "/home/me/mnist", "tensorboard_dir": "/home/me/tensorboard/mnist-3f2a9c01de",
     "created": "2026-11-27T06:40:00+00:00", "config": {...}}

Beside it, ``canceled.json`` while the experiment is canceled (the client's ``cancel()`` or
``kill()``: its state is then ``CANCELED``, terminal, for every reader); a rerun of its command
removes it and continues the experiment::

    {"canceled": "2026-11-29T10:40:00+00:00", "by": "kill"}
"""

import datetime
import json
from typing import Any, Dict, Optional

from det_lightning._runner.plan import Plan, UsageError
from det_lightning.pytorch._store import CheckpointStore

RECORD_NAME = "experiment.json"
CANCEL_NAME = "canceled.json"


def experiment_record(plan: Plan) -> Dict[str, Any]:
    """The content of the plan's ``experiment.json``."""
    return {
        "id": plan.experiment_id,
        "name": plan.config.name,
        "searcher": plan.config.searcher_config.name,
        "model_dir": str(plan.model_dir),
        "tensorboard_dir": str(plan.tensorboard_root),  # for the client's delete()
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        # As given: an unnamed experiment's random name left out, so the id reads back.
        "config": {k: v for k, v in plan.config.as_given.items() if v is not None or k != "name"},
    }


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


def cancel_mark(folder: CheckpointStore) -> Optional[Dict[str, Any]]:
    """The experiment's ``canceled.json`` (``folder``: the experiment's), or None when it is
    not canceled (or the mark cannot be read: the state then reads as it would without it)."""
    try:
        data = folder.read_once(CANCEL_NAME)
        mark = json.loads(data) if data is not None else None
    except Exception:  # any store's failure to read (a bucket's own errors)
        return None
    return mark if isinstance(mark, dict) else None


def canceled_by(mark: Dict[str, Any]) -> str:
    """``kill`` or ``cancel``: the client's method that wrote ``mark`` (``cancel`` for a mark
    that does not say).

    >>> canceled_by({"by": "kill"}), canceled_by({})
    ('kill', 'cancel')
    """
    return "kill" if mark.get("by") == "kill" else "cancel"


def mark_canceled(folder: CheckpointStore, by: str) -> None:
    """Records that the experiment in ``folder`` was canceled (``by``: the client's method).

    Raises:
        OSError: the folder cannot be written (``CheckpointStorageError`` for a bucket).
    """
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    folder.set_file(CANCEL_NAME, json.dumps({"canceled": now, "by": by}).encode())


def clear_cancel(folder: CheckpointStore) -> Optional[Dict[str, Any]]:
    """Removes the experiment's cancel mark (a rerun continues the experiment); returns the
    mark it removed, or None."""
    mark = cancel_mark(folder)
    if mark is not None:
        folder.set_file(CANCEL_NAME, None)
    return mark


__all__ = [
    "CANCEL_NAME",
    "RECORD_NAME",
    "cancel_mark",
    "canceled_by",
    "clear_cancel",
    "experiment_record",
    "mark_canceled",
    "write_experiment_record",
]
