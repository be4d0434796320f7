"""What every call-journal backend checks, and Firestore's journal layout, as pure functions.

A journal entry crosses two trust boundaries: the caller hands it to
``write``, and a store hands a row back to ``read``. Both are checked here,
once for every backend:

* :func:`check_entry` refuses, before any I/O, an entry no backend can store
  faithfully (wrong types, a cache key that is not 64 lowercase hex digits, a
  digest that does not match the response, integers beyond a signed 64-bit
  column). Storing it would plant a row that later reads back as corrupt.
* :func:`decode_entry` rebuilds an entry from a stored row and raises
  `JournalCorruptError` (naming the store and the key) for anything that is
  not exactly what :func:`check_entry` admits, or that belongs to another
  ``(entity_key, seq)`` than the one asked for. A replay must never be handed
  bytes that are not provably what the provider returned (invariants 3, 9).

Firestore layout: ``{collection}/{cache key}``, one document per call, with
the fields of :func:`journal_document_fields`. The entity is kept in full, and
as ``entity_key_digest`` (the hex SHA-256 of its bytes, 64 characters):

* an entity key of up to 749 bytes (`MAX_HEX_QUERY_ENTITY_BYTES`) is kept as
  lowercase hex, ``entity_key_hex``, and reads query on it: its hex is at most
  1,498 characters, a 1,499-byte value, within the 1,500 bytes Firestore lets
  a query filter on. These documents are the format every earlier version
  wrote (plus the digest), so their entries, old and new, are found alike;
* a longer key is kept as bytes, ``entity_key`` (half the size of its hex,
  never queried), and reads query on ``entity_key_digest``.

:func:`journal_query` picks the field. Whichever matched, the read compares
the full stored key with the one asked for, so two entities never share
entries (invariant 7). No entity key is refused for its length; the bound is
the 1 MiB document, which holds the key once beside the response. Queries
use fields, not ``__name__`` ranges, which the npm test server does not
support; hex and digests are ASCII, so they compare alike on every server.
``expire_at`` is a timestamp so that a Firestore TTL policy on that field can
garbage-collect entries; the journal itself never reads a clock (invariant 2).
See docs/design-firestore-keys.md.

Sizes follow Firestore's documented storage-size rules, as
`beam_agents.stores.firestore._rules.document_size` does for long-term
records; this module imports neither sqlite3 nor ``google.cloud``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from beam_agents.backend import JournalEntry
from beam_agents.errors import JournalCorruptError, StoreLimitError
from beam_agents.model import MAX_REQUEST_SUMMARY_BYTES, LearnedRateRecord
from beam_agents.stores.firestore._rules import MAX_DOCUMENT_BYTES, MAX_QUERY_VALUE_BYTES

__all__ = [
    "DIGEST_FIELD",
    "HEX_FIELD",
    "KEY_FIELD",
    "MAX_HEX_QUERY_ENTITY_BYTES",
    "MAX_INT64",
    "MAX_TIMESTAMP_MS",
    "MIN_INT64",
    "MIN_TIMESTAMP_MS",
    "check_cache_key",
    "check_entry",
    "check_firestore_entry",
    "check_read",
    "decode_entry",
    "entity_key_digest",
    "entry_from_document",
    "firestore_max_entity_key_bytes",
    "firestore_max_response_bytes",
    "journal_document_fields",
    "journal_document_size",
    "journal_query",
    "ms_from_timestamp",
    "rate_document_id",
    "rate_record",
    "require_int64",
    "timestamp_from_ms",
]

#: The range of a signed 64-bit integer: SQLite's INTEGER and Firestore's integer.
MIN_INT64 = -(2**63)
MAX_INT64 = 2**63 - 1

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
#: Firestore timestamps run from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z.
MIN_TIMESTAMP_MS = (datetime(1, 1, 1, tzinfo=UTC) - _EPOCH) // _MS
MAX_TIMESTAMP_MS = (datetime(9999, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC) - _EPOCH) // _MS

# The replay-cache key is a sha256 hexdigest (seed 002): lowercase, 64 digits.
# It is also the Firestore document id, valid as it stands. So is an entity digest.
_CACHE_KEY = re.compile(r"[0-9a-f]{64}")

#: The Firestore journal's entity fields: the key as hex (queried, keys of up to
#: `MAX_HEX_QUERY_ENTITY_BYTES`), as bytes (longer keys), and its digest (always).
HEX_FIELD = "entity_key_hex"
KEY_FIELD = "entity_key"
DIGEST_FIELD = "entity_key_digest"
#: The longest entity key whose hex a query may filter on: a string counts its
#: UTF-8 bytes + 1, so hex of up to 1,499 characters; hex has an even length.
MAX_HEX_QUERY_ENTITY_BYTES = (MAX_QUERY_VALUE_BYTES - 1) // 2

# Per Firestore's storage-size rules (bytes per value of each type).
_BOOL_SIZE = 1
_NUMBER_SIZE = 8
_TIMESTAMP_SIZE = 8
_NAME_OVERHEAD = 16
_DOCUMENT_OVERHEAD = 32


# -- what a write may carry ------------------------------------------------------------


def check_cache_key(cache_key: object) -> str:
    """Return `cache_key` if it is 64 lowercase hex digits; raise otherwise.

    Raises:
        TypeError: `cache_key` is not a str.
        ValueError: it is not a sha256 hexdigest.
    """
    if not isinstance(cache_key, str):
        raise TypeError(f"cache_key must be str, not {type(cache_key).__name__}")
    if _CACHE_KEY.fullmatch(cache_key) is None:
        raise ValueError(f"cache_key must be 64 lowercase hex digits, got {cache_key!r}")
    return cache_key


def require_int64(value: object, name: str, *, low: int = MIN_INT64) -> int:
    """Return `value` if it is an int (not a bool) in ``[low, MAX_INT64]``; raise otherwise.

    Raises:
        TypeError: not an int.
        ValueError: below `low`.
        StoreLimitError: above `MAX_INT64`, the largest integer either backend stores.
    """
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be int, not {type(value).__name__}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    if value > MAX_INT64:
        raise StoreLimitError(f"{name} {value} is over the largest storable integer {MAX_INT64}",
                              limit=MAX_INT64, attempted=value)
    return value


def check_read(entity_key: object, seq: object) -> None:
    """Check the arguments of ``read``: bytes and a storable seq.

    Raises:
        TypeError: `entity_key` is not bytes or `seq` is not an int.
        ValueError: `seq` is negative.
        StoreLimitError: `seq` does not fit a signed 64-bit integer.
    """
    if not isinstance(entity_key, bytes):
        raise TypeError(f"entity_key must be bytes, not {type(entity_key).__name__}")
    require_int64(seq, "seq", low=0)


def check_entry(entry: object) -> JournalEntry:
    """Return `entry` if every backend can store it and read it back unchanged.

    Raises:
        TypeError: `entry` is not a `JournalEntry`, or a field has the wrong type.
        ValueError: a malformed cache key, a negative seq, or a response
            whose sha256 is not `JournalEntry.sha256`.
        StoreLimitError: seq or a time does not fit a signed 64-bit integer.
    """
    if not isinstance(entry, JournalEntry):
        raise TypeError(f"a journal writes JournalEntry, not {type(entry).__name__}")
    check_cache_key(entry.cache_key)
    check_read(entry.entity_key, entry.seq)
    for name in ("response", "sha256"):
        if not isinstance(getattr(entry, name), bytes):
            raise TypeError(f"JournalEntry.{name} must be bytes, "
                            f"not {type(getattr(entry, name)).__name__}")
    if not isinstance(entry.digest_only, bool):
        raise TypeError(f"JournalEntry.digest_only must be bool, "
                        f"not {type(entry.digest_only).__name__}")
    require_int64(entry.created_at_ms, "JournalEntry.created_at_ms")
    require_int64(entry.expire_at_ms, "JournalEntry.expire_at_ms")
    if not isinstance(entry.request, str):
        raise TypeError(f"JournalEntry.request must be str, not {type(entry.request).__name__}")
    if len(entry.request.encode("utf-8", "surrogatepass")) > MAX_REQUEST_SUMMARY_BYTES:
        raise StoreLimitError(f"journal entry {entry.cache_key}: its request summary is over "
                              f"{MAX_REQUEST_SUMMARY_BYTES} bytes",
                              limit=MAX_REQUEST_SUMMARY_BYTES,
                              attempted=len(entry.request.encode("utf-8", "surrogatepass")))
    if not entry.digest_only and hashlib.sha256(entry.response).digest() != entry.sha256:
        raise ValueError(f"journal entry {entry.cache_key}: sha256 does not match the response")
    return entry


# -- what a read may return --------------------------------------------------------------


def _corrupt(store: str, cache_key: str, reason: str) -> JournalCorruptError:
    return JournalCorruptError(
        f"{store}: stored entry {cache_key!r} is corrupt: {reason}; it is never replayed. "
        "Delete the row so that the call is paid again, or restore the journal",
        store=store, key=cache_key)


def decode_entry(row: Mapping[str, object], *, store: str, cache_key: str,
                 entity_key: bytes, seq: int) -> JournalEntry:
    """Rebuild the entry a backend stored under `cache_key`, or raise `JournalCorruptError`.

    Args:
        row: The stored values by `JournalEntry` field name, already mapped
            from the backend's types (``digest_only`` may be a 0/1 integer).
        store: Names the store in the error, e.g. ``"sqlite call journal x.db"``.
        cache_key: The key the row was found under (primary key or document id).
        entity_key: The entity that was asked for (or that the written entry names).
        seq: The seq that was asked for (or that the written entry names).

    Raises:
        JournalCorruptError: a field is missing or of the wrong type, the key
            is malformed or differs from `cache_key`, the digest is not 32
            bytes or does not match the response, or the row belongs to
            another ``(entity_key, seq)``.
    """

    def corrupt(reason: str) -> JournalCorruptError:
        return _corrupt(store, cache_key, reason)

    digest_only = row.get("digest_only")
    if type(digest_only) not in (bool, int) or digest_only not in (0, 1):
        raise corrupt(f"digest_only is {digest_only!r}, not a boolean")
    values: dict[str, Any] = {"digest_only": bool(digest_only)}
    for name, kind in (("cache_key", str), ("entity_key", bytes), ("seq", int),
                       ("response", bytes), ("sha256", bytes), ("created_at_ms", int),
                       ("expire_at_ms", int)):
        value = row.get(name)
        if type(value) is not kind:
            raise corrupt(f"{name} is {type(value).__name__}, not {kind.__name__}")
        values[name] = value
    request = row.get("request", "")
    if request is None:  # a row of an earlier version: no summary
        request = ""
    if not isinstance(request, str):
        raise corrupt(f"request is {type(request).__name__}, not str")
    values["request"] = request
    if values["cache_key"] != cache_key or _CACHE_KEY.fullmatch(cache_key) is None:
        raise corrupt(f"it carries key {values['cache_key']!r}; keys are 64 lowercase hex digits")
    if values["entity_key"] != entity_key:
        raise corrupt(f"it belongs to entity {values['entity_key']!r}, not {entity_key!r}")
    if values["seq"] != seq:
        raise corrupt(f"it belongs to seq {values['seq']}, not {seq}")
    try:
        entry = JournalEntry(**values)
    except ValueError as exc:
        raise corrupt(str(exc)) from exc
    if not entry.digest_only and hashlib.sha256(entry.response).digest() != entry.sha256:
        raise corrupt("its sha256 does not match its response bytes")
    return entry


# -- Firestore's layout and limits ----------------------------------------------------------


def timestamp_from_ms(ms: int) -> datetime:
    """The UTC datetime `ms` milliseconds after the epoch, exactly (no float rounding)."""
    return _EPOCH + timedelta(milliseconds=ms)


def ms_from_timestamp(value: datetime) -> int:
    """Invert :func:`timestamp_from_ms`; sub-millisecond digits are floored."""
    return (value - _EPOCH) // _MS


def entity_key_digest(entity_key: bytes) -> str:
    """The hex SHA-256 of `entity_key`: 64 characters, for a key of any length."""
    return hashlib.sha256(entity_key).hexdigest()


def journal_query(entity_key: bytes) -> tuple[str, str]:
    """The field and value a read of `entity_key` filters on (with ``seq``).

    ``entity_key_hex`` for a key of up to `MAX_HEX_QUERY_ENTITY_BYTES` bytes
    (its documents, of any version, carry it), ``entity_key_digest`` for a
    longer one (whose hex no query may filter on).
    """
    if len(entity_key) <= MAX_HEX_QUERY_ENTITY_BYTES:
        return HEX_FIELD, entity_key.hex()
    return DIGEST_FIELD, entity_key_digest(entity_key)


def journal_document_fields(entry: JournalEntry) -> dict[str, Any]:
    """The fields of `entry`'s Firestore document (see the module docstring)."""
    key: dict[str, Any] = (
        {HEX_FIELD: entry.entity_key.hex()}
        if len(entry.entity_key) <= MAX_HEX_QUERY_ENTITY_BYTES
        else {KEY_FIELD: entry.entity_key})
    return {
        **key,
        DIGEST_FIELD: entity_key_digest(entry.entity_key),
        "seq": entry.seq,
        "response": entry.response,
        "sha256": entry.sha256,
        "digest_only": entry.digest_only,
        "created_at_ms": entry.created_at_ms,
        "expire_at": timestamp_from_ms(entry.expire_at_ms),
        **({"request": entry.request} if entry.request else {}),
    }


