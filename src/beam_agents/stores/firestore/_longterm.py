"""The production long-term store on Cloud Firestore (``google-cloud-firestore`` AsyncClient).

Layout: ``{collection}/{entity id}/records/{document id}``, one document per
record. The ids, the document's fields and Firestore's limits are pure rules
in `beam_agents.stores.firestore._rules` (re-exported here); this module
adds the client, the queries and the transactions.

This module and `beam_agents.stores.firestore._client` (the client plumbing it
shares with the call journal) are the only ones of the store that import
``google.cloud``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

from google.cloud.firestore_v1 import AsyncClient, AsyncTransaction, async_transactional
from google.cloud.firestore_v1.async_document import AsyncDocumentReference
from google.cloud.firestore_v1.base_query import FieldFilter

from beam_agents.backend import seq_guard_allows, validate_key, validate_search
from beam_agents.errors import MemoryContractError, MemoryUnavailable
from beam_agents.memory import FlushReceipt, LongtermRecord
from beam_agents.stores._buffered import StoreBase
from beam_agents.stores._config import FirestoreLongtermConfig
from beam_agents.stores.firestore._client import FirestoreClient
from beam_agents.stores.firestore._rules import (
    MAX_DOCUMENT_BYTES,
    MAX_REQUEST_BYTES,
    MAX_WRITES_PER_COMMIT,
    ORDER_FIELD,
    RECORDS_COLLECTION,
    check_commit,
    check_entity_key,
    decode_document_id,
    document_fields,
    document_size,
    encode_document_id,
    entity_document_id,
    order_range,
    record_from_fields,
)

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "MAX_REQUEST_BYTES",
    "MAX_WRITES_PER_COMMIT",
    "FirestoreLongtermConfig",
    "FirestoreLongtermStore",
    "decode_document_id",
    "document_size",
    "encode_document_id",
    "entity_document_id",
]

_T = TypeVar("_T")


class FirestoreLongtermStore(StoreBase):
    """A `DiscardingLongtermStore` on Firestore, for the Dataflow deployment.

    Flush runs one Firestore transaction per entity: it reads the buffered
    keys' documents, applies the seq guard, and writes the survivors, so the
    whole activation's upserts commit or none do. Limits (writes per commit,
    document size, request size) are checked before any I/O and raise
    `StoreLimitError`. An entity key of any length has a document id (its hex
    up to 750 bytes, a digest id beyond), and every read compares the full
    key a record holds, so no key is refused for its length (invariant 7).
    ``google.api_core`` and ``google.auth`` errors, and calls past
    ``timeout_ms``, raise `MemoryUnavailable` with the buffer kept.

    The client is built on first use, inside the event loop that uses it, and
    closed by :meth:`close`. ``client_factory`` is a test seam; by default the
    client is ``AsyncClient(project=..., database=...)``.
    """

    def __init__(
        self,
        config: FirestoreLongtermConfig,
        *,
        client_factory: Callable[[], AsyncClient] | None = None,
    ) -> None:
        super().__init__(check=self._check_limits)
        self._config = config
        self._timeout_s = config.timeout_ms / 1000
        self._firestore = FirestoreClient(
            timeout_ms=config.timeout_ms, factory=client_factory or self._new_client,
            where=f"Firestore long-term store {config.project}/{config.database}",
            field="longterm_memory", unavailable=MemoryUnavailable,
            ensure_open=self._ensure_client_open, unwrap_value_errors=True)

    def _new_client(self) -> AsyncClient:
        return AsyncClient(project=self._config.project, database=self._config.database)

    @property
    def config(self) -> FirestoreLongtermConfig:
        """The settings this store was opened with."""
        return self._config

    # -- client and call plumbing ---------------------------------------------

    def _ensure_client_open(self, what: str) -> None:
        if self._closed:
            raise MemoryContractError("the FirestoreLongtermStore is closed")

    async def _call(self, what: str, work: Callable[[AsyncClient], Awaitable[_T]]) -> _T:
        self._require_open(what)
        return await self._firestore.call(what, work)

    def _records(self, client: AsyncClient, entity_key: bytes) -> Any:
        return (
            client.collection(self._config.collection)
            .document(entity_document_id(entity_key))
            .collection(RECORDS_COLLECTION)
        )

    def _document(self, client: AsyncClient, entity_key: bytes, key: str) -> AsyncDocumentReference:
        reference: AsyncDocumentReference = self._records(client, entity_key).document(
            encode_document_id(key)
        )
        return reference

    def _decode(self, entity_key: bytes, snapshot: Any) -> LongtermRecord:
        return record_from_fields(entity_key, snapshot.id, snapshot.to_dict(),
                                  where=snapshot.reference.path)

    def _check_limits(self, entity_key: bytes, pending: Mapping[str, LongtermRecord]) -> None:
        """Firestore's limits for one entity's buffer, bound into it: checked at stage."""
        check_entity_key(entity_key)
        check_commit(self._config.collection, pending)

    # -- the port ---------------------------------------------------------------

    async def load(self, entity_key: bytes, key: str) -> LongtermRecord | None:
        """Return the committed record for ``key``, or None."""
        check_entity_key(entity_key)
        validate_key(key)

        async def work(client: AsyncClient) -> LongtermRecord | None:
            reference = self._document(client, entity_key, key)
            snapshot = await reference.get(timeout=self._timeout_s)
            if not snapshot.exists:
                return None
            return self._decode(entity_key, snapshot)

        return await self._call("load", work)

    async def search(
        self, entity_key: bytes, prefix: str, limit: int
    ) -> tuple[LongtermRecord, ...]:
        """Return committed records with ``prefix`` in code point order, at most ``limit``."""
        check_entity_key(entity_key)
        validate_search(prefix, limit)
        if limit == 0:
            return ()
        low, high = order_range(prefix)

        async def work(client: AsyncClient) -> tuple[LongtermRecord, ...]:
            query = self._records(client, entity_key)
            if prefix:
                query = query.where(filter=FieldFilter(ORDER_FIELD, ">=", low)).where(
                    filter=FieldFilter(ORDER_FIELD, "<", high)
                )
            query = query.order_by(ORDER_FIELD).limit(limit)
            stream: AsyncIterator[Any] = query.stream(timeout=self._timeout_s)
            return tuple(
                [
                    self._decode(entity_key, snapshot) async for snapshot in stream
                ]
            )

        return await self._call("search", work)

    async def flush(self, entity_key: bytes) -> FlushReceipt:
        """Commit the entity's buffer in one seq-guarded Firestore transaction."""
        check_entity_key(entity_key)
        self._require_open("flush")
        batch = self._pending.snapshot(entity_key)
        if not batch:
            return FlushReceipt(entity_key=entity_key)
        self._check_limits(entity_key, batch)
        records = [batch[key] for key in sorted(batch)]

        async def work(client: AsyncClient) -> tuple[list[str], list[str]]:
            references = {
                record.key: self._document(client, entity_key, record.key) for record in records
            }
            key_of_path = {reference.path: key for key, reference in references.items()}

            @async_transactional
            async def apply(transaction: AsyncTransaction) -> tuple[list[str], list[str]]:
                stored: dict[str, int] = {}
                snapshots = client.get_all(
                    list(references.values()), transaction=transaction, timeout=self._timeout_s
                )
                async for snapshot in snapshots:
                    if snapshot.exists:
                        row = self._decode(entity_key, snapshot)
                        stored[key_of_path[snapshot.reference.path]] = row.seq
                committed: list[str] = []
                superseded: list[str] = []
                for record in records:
                    if seq_guard_allows(stored.get(record.key), record):
                        transaction.set(references[record.key], document_fields(record))
                        committed.append(record.key)
                    else:
                        superseded.append(record.key)
                return committed, superseded

            return await apply(client.transaction())

        committed, superseded = await self._call("flush", work)
        return self._settled(entity_key, batch, committed, superseded)

    async def close(self) -> None:
        """Close the client's gRPC channel and drop pending buffers; idempotent."""
        def mark_closed() -> None:
            self._closed = True
            self._pending.clear()

        await self._firestore.close(mark_closed)
