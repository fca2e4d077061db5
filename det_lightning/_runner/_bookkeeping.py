"""What Determined's master answered, read from the files: ``det-lightning experiment list``,
``experiment describe ID`` and ``checkpoint list [ID]``, in the spirit of ``det experiment
list/describe`` and ``det checkpoint list``::

    <checkpoint dir>/<id>/experiment.json     id, name, searcher, model dir, created, config
    <checkpoint dir>/<id>/search.journal      the trials' states and metrics (the summary's)
    <checkpoint dir>/<id>/trial-<n>/<uuid>/   each checkpoint's metadata.json

The checkpoint directory is ``--checkpoint-dir``, else ``$DET_LIGHTNING_CHECKPOINT_DIR``,
else ``./checkpoints``: a directory, or a bucket's prefix (``s3://bucket/prefix``), read through
the ``CheckpointStore`` interface either way. An experiment is read from the search storage its
record names: the journal beside its checkpoints (for a bucket, beside this machine's local
copies of them), or the ``--storage URL`` it began with; a database URL's password is not
recorded: give it with ``--storage``.
"""

import argparse
import json
import os
import pathlib
import re
import sys
from typing import Any, Dict, List, NamedTuple, Optional

from det_lightning import errors
from det_lightning._env import CHECKPOINT_DIR_ENV
from det_lightning._runner._record import (
    RECORD_NAME,
    read_record,
    search_storage,
    stop_mark,
    stopped_by,
)
from det_lightning._runner.config._searcher import SearcherConfig
from det_lightning._runner.trial import FINISHED, INVALID_HP, TrialResult
from det_lightning.pytorch import _checkpoint as ckpt
from det_lightning.pytorch._retention import VALIDATION_KEY
from det_lightning.pytorch._store import CheckpointStore


def checkpoint_root(given: Optional[str]) -> CheckpointStore:
    """Where the experiments are: ``given``, else the environment's, else ``./checkpoints``.

    Raises:
        errors.CheckpointStorageError: a URL of a scheme no store supports.
    """
    from det_lightning.pytorch._remote import checkpoint_location

    return checkpoint_location(given or os.environ.get(CHECKPOINT_DIR_ENV) or "checkpoints")


def records(root: CheckpointStore) -> List[Dict[str, Any]]:
    """Every experiment's ``experiment.json`` under ``root``, oldest first."""
    found = []
    for name in root.folders():
        try:
            data = (root / name).read_once(RECORD_NAME)
            if data is not None:
                found.append(json.loads(data))
        except (OSError, ValueError):
            continue
    return sorted(found, key=lambda r: str(r.get("created")))


def _plan_of(root: CheckpointStore, record: Dict[str, Any]) -> Any:
    """The plan of the experiment ``record`` describes (its model dir, if it still exists)."""
    from det_lightning._runner.config import load_config
    from det_lightning._runner.plan import plan_experiment

    model_dir = pathlib.Path(record.get("model_dir") or ".")
    fallback = pathlib.Path(str(root)) if root.is_local else pathlib.Path(".")
    return plan_experiment(
        load_config(record["config"], announce=False),
        model_dir if model_dir.is_dir() else fallback,
        checkpoint_dir=str(root),
    )


def trials_of(
    root: CheckpointStore, record: Dict[str, Any], storage: Optional[str]
) -> List[TrialResult]:
    """The experiment's trials as its summary shows them, from its search storage
    (``search_storage``: ``storage`` if its record names that one, else the record's).

    Raises:
        ValueError: its record names a database whose password it leaves out, and ``storage``
            is not that database's URL.
    """
    from det_lightning._runner.search._worker import search_summary

    return search_summary(_plan_of(root, record), search_storage(record, storage))


def seed_of(plan: Any, storage: Optional[str]) -> str:
    """The experiment seed its trials' seeds and points come from, as ``describe`` shows it:
    the config's, else the one drawn when the search began."""
    from det_lightning._runner.search._worker import search_seed

    seed = search_seed(plan, storage)
    if seed is None:
        return "none recorded (a search begun before seeds were: each trial drew its own)"
    configured = plan.config.reproducibility_config.experiment_seed is not None
    return f"{seed}" if configured else f"{seed} (drawn)"


