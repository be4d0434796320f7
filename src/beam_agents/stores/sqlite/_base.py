"""What the SQLite backends share: one lazy connection, WAL mode, worker threads, errors.

The long-term store and the call journal each keep one SQLite file in WAL
mode. Both open it on first use (making its folder), run every blocking call
in a worker thread (`asyncio.to_thread`) so the event loop keeps running while
a write waits up to ``busy_timeout_ms`` for another connection's lock, share
the one connection between those threads under a lock, and translate
``sqlite3`` and ``OSError`` failures into the backend's unavailable error
(`MemoryUnavailable` for the store, `JournalUnavailable` for the journal), so
the core never sees ``sqlite3`` types.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

from beam_agents.errors import BeamAgentsError

__all__ = ["SqliteDatabase", "enter_wal", "immediate_transaction"]

_T = TypeVar("_T")


def enter_wal(connection: sqlite3.Connection, timeout_s: float) -> None:
    """Switch the file to WAL mode, retrying a busy answer for up to `timeout_s`.

    Connections that open a new file at once (the parallel instances of one
    job) each take a shared lock and then need an exclusive one for the switch;
    SQLite breaks that deadlock by failing one of them with SQLITE_BUSY at
    once, without consulting the busy timeout. Retrying turns the collision
    into the wait the timeout promises instead of a failed first call.
    """
    deadline = time.monotonic() + timeout_s
    pause = 0.002
    while True:
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


@contextlib.contextmanager
def immediate_transaction(connection: sqlite3.Connection) -> Iterator[None]:
    """Run the block in one ``BEGIN IMMEDIATE`` transaction, committed on normal exit.

    Taking the write lock up front keeps a guard's reads and writes from
    interleaving with another writer's. Any exception (the COMMIT's included)
    rolls back and propagates.
    """
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield
        connection.execute("COMMIT")
    except BaseException:
        # A failed ROLLBACK must not hide the error that caused it.
        with contextlib.suppress(sqlite3.Error):
            if connection.in_transaction:
                connection.execute("ROLLBACK")
        raise


class SqliteDatabase:
    """One SQLite file behind a lazily opened connection, used from worker threads.

    Args:
        path: Database file, or ``:memory:``.
        busy_timeout_ms: How long a call waits for another connection's lock.
        schema: Statements run once, right after the connection enters WAL mode.
        added_columns: ``(table, column, declaration)`` a later version added:
            each is added to a database an earlier version created.
        where: Names the backend in error messages (``<where>: <what> failed: ...``).
        unavailable: The error a ``sqlite3.Error`` or ``OSError`` becomes.
        require_open: The owner's closed check, called with the operation's name
            before the work is queued and again in the worker thread.
    """

    def __init__(self, *, path: str, busy_timeout_ms: int, schema: Sequence[str], where: str,
                 unavailable: Callable[[str], BeamAgentsError],
                 require_open: Callable[[str], None],
                 added_columns: Sequence[tuple[str, str, str]] = ()) -> None:
        self._path = path
        self._added_columns = tuple(added_columns)
        self._timeout_s = busy_timeout_ms / 1000
        self._schema = tuple(schema)
        self._where = where
        self._unavailable = unavailable
        self._require_open = require_open
        self._lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None

    def _connect(self) -> sqlite3.Connection:
        # Runs in a worker thread holding _lock.
        if self._connection is None:
            if self._path != ":memory:":
                # The first call may precede any output, so nothing else made the folder yet.
                Path(self._path).parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(
                self._path,
                timeout=self._timeout_s,
                isolation_level=None,  # autocommit; writes issue BEGIN/COMMIT themselves
                check_same_thread=False,  # used from to_thread workers, one at a time
            )
            try:
                # Parallel workers open one new file at once; see enter_wal.
                enter_wal(connection, self._timeout_s)
                for statement in self._schema:
                    connection.execute(statement)
                self._add_columns(connection)
            except BaseException:
                connection.close()
                raise
            self._connection = connection
        return self._connection

    def _add_columns(self, connection: sqlite3.Connection) -> None:
        """Bring a database an earlier version made up to this schema; idempotent."""
        for table, column, declaration in self._added_columns:
            present = {row[1] for row in connection.execute(f"PRAGMA table_info({table})")}
            if column in present:
                continue
            try:
                connection.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
            except sqlite3.OperationalError as exc:
                if "duplicate column" not in str(exc):  # another worker added it first
                    raise

    async def run(self, what: str, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run `work` on the connection in a worker thread, translating SQLite failures."""
        self._require_open(what)

        def call() -> _T:
            with self._lock:
                self._require_open(what)
                return work(self._connect())

        try:
            return await asyncio.to_thread(call)
        except (sqlite3.Error, OSError) as exc:
            raise self._unavailable(f"{self._where}: {what} failed: {exc}") from exc

    async def close(self) -> None:
        """Close the connection, if one was opened; idempotent."""

        def shut() -> None:
            with self._lock:
                connection, self._connection = self._connection, None
                if connection is not None:
                    connection.close()

        try:
            await asyncio.to_thread(shut)
        except (sqlite3.Error, OSError) as exc:
            raise self._unavailable(f"{self._where}: close failed: {exc}") from exc
