"""Firestore's id, layout and size rules for the long-term store, as pure functions.

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

Ids: the entity id is ``hex(entity_key)`` (``-`` for the empty key) while
that fits Firestore's 1,500-byte id limit, i.e. for entity keys of up to 750
bytes (`MAX_HEX_ID_ENTITY_BYTES`); a longer key's id is ``sha256-`` and the
hex SHA-256 of the key (:func:`entity_document_id`), which no hex id can
equal. Every record keeps the full ``entity_key`` and a read compares it, so
two entities never share records even if their ids did (invariant 7). Keys
of up to 750 bytes keep the ids they always had. The document id is the key
with an escape scheme (:func:`encode_document_id`), readable in the console
and valid for any key: it never contains ``/``, is never ``.``/``..``, never
matches ``__.*__``, and stays under 1,500 bytes for keys up to `MAX_KEY_BYTES`
(so ``key_utf8_hex``, at most 1,024 characters, is always queryable).

No entity key is refused for its length: the one bound left is the 1 MiB
document, which holds the key once (``entity_key``) beside the value.

Limits are Firestore's documented ones, checked before any I/O so that a
record the server would refuse fails at stage time with `StoreLimitError`,
not as a failed commit. This module is pure (stdlib, protobuf and
beam_agents only): the rules are tested without ``google.cloud``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from beam_agents.backend import validate_entity_key, validate_key
from beam_agents.errors import (
    ConfigError,
    MemoryContractError,
    ScopeViolation,
    StoreLimitError,
)
from beam_agents.memory import LongtermRecord

__all__ = [
    "LONG_ENTITY_ID_PREFIX",
    "MAX_DOCUMENT_BYTES",
    "MAX_HEX_ID_ENTITY_BYTES",
    "MAX_ID_BYTES",
    "MAX_QUERY_VALUE_BYTES",
    "MAX_REQUEST_BYTES",
    "MAX_WRITES_PER_COMMIT",
    "ORDER_FIELD",
    "RECORDS_COLLECTION",
    "check_commit",
    "check_entity_key",
    "decode_document_id",
    "document_fields",
    "document_path",
    "document_size",
    "encode_document_id",
    "entity_document_id",
    "order_range",
    "record_from_fields",
    "require_collection_id",
]

#: Firestore's documented limits, checked before any I/O.
MAX_WRITES_PER_COMMIT = 500
MAX_DOCUMENT_BYTES = 1_048_576
MAX_REQUEST_BYTES = 10 * 1_048_576
#: The longest collection or document id, in UTF-8 bytes.
MAX_ID_BYTES = 1_500
#: The largest value a query may filter on (a string counts its UTF-8 bytes + 1);
#: the official emulator refuses a larger one ("too large to be used in a query").
MAX_QUERY_VALUE_BYTES = 1_500
#: The longest entity key whose hex is its entity id; longer keys get a digest id.
MAX_HEX_ID_ENTITY_BYTES = MAX_ID_BYTES // 2
#: How a digest entity id starts; not a hex digit, so it never equals a hex id.
LONG_ENTITY_ID_PREFIX = "sha256-"
# A field value may be 1 MiB - 89 bytes; every document here carries more than
# 89 bytes besides its largest value, so MAX_DOCUMENT_BYTES is the binding limit.

RECORDS_COLLECTION = "records"
ORDER_FIELD = "key_utf8_hex"
# Above every hex digit, so hex(p) + "g" bounds every hex string starting with hex(p).
_HEX_CEILING = "g"

# Ids Firestore reserves for itself.
_RESERVED_ID = re.compile(r"__.*__", re.DOTALL)
# Two-character escapes; "%" always starts one, so decoding is unambiguous.
_ESCAPES = {"%": "%%", "/": "%s"}
_LEADING_ESCAPES = {".": "%d", "_": "%u"}
_UNESCAPES = {"%": "%", "s": "/", "d": ".", "u": "_"}
_ESCAPE_PATTERN = re.compile(r"[%/]")
# Per-write overhead beyond the document itself in a CommitRequest: the full
# resource name prefix and protobuf framing. Generous on purpose.
_WRITE_OVERHEAD_BYTES = 256


# -- ids ----------------------------------------------------------------------------


def require_collection_id(collection: object, *, owner: str = "FirestoreLongtermConfig") -> None:
    """Check that ``collection`` is a usable top-level collection id.

    Raises:
        ConfigError: ``collection`` is not a non-empty str, contains ``/``, is
            ``.`` or ``..``, matches ``__.*__``, is not UTF-8-encodable, or is
            longer than `MAX_ID_BYTES`; the message names
            ``<owner>.collection`` (``FirestoreLongtermConfig`` by default).
    """
    problem = None
    if not isinstance(collection, str) or not collection:
        problem = "must be a non-empty str"
    elif "/" in collection:
        problem = "must not contain '/'"
    elif collection in (".", ".."):
        problem = "must not be '.' or '..'"
    elif _RESERVED_ID.fullmatch(collection):
        problem = "must not match __.*__ (reserved by Firestore)"
    else:
        try:
            size = len(collection.encode("utf-8"))
        except UnicodeEncodeError:
            problem = "must be valid Unicode text"
        else:
            if size > MAX_ID_BYTES:
                problem = f"must be at most {MAX_ID_BYTES} UTF-8 bytes"
    if problem is not None:
        raise ConfigError(
            f"{owner}.collection {problem}, got {collection!r}",
            field="collection",
        )


def encode_document_id(key: str) -> str:
    """Map a record key to a valid Firestore document id, injectively.

    ``%`` becomes ``%%`` and ``/`` becomes ``%s`` anywhere; a leading ``.``
    becomes ``%d`` and a leading ``_`` becomes ``%u``. So the id has no ``/``,
    cannot be ``.`` or ``..`` and cannot match ``__.*__``; at most it doubles
    the key's size (1,024 bytes for a 512-byte key).

    Raises:
        ValueError: ``key`` is not a valid record key (see `validate_key`).
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
    """Return the entity's document id: lowercase hex, ``-`` for the empty key, or a digest.

    Keys of up to `MAX_HEX_ID_ENTITY_BYTES` bytes: their hex (as ever). Longer
    keys, whose hex would pass `MAX_ID_BYTES`: `LONG_ENTITY_ID_PREFIX` and the
    hex SHA-256 of the key (71 characters).
    """
    if len(entity_key) > MAX_HEX_ID_ENTITY_BYTES:
        return LONG_ENTITY_ID_PREFIX + hashlib.sha256(entity_key).hexdigest()
    return entity_key.hex() or "-"


