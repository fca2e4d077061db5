"""Which checkpoints of a trial stay on disk: Determined's garbage collection.

Retention follows Determined's ``checkpoint_storage.save_trial_best``, ``save_trial_latest`` and
``save_experiment_best``, applied as each checkpoint completes instead of at the end of the
experiment; the result is the same, since a checkpoint outside a trial's best and latest never
re-enters them. ``metadata.json`` records each checkpoint's searcher metric and the trial's run
id, so after a resume the trial's earlier checkpoints count too::

    CheckpointManager._record(uuid)            after each save, rank 0
      entries += Entry(uuid, batches, metric)
      choose_kept(entries, retention)          the rest is deleted
    retain_experiment_best(trial_dirs, ...)    once, when an experiment ends

The counts come typed (``CheckpointStorageConfig``, built once per run by the context or the
runner), their defaults stated there.
"""

import dataclasses
import pathlib
from typing import Any, Dict, List, NamedTuple, Optional, Set

from det_lightning.pytorch import _checkpoint as ckpt
from det_lightning.pytorch._config_sections import CheckpointStorageConfig
from det_lightning.pytorch._store import CheckpointStore

RUN_KEY = "det_lightning_run"  # metadata.json: one id for every run (resume) of a trial
# metadata.json: the validation at the checkpoint's batch, {"metric", "value", "metrics"}, or null
VALIDATION_KEY = "det_lightning_validation"


class Entry(NamedTuple):
    """One checkpoint retention weighs: its UUID, batches trained, searcher metric (or None)."""

    uuid: str
    steps: int
    value: Optional[float]


def choose_kept(
    entries: List[Entry], retention: CheckpointStorageConfig, smaller_is_better: bool
) -> Set[str]:
    """The UUIDs one trial keeps: its ``save_trial_latest`` newest checkpoints, its
    ``max(save_trial_best, save_experiment_best)`` best validated ones (a trial's share of the
    experiment's best is among its own best; ``retain_experiment_best`` trims the rest after the
    experiment), and always the newest, which a resume needs.

    ``entries`` are oldest first; on equal metrics the older checkpoint ranks first.

    >>> e = [Entry("a", 2, 1.0), Entry("b", 4, 3.0), Entry("c", 6, 0.5), Entry("d", 8, None)]
    >>> def kept(best, latest, entries=e, smaller=True):
    ...     counts = CheckpointStorageConfig(save_trial_best=best, save_trial_latest=latest)
    ...     return sorted(choose_kept(entries, counts, smaller))
    >>> kept(1, 1), kept(2, 0, smaller=False), kept(0, 3, e[:2])
    (['c', 'd'], ['a', 'b', 'd'], ['a', 'b'])
    """
    keep = {e.uuid for e in entries[max(0, len(entries) - retention.save_trial_latest) :]}
    if entries:
        keep.add(entries[-1].uuid)
    validated = [e for e in entries if e.value is not None]
    validated.sort(key=lambda e: e.value if smaller_is_better else -e.value)  # type: ignore
    best = max(retention.save_trial_best, retention.save_experiment_best)
    keep.update(e.uuid for e in validated[:best])
    return keep


def run_entries(
    root: CheckpointStore, run_id: str, metric: str, listed: Optional[List[ckpt.Listed]] = None
) -> List[Entry]:
    """The complete checkpoints under ``root`` (a directory or a URL) of the trial run
    ``run_id``, oldest first, with their recorded ``metric`` (None when recorded for another
    metric or not at all). ``listed``: ``root.complete()``, when already read."""
    found = []
    for item in root.complete() if listed is None else listed:
        metadata = item.metadata
        if metadata.get(RUN_KEY) != run_id:
            continue
        validation = metadata.get(VALIDATION_KEY) or {}
        value = validation.get("value") if validation.get("metric") == metric else None
        entry = Entry(item.name, _steps(metadata), None if value is None else float(value))
        found.append((entry.steps, item.mtime, entry))
    return [entry for _, _, entry in sorted(found, key=lambda t: t[:2])]


def newest_run_entries(
    directory: CheckpointStore, metric: str, listed: Optional[List[ckpt.Listed]] = None
) -> Optional[List[Entry]]:
    """``run_entries`` of the trial run that wrote ``directory``'s newest checkpoint, or None
    when that checkpoint names no run (none written by a trial's ``fit()``); ``listed``:
    ``directory.complete()``, when already read."""
    listed = directory.complete() if listed is None else listed
    newest = max(listed, key=lambda c: (_steps(c.metadata), c.mtime), default=None)
    run_id = newest.metadata.get(RUN_KEY) if newest is not None else None
    return run_entries(directory, run_id, metric, listed) if isinstance(run_id, str) else None


def best_checkpoint(
    directory: CheckpointStore,
    metric: str,
    smaller_is_better: bool,
    listed: Optional[List[ckpt.Listed]] = None,
) -> Optional[CheckpointStore]:
    """The checkpoint of a trial to report as its best: the one whose validation gave the best
    ``metric`` (the older on ties), as Determined names a trial's best checkpoint by the
    searcher metric; else (none validated) the newest; None when there is none. ``listed``:
    ``directory.complete()``, when already read (one listing of a bucket, not several)."""
    listed = directory.complete() if listed is None else listed
    entries = newest_run_entries(directory, metric, listed)
    validated = [e for e in entries or [] if e.value is not None]
    if not validated:
        newest = ckpt.newest(listed)
        return None if newest is None else directory.child(newest)
    pick = min if smaller_is_better else max
    return directory.child(pick(validated, key=lambda e: e.value).uuid)  # type: ignore


def retain_experiment_best(
    trial_dirs: List[CheckpointStore],
    retention: CheckpointStorageConfig,
    *,
    metric: str,
    smaller_is_better: bool,
) -> List[CheckpointStore]:
    """Determined's garbage collection at the end of an experiment: in each trial's checkpoint
    directory (its newest run), keeps the ``save_trial_latest`` newest and ``save_trial_best``
    best checkpoints, plus the ``save_experiment_best`` best across all trials; deletes the rest.
    ``metric`` and ``smaller_is_better`` are the searcher's. Returns the deleted directories.
    """
    per_trial: Dict[CheckpointStore, List[Entry]] = {}
    for directory in trial_dirs:
        entries = newest_run_entries(directory, metric)
        if entries is not None:
            per_trial[directory] = entries
    ranked = [(d, e) for d, entries in per_trial.items() for e in entries if e.value is not None]
    ranked.sort(key=lambda de: de[1].value if smaller_is_better else -de[1].value)  # type: ignore
    experiment_best = {(d, e.uuid) for d, e in ranked[: retention.save_experiment_best]}
    own = dataclasses.replace(retention, save_experiment_best=0)
    deleted = []
    for directory, entries in per_trial.items():
        keep = choose_kept(entries, own, smaller_is_better)
        for entry in entries:
            if entry.uuid not in keep and (directory, entry.uuid) not in experiment_best:
                if directory.delete(entry.uuid):
                    deleted.append(directory / entry.uuid)
    return deleted


def steps_from_metadata(path: pathlib.Path) -> int:
    """``steps_completed`` of the checkpoint ``path`` (0 when unrecorded)."""
    return _steps(ckpt.read_metadata(path))


def _steps(metadata: Dict[str, Any]) -> int:
    try:
        return int(metadata.get("steps_completed", 0))
    except (TypeError, ValueError):
        return 0