def _string_size(text: str) -> int:
    return len(text.encode("utf-8")) + 1


def journal_document_size(collection: str, entry: JournalEntry) -> int:
    """The stored size of `entry`'s document per Firestore's storage-size rules.

    Name: each id on the path as a string (UTF-8 bytes + 1) plus 16. Fields:
    the name as a string plus the value (string UTF-8 bytes + 1, bytes their
    length, boolean 1, integer and timestamp 8). Document: name + fields + 32.
    """
    size = _string_size(collection) + _string_size(entry.cache_key) + _NAME_OVERHEAD
    for name, value in journal_document_fields(entry).items():
        size += _string_size(name)
        if isinstance(value, str):
            size += _string_size(value)
        elif isinstance(value, bytes):
            size += len(value)
        elif isinstance(value, bool):
            size += _BOOL_SIZE
        elif isinstance(value, datetime):
            size += _TIMESTAMP_SIZE
        else:
            size += _NUMBER_SIZE
    return size + _DOCUMENT_OVERHEAD


def firestore_max_response_bytes(collection: str, entity_key: bytes) -> int:
    """The largest response a full (not digest-only) entry of `entity_key` may carry."""
    # Without a request summary: one (at most MAX_REQUEST_SUMMARY_BYTES) takes its room
    # from the ~46 KB the facade's threshold leaves below this.
    empty = JournalEntry(cache_key="0" * 64, entity_key=entity_key, seq=0, response=b"",
                         sha256=bytes(32), digest_only=True, created_at_ms=0, expire_at_ms=0)
    # Switching digest_only to False changes no size: a boolean is 1 byte either way.
    return MAX_DOCUMENT_BYTES - journal_document_size(collection, empty)


