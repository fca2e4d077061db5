"""Where a search lives: its Optuna storage (a journal file beside the checkpoints, or a
database several machines share) and its studies, one per bracket."""

import errno
import logging
import os
import pathlib
import re
from typing import Any, List, NoReturn, Optional

import optuna

from det_lightning._runner._lease import BRACKET, search_name, search_name_of
from det_lightning._runner._record import RECORD_NAME, read_record, shown_storage
from det_lightning._runner._search_settings import SearchSettings
from det_lightning._runner._serial import creating
from det_lightning._runner.plan import UsageError
from det_lightning._runner.search._experiment_seed import record_experiment_seed
from det_lightning._runner.search._grid import enqueue_grid
from det_lightning._runner.search._pool import OneConnectionPool, close_idle_connections
from det_lightning.pytorch._store import CheckpointStore

logger = logging.getLogger("det_lightning")

JOURNAL_NAME = "search.journal"
GRPC_SCHEME = "grpc://"  # Optuna's gRPC storage proxy, in front of a database
# A database storage's engine: one connection per process, open only around its use (a
# connection reused after its linger is checked first).
ENGINE_KWARGS = {"poolclass": OneConnectionPool, "pool_pre_ping": True}


def open_storage(
    url: Optional[str],
    checkpoint_root: Optional[CheckpointStore] = None,
    *,
    made: bool = False,
    reading: bool = False,
) -> Any:
    """The Optuna storage: ``url`` (a database URL, or a journal file path), else a journal file
    beside the checkpoints of ``checkpoint_root`` (beside their local copies for a URL root:
    give several machines ``--storage``). ``made``: the worker that started this process made
    and checked the database's tables (a trial's process): opening it then reads and writes
    nothing. ``reading``: an existing journal, only read (a folder the reader cannot write)."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    if url and url.startswith(GRPC_SCHEME):
        return _open_grpc_proxy(url)
    if url and "://" in url:
        if made:
            return optuna.storages.get_storage(
                optuna.storages.RDBStorage(
                    url,
                    engine_kwargs=ENGINE_KWARGS,
                    skip_compatibility_check=True,
                    skip_table_creation=True,
                )
            )
        return _open_database(url)
    if url:
        path = pathlib.Path(url)
    elif checkpoint_root is not None:
        path = checkpoint_root.staging() / JOURNAL_NAME
    else:
        raise ValueError("open_storage: no storage URL, and no checkpoint root to put it beside.")
    if not reading:
        _check_writable(path, given=bool(url))
    return JournalStorage(JournalFileBackend(str(path)))


def _check_writable(path: pathlib.Path, given: bool) -> None:
    """The journal file and the lock Optuna keeps beside it can be written (else Optuna fails
    deep inside with a traceback that names neither the folder nor the fix).

    Raises:
        UsageError: they cannot, with the folder and what to pass instead.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab"):
            pass
        if not os.access(path.parent, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path.parent))
    except OSError as e:
        flag = (
            "--storage" if given else "--checkpoint-dir (the journal goes beside it) or --storage"
        )
        raise UsageError(
            f"the search's journal {path} cannot be written in {path.parent} "
            f"({e.strerror or e}); give a writable folder with {flag}."
        ) from None


def _open_database(url: str, attempts: int = 5) -> Any:
    """Optuna's RDB storage for ``url``, one for all the studies of this process, holding at
    most one connection at a time, only while in use and a moment after (``_pool``).

    Opening it creates Optuna's tables in a new database. Workers starting together on an empty
    database all try to: PostgreSQL makes the others wait for the first one's transaction, then
    fails them ("type studydirection already exists"; likewise for the schema version records
    written next). Each failure means another worker's transaction at that step committed, so
    trying again finds what it wrote and gets further; a failed try leaves no connection open.
    """
    from sqlalchemy import exc

    for attempt in range(attempts):
        try:
            storage = optuna.storages.RDBStorage(url, engine_kwargs=ENGINE_KWARGS)
            break
        except (exc.IntegrityError, exc.ProgrammingError, exc.OperationalError):
            close_idle_connections()  # the failed try's: its engine went with it
            if attempt == attempts - 1:
                raise
            logger.info("another worker is creating the search's tables; trying again")
    return optuna.storages.get_storage(storage)


