"""One rung decision at a time in each study, as Determined's master made them.

A trial at a rung reads what the study's other trials recorded there, decides (``_asha``) and
writes its own result. Two trials doing that at once each decide without the other's result:
measured at 64 workers, 2-5 of ~640 decisions differed from a serial replay (two trials at one
rung, swapped). So the read and the write happen inside ``deciding(study)``::

    PostgreSQL      pg_advisory_lock(NAMESPACE, study id) on a connection of its own, released
                    (pg_advisory_unlock) when the block ends, or by the server when the process
                    dies; while held, the process briefly has a second connection (Optuna's)
    journal file    fcntl.flock on ``<journal>.decide.lock`` beside it (released by the kernel
                    when the process dies)
    other storages  nothing: SQLite serialises writers itself but not the read before them;
                    MySQL and the gRPC proxy decide as before (docs/notes/many-machines.md)

Each study is one ASHA bracket and ranks its own trials, so brackets decide in parallel.
"""

import contextlib
import fcntl
import logging
from typing import Any, Iterator

logger = logging.getLogger("det_lightning")

# The first key of the two-key advisory lock: "dl" (det_lightning), so no other user of
# advisory locks in the same database collides with the study ids in the second key.
NAMESPACE = 0x646C
LOCK_SUFFIX = ".decide.lock"


def _backend(storage: Any) -> Any:
    """The storage under Optuna's cache (``_CachedStorage`` wraps an ``RDBStorage``)."""
    return getattr(storage, "_backend", storage)


def kind(storage: Any) -> str:
    """How ``deciding`` serialises decisions on ``storage``: "postgresql", "journal" or
    "none"."""
    from optuna.storages import JournalStorage, RDBStorage

    if isinstance(storage, JournalStorage):
        return "journal" if hasattr(storage._backend, "_file_path") else "none"
    backend = _backend(storage)
    if isinstance(backend, RDBStorage) and backend.engine.dialect.name == "postgresql":
        return "postgresql"
    return "none"


@contextlib.contextmanager
def deciding(study: Any) -> Iterator[None]:
    """Inside the block, no other process decides in ``study`` (an ``optuna.Study``)."""
    storage = study._storage
    how = kind(storage)
    if how == "postgresql":
        with _advisory_lock(_backend(storage).engine, study._study_id):
            yield
    elif how == "journal":
        with _file_lock(storage._backend._file_path + LOCK_SUFFIX):
            yield
    else:
        yield


@contextlib.contextmanager
def _advisory_lock(engine: Any, study_id: int) -> Iterator[None]:
    from sqlalchemy import text

    keys = {"a": NAMESPACE, "b": int(study_id)}
    with engine.connect() as connection:
        connection.execute(text("SELECT pg_advisory_lock(:a, :b)"), keys)
        connection.commit()  # the lock is the session's: it outlives this transaction
        try:
            yield
        finally:
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


__all__ = ["LOCK_SUFFIX", "NAMESPACE", "deciding", "kind"]