def firestore_max_entity_key_bytes(collection: str) -> int:
    """The longest entity key whose (digest-only) entries fit one Firestore document.

    A key longer than `MAX_HEX_QUERY_ENTITY_BYTES` is stored as bytes, so each
    byte of it adds one byte to the document (1,048,238 bytes in the default
    collection, ``beam_agents_calls``). A full entry leaves the key the room
    its response does not take.
    """
    sample = MAX_HEX_QUERY_ENTITY_BYTES + 1
    return sample + firestore_max_response_bytes(collection, bytes(sample))


def check_firestore_entry(collection: str, entry: JournalEntry) -> None:
    """Check that `entry` fits one Firestore document, before any I/O.

    The model facade journals a response too large to keep digest-only, so
    an entry over the limit here is a caller's error, not a store outage.

    Raises:
        StoreLimitError: the expiry is outside Firestore's timestamp range, or
            the document would exceed `MAX_DOCUMENT_BYTES` (which a long
            entity key can make it: the document holds the key once).
    """
    if not MIN_TIMESTAMP_MS <= entry.expire_at_ms <= MAX_TIMESTAMP_MS:
        raise StoreLimitError(
            f"journal entry {entry.cache_key}: expire_at_ms {entry.expire_at_ms} is outside "
            f"Firestore's timestamp range [{MIN_TIMESTAMP_MS}, {MAX_TIMESTAMP_MS}]",
            limit=MAX_TIMESTAMP_MS, attempted=entry.expire_at_ms)
    size = journal_document_size(collection, entry)
    if size > MAX_DOCUMENT_BYTES:
        room = firestore_max_response_bytes(collection, entry.entity_key)
        advice = (f"journal a response over {room} bytes digest-only" if room >= 0 else
                  f"its {len(entry.entity_key)}-byte entity key is over the "
                  f"{firestore_max_entity_key_bytes(collection)} bytes one document holds")
        raise StoreLimitError(
            f"journal entry {entry.cache_key} makes a {size}-byte Firestore document, over "
            f"the {MAX_DOCUMENT_BYTES}-byte limit; {advice}",
            limit=MAX_DOCUMENT_BYTES, attempted=size)


