"""``experiment.json``: what the experiment in ``<checkpoint dir>/<experiment id>/`` is.

Written once, atomically, by the first run of the experiment (a rerun, or another worker, finds
it there and leaves it); the bookkeeping commands read it::

    {"id": "mnist-3f2a9c01de", "name": "mnist", "searcher": "adaptive_asha",
     "model_dir": "/home/me/mnist", "created": "2026-11-27T06:40:00+00:00", "config": {...}}
"""

import datetime
import json
from typing import Any, Dict

from det_lightning._runner.plan import Plan, UsageError

RECORD_NAME = "experiment.json"


def experiment_record(plan: Plan) -> Dict[str, Any]:
    """The content of the plan's ``experiment.json``."""
    return {
        "id": plan.experiment_id,
        "name": plan.config.name,
        "searcher": plan.config.searcher_config.name,
        "model_dir": str(plan.model_dir),
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


__all__ = ["RECORD_NAME", "experiment_record", "write_experiment_record"]
