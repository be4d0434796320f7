"""The production long-term store on Cloud Firestore (``google-cloud-firestore`` AsyncClient).

Layout: ``{collection}/{entity id}/records/{document id}``, one document per
record, with the fields

* ``entity_key`` (bytes), ``value`` (bytes), ``seq`` and ``updated_at_ms``
  (integers): the record itself;
* ``key`` (string): the key as text, for people and tools reading the data;
* ``key_utf8_hex`` (string): the key's UTF-8 bytes in lowercase hex. Prefix
  search ranges and orders on it, and reads take the key from it.

Why a separate order field: Firestore orders strings by UTF-8 bytes (code
point order), but the Firestore-protocol test server compares JavaScript
strings by UTF-16 code units, which disagree for keys mixing U+E000..U+FFFF
with supplementary characters. Hex digits are ASCII, so both servers order
``key_utf8_hex`` exactly as the port requires, and every key starting with a
prefix ``p`` lies in ``[hex(p), hex(p) + "g")``. Range queries on
``__name__`` do not work on the test server, hence a field at all.

Ids: the entity id is ``hex(entity_key)`` (``-`` for the empty key). The
document id is the key with an escape scheme (:func:`encode_document_id`),
readable in the console and valid for any key: it never contains ``/``, is
never ``.``/``..``, never matches ``__.*__``, and stays under 1,500 bytes for
keys up to `MAX_KEY_BYTES`.

This is the only module that imports ``google.cloud``.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from google.api_core import exceptions as api_exceptions
from google.auth import exceptions as auth_exceptions
from google.cloud.firestore_v1 import AsyncClient, AsyncTransaction, async_transactional
from google.cloud.firestore_v1.async_document import AsyncDocumentReference
from google.cloud.firestore_v1.base_query import FieldFilter

from beam_agents.errors import (
    ConfigError,
    MemoryContractError,
    MemoryUnavailable,
    ScopeViolation,
    StoreLimitError,
)
from beam_agents.memory._store import (
    FlushReceipt,
    LongtermRecord,
    seq_guard_allows,
    validate_entity_key,
    validate_key,
    validate_search,
)
from beam_agents.stores._buffered import BufferedStore
from beam_agents.stores._config import FirestoreLongtermConfig

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

#: Firestore's documented limits, checked before any I/O.
MAX_WRITES_PER_COMMIT = 500
MAX_DOCUMENT_BYTES = 1_048_576
MAX_REQUEST_BYTES = 10 * 1_048_576
MAX_ID_BYTES = 1_500

RECORDS_COLLECTION = "records"
ORDER_FIELD = "key_utf8_hex"
# Above every hex digit, so hex(p) + "g" bounds every hex string starting with hex(p).
_HEX_CEILING = "g"

# Two-character escapes; "%" always starts one, so decoding is unambiguous.
_ESCAPES = {"%": "%%", "/": "%s"}
_LEADING_ESCAPES = {".": "%d", "_": "%u"}
_UNESCAPES = {"%": "%", "s": "/", "d": ".", "u": "_"}
_ESCAPE_PATTERN = re.compile(r"[%/]")
# Per-write overhead beyond the document itself in a CommitRequest: the full
# resource name prefix and protobuf framing. Generous on purpose.
_WRITE_OVERHEAD_BYTES = 256


def encode_document_id(key: str) -> str:
    """Map a record key to a valid Firestore document id, injectively.

    ``%`` becomes ``%%`` and ``/`` becomes ``%s`` anywhere; a leading ``.``
    becomes ``%d`` and a leading ``_`` becomes ``%u``. So the id has no ``/``,
    cannot be ``.`` or ``..`` and cannot match ``__.*__``; at most it doubles
    the key's size (1,024 bytes for a 512-byte key).
    """
    validate_key(key)
    body = _ESCAPE_PATTERN.sub(lambda match: _ESCAPES[match.group()], key)
    lead = _LEADING_ESCAPES.get(body[0])
    return body if lead is None else lead + body[1:]


def decode_document_id(document_id: str) -> str:
    """Invert :func:`encode_document_id`; raise ValueError for an id it cannot produce."""
    out: list[str] = []
    chars = iter(document_id)
    for char in chars:
        if char != "%":
            out.append(char)
            continue
        code = next(chars, "")
        if code not in _UNESCAPES:
            raise ValueError(f"{document_id!r} is not an encoded long-term key")
        out.append(_UNESCAPES[code])
    key = "".join(out)
    if not key or encode_document_id(key) != document_id:
        raise ValueError(f"{document_id!r} is not an encoded long-term key")
    return key


def entity_document_id(entity_key: bytes) -> str:
    """Return the entity's document id: lowercase hex, or ``-`` for the empty key."""
    return entity_key.hex() or "-"


def _string_size(text: str) -> int:
    return len(text.encode("utf-8")) + 1


