"""The embedded call journal: one SQLite table in WAL mode (stdlib sqlite3).

One row per paid call, keyed by the cache key, with an index on
``(entity_key, seq)`` so that an activation's prefetch is one index range
scan. A write is ``INSERT ... ON CONFLICT DO NOTHING`` and, when that
inserted nothing, a read of the row that stands, both in one ``BEGIN
IMMEDIATE`` transaction: the first write wins and nothing is ever
overwritten (invariant 5), and the row a losing write reports is the one
that beat it.

Blocking calls run in a worker thread (`asyncio.to_thread`), never on the
event loop, as in `beam_agents.stores.sqlite._longterm`: a write can wait up to
``busy_timeout_ms`` for another connection's lock. One connection per journal
is shared by those threads under a lock.

Expired rows are not hidden from reads (the journal reads no clock); they are
deleted by :meth:`SqliteCallJournal.prune`, an operator's job.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping

from beam_agents.backend import JournalEntry, JournalWrite
from beam_agents.errors import JournalUnavailable, MemoryContractError
from beam_agents.model import LearnedRateRecord
from beam_agents.stores._journal_config import SqliteCallJournalConfig
from beam_agents.stores._journal_rules import (
    check_entry,
    check_read,
    decode_entry,
    rate_record,
    require_int64,
)
from beam_agents.stores.sqlite._base import SqliteDatabase, immediate_transaction

__all__ = ["SqliteCallJournal", "SqliteCallJournalConfig"]

_COLUMNS = ("cache_key", "entity_key", "seq", "response", "sha256", "digest_only",
            "created_at_ms", "expire_at_ms", "request")
_COLUMN_LIST = ", ".join(_COLUMNS)

_SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS call_journal (
        cache_key     TEXT    NOT NULL PRIMARY KEY,
        entity_key    BLOB    NOT NULL,
        seq           INTEGER NOT NULL,
        response      BLOB    NOT NULL,
        sha256        BLOB    NOT NULL,
        digest_only   INTEGER NOT NULL,
        created_at_ms INTEGER NOT NULL,
        expire_at_ms  INTEGER NOT NULL,
        request       TEXT    NOT NULL DEFAULT ''
    )
    """,
    "CREATE INDEX IF NOT EXISTS call_journal_by_activation ON call_journal (entity_key, seq)",
    """
    CREATE TABLE IF NOT EXISTS learned_rates (
        account    TEXT    NOT NULL,
        worker     TEXT    NOT NULL,
        rate_rps   REAL    NOT NULL,
        updated_ms INTEGER NOT NULL,
        PRIMARY KEY (account, worker)
    )
    """,
)

# First write wins (invariant 5): a present key is left as it is, and the
# statement changing no row (rowcount 0) is how the write learns it lost.
_INSERT = (f"INSERT INTO call_journal ({_COLUMN_LIST}) VALUES ({', '.join('?' * len(_COLUMNS))})"
           " ON CONFLICT (cache_key) DO NOTHING")
_READ = f"SELECT {_COLUMN_LIST} FROM call_journal WHERE entity_key = ? AND seq = ?"
_ENTITY = (f"SELECT {_COLUMN_LIST} FROM call_journal WHERE entity_key = ? "
           "ORDER BY seq, created_at_ms, cache_key")
#: Columns later versions added; a database an earlier version made gets them on open.
_ADDED = (("call_journal", "request", "TEXT NOT NULL DEFAULT ''"),)
_STANDING = f"SELECT {_COLUMN_LIST} FROM call_journal WHERE cache_key = ?"
_PRUNE = "DELETE FROM call_journal WHERE expire_at_ms < ?"
_READ_RATES = ("SELECT account, worker, rate_rps, updated_ms FROM learned_rates "
               "WHERE account = ? ORDER BY worker")
_WRITE_RATE = ("INSERT INTO learned_rates (account, worker, rate_rps, updated_ms) "
               "VALUES (?, ?, ?, ?) ON CONFLICT (account, worker) DO UPDATE SET "
               "rate_rps = excluded.rate_rps, updated_ms = excluded.updated_ms")


