"""The production call journal on Cloud Firestore (``google-cloud-firestore`` AsyncClient).

Layout: ``{collection}/{cache key}``, one document per paid call, and
``{collection}_rates/{digest}``, one per worker's learned rate; the fields,
the size rules and the decoding are pure rules in
`beam_agents.stores._journal_rules`. This module adds the client, the query
and the create-or-read write.

This module and `beam_agents.stores.firestore._client` (the client plumbing it
shares with the long-term store) are the only ones of the journal that import
``google.cloud``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

from google.api_core import exceptions as api_exceptions
from google.cloud.firestore_v1 import AsyncClient
from google.cloud.firestore_v1.base_query import FieldFilter

from beam_agents.backend import JournalEntry, JournalWrite
from beam_agents.errors import JournalUnavailable, MemoryContractError
from beam_agents.model import LearnedRateRecord
from beam_agents.stores._journal_config import FirestoreCallJournalConfig
from beam_agents.stores._journal_rules import (
    check_entry,
    check_firestore_entry,
    check_read,
    entry_from_document,
    journal_document_fields,
    journal_query,
    rate_document_id,
    rate_record,
)
from beam_agents.stores.firestore._client import FirestoreClient

__all__ = ["FirestoreCallJournal", "FirestoreCallJournalConfig"]

_T = TypeVar("_T")

# A create that finds the document, then a read that does not, means a TTL
# deletion ran in between; the next create then wins. Twice in a row is not
# a race any more but a failing store.
_CREATE_ATTEMPTS = 3


class FirestoreCallJournal:
    """A `CallJournal` on Firestore, for the Dataflow deployment.

    ``read`` is one query, two equalities served by Firestore's automatic
    single-field indexes: ``entity_key_hex == hex and seq == seq`` for an
    entity key of up to 749 bytes (documents of every version carry the
    hex), ``entity_key_digest == sha256 and seq == seq`` for a longer one,
    whose hex is too large to filter on. Either way the full stored key must
    equal the one asked for (invariant 7); no key is refused for its length.
    ``write`` is ``create()``, which the server refuses when the document
    exists, so the server alone decides which of several concurrent writers
    wins (invariant 5); a loser reads the entry that stands. An entry too
    large for one document, or otherwise unstorable, raises `StoreLimitError`
    before any I/O. ``google.api_core`` and ``google.auth`` errors, and calls
    past ``timeout_ms``, raise `JournalUnavailable`; a document that does not
    decode raises `JournalCorruptError` naming
    ``firestore call journal <project>/<database>/<collection>`` and the key.

    A losing write reports ``won=False`` also when the standing entry came
    from an earlier, retried attempt of the very same write; the stored entry
    then equals the one written, so no divergence is counted for it.

    The client is built on first use, inside the event loop that uses it, and
    closed by :meth:`close`. ``client_factory`` is a test seam; by default the
    client is ``AsyncClient(project=..., database=...)``.
    """

    def __init__(
        self,
        config: FirestoreCallJournalConfig,
        *,
        client_factory: Callable[[], AsyncClient] | None = None,
    ) -> None:
        self._config = config
        self._closed = False
        self._timeout_s = config.timeout_ms / 1000
        self._store = (f"firestore call journal "
                       f"{config.project}/{config.database}/{config.collection}")
        self._firestore = FirestoreClient(
            timeout_ms=config.timeout_ms, factory=client_factory or self._new_client,
            where=self._store, field="call_journal",
            unavailable=JournalUnavailable, ensure_open=self._require_open)

    def _new_client(self) -> AsyncClient:
        return AsyncClient(project=self._config.project, database=self._config.database)

    @property
    def config(self) -> FirestoreCallJournalConfig:
        """The settings this journal was opened with."""
        return self._config

    # -- client and call plumbing ---------------------------------------------

    def _require_open(self, what: str) -> None:
        if self._closed:
            raise MemoryContractError(f"{what} on a closed FirestoreCallJournal ({self._store})")

    async def _call(self, what: str, work: Callable[[AsyncClient], Awaitable[_T]]) -> _T:
        self._require_open(what)
        return await self._firestore.call(what, work)

    def _collection(self, client: AsyncClient) -> Any:
        return client.collection(self._config.collection)

    def _decode(self, snapshot: Any, *, entity_key: bytes, seq: int) -> JournalEntry:
        return entry_from_document(snapshot.to_dict(), store=self._store,
                                   document_id=snapshot.id, entity_key=entity_key, seq=seq)

    # -- the port ---------------------------------------------------------------

    async def read(self, entity_key: bytes, seq: int) -> Mapping[str, JournalEntry]:
        """Every entry of ``(entity_key, seq)``, by cache key, in one query."""
        check_read(entity_key, seq)
        field, value = journal_query(entity_key)

        async def work(client: AsyncClient) -> dict[str, JournalEntry]:
            query = (self._collection(client)
                     .where(filter=FieldFilter(field, "==", value))
                     .where(filter=FieldFilter("seq", "==", seq)))
            stream: AsyncIterator[Any] = query.stream(timeout=self._timeout_s)
            entries = [self._decode(snapshot, entity_key=entity_key, seq=seq)
                       async for snapshot in stream]
            return {entry.cache_key: entry for entry in sorted(entries,
                                                               key=lambda e: e.cache_key)}

        return await self._call("read", work)

    async def entries_of(self, entity_key: bytes) -> list[JournalEntry]:
        """Every entry of one entity, in seq order (for a person: ``beam-agents inspect``).

        One equality filter, on the field `read` filters on too, so no index
        beyond Firestore's automatic ones is needed; sorted here.
        """
        check_read(entity_key, 0)
        field, value = journal_query(entity_key)

        async def work(client: AsyncClient) -> list[JournalEntry]:
            query = self._collection(client).where(filter=FieldFilter(field, "==", value))
            stream: AsyncIterator[Any] = query.stream(timeout=self._timeout_s)
            entries = []
            async for snapshot in stream:
                seq = (snapshot.to_dict() or {}).get("seq")
                entries.append(self._decode(snapshot, entity_key=entity_key,
                                            seq=seq if isinstance(seq, int) else -1))
            return sorted(entries, key=lambda e: (e.seq, e.created_at_ms, e.cache_key))

        return await self._call("entries_of", work)

    async def write(self, entry: JournalEntry) -> JournalWrite:
        """Create `entry`'s document unless it exists; report the entry that stands."""
        check_entry(entry)
        check_firestore_entry(self._config.collection, entry)
        fields = journal_document_fields(entry)

        async def work(client: AsyncClient) -> JournalWrite:
            reference = self._collection(client).document(entry.cache_key)
            for _ in range(_CREATE_ATTEMPTS):
                try:
                    await reference.create(fields, timeout=self._timeout_s)
                except api_exceptions.AlreadyExists:
                    pass
                else:
                    return JournalWrite(won=True, stored=entry)
                snapshot = await reference.get(timeout=self._timeout_s)
                if snapshot.exists:
                    # The key scopes (entity_key, seq) (seed 002): a standing
                    # document of another activation is corrupt, never replayed.
                    return JournalWrite(won=False, stored=self._decode(
                        snapshot, entity_key=entry.entity_key, seq=entry.seq))
            raise JournalUnavailable(
                f"{self._store}: write of {entry.cache_key} found the document present and "
                f"then absent {_CREATE_ATTEMPTS} times")

        return await self._call("write", work)

    async def read_rates(self, account: str) -> list[LearnedRateRecord]:
        """Every worker's learned rate for `account`, in one query; bad documents are skipped."""

        async def work(client: AsyncClient) -> list[LearnedRateRecord]:
            query = self._rates(client).where(filter=FieldFilter("account", "==", account))
            stream: AsyncIterator[Any] = query.stream(timeout=self._timeout_s)
            found = [rate_record(tuple((snapshot.to_dict() or {}).get(name) for name in
                                       ("account", "worker", "rate_rps", "updated_ms")))
                     async for snapshot in stream]
            return sorted((record for record in found if record is not None),
                          key=lambda record: record.worker)

        return await self._call("read_rates", work)

    async def write_rate(self, record: LearnedRateRecord) -> None:
        """Keep `record`, replacing its worker's document."""

        async def work(client: AsyncClient) -> None:
            reference = self._rates(client).document(
                rate_document_id(record.account, record.worker))
            await reference.set({"account": record.account, "worker": record.worker,
                                 "rate_rps": record.rate_rps, "updated_ms": record.updated_ms},
                                timeout=self._timeout_s)

        await self._call("write_rate", work)

    def _rates(self, client: AsyncClient) -> Any:
        return client.collection(f"{self._config.collection}_rates")

    async def close(self) -> None:
        """Close the client's gRPC channel; idempotent."""
        def mark_closed() -> None:
            self._closed = True

        await self._firestore.close(mark_closed)