def _open_grpc_proxy(url: str) -> Any:
    """Optuna's gRPC storage proxy at ``grpc://host:port``: one server
    (``optuna.storages.run_grpc_proxy_server``) holds the database's connections for all the
    workers (``docs/notes/many-machines.md``)."""
    import warnings

    from optuna.storages import GrpcStorageProxy

    host, _, port = url[len(GRPC_SCHEME) :].rstrip("/").rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--storage {url}: a gRPC storage proxy is grpc://HOST:PORT.")
    with warnings.catch_warnings():  # Optuna marks the proxy experimental
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return GrpcStorageProxy(host=host, port=int(port))


def delete_studies(url: str, experiment_id: str) -> List[str]:
    """Deletes experiment ``experiment_id``'s studies (its brackets) from the search storage
    ``url`` (a database URL or a journal file); returns their names."""
    storage = open_storage(url)
    names = [
        s.study_name
        for s in storage.get_all_studies()
        if search_name_of(s.study_name) == experiment_id
    ]
    for name in names:
        optuna.delete_study(study_name=name, storage=storage)
    return names


def check_search_is_here(url: Optional[str], checkpoint_root: CheckpointStore, key: str) -> None:
    """Refuses to run experiment ``key`` where its folder ``checkpoint_root`` and its search
    storage ``url`` disagree (each a rerun that reported success on wrong results before):

    - the folder has trials, and the storage holds none of its search: a rerun without the
      ``--storage`` it began with, or with another, or a storage that lost it. Begun there, the
      search would start over, its trials resuming past rungs and decisions it no longer knew;
    - the storage holds its search, with trials, and the folder has neither its record nor a
      trial: its checkpoints are in another folder (another ``--checkpoint-dir``), or the folder
      was deleted and its studies were not. Continued there, the search would count trials
      whose checkpoints it does not have (finished: nothing would run at all).

    Each side is read after the one written before it (a worker writes the experiment's record,
    then makes its studies, then its trial folders), so a search that other workers are
    beginning meanwhile is never refused.

    Raises:
        UsageError: naming the storage or the folder the experiment began with, and the fix.
    """
    trials = [n for n in checkpoint_root.folders() if re.fullmatch(r"trial-\d+", n)]
    studies = read_studies(url, checkpoint_root, key)
    if trials and not studies:
        _refuse_another_storage(url, checkpoint_root, key, len(trials))
    if studies and not trials and checkpoint_root.read_once(RECORD_NAME) is None:
        begun = sum(len(s.get_trials(deepcopy=False)) for s in studies)
        if begun:
            where = shown_storage(url) or str(checkpoint_root.staging() / JOURNAL_NAME)
            names = ", ".join(s.study_name for s in studies)
            raise UsageError(
                f"experiment {key}'s search in {where} has {begun} trial(s), but "
                f"{checkpoint_root} has neither its record nor its trials: its checkpoints are "
                "in another folder (rerun with the --checkpoint-dir it began with), or were "
                "deleted without its search. Continued here, the search would count trials "
                "whose checkpoints it does not have. To start over, delete its studies too "
                f"(optuna delete-study --storage URL --study-name NAME for each of {names}), "
                "or change the experiment's name."
            )


