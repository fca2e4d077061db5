"""One rung decision at a time in each study, as Determined's master made them.

A trial at a rung reads what the study's other trials recorded there, decides (``_asha``) and
writes its own result. Two trials doing that at once each decide without the other's result:
measured at 64 workers, 2-5 of ~640 decisions differed from a serial replay (two trials at one
rung, swapped). So the read and the write happen inside ``deciding(study)``::

    PostgreSQL      pg_advisory_lock(NAMESPACE, study id), released (pg_advisory_unlock) when
                    the block ends, or by the server when the process dies; the block's reads
                    and writes run on the lock's connection (``_pool.OneConnectionPool.pinned``):
                    still one connection per process, and one connect for the whole decision
    journal file    fcntl.flock on ``<journal>.decide.lock`` beside it (released by the kernel
                    when the process dies)
    other storages  nothing: SQLite serialises writers itself but not the read before them;
                    MySQL and the gRPC proxy decide as before (docs/notes/many-machines.md)

Each study is one ASHA bracket and ranks its own trials, so brackets decide in parallel.

``creating(study, search)`` likewise creates and numbers a search's new trials (``study.ask()``
and the new trial's numbering; a grid's points) one process at a time on PostgreSQL
(``pg_advisory_lock(NUMBERING, <the search's key>)``, one lock for all its brackets). A
database's trial ids come from one sequence for all studies, and Optuna serialises creations
only within a study (it locks the study's row), so a trial of one bracket whose creation
committed late was invisible to a trial of another with a higher id numbering itself
meanwhile, and both took one number (seen once in the 16-worker drill). A trial is created
only once the lock is held, so a worker waiting for it has no trial that sits unnumbered
meanwhile, for another worker to take over as abandoned (one killed in between is numbered by
the next worker to hold the lock, ``_lease.number_new_trial``, with the number it would have
had). On a journal file the lock is
``fcntl.flock`` on ``<journal>.create.lock``: its trials get their ids in the order the journal
records them, but a trial numbered by ids alone had to count those not numbered yet by a
stand-in (their id + 1), which left gaps; under the lock numbers run 1..n there too.
"""

import contextlib
import fcntl
import logging
import zlib
from typing import Any, ContextManager, Iterator, Optional

import optuna

from det_lightning._runner._optuna import journal_file_of, rdb_of, storage_of, study_id

logger = logging.getLogger("det_lightning")

# The first key of the two-key advisory lock: "dl" (det_lightning), so no other user of
# advisory locks in the same database collides with the study ids in the second key.
NAMESPACE = 0x646C
NUMBERING = 0x6E6D  # "nm": the lock that numbers a search's new trials
LOCK_SUFFIX = ".decide.lock"
CREATE_LOCK_SUFFIX = ".create.lock"


def _postgresql(storage: Any) -> Optional[Any]:
    """The SQLAlchemy engine of a PostgreSQL storage; None for any other kind."""
    rdb = rdb_of(storage)
    return rdb.engine if rdb is not None and rdb.engine.dialect.name == "postgresql" else None


def kind(storage: Any) -> str:
    """How ``deciding`` serialises decisions on ``storage``: "postgresql", "journal" or
    "none"."""
    if journal_file_of(storage) is not None:
        return "journal"
    return "postgresql" if _postgresql(storage) is not None else "none"


def deciding(study: optuna.Study) -> ContextManager[bool]:
    """Inside the block, no other process decides in ``study``."""
    return _serialized(study, NAMESPACE, study_id(study), LOCK_SUFFIX)


def creating(study: optuna.Study, search: str) -> ContextManager[bool]:
    """Inside the block, no other process creates or numbers a trial of the search ``search``
    (its studies' common name); yields whether that holds (PostgreSQL, a journal file), else
    nothing is locked."""
    key = zlib.crc32(search.encode())
    return _serialized(
        study, NUMBERING, key - (1 << 32) if key >= 1 << 31 else key, CREATE_LOCK_SUFFIX
    )


@contextlib.contextmanager
def _serialized(study: optuna.Study, namespace: int, key: int, suffix: str) -> Iterator[bool]:
    """The lock (``namespace``, ``key``) on PostgreSQL, the file lock ``<journal><suffix>`` on a
    journal (yields True), else nothing (False)."""
    storage = storage_of(study)
    engine, journal = _postgresql(storage), journal_file_of(storage)
    if engine is not None:
        with _advisory_lock(engine, namespace, key):
            yield True
    elif journal is not None:
        with _file_lock(journal + suffix):
            yield True
    else:
        yield False


@contextlib.contextmanager
def _advisory_lock(engine: Any, namespace: int, key: int) -> Iterator[None]:
    from sqlalchemy import text

    keys = {"a": namespace, "b": int(key)}
    pinned = getattr(engine.pool, "pinned", contextlib.nullcontext)  # ours: one connection
    with pinned():
        with engine.connect() as connection:
            connection.execute(text("SELECT pg_advisory_lock(:a, :b)"), keys)
            connection.commit()  # the lock is the session's: it outlives the transaction
        try:
            yield
        finally:
            with engine.connect() as connection:
                connection.execute(text("SELECT pg_advisory_unlock(:a, :b)"), keys)
                connection.commit()


@contextlib.contextmanager
def _file_lock(path: str) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


__all__ = [
    "CREATE_LOCK_SUFFIX",
    "LOCK_SUFFIX",
    "NAMESPACE",
    "NUMBERING",
    "creating",
    "deciding",
    "kind",
]
