"""A ceiling on the queries of a web request (``REQUEST_QUERY_TIMEOUT``).

A query that runs long must not hold a web worker: past the ceiling the database
stops it, and the request answers 503 (``errors.QueryTimeout``, code
``query_timeout``, with ``Retry-After``) instead of waiting for it. A browser or a
proxy that gives up does not stop a query by itself: PostgreSQL would finish it,
holding a core and the worker thread, however long it takes.

``ceiling(seconds)`` puts the calling thread's connections under the ceiling for
a block (``core.middleware.QueryCeilingMiddleware`` wraps every request in one);
each statement may run ``seconds``:

- PostgreSQL: the connection's ``statement_timeout``, set when the block starts
  (or when the block opens the connection) and reset when it ends, so a
  connection kept open (``CONN_MAX_AGE``) carries nothing into later work. It is
  set before the request's first statement, outside the request's transactions,
  so none of their rollbacks undoes it; and on the DB-API connection, so it is not
  in Django's query log (the query counts of tests). The only SQL written here:
  the ORM has no word for a session setting. The server cancels the statement
  itself (SQLSTATE 57014): nothing runs on after the answer.
- SQLite: a progress handler on the DB-API connection, with a deadline that each
  statement starts afresh; it is removed when the block ends (connections persist:
  a handler left behind would interrupt whatever used the connection next).

Only the thread in the block is under it: Celery workers, the embedded job thread
(``jobs.engine``), management commands and any thread a request starts run their
queries to the end. The ceiling is per statement: a request of many queries may
take longer than ``seconds`` in all.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import ExitStack, contextmanager

from django.db import DatabaseError, connections
from django.db.backends.signals import connection_created

from .errors import QueryTimeout

QUERY_CANCELED = "57014"  # PostgreSQL's SQLSTATE for a statement cancelled (statement_timeout)
# SQLite calls the progress handler every this many virtual-machine instructions:
# often enough to stop within a fraction of a millisecond, seldom enough that the
# calls (each takes Python's GIL) cost nothing to speak of.
SQLITE_PROGRESS_STEPS = 10_000
RETRY_AFTER = 30

_local = threading.local()


class _Ceiling:
    """One block's ceiling: its limit, the connections it armed, and what it stopped."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds  # of the SQLite statement running now
        self.sql = ""  # the statement running now
        self.stopped_sql: str | None = None  # the statement that was stopped, once one was
        self.armed: list[tuple[object, object]] = []  # (Django connection, its DB-API connection)

    # --- per statement -------------------------------------------------------------

    def execute(self, execute, sql, params, many, context):
        """Django's execute wrapper: each statement gets the whole ceiling."""
        self.sql = sql
        self.deadline = time.monotonic() + self.seconds
        try:
            return execute(sql, params, many, context)
        except DatabaseError as exc:
            if _cancelled(exc):
                self.stopped_sql = sql
            raise

    def sqlite_progress(self) -> int:
        """SQLite's progress handler: non-zero interrupts the running statement."""
        if time.monotonic() < self.deadline:
            return 0
        self.stopped_sql = self.sql
        return 1

    # --- per connection ------------------------------------------------------------

    def arm(self, connection) -> None:
        """Put ``connection`` (open) under the ceiling, once per DB-API connection."""
        raw = connection.connection
        if raw is None or any(raw is armed for _, armed in self.armed):
            return
        if connection.vendor == "postgresql":
            try:
                with raw.cursor() as cursor:
                    cursor.execute("SELECT set_config('statement_timeout', %s, false)",
                                   [str(max(1, round(self.seconds * 1000)))])
            except Exception:  # a broken connection: Django checks it before the next query and reconnects
                return
        elif connection.vendor == "sqlite":
            raw.set_progress_handler(self.sqlite_progress, SQLITE_PROGRESS_STEPS)
        else:
            return
        self.armed.append((connection, raw))

    def disarm(self) -> None:
        """Take the ceiling off every connection this block armed that is still open.
        A PostgreSQL connection whose setting cannot be reset is closed rather than
        kept with it."""
        for connection, raw in self.armed:
            if connection.vendor == "sqlite":
                try:
                    raw.set_progress_handler(None, SQLITE_PROGRESS_STEPS)
                except sqlite3.ProgrammingError:
                    pass  # closed already: the handler went with it
                continue
            if raw.closed:
                continue
            try:
                with raw.cursor() as cursor:
                    cursor.execute("RESET statement_timeout")
            except Exception:
                # Inside a transaction (a test's) its rollback undoes the setting; outside
                # one, a connection that cannot say RESET is not worth keeping.
                if raw is connection.connection and not connection.in_atomic_block:
                    connection.close()
        self.armed.clear()


def _cancelled(exc: BaseException) -> bool:
    """Whether the database error ``exc`` is a statement the database stopped:
    PostgreSQL's cancel (SQLSTATE 57014) or SQLite's interrupt."""
    cause = exc.__cause__
    if (getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)) == QUERY_CANCELED:
        return True
    return getattr(cause, "sqlite_errorcode", None) == sqlite3.SQLITE_INTERRUPT


def _arm_new_connection(sender, connection, **kwargs) -> None:
    """A connection opened inside a block (the first query of a request, or after a
    reconnect) is armed before its first statement."""
    state = getattr(_local, "ceiling", None)
    if state is not None:
        state.arm(connection)


connection_created.connect(_arm_new_connection, dispatch_uid="core.query_ceiling")


@contextmanager
def ceiling(seconds: float):
    """Run the block with every statement of this thread's connections limited to
    ``seconds``; yields the ceiling (``stopped_sql`` says what was stopped, if anything).
    Connections opened in the block are armed when they open; the ceiling is off again
    when the block ends, however it ends. Inside another block, the outer one holds."""
    outer = getattr(_local, "ceiling", None)
    if outer is not None:
        yield outer
        return
    state = _local.ceiling = _Ceiling(seconds)
    try:
        with ExitStack() as stack:
            for connection in connections.all():
                stack.enter_context(connection.execute_wrapper(state.execute))
                state.arm(connection)
            yield state
    finally:
        _local.ceiling = None
        state.disarm()


def stopped_error(exc: BaseException) -> QueryTimeout | None:
    """The domain error (the API's and the pages' 503) when ``exc`` is a query that the
    ceiling of this thread's block stopped; else None."""
    state = getattr(_local, "ceiling", None)
    if state is None or not isinstance(exc, DatabaseError) or not _cancelled(exc):
        return None
    return QueryTimeout(
        f"This request took too long on the database and was stopped after {state.seconds:g} s. "
        "Try again, or narrow the request (filters, a smaller page).", retry_after=RETRY_AFTER)