def state(trials: List[TrialResult], max_trials: Optional[int], by: Optional[str] = None) -> str:
    """The experiment's state, Determined's words: ACTIVE while a trial runs, COMPLETED once
    every trial ended, else PAUSED (rerun the command to continue). ``by``: the client's method
    whose mark is there (``_record.stopped_by``): after a ``cancel`` (``kill``) it is
    STOPPING_CANCELED (STOPPING_KILLED) while the process that runs it stops its trials, then
    CANCELED; after a ``pause``, PAUSED at once, as on Determined.

    >>> state([TrialResult(1, {}, "COMPLETED")], 1), state([TrialResult(1, {}, "RUNNING")], 2)
    ('COMPLETED', 'ACTIVE')
    >>> state([TrialResult(1, {}, "INTERRUPTED")], 1, by="cancel")
    'CANCELED'
    >>> [state([TrialResult(1, {}, "RUNNING")], 1, by) for by in ("cancel", "kill", "pause")]
    ['STOPPING_CANCELED', 'STOPPING_KILLED', 'PAUSED']
    """
    if any(t.status == "RUNNING" for t in trials):
        return stopped_state(by, live=True) if by is not None else "ACTIVE"
    ended = [t for t in trials if t.status in (*FINISHED, "ERROR", INVALID_HP)]
    done = len(ended) == len(trials) and (max_trials is None or len(trials) >= max_trials)
    if trials and done:
        return "COMPLETED"
    return stopped_state(by, live=False) if by is not None else "PAUSED"


def stopped_state(by: str, live: bool) -> str:
    """The state of an experiment a client's ``by`` (``cancel``, ``kill``, ``pause``) stopped
    before its end: while the process that runs it still stops its trials (``live``), then
    after.

    >>> stopped_state("kill", True), stopped_state("kill", False), stopped_state("pause", True)
    ('STOPPING_KILLED', 'CANCELED', 'PAUSED')
    """
    if by == "pause":
        return "PAUSED"
    return ("STOPPING_KILLED" if by == "kill" else "STOPPING_CANCELED") if live else "CANCELED"


def state_of(
    root: CheckpointStore, experiment_id: str, trials: List[TrialResult], total: Optional[int]
) -> str:
    """``state`` of experiment ``experiment_id`` under ``root``, its marks read."""
    mark = stop_mark(root / experiment_id)
    return state(trials, total, stopped_by(mark) if mark is not None else None)


class FoundCheckpoint(NamedTuple):
    """A checkpoint of an experiment's trial: the trial's number and folder, the checkpoint."""

    trial: int
    folder: CheckpointStore
    entry: ckpt.Listed

    @property
    def store(self) -> CheckpointStore:
        """The checkpoint's own address."""
        return self.folder / self.entry.name


def experiment_checkpoints(root: CheckpointStore, experiment_id: str) -> List[FoundCheckpoint]:
    """The checkpoints of experiment ``experiment_id`` under ``root``, trial by trial (trial 2
    before 10), oldest first in each: a Trainer's complete ones and those a Core API loop
    stored (``store_path``: its own files, ``steps_completed`` from the metadata it gave)."""
    found = []
    experiment = root / experiment_id
    trials = [n for n in experiment.folders() if re.fullmatch(r"trial-\d+", n)]
    for name in sorted(trials, key=lambda n: int(n.split("-")[1])):
        folder = experiment / name
        complete = {e.name for e in folder.complete()}
        listed = [
            e
            for e in folder.published()
            if e.name in complete or ckpt.WRITER_KEY not in e.metadata  # not a damaged one
        ]
        number = int(name.split("-")[1])
        found += [FoundCheckpoint(number, folder, e) for e in sorted(listed, key=lambda e: e.mtime)]
    return found


def checkpoint_rows(root: CheckpointStore, experiment_id: str) -> List[List[str]]:
    """``[experiment, trial, uuid, batches, validation metric, path]`` per checkpoint
    (``experiment_checkpoints``)."""
    rows = []
    for found in experiment_checkpoints(root, experiment_id):
        entry = found.entry
        validation = entry.metadata.get(VALIDATION_KEY) or {}
        metric = f"{validation['metric']}={validation['value']:.4g}" if validation else "-"
        rows.append(
            [
                experiment_id,
                str(found.trial),
                entry.name,
                str(entry.metadata.get("steps_completed", "-")),
                metric,
                str(found.store),
            ]
        )
    return rows


def table(rows: List[List[str]]) -> str:
    """Left-aligned columns, two spaces apart.

    >>> print(table([["id", "name"], ["a-1", "x"]]))
    id   name
    a-1  x
    """
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)