class SqliteCallJournal:
    """A `CallJournal` over one SQLite database file.

    Any ``sqlite3.Error`` or ``OSError`` (a locked, unwritable or unopenable
    database, a full disk) becomes `JournalUnavailable`, which suspends the
    activation; a stored row that does not decode raises
    `JournalCorruptError` naming ``sqlite call journal <path>`` and the key.
    A closed journal refuses work with `MemoryContractError`, as the
    long-term stores do.
    """

    def __init__(self, config: SqliteCallJournalConfig) -> None:
        self._config = config
        self._store = f"sqlite call journal {config.path}"
        self._closed = False
        self._db = SqliteDatabase(
            path=config.path, busy_timeout_ms=config.busy_timeout_ms, schema=_SCHEMA,
            where=self._store, unavailable=JournalUnavailable,
            require_open=self._require_open, added_columns=_ADDED)

    @property
    def config(self) -> SqliteCallJournalConfig:
        """The settings this journal was opened with."""
        return self._config

    def _require_open(self, what: str) -> None:
        if self._closed:
            raise MemoryContractError(f"{what} on a closed SqliteCallJournal ({self._store})")

    def _decode(self, row: tuple[object, ...], *, cache_key: str | None = None,
                entity_key: bytes, seq: int) -> JournalEntry:
        fields = dict(zip(_COLUMNS, row, strict=True))
        key = fields["cache_key"]
        return decode_entry(fields, store=self._store,
                            cache_key=cache_key if cache_key is not None else str(key),
                            entity_key=entity_key, seq=seq)

    async def read(self, entity_key: bytes, seq: int) -> Mapping[str, JournalEntry]:
        """Every entry of ``(entity_key, seq)``, by cache key, in one indexed SELECT."""
        check_read(entity_key, seq)

        def work(connection: sqlite3.Connection) -> dict[str, JournalEntry]:
            rows = connection.execute(_READ, (entity_key, seq)).fetchall()
            entries = [self._decode(row, entity_key=entity_key, seq=seq) for row in rows]
            return {entry.cache_key: entry for entry in sorted(entries,
                                                               key=lambda e: e.cache_key)}

        return await self._db.run("read", work)

    async def write(self, entry: JournalEntry) -> JournalWrite:
        """Insert `entry` unless its key is present; report the entry that stands."""
        check_entry(entry)
        values = (entry.cache_key, entry.entity_key, entry.seq, entry.response, entry.sha256,
                  int(entry.digest_only), entry.created_at_ms, entry.expire_at_ms, entry.request)

        def work(connection: sqlite3.Connection) -> JournalWrite:
            with immediate_transaction(connection):
                if connection.execute(_INSERT, values).rowcount == 1:
                    return JournalWrite(won=True, stored=entry)
                row = connection.execute(_STANDING, (entry.cache_key,)).fetchone()
            # The key scopes (entity_key, seq) (seed 002), so a standing row of
            # another activation under it is corrupt, never a result to replay.
            stored = self._decode(row, cache_key=entry.cache_key, entity_key=entry.entity_key,
                                  seq=entry.seq)
            return JournalWrite(won=False, stored=stored)

        return await self._db.run("write", work)

    async def entries_of(self, entity_key: bytes) -> list[JournalEntry]:
        """Every entry of one entity, in seq order (for a person: ``beam-agents inspect``)."""
        check_read(entity_key, 0)

        def work(connection: sqlite3.Connection) -> list[JournalEntry]:
            rows = connection.execute(_ENTITY, (entity_key,)).fetchall()
            return [self._decode(row, entity_key=entity_key, seq=int(row[2])) for row in rows]

        return await self._db.run("entries_of", work)

    async def read_rates(self, account: str) -> list[LearnedRateRecord]:
        """Every worker's learned rate for `account`; rows that do not decode are skipped."""

        def work(connection: sqlite3.Connection) -> list[LearnedRateRecord]:
            rows = connection.execute(_READ_RATES, (account,)).fetchall()
            return [record for record in map(rate_record, rows) if record is not None]

        return await self._db.run("read_rates", work)

    async def write_rate(self, record: LearnedRateRecord) -> None:
        """Keep `record`, replacing its worker's row."""

        def work(connection: sqlite3.Connection) -> None:
            with immediate_transaction(connection):
                connection.execute(_WRITE_RATE, (record.account, record.worker,
                                                 record.rate_rps, record.updated_ms))

        await self._db.run("write_rate", work)

    async def prune(self, before_ms: int) -> int:
        """Delete entries whose ``expire_at_ms`` is before `before_ms`; return how many.

        The pipeline never calls this: the journal reads no clock, so expiry
        is garbage collection that an operator runs (a cron job, a
        maintenance task) with the wall-clock time of their choosing. A
        pruned entry is paid for again if its activation ever replays.
        """
        require_int64(before_ms, "before_ms")

        def work(connection: sqlite3.Connection) -> int:
            return connection.execute(_PRUNE, (before_ms,)).rowcount

        return await self._db.run("prune", work)

    async def close(self) -> None:
        """Close the connection; idempotent."""
        self._closed = True
        await self._db.close()
