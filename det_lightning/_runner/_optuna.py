"""Every Optuna private the search relies on, in one place.

Optuna's public API names a trial by its per-study ``number`` and gives no way to reach a trial
asked in another process, nor the database under its cache. The search needs all three (a trial
id is unique across the storage's studies, the brackets; a trial's process writes to the trial
its worker asked; the rung lock talks to PostgreSQL). Each private is read here and nowhere
else (``tests/unit/test_layers.py`` checks that), and ``tests/unit/test_optuna_contract.py``
checks each against the installed Optuna, as ``adapters/lightning/internals.py`` does for
Lightning. ``pyproject.toml`` bounds Optuna below its next major release::

    trial_id(trial)            Trial._trial_id, FrozenTrial._trial_id: the storage's id
    study_id(study)            Study._study_id
    storage_of(study)          Study._storage: reads and writes by trial id
    live_trial(study, id)      optuna.trial.Trial(study, id): a trial asked elsewhere
    rdb_of(storage)            the RDBStorage, under Optuna's cache (_CachedStorage._backend)
    journal_file_of(storage)   a JournalStorage's file (JournalFileBackend._file_path)
"""

from typing import Any, Optional, Union

import optuna

TrialLike = Union[optuna.Trial, optuna.trial.FrozenTrial]


def trial_id(trial: TrialLike) -> int:
    """The trial's id in its storage: unique across the storage's studies."""
    return int(trial._trial_id)


def study_id(study: optuna.Study) -> int:
    """The study's id in its storage."""
    return int(study._study_id)


def storage_of(study: optuna.Study) -> Any:
    """The storage ``study`` reads and writes through (Optuna's cache, where it has one)."""
    return study._storage


def live_trial(study: optuna.Study, trial: Union[int, TrialLike]) -> optuna.Trial:
    """A trial of ``study`` to report to and set attributes on, by its id or a (frozen) trial
    asked through another storage or process."""
    identity = trial if isinstance(trial, int) else trial_id(trial)
    return optuna.trial.Trial(study, identity)


def rdb_of(storage: Any) -> Optional[optuna.storages.RDBStorage]:
    """The database storage ``storage`` is or caches; None for any other kind."""
    backend = getattr(storage, "_backend", storage)
    return backend if isinstance(backend, optuna.storages.RDBStorage) else None


def journal_file_of(storage: Any) -> Optional[str]:
    """The file of a journal-file storage; None for any other kind (or another journal
    backend)."""
    if not isinstance(storage, optuna.storages.JournalStorage):
        return None
    path = getattr(storage._backend, "_file_path", None)
    return str(path) if path is not None else None


__all__ = [
    "journal_file_of",
    "live_trial",
    "rdb_of",
    "storage_of",
    "study_id",
    "trial_id",
]