def _stored_entity(data: Mapping[str, Any], *, store: str, document_id: str) -> bytes:
    """The full entity key a journal document holds, checked against its digest."""
    if HEX_FIELD in data and KEY_FIELD in data:
        raise _corrupt(store, document_id,
                       f"it carries both {HEX_FIELD} and {KEY_FIELD}; one holds the key")
    if KEY_FIELD in data:
        stored = data[KEY_FIELD]
        if type(stored) is not bytes:
            raise _corrupt(store, document_id,
                           f"{KEY_FIELD} is {type(stored).__name__}, not bytes")
        if DIGEST_FIELD not in data:
            # Only this format has entity_key, and it always has the digest.
            raise _corrupt(store, document_id, f"{DIGEST_FIELD} is missing beside {KEY_FIELD}")
    else:
        entity_hex = data.get(HEX_FIELD)
        try:
            if not isinstance(entity_hex, str):
                raise TypeError(f"it is {type(entity_hex).__name__}")
            stored = bytes.fromhex(entity_hex)
            if stored.hex() != entity_hex:
                raise ValueError("it is not lowercase hex without separators")
        except (TypeError, ValueError) as exc:
            raise _corrupt(store, document_id, f"{HEX_FIELD} {entity_hex!r}: {exc}") from exc
    if DIGEST_FIELD in data:  # absent only from documents of earlier versions
        digest = data[DIGEST_FIELD]
        if not isinstance(digest, str) or _CACHE_KEY.fullmatch(digest) is None:
            raise _corrupt(store, document_id,
                           f"{DIGEST_FIELD} {digest!r} is not 64 lowercase hex digits")
        if digest != entity_key_digest(stored):
            raise _corrupt(store, document_id,
                           f"{DIGEST_FIELD} {digest!r} is not the sha256 of its entity key")
    return stored


