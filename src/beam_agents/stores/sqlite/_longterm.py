"""The embedded long-term store: one SQLite file in WAL mode (stdlib sqlite3).

Rows live in one table keyed by ``(entity_key BLOB, key TEXT)`` WITHOUT ROWID,
so an entity's rows are clustered in key order and a prefix search is one
index range scan. Text compares with SQLite's BINARY collation, i.e. memcmp
over UTF-8, which is Unicode code point order, the order the port specifies.

Blocking calls run in a worker thread (`asyncio.to_thread`), never on the
event loop: a write can wait up to ``busy_timeout_ms`` for another
connection's lock, and other tasks on the loop must keep running meanwhile.
One connection per store is shared by those threads under a lock.
"""

from __future__ import annotations

import sqlite3

from beam_agents.backend import validate_entity_key, validate_key, validate_search
from beam_agents.errors import MemoryUnavailable
from beam_agents.memory import FlushReceipt, LongtermRecord
from beam_agents.stores._buffered import StoreBase
from beam_agents.stores._config import SqliteLongtermConfig
from beam_agents.stores.sqlite._base import SqliteDatabase, immediate_transaction

__all__ = ["SqliteLongtermConfig", "SqliteLongtermStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS longterm_records (
    entity_key    BLOB    NOT NULL,
    key           TEXT    NOT NULL,
    value         BLOB    NOT NULL,
    seq           INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    PRIMARY KEY (entity_key, key)
) WITHOUT ROWID
"""

_COLUMNS = "entity_key, key, value, seq, updated_at_ms"

# The seq guard of invariant 5 in one statement: insert, or overwrite only when
# the incoming seq is not older. A skipped update changes no row, which is how
# flush tells committed from superseded (cursor.rowcount 1 vs 0).
_UPSERT = f"""
INSERT INTO longterm_records ({_COLUMNS}) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (entity_key, key) DO UPDATE SET
    value = excluded.value,
    seq = excluded.seq,
    updated_at_ms = excluded.updated_at_ms
WHERE excluded.seq >= longterm_records.seq
"""

_LOAD = f"SELECT {_COLUMNS} FROM longterm_records WHERE entity_key = ? AND key = ?"
_SEARCH_FROM = f"SELECT {_COLUMNS} FROM longterm_records WHERE entity_key = ? AND key >= ?"
_SEARCH_BOUNDED = _SEARCH_FROM + " AND key < ? ORDER BY key LIMIT ?"
_SEARCH_UNBOUNDED = _SEARCH_FROM + " ORDER BY key LIMIT ?"

_MAX_CODE_POINT = 0x10FFFF
_SURROGATES = range(0xD800, 0xE000)


def prefix_upper_bound(prefix: str) -> str | None:
    """Return the least string above every string that starts with ``prefix``.

    Keys starting with ``prefix`` are exactly ``prefix <= key < bound``: the
    last code point that can be raised is raised by one, skipping surrogates
    (not valid text) and dropping trailing U+10FFFF, which cannot be raised.
    None means no upper bound (empty prefix, or only U+10FFFF). Range bounds
    avoid LIKE/GLOB, whose ``%``/``_``/``*`` wildcards and case folding would
    need escaping, and keep the scan on the primary key.
    """
    code_points = [ord(char) for char in prefix]
    while code_points:
        raised = code_points[-1] + 1
        if raised in _SURROGATES:
            raised = _SURROGATES.stop
        if raised <= _MAX_CODE_POINT:
            code_points[-1] = raised
            return "".join(map(chr, code_points))
        code_points.pop()
    return None


def _record(row: tuple[bytes, str, bytes, int, int]) -> LongtermRecord:
    entity_key, key, value, seq, updated_at_ms = row
    return LongtermRecord(
        entity_key=bytes(entity_key),
        key=key,
        value=bytes(value),
        seq=seq,
        updated_at_ms=updated_at_ms,
    )


class SqliteLongtermStore(StoreBase):
    """A `DiscardingLongtermStore` over one SQLite database file.

    Flush commits an entity's buffer in one ``BEGIN IMMEDIATE`` transaction,
    taking the write lock up front so the guard's reads and writes cannot
    interleave with another writer's. Any ``sqlite3.Error`` (a locked or
    unwritable database, a full disk) becomes `MemoryUnavailable`, with the
    buffer kept.
    """

    def __init__(self, config: SqliteLongtermConfig) -> None:
        super().__init__()
        self._config = config
        self._db = SqliteDatabase(
            path=config.path, busy_timeout_ms=config.busy_timeout_ms, schema=(_SCHEMA,),
            where=f"SQLite long-term store {config.path!r}", unavailable=MemoryUnavailable,
            require_open=self._require_open)

    @property
    def config(self) -> SqliteLongtermConfig:
        """The settings this store was opened with."""
        return self._config

    async def load(self, entity_key: bytes, key: str) -> LongtermRecord | None:
        """Return the committed row for ``key``, or None."""
        validate_entity_key(entity_key)
        validate_key(key)

        def work(connection: sqlite3.Connection) -> LongtermRecord | None:
            row = connection.execute(_LOAD, (entity_key, key)).fetchone()
            return None if row is None else _record(row)

        return await self._db.run("load", work)

    async def search(
        self, entity_key: bytes, prefix: str, limit: int
    ) -> tuple[LongtermRecord, ...]:
        """Return committed rows with ``prefix`` in code point order, at most ``limit``."""
        validate_entity_key(entity_key)
        validate_search(prefix, limit)
        if limit == 0:
            return ()
        upper = prefix_upper_bound(prefix)

        def work(connection: sqlite3.Connection) -> tuple[LongtermRecord, ...]:
            if upper is None:
                rows = connection.execute(_SEARCH_UNBOUNDED, (entity_key, prefix, limit))
            else:
                rows = connection.execute(_SEARCH_BOUNDED, (entity_key, prefix, upper, limit))
            return tuple(_record(row) for row in rows)

        return await self._db.run("search", work)

    async def flush(self, entity_key: bytes) -> FlushReceipt:
        """Commit the entity's buffer in one seq-guarded transaction."""
        validate_entity_key(entity_key)
        self._require_open("flush")
        batch = self._pending.snapshot(entity_key)
        if not batch:
            return FlushReceipt(entity_key=entity_key)
        records = [batch[key] for key in sorted(batch)]

        def work(connection: sqlite3.Connection) -> tuple[list[str], list[str]]:
            committed: list[str] = []
            superseded: list[str] = []
            with immediate_transaction(connection):
                for record in records:
                    cursor = connection.execute(
                        _UPSERT,
                        (entity_key, record.key, record.value, record.seq, record.updated_at_ms),
                    )
                    (committed if cursor.rowcount == 1 else superseded).append(record.key)
            return committed, superseded

        committed, superseded = await self._db.run("flush", work)
        return self._settled(entity_key, batch, committed, superseded)

    async def close(self) -> None:
        """Close the connection and drop pending buffers; idempotent."""
        self._closed = True
        self._pending.clear()
        await self._db.close()