def check_entity_key(entity_key: bytes) -> None:
    """Check that ``entity_key`` is bytes. Any length has an id (:func:`entity_document_id`).

    Raises:
        TypeError: ``entity_key`` is not bytes.
    """
    validate_entity_key(entity_key)


def document_path(collection: str, entity_key: bytes, key: str) -> tuple[str, str, str, str]:
    """Return the collection and document ids on the way to a record's document."""
    return (collection, entity_document_id(entity_key), RECORDS_COLLECTION,
            encode_document_id(key))


def order_range(prefix: str) -> tuple[str, str]:
    """Return ``(low, high)``: every key starting with ``prefix`` has `ORDER_FIELD` in it.

    The range is half-open, ``low <= value < high``; an empty prefix gives
    ``("", "g")``, which holds every hex string.
    """
    low = prefix.encode("utf-8").hex()
    return low, low + _HEX_CEILING


# -- documents ------------------------------------------------------------------------


def document_fields(record: LongtermRecord) -> dict[str, Any]:
    """Return the fields of ``record``'s document (see the module docstring)."""
    return {
        "entity_key": record.entity_key,
        "key": record.key,
        ORDER_FIELD: record.key.encode("utf-8").hex(),
        "value": record.value,
        "seq": record.seq,
        "updated_at_ms": record.updated_at_ms,
    }


def record_from_fields(
    entity_key: bytes, document_id: str, data: Mapping[str, Any] | None, *, where: str
) -> LongtermRecord:
    """Read a record back from its document's fields, for the entity that asked.

    Args:
        entity_key: The entity whose records are being read.
        document_id: The id the document was found under.
        data: The document's fields; None for a document without data.
        where: The document's path, for error messages.

    Raises:
        ScopeViolation: the document holds another entity's record.
        MemoryContractError: the document is not a long-term record, or its
            key does not encode to ``document_id``.
    """
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
        if encode_document_id(key) != document_id:
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


def _string_size(text: str) -> int:
    return len(text.encode("utf-8")) + 1


def document_size(collection: str, record: LongtermRecord) -> int:
    """Return the stored size of ``record``'s document per Firestore's size rules.

    Document name: each collection and document id in the path as a string
    (UTF-8 bytes + 1) plus 16. Fields: name as a string plus the value (string
    UTF-8 bytes + 1, bytes their length, integer 8). Document: name + fields + 32.
    """
    path = document_path(collection, record.entity_key, record.key)
    name_size = sum(_string_size(part) for part in path) + 16
    fields_size = 0
    for name, value in document_fields(record).items():
        fields_size += _string_size(name)
        if isinstance(value, str):
            fields_size += _string_size(value)
        elif isinstance(value, bytes):
            fields_size += len(value)
        else:
            fields_size += 8
    return name_size + fields_size + 32


def check_commit(collection: str, pending: Mapping[str, LongtermRecord]) -> None:
    """Check that one entity's pending upserts fit in one Firestore commit.

    Raises:
        StoreLimitError: more than `MAX_WRITES_PER_COMMIT` upserts, a document
            over `MAX_DOCUMENT_BYTES` (the first in key order is named), or a
            commit request over `MAX_REQUEST_BYTES`; the error carries the
            limit and the attempted count or size.
    """
    if len(pending) > MAX_WRITES_PER_COMMIT:
        raise StoreLimitError(
            f"{len(pending)} pending upserts for one entity exceed Firestore's "
            f"{MAX_WRITES_PER_COMMIT} writes per commit; flush in smaller activations",
            limit=MAX_WRITES_PER_COMMIT,
            attempted=len(pending),
        )
    request_size = 0
    for key in sorted(pending):
        size = document_size(collection, pending[key])
        if size > MAX_DOCUMENT_BYTES:
            entity = len(pending[key].entity_key)
            held = (f" (it holds its {entity}-byte entity key)"
                    if entity > MAX_HEX_ID_ENTITY_BYTES else "")
            raise StoreLimitError(
                f"long-term record {key!r} makes a {size}-byte Firestore document, over "
                f"the {MAX_DOCUMENT_BYTES}-byte limit{held}; store a smaller value",
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