def _fields(record: LongtermRecord) -> dict[str, Any]:
    return {
        "entity_key": record.entity_key,
        "key": record.key,
        ORDER_FIELD: record.key.encode("utf-8").hex(),
        "value": record.value,
        "seq": record.seq,
        "updated_at_ms": record.updated_at_ms,
    }


def document_size(collection: str, record: LongtermRecord) -> int:
    """Return the stored size of ``record``'s document per Firestore's size rules.

    Document name: each collection and document id in the path as a string
    (UTF-8 bytes + 1) plus 16. Fields: name as a string plus the value (string
    UTF-8 bytes + 1, bytes their length, integer 8). Document: name + fields + 32.
    """
    path = (
        collection,
        entity_document_id(record.entity_key),
        RECORDS_COLLECTION,
        encode_document_id(record.key),
    )
    name_size = sum(_string_size(part) for part in path) + 16
    fields_size = 0
    for name, value in _fields(record).items():
        fields_size += _string_size(name)
        if isinstance(value, str):
            fields_size += _string_size(value)
        elif isinstance(value, bytes):
            fields_size += len(value)
        else:
            fields_size += 8
    return name_size + fields_size + 32


def _check_entity_key(entity_key: bytes) -> None:
    size = len(entity_document_id(validate_entity_key(entity_key)))
    if size > MAX_ID_BYTES:
        raise StoreLimitError(
            f"entity_key of {len(entity_key)} bytes gives a {size}-byte Firestore document "
            f"id, over the {MAX_ID_BYTES}-byte limit; entity keys must be at most "
            f"{MAX_ID_BYTES // 2} bytes for the Firestore store",
            limit=MAX_ID_BYTES,
            attempted=size,
        )


