"""A search's database connections: at most one per process, open only around its use.

Every process of a search that talks to its database (a worker, with its lease keeper's thread;
a trial's process, with its background checkpoint writer) gets one connection at a time, and
keeps it open for ``LINGER_S`` after an operation ends: Optuna's operations come in bursts
milliseconds apart (a trial asked for and admitted, a report and its rung decision), and each
new PostgreSQL connection starts a server backend (3 to 18 ms on loopback, more across a
network). After that the connection closes: a worker whose trial trains, or a trial between
two validations, holds none. A trial deciding at a rung keeps its connection for the whole
decision, the study's lock held on it (``_serial``, ``pinned``), and lets it linger once the
lock is released. So a search of N workers never
holds more than 2N connections, and at a moment holds one per process then talking to the
database or just done (``docs/notes/many-machines.md`` has the budget, and what to do above
the server's ``max_connections``).

A reused connection is checked first (the engine's ``pool_pre_ping``: a round trip), so one
the server dropped meanwhile is replaced, not failed on. A child forked while a connection is
open (a DataLoader's worker) never uses it, and never ends the parent's session: its copy of
the socket is pointed at ``/dev/null`` (``_forget_in_child``).

A server at its limit refuses new connections ("sorry, too many clients already"; "remaining
connection slots are reserved"): the pool tries again for ``LIMIT_WAIT_S`` seconds (another
process's connection closes within milliseconds), then raises ``ConnectionLimitReached``, whose
message names the fixes.
"""

import atexit
import contextlib
import os
import threading
import time
import weakref
from typing import Any, Iterator, Optional

from sqlalchemy import pool

# How long a refused connection is tried again before the search gives up on the server.
LIMIT_WAIT_S = 30.0
# How long a connection stays open after its last use, for the next operation to reuse
# (seconds; $DET_LIGHTNING_DB_LINGER_S, 0: closed at once, as before 2026-11-28).
LINGER_S = 0.5
LINGER_ENV = "DET_LIGHTNING_DB_LINGER_S"
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
        "each open only while in use and a moment after), plus those of other clients. Raise "
        "the server's max_connections (postgresql.conf; restart it), or set "
        f"{LINGER_ENV}=0 to close each connection as soon as it is used; put PgBouncer in "
        "transaction mode "
        "between the workers and the server (give --storage its address), or serve the "
        "storage to the workers through Optuna's gRPC storage proxy "
        "(optuna.storages.run_grpc_proxy_server). See docs/notes/many-machines.md."
    )


def linger_seconds(environ: Any = os.environ) -> float:
    """``$DET_LIGHTNING_DB_LINGER_S`` (seconds, >= 0), else ``LINGER_S``.

    >>> linger_seconds({}), linger_seconds({LINGER_ENV: "0"}), linger_seconds({LINGER_ENV: "2"})
    (0.5, 0.0, 2.0)
    >>> linger_seconds({LINGER_ENV: "soon"})
    Traceback (most recent call last):
    ValueError: DET_LIGHTNING_DB_LINGER_S='soon': expected seconds >= 0 (0: close a connection as soon as it is used).
    """
    raw = environ.get(LINGER_ENV, "")
    if not raw:
        return LINGER_S
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise ValueError(
            f"{LINGER_ENV}={raw!r}: expected seconds >= 0 (0: close a connection as soon as it "
            "is used)."
        )
    return seconds