def entry_from_document(data: Mapping[str, Any] | None, *, store: str, document_id: str,
                        entity_key: bytes, seq: int) -> JournalEntry:
    """Rebuild the entry stored in a Firestore document, or raise `JournalCorruptError`.

    Maps the document's fields back to `JournalEntry` fields (hex or bytes to
    the entity key, timestamp to milliseconds) and checks the result with
    :func:`decode_entry`, which compares the full entity key with `entity_key`
    (a digest match alone never hands over an entry). Documents without
    ``entity_key_digest``, written by earlier versions, read as before.

    Raises:
        JournalCorruptError: as :func:`decode_entry`; also for a document
            without data, with both or neither of ``entity_key_hex`` and
            ``entity_key``, an ``entity_key_hex`` that is not lowercase hex, an
            ``entity_key`` that is not bytes or has no digest beside it, an
            ``entity_key_digest`` that is malformed or not the key's sha256,
            or an ``expire_at`` that is not a timestamp.
    """
    if data is None:
        raise _corrupt(store, document_id, "the document has no data")
    stored_entity = _stored_entity(data, store=store, document_id=document_id)
    expire_at = data.get("expire_at")
    if not isinstance(expire_at, datetime) or expire_at.tzinfo is None:
        raise _corrupt(store, document_id, f"expire_at is {expire_at!r}, not a timestamp")
    row = {
        "cache_key": document_id,
        "entity_key": stored_entity,
        "seq": data.get("seq"),
        "response": data.get("response"),
        "sha256": data.get("sha256"),
        "digest_only": data.get("digest_only"),
        "created_at_ms": data.get("created_at_ms"),
        "expire_at_ms": ms_from_timestamp(expire_at),
        "request": data.get("request", ""),
    }
    return decode_entry(row, store=store, cache_key=document_id, entity_key=entity_key, seq=seq)


def rate_record(row: Sequence[object]) -> LearnedRateRecord | None:
    """A stored learned rate ``(account, worker, rate_rps, updated_ms)``, or None if malformed.

    A learned rate only saves a run its warm-up: a row that does not decode
    is skipped, never an error that could stop a run.
    """
    try:
        account, worker, rate, updated = row
        if not isinstance(rate, int | float) or isinstance(rate, bool) or \
                not isinstance(updated, int) or isinstance(updated, bool):
            return None
        return LearnedRateRecord(account=str(account), worker=str(worker),
                                 rate_rps=float(rate), updated_ms=updated)
    except (TypeError, ValueError):
        return None


def rate_document_id(account: str, worker: str) -> str:
    """The Firestore document of one worker's learned rate: a digest, so any names fit."""
    return hashlib.sha256(f"{account}\0{worker}".encode()).hexdigest()