def _find_cause(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


class FirestoreLongtermStore(BufferedStore):
    """A `DiscardingLongtermStore` on Firestore, for the Dataflow deployment.

    Flush runs one Firestore transaction per entity: it reads the buffered
    keys' documents, applies the seq guard, and writes the survivors, so the
    whole activation's upserts commit or none do. Limits (writes per commit,
    document size, request size, id length) are checked before any I/O and
    raise `StoreLimitError`. ``google.api_core`` and ``google.auth`` errors, and
    calls past ``timeout_ms``, raise `MemoryUnavailable` with the buffer kept.

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
        super().__init__()
        self._config = config
        self._client_factory = client_factory
        self._client: AsyncClient | None = None
        self._client_lock = asyncio.Lock()
        self._timeout_s = config.timeout_ms / 1000

    @property
    def config(self) -> FirestoreLongtermConfig:
        """The settings this store was opened with."""
        return self._config

    # -- client and call plumbing ---------------------------------------------

    def _new_client(self) -> AsyncClient:
        if self._client_factory is not None:
            return self._client_factory()
        return AsyncClient(project=self._config.project, database=self._config.database)

    async def _get_client(self) -> AsyncClient:
        async with self._client_lock:
            if self._closed:
                raise MemoryContractError("the FirestoreLongtermStore is closed")
            if self._client is None:
                # Credential discovery may block on the metadata server; keep it
                # off the event loop. The gRPC channel itself is created lazily
                # on first RPC, in this loop.
                self._client = await asyncio.to_thread(self._new_client)
            return self._client

    async def _call(self, what: str, work: Callable[[AsyncClient], Awaitable[_T]]) -> _T:
        self._require_open(what)
        where = f"Firestore long-term store {self._config.project}/{self._config.database}"
        try:
            async with asyncio.timeout(self._timeout_s) as deadline:
                return await work(await self._get_client())
        except auth_exceptions.DefaultCredentialsError as exc:
            raise ConfigError(
                f"{where}: no Google credentials found ({exc}); configure Application "
                "Default Credentials for the workers",
                field="longterm_memory",
            ) from exc
        except (api_exceptions.GoogleAPIError, auth_exceptions.GoogleAuthError) as exc:
            raise MemoryUnavailable(f"{where}: {what} failed: {exc}") from exc
        except TimeoutError as exc:
            raise MemoryUnavailable(
                f"{where}: {what} did not finish within {self._config.timeout_ms} ms"
            ) from exc
        except ValueError as exc:
            # The SDK's transaction runner can replace the transport error (or
            # the cancellation of an expired deadline) with a ValueError from
            # its rollback, chained to the original.
            if deadline.expired():
                raise MemoryUnavailable(
                    f"{where}: {what} did not finish within {self._config.timeout_ms} ms"
                ) from exc
            cause = _find_cause(exc, api_exceptions.GoogleAPIError)
            if cause is None:
                raise
            raise MemoryUnavailable(f"{where}: {what} failed: {cause}") from exc

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
        where = snapshot.reference.path
        data: Mapping[str, Any] | None = snapshot.to_dict()
        if data is None:
            raise MemoryContractError(f"{where}: document has no data")
        stored_entity = data.get("entity_key")
        if stored_entity != entity_key:
            # Only a hand-edited document can get here; never hand it to the
            # wrong tenant (invariant 7).
            raise ScopeViolation(
                f"{where} holds a record of another entity",
                expected=entity_key,
                actual=stored_entity if isinstance(stored_entity, bytes) else b"",
            )
        try:
            # The key comes from its hex field: binary-exact, and the field the
            # index orders by. The test server mangles some strings (it drops a
            # leading U+FEFF), so the readable `key` field is not read back.
            key = bytes.fromhex(data[ORDER_FIELD]).decode("utf-8")
            if encode_document_id(key) != snapshot.id:
                raise ValueError(f"field {ORDER_FIELD} names another key, {key!r}")
            return LongtermRecord(
                entity_key=entity_key,
                key=key,
                value=data["value"],
                seq=data["seq"],
                updated_at_ms=data["updated_at_ms"],
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise MemoryContractError(f"{where} is not a long-term record: {exc!r}") from exc

    # -- limits ---------------------------------------------------------------

    def _check_limits(self, pending: Mapping[str, LongtermRecord]) -> None:
        if len(pending) > MAX_WRITES_PER_COMMIT:
            raise StoreLimitError(
                f"{len(pending)} pending upserts for one entity exceed Firestore's "
                f"{MAX_WRITES_PER_COMMIT} writes per commit; flush in smaller activations",
                limit=MAX_WRITES_PER_COMMIT,
                attempted=len(pending),
            )
        request_size = 0
        for key in sorted(pending):
            size = document_size(self._config.collection, pending[key])
            if size > MAX_DOCUMENT_BYTES:
                raise StoreLimitError(
                    f"long-term record {key!r} makes a {size}-byte Firestore document, over "
                    f"the {MAX_DOCUMENT_BYTES}-byte limit; store a smaller value",
                    limit=MAX_DOCUMENT_BYTES,
                    attempted=size,
                )
            request_size += size + _WRITE_OVERHEAD_BYTES
        if request_size > MAX_REQUEST_BYTES:
            raise StoreLimitError(
                f"pending upserts need a commit of about {request_size} bytes, over "
                f"Firestore's {MAX_REQUEST_BYTES}-byte request limit",
                limit=MAX_REQUEST_BYTES,
                attempted=request_size,
            )

    # -- the port ---------------------------------------------------------------

    async def load(self, entity_key: bytes, key: str) -> LongtermRecord | None:
        """Return the committed record for ``key``, or None."""
        _check_entity_key(entity_key)
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
        _check_entity_key(entity_key)
        validate_search(prefix, limit)
        if limit == 0:
            return ()
        low = prefix.encode("utf-8").hex()

        async def work(client: AsyncClient) -> tuple[LongtermRecord, ...]:
            query = self._records(client, entity_key)
            if prefix:
                query = query.where(filter=FieldFilter(ORDER_FIELD, ">=", low)).where(
                    filter=FieldFilter(ORDER_FIELD, "<", low + _HEX_CEILING)
                )
            query = query.order_by(ORDER_FIELD).limit(limit)
            stream: AsyncIterator[Any] = query.stream(timeout=self._timeout_s)
            return tuple(
                [
                    self._decode(entity_key, snapshot) async for snapshot in stream
                ]
            )

        return await self._call("search", work)

    async def stage(
        self, entity_key: bytes, records: Sequence[LongtermRecord]
    ) -> tuple[str, ...]:
        """Buffer upserts in this object until flush; limits are checked here. No I/O."""
        self._require_open("stage")
        _check_entity_key(entity_key)
        return self._pending.stage(entity_key, records, check=self._check_limits)

    async def flush(self, entity_key: bytes) -> FlushReceipt:
        """Commit the entity's buffer in one seq-guarded Firestore transaction."""
        _check_entity_key(entity_key)
        self._require_open("flush")
        batch = self._pending.snapshot(entity_key)
        if not batch:
            return FlushReceipt(entity_key=entity_key)
        self._check_limits(batch)
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
                        transaction.set(references[record.key], _fields(record))
                        committed.append(record.key)
                    else:
                        superseded.append(record.key)
                return committed, superseded

            return await apply(client.transaction())

        committed, superseded = await self._call("flush", work)
        return self._settled(entity_key, batch, committed, superseded)

    async def close(self) -> None:
        """Close the client's gRPC channel and drop pending buffers; idempotent."""
        async with self._client_lock:
            self._closed = True
            self._pending.clear()
            client, self._client = self._client, None
        if client is not None:
            await _close_client(client)


async def _close_client(client: AsyncClient) -> None:
    client.close()  # type: ignore[no-untyped-call]  # public; releases HTTP resources only
    # The AsyncClient has no public way to close its gRPC channel. The GAPIC
    # client it wraps does (transport.close()); reach it only if it was built.
    api = getattr(client, "_firestore_api_internal", None)
    if api is not None:
        with contextlib.suppress(Exception):
            await api.transport.close()