class OneConnectionPool(pool.NullPool):
    """SQLAlchemy's ``NullPool`` (a connection per checkout, closed at checkin), letting one
    thread at a time hold connections: another thread waits for the first's to end. A thread
    may nest a second checkout in its first (Optuna's schema check, once, as the storage
    opens): that briefly makes two.

    A connection checked in stays open for ``linger`` seconds (``linger_seconds()``), and the
    next checkout within them takes it; a daemon thread closes it once they pass.

    Inside ``pinned()`` the thread keeps the block's first connection open between its
    checkouts, and every later checkout reuses it: a session-level lock taken on it (the
    study's rung lock, ``_serial``) holds across the operations of the block, on one
    connection, and other threads wait until the block ends. The block's end lets it linger
    (closes it when the block raised: a lock it may hold goes with it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.linger = linger_seconds()
        self._reset()
        _POOLS.add(self)

    def _reset(self) -> None:
        self._turn = threading.Condition()
        self._owner: Optional[int] = None
        self._held = 0
        self._pinning = False
        self._pinned: Any = None  # the record kept open inside pinned()
        self._parked = False  # whether it is checked in (free to reuse)
        self._idle: Any = None  # the record kept open after its last use
        self._idle_until = 0.0
        self._closer: Optional[threading.Thread] = None

    def _acquire(self) -> None:
        me = threading.get_ident()
        with self._turn:
            while self._owner not in (None, me):
                self._turn.wait()
            self._owner, self._held = me, self._held + 1

    @contextlib.contextmanager
    def pinned(self) -> Iterator[None]:
        """Inside the block this thread holds the pool, on one connection kept open; after a
        block that ended well (its session lock released) the connection lingers as after
        any use, after one that raised it is closed (a lock it may hold goes with it)."""
        self._acquire()
        self._pinning = True
        ended_well = False
        try:
            yield
            ended_well = True
        finally:
            record, parked = self._pinned, self._parked
            self._pinning, self._pinned, self._parked = False, None, False
            try:
                if record is not None and parked and not (ended_well and self._park(record)):
                    super()._do_return_conn(record)  # closes it
            finally:
                self._release()

    def _do_get(self) -> Any:
        self._acquire()
        if self._pinning and self._parked:
            self._parked = False
            return self._pinned
        if self._idle is not None:
            record, self._idle = self._idle, None
            return record
        try:
            return self._connect_within_limit()
        except BaseException:
            self._release()
            raise

    def _do_return_conn(self, record: Any) -> None:
        try:
            if self._pinning and self._pinned in (None, record):
                self._pinned, self._parked = record, True  # kept open for the next checkout
            elif not self._park(record):
                super()._do_return_conn(record)
        finally:
            self._release()

    def _park(self, record: Any) -> bool:
        """Keeps ``record`` open for the linger, for the next checkout; False when it cannot
        be kept (no linger, another one idle already, or the record was invalidated)."""
        if self.linger <= 0 or self._idle is not None or record.dbapi_connection is None:
            return False
        self._idle, self._idle_until = record, time.monotonic() + self.linger
        self._start_closer()
        return True

    def _start_closer(self) -> None:
        with self._turn:
            if self._closer is None:
                self._closer = threading.Thread(
                    target=self._close_when_idle, name="det-lightning-db-linger", daemon=True
                )
                self._closer.start()
            self._turn.notify_all()

    def _close_when_idle(self) -> None:
        """The closer's loop: closes the idle connection once its linger has passed and no
        thread holds the pool; ends when none is idle (the next one parked starts another)."""
        while True:
            with self._turn:
                while True:
                    if self._idle is None:
                        self._closer = None
                        return
                    left = self._idle_until - time.monotonic()
                    if self._owner is None and left <= 0:
                        break
                    self._turn.wait(left if left > 0 else None)
                record, self._idle = self._idle, None
                self._owner, self._held = threading.get_ident(), 1
            self._close_held(record)

    def close_idle(self) -> None:
        """Closes the idle connection now, if there is one (the process ends; ``dispose``);
        never waits: while another thread uses the pool there is none idle."""
        me = threading.get_ident()
        with self._turn:
            if self._idle is None or self._owner not in (None, me):
                return
            record, self._idle = self._idle, None
            self._owner, self._held = me, self._held + 1
        self._close_held(record)

    def _close_held(self, record: Any) -> None:
        """Closes ``record``, taken from the pool by this thread, and lets the pool go."""
        try:
            super()._do_return_conn(record)  # NullPool's: closes it
        except Exception:  # the server or network went: nothing is left to close
            pass
        finally:
            self._release()

    def dispose(self) -> None:
        self.close_idle()
        super().dispose()

    def _forget_in_child(self) -> None:
        """In a child forked from this process: the parent's idle or pinned connection is the
        parent's; its socket here is pointed at ``/dev/null``, so that nothing the child does
        (its garbage collector closing it) reaches the parent's session. One that another
        thread was using is out of reach: that thread does not exist in the child, and the
        objects its frames held are never freed there."""
        for record in (self._idle, self._pinned):
            connection = getattr(record, "dbapi_connection", None)
            fileno = getattr(connection, "fileno", None)
            if fileno is None:
                continue
            try:
                descriptor = fileno()
                null = os.open(os.devnull, os.O_RDWR)
                try:
                    os.dup2(null, descriptor)
                finally:
                    os.close(null)
            except Exception:  # already closed
                pass
            _FORGOTTEN.append(record)  # never closed here
        self._reset()

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


_POOLS: "weakref.WeakSet[OneConnectionPool]" = weakref.WeakSet()
_FORGOTTEN: list = []  # a forked child's copies of its parent's connections


def close_idle_connections() -> None:
    """Closes every pool's idle connection (at exit: the server sees the session end instead
    of a dropped socket)."""
    for each in list(_POOLS):
        each.close_idle()


def _forget_connections_in_child() -> None:
    for each in list(_POOLS):
        each._forget_in_child()


atexit.register(close_idle_connections)
os.register_at_fork(after_in_child=_forget_connections_in_child)
