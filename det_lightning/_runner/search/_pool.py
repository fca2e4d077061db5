"""A search's database connections: at most one per process, open only while in use.

Every process of a search that talks to its database (a worker, with its lease keeper's thread;
a trial's process, with its background checkpoint writer) gets one connection at a time, closed
as soon as the operation that needed it ends: a worker whose trial trains, or a trial between
two validations, holds none. A trial deciding at a rung keeps its connection for the whole
decision, the study's lock held on it (``_serial``, ``pinned``). So a search of N workers never
holds more than 2N connections, and
at a moment holds one per process then talking to the database (``docs/notes/many-machines.md``
has the budget, and what to do above the server's ``max_connections``).

A server at its limit refuses new connections ("sorry, too many clients already"; "remaining
connection slots are reserved"): the pool tries again for ``LIMIT_WAIT_S`` seconds (another
process's connection closes within milliseconds), then raises ``ConnectionLimitReached``, whose
message names the fixes.
"""

import contextlib
import threading
import time
from typing import Any, Iterator, Optional

from sqlalchemy import pool

# How long a refused connection is tried again before the search gives up on the server.
LIMIT_WAIT_S = 30.0
_LIMIT_MESSAGES = ("too many clients", "remaining connection slots are reserved")


class ConnectionLimitReached(RuntimeError):
    """The database server refused a connection: it has ``max_connections`` open already."""


def at_limit(error: BaseException) -> bool:
    """Whether ``error`` is a server refusing a connection for its ``max_connections``."""
    return any(text in str(error) for text in _LIMIT_MESSAGES)


def limit_reached(error: BaseException, waited: float) -> ConnectionLimitReached:
    """The error a search stops with once the server kept refusing connections."""
    return ConnectionLimitReached(
        f"the search's database refused a connection for {waited:.0f} s: it has as many "
        f"connections open as its max_connections allows ({str(error).strip()}). A search of "
        "N workers needs up to 2*N connections (one per worker and one per trial's process, "
        "each open only while in use), plus those of other clients. Raise the server's "
        "max_connections (postgresql.conf; restart it), put PgBouncer in transaction mode "
        "between the workers and the server (give --storage its address), or serve the "
        "storage to the workers through Optuna's gRPC storage proxy "
        "(optuna.storages.run_grpc_proxy_server). See docs/notes/many-machines.md."
    )


class OneConnectionPool(pool.NullPool):
    """SQLAlchemy's ``NullPool`` (a connection per checkout, closed at checkin), letting one
    thread at a time hold connections: another thread waits for the first's to end. A thread
    may nest a second checkout in its first (Optuna's schema check, once, as the storage
    opens): that briefly makes two.

    Inside ``pinned()`` the thread keeps the block's first connection open between its
    checkouts, and every later checkout reuses it: a session-level lock taken on it (the
    study's rung lock, ``_serial``) holds across the operations of the block, on one
    connection, and other threads wait until the block ends."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._turn = threading.Condition()
        self._owner: Optional[int] = None
        self._held = 0
        self._pinning = False
        self._pinned: Any = None  # the record kept open inside pinned()
        self._parked = False  # whether it is checked in (free to reuse)

    def _acquire(self) -> None:
        me = threading.get_ident()
        with self._turn:
            while self._owner not in (None, me):
                self._turn.wait()
            self._owner, self._held = me, self._held + 1

    @contextlib.contextmanager
    def pinned(self) -> Iterator[None]:
        """Inside the block this thread holds the pool, on one connection kept open."""
        self._acquire()
        self._pinning = True
        try:
            yield
        finally:
            record, parked = self._pinned, self._parked
            self._pinning, self._pinned, self._parked = False, None, False
            try:
                if record is not None and parked:
                    super()._do_return_conn(record)  # closes it
            finally:
                self._release()

    def _do_get(self) -> Any:
        self._acquire()
        if self._pinning and self._parked:
            self._parked = False
            return self._pinned
        try:
            return self._connect_within_limit()
        except BaseException:
            self._release()
            raise

    def _do_return_conn(self, record: Any) -> None:
        try:
            if self._pinning and self._pinned in (None, record):
                self._pinned, self._parked = record, True  # kept open for the next checkout
            else:
                super()._do_return_conn(record)
        finally:
            self._release()

    def _release(self) -> None:
        with self._turn:
            self._held -= 1
            if self._held == 0:
                self._owner = None
                self._turn.notify_all()

    def _connect_within_limit(self) -> Any:
        start, delay = time.monotonic(), 0.05
        while True:
            try:
                return super()._do_get()
            except Exception as error:
                waited = time.monotonic() - start
                if not at_limit(error):
                    raise
                if waited >= LIMIT_WAIT_S:
                    raise limit_reached(error, waited) from error
            time.sleep(min(delay, LIMIT_WAIT_S))
            delay = min(delay * 2, 1.0)