def _refuse_another_storage(
    url: Optional[str], checkpoint_root: CheckpointStore, key: str, trials: int
) -> NoReturn:
    journal = checkpoint_root.staging() / JOURNAL_NAME
    current = shown_storage(url)
    record = read_record(checkpoint_root) or {}  # none readable: what it began with is unknown
    began = record.get("storage")
    if "storage" not in record:  # a record from before records named the storage
        fix = (
            "It began with another storage: rerun with the --storage its first run was given "
            "(none: its journal beside the checkpoints, on the machine that ran it)."
        )
    elif began != current:
        fix = (
            f"It began with --storage {began}: rerun with that (a database's password as before)."
            if began is not None
            else "It began without --storage: its search is in the journal beside its "
            "checkpoints on the machine that ran it; rerun there without --storage."
        )
    elif not checkpoint_root.is_local and url is None:
        fix = (
            f"Its journal ({journal}) is kept on the machine that began it, beside its local "
            "copies: rerun there (give experiments in a bucket --storage with a database "
            "every machine reaches)."
        )
    else:
        fix = "Its storage no longer holds it: it was emptied, deleted or replaced."
    raise UsageError(
        f"experiment {key} has {trials} trial folder(s) in {checkpoint_root}, but its "
        f"search is not in {current or f'the journal {journal}'}. {fix} Begun here, the "
        "search would start over, and its trials would resume past decisions it no longer "
        "knows. To start a new experiment instead, change its name (or delete its folder)."
    )


def storage_ref(url: Optional[str], checkpoint_root: CheckpointStore) -> str:
    """A search's storage as other processes are told it: the URL or journal file path."""
    return str(url or checkpoint_root.staging() / JOURNAL_NAME)


def read_studies(
    url: Optional[str], checkpoint_root: CheckpointStore, key: str
) -> List[optuna.Study]:
    """The studies of the search named ``key`` (the experiment id) as they are, to read: no
    journal, database table, study or seed is made (reading a folder or a database the
    reader cannot write works; a search not begun has none)."""
    if not url or "://" not in url:
        journal = pathlib.Path(url) if url else checkpoint_root.staging() / JOURNAL_NAME
        if not journal.is_file():
            return []
        storage = open_storage(url, checkpoint_root, reading=True)
    elif url.startswith(GRPC_SCHEME):
        storage = _open_grpc_proxy(url)
    elif not _has_tables(url):
        return []
    else:  # tables there: nothing created, migrated or recorded
        storage = optuna.storages.get_storage(
            optuna.storages.RDBStorage(url, engine_kwargs=ENGINE_KWARGS, skip_table_creation=True)
        )
    names = sorted(
        s.study_name for s in storage.get_all_studies() if search_name_of(s.study_name) == key
    )
    return [optuna.load_study(study_name=name, storage=storage) for name in names]


def _has_tables(url: str) -> bool:
    """Whether the database ``url`` has Optuna's tables (a search began there), asked without
    creating anything: not a SQLite file that is not there, not a table."""
    import sqlalchemy

    parsed = sqlalchemy.engine.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if database in ("", ":memory:"):
            return False  # a new empty database each time: nothing to read
        if not database.startswith("file:") and not pathlib.Path(database).is_file():
            return False
    # The search's own pool: a server at its connection limit is tried again for a while,
    # then named with the fixes (ConnectionLimitReached), not a driver's traceback.
    engine = sqlalchemy.create_engine(url, poolclass=OneConnectionPool)
    try:
        return sqlalchemy.inspect(engine).has_table("studies")
    finally:
        engine.dispose()


def open_studies(
    storage: Any, key: str, settings: SearchSettings, *, seed: Optional[int]
) -> List[optuna.Study]:
    """One study per bracket, named for the experiment id ``key`` (a grid's with its points
    enqueued). The worker that creates the first records the experiment seed on it: ``seed``
    (the config's ``reproducibility.experiment_seed``), else one drawn now
    (``_experiment_seed``)."""
    direction = (
        optuna.study.StudyDirection.MINIMIZE
        if settings.smaller_is_better
        else optuna.study.StudyDirection.MAXIMIZE
    )
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    studies = []
    for i in range(len(settings.brackets)):
        name = f"{key}{BRACKET}{i}"
        try:  # exactly one worker creates each study
            study = optuna.create_study(study_name=name, storage=storage, direction=direction)
            if i == 0:
                record_experiment_seed(study, seed)
        except optuna.exceptions.DuplicatedStudyError:
            study = optuna.load_study(study_name=name, storage=storage)
        studies.append(study)
    if settings.grid:  # every worker enqueues what is missing, one at a time (``_serial``)
        with creating(studies[0], search_name(studies[0])):
            enqueue_grid(studies[0], settings.grid)
    return studies