def _parser(command: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"det-lightning {command}")
    if command in ("experiment describe", "checkpoint list"):
        parser.add_argument(
            "id", nargs="?" if command == "checkpoint list" else None, help="the experiment id"
        )
    parser.add_argument("--checkpoint-dir", default=None, help="where the experiments are")
    parser.add_argument(
        "--storage",
        default=None,
        help="a search storage's database URL with the password (each record names the "
        "storage its experiment began with, a password left out)",
    )
    return parser


def find_record(root: CheckpointStore, experiment_id: str) -> Optional[Dict[str, Any]]:
    """Experiment ``experiment_id``'s ``experiment.json`` under ``root``, or None."""
    if not experiment_id or "/" in experiment_id or experiment_id.startswith("."):
        return None
    return read_record(root / experiment_id)


def _list(root: CheckpointStore, storage: Optional[str]) -> int:
    rows = [["id", "name", "searcher", "state", "trials", "best", "created"]]
    for record in records(root):
        try:
            trials = trials_of(root, record, storage)
            searcher = SearcherConfig.from_experiment(record["config"])
        except (ValueError, OSError) as e:  # one unreadable record must not hide the others
            print(
                f"det-lightning experiment list: cannot read {root / str(record.get('id'))}: {e}",
                file=sys.stderr,
            )
            rows.append([str(record.get("id")), str(record.get("name")), "-", "UNREADABLE"])
            rows[-1] += ["-", "-", str(record.get("created"))]
            continue
        metric, smaller = searcher.metric, searcher.smaller_is_better
        best = [t.best_metric for t in trials if t.best_metric is not None]
        shown = f"{metric}={(min if smaller else max)(best):.4g}" if best else "-"
        total = 1 if searcher.name == "single" else None
        rows.append(
            [
                record["id"],
                str(record.get("name")),
                searcher.name,
                state_of(root, record["id"], trials, total),
                str(len(trials)),
                shown,
                str(record.get("created")),
            ]
        )
    print(table(rows))
    return 0


def _describe(root: CheckpointStore, experiment_id: str, storage: Optional[str]) -> int:
    from det_lightning._runner.summary import format_summary, stopped_as

    record = find_record(root, experiment_id)
    if record is None:
        print(f"det-lightning experiment describe: no experiment {experiment_id!r} under {root}.")
        return 1
    searcher = SearcherConfig.from_experiment(record["config"])
    from det_lightning._runner.search._worker import search_summary

    plan = _plan_of(root, record)
    try:
        storage = search_storage(record, storage)
    except ValueError as e:
        print(f"det-lightning experiment describe: error: {e}", file=sys.stderr)
        return 1
    trials = search_summary(plan, storage)
    total = 1 if searcher.name == "single" else None
    words = state_of(root, record["id"], trials, total)
    if words == "CANCELED" or (words == "PAUSED" and stop_mark(root / record["id"])):
        trials = stopped_as(trials, words)  # as its command's summary showed them
    print(f"experiment {record['id']} ({record.get('name')}): {words}")
    seed = seed_of(plan, storage)
    print(f"searcher {searcher.name}; experiment seed {seed}; created {record.get('created')}")
    print(f"model dir {record.get('model_dir')}; files in {root / record['id']}")
    summary = format_summary(trials, searcher.metric, searcher.smaller_is_better)
    print(summary)
    return 0


def main(command: str, argv: List[str]) -> int:
    """``det-lightning experiment list|describe ...`` and ``checkpoint list ...``
    (``command``: those two words; ``argv``: what follows)."""
    args = _parser(command).parse_args(argv)
    try:
        return _dispatch(command, args)
    except errors.CheckpointStorageError as e:  # a bucket that cannot be listed, a bad URL
        print(f"det-lightning {command}: error: {e}", file=sys.stderr)
        return 1


def _dispatch(command: str, args: argparse.Namespace) -> int:
    root = checkpoint_root(args.checkpoint_dir)
    if command == "experiment list":
        return _list(root, args.storage)
    if command == "experiment describe":
        return _describe(root, args.id, args.storage)
    ids = [args.id] if args.id else [str(r["id"]) for r in records(root)]
    rows = [["experiment", "trial", "uuid", "batches", "validation", "path"]]
    for experiment_id in ids:
        rows += checkpoint_rows(root, experiment_id)
    print(table(rows), file=sys.stdout)
    return 0


__all__ = [
    "FoundCheckpoint",
    "checkpoint_root",
    "checkpoint_rows",
    "experiment_checkpoints",
    "find_record",
    "main",
    "records",
    "state",
    "table",
    "trials_of",
]
