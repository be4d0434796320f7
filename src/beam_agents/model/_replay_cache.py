"""The LLM replay cache: one activation's view of an entity's ``llm_cache`` cell.

Beam retries bundles, so an activation may run more than once. `ReplayCache`
memoises model responses per cache key (see `compute_cache_key`), so a replay
sees the responses the first run saw (invariant 3). It is a facade over an
in-memory `LlmCacheBlob`: it reads no clock and does no I/O (invariant 2); the
runner adapter reads the cell, builds the facade, and writes `to_blob()` back
only when `dirty` is set and the activation commits.

Every dimension is bounded (invariant 4): entries live six hours from creation
(C09-C11), at most 64 are kept in LRU order (C12, C13), and the serialized blob
never exceeds 100 KiB (C14, C15). A response too large to keep in any blob is
stored digest-only, so a replay can still prove what the provider returned
(C16, C17).

Cost model. The parsed blob is the working copy and is edited in place, so
`to_blob()` is one C-level message copy and never rebuilds an entry. Loading
reads three fields per entry (key, response, digest), through C-level ``map``
passes; other fields are read only for entries an operation touches.

The cap is enforced without serializing. Every change adjusts the entries'
serialized size by exact field lengths, starting from a bound: re-encoding
parsed bytes never lengthens them (minimal varints, one occurrence per field,
no defaults, unknown fields dropped), so the length of the incoming bytes
bounds the size from above, and equals it for the canonical bytes this
library writes. While the bound keeps a `put` under the cap, nothing is
measured; only when it would evict for size (or `size_bytes` is read) does
protobuf measure the exact size, once per facade (a measurement serializes
the blob, which costs as much as writing it). Eviction therefore decides
exactly as if the size had been known all along.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from operator import attrgetter
from typing import Final

from google.protobuf.message import DecodeError

from beam_agents._proto.llm_cache_pb2 import LlmCacheBlob, LlmCacheEntry
from beam_agents._varint import varint_size
from beam_agents.errors import StateCorruptError, UnsupportedSchemaVersionError

__all__ = ["MAX_BLOB_BYTES", "MAX_ENTRIES", "STATE_SCHEMA_VERSION", "TTL_MS", "CachedResponse",
           "ReplayCache"]

#: An entry is live while ``now_ms - created_at_ms <= TTL_MS`` (six hours, C10).
TTL_MS: Final = 21_600_000
#: At most this many entries, digest-only ones included (C12).
MAX_ENTRIES: Final = 64
#: ``to_blob().ByteSize()`` never exceeds this (100 KiB, C14).
MAX_BLOB_BYTES: Final = 102_400
#: The only ``LlmCacheBlob.state_schema_version`` this library reads or writes.
STATE_SCHEMA_VERSION: Final = 1

_CELL: Final = "llm_cache"
_DIGEST_BYTES: Final = 32
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_key_of = attrgetter("cache_key")
_response_of = attrgetter("response")
_digest_of = attrgetter("response_digest")
_created_of = attrgetter("created_at_ms")


@dataclass(frozen=True, slots=True, kw_only=True)
class CachedResponse:
    """A staged response as a replay sees it; `digest` always proves the full response.

    For a digest-only entry (C17), `response` is empty and `digest` is the
    sha256 of the response the provider returned, so a caller that has to
    call the provider again can detect that it answered differently
    (invariant 3).
    """

    cache_key: str
    response: bytes
    digest: bytes
    digest_only: bool
    created_at_ms: int
    last_access_ms: int

    def __post_init__(self) -> None:
        if len(self.digest) != _DIGEST_BYTES:
            raise ValueError(f"digest must be a raw {_DIGEST_BYTES}-byte sha256")
        if self.digest_only and self.response:
            raise ValueError("a digest-only response carries no response bytes")

    @property
    def hexdigest(self) -> str:
        """The digest as 64 lowercase hex characters."""
        return self.digest.hex()


class ReplayCache:
    """Stages cache lookups and inserts for one activation, within every bound.

    `now_ms` is the activation's event time, fixed for the facade's life, so a
    replay of the same activation expires and evicts exactly as the first run
    did (invariants 2 and 3). Not thread-safe: one activation owns it.
    """

    __slots__ = ("_blob", "_dirty", "_entries_bytes", "_exact", "_keys", "_keyset", "_now_ms",
                 "_purged", "_total")

    def __init__(self, blob: LlmCacheBlob | bytes | None = None, *, now_ms: int) -> None:
        """Load the cell's blob, checking it before anything is staged on top of it.

        Args:
            blob: The ``llm_cache`` cell: serialized bytes, a parsed message (copied,
                never mutated), or None. None, empty bytes and an all-default
                message are a fresh cache (C05).
            now_ms: The activation's event time; the only clock the cache sees.

        Raises:
            TypeError: `now_ms` is not an int, or `blob` is of another type.
            ValueError: `now_ms` is outside the int64 range of the wire schema.
            UnsupportedSchemaVersionError: A non-empty blob has a version other than 1.
            StateCorruptError: The bytes do not decode, a key is duplicated, a
                digest is not 32 bytes, `total_response_bytes` disagrees with the
                entries, or the blob breaks a bound this library never lets it
                break (invariant 8: the cell is reported, never silently replaced
                by an empty cache). These checks read three fields per entry and
                nothing more; the rest is checked when an entry is used (`get`).
        """
        if isinstance(now_ms, bool) or not isinstance(now_ms, int):
            raise TypeError(f"now_ms must be int, got {type(now_ms).__name__}")
        if not _INT64_MIN <= now_ms <= _INT64_MAX:
            raise ValueError(f"now_ms {now_ms} is outside the int64 range")
        self._now_ms = now_ms
        self._blob = working = _load(blob)
        self._dirty = False
        entries = list(working.entries)
        self._keys: list[str] = list(map(_key_of, entries))  # LRU order, parallel to entries
        self._keyset = set(self._keys)
        self._total = sum(map(len, map(_response_of, entries)))
        # Serialized size of the entries, wrappers included: exact once `_exact`,
        # until then an upper bound taken from the incoming bytes (module docstring).
        self._exact = not entries
        self._entries_bytes = 0
        if entries:
            if isinstance(blob, bytes | bytearray | memoryview):
                self._entries_bytes = len(blob) - _blob_size(0, self._total)
            else:
                self._measure()  # a message has no incoming bytes to bound it
        # Whether no expired entry is left for put to purge. now_ms is fixed and
        # new entries are created at now_ms, so once true it stays true. Reading
        # the creation times here, while `entries` holds the wrappers, is a
        # fraction of what a purge pass over the blob costs later.
        self._purged = not entries or now_ms - min(map(_created_of, entries)) <= TTL_MS

        # Re-serializing parsed bytes never lengthens them (minimal varints, one
        # occurrence per field, no defaults, unknown fields dropped), so only a
        # message or bytes over the cap need measuring against it.
        needs_measuring = (
            not isinstance(blob, bytes | bytearray | memoryview) or len(blob) > MAX_BLOB_BYTES
        )
        problem = None
        if len(self._keyset) != len(self._keys):
            repeated = next(key for key, n in Counter(self._keys).items() if n > 1)
            problem = f"repeats the cache key {repeated!r}"
        elif not set(map(len, map(_digest_of, entries))) <= {_DIGEST_BYTES}:
            index = next(i for i, e in enumerate(entries)
                         if len(e.response_digest) != _DIGEST_BYTES)
            problem = (f"entry {index} has a {len(entries[index].response_digest)}-byte "
                       f"response_digest, not a raw {_DIGEST_BYTES}-byte sha256")
        elif working.total_response_bytes != self._total:
            problem = (f"records total_response_bytes {working.total_response_bytes}, "
                       f"but its entries hold {self._total}")
        elif len(entries) > MAX_ENTRIES:
            problem = f"holds {len(entries)} entries, over the {MAX_ENTRIES}-entry bound"
        elif needs_measuring and self.size_bytes > MAX_BLOB_BYTES:
            problem = f"is {self.size_bytes} bytes, over the {MAX_BLOB_BYTES}-byte cap"
        if problem is not None:
            raise StateCorruptError(
                f"llm_cache blob {problem}; this library never writes such a blob. "
                "The cell is left as it is (invariant 8): inspect or clear it, then redrive.",
                cell=_CELL,
            )

    # -- reads -----------------------------------------------------------------

    @property
    def dirty(self) -> bool:
        """Whether the cell must be written back: set by a put, a hit, or a purge (C08)."""
        return self._dirty

    @property
    def size_bytes(self) -> int:
        """Exactly ``to_blob().ByteSize()``, kept up to date without serializing."""
        self._measure()
        return _blob_size(self._entries_bytes, self._total)

    def _measure(self) -> None:
        """Replace the bound by the exact size; at most once per facade."""
        if not self._exact:
            self._blob.total_response_bytes = self._total
            self._entries_bytes = self._blob.ByteSize() - _blob_size(0, self._total)
            self._exact = True

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, cache_key: object) -> bool:
        """Whether `to_blob()` would hold the key; no LRU effect, no expiry purge.

        An expired entry that nothing has purged yet still counts; `get` is the
        lookup that honours the TTL.
        """
        return cache_key in self._keyset

    def __repr__(self) -> str:
        return (f"ReplayCache(entries={len(self._keys)}, dirty={self._dirty}, "
                f"now_ms={self._now_ms})")

    def to_blob(self) -> LlmCacheBlob:
        """Return the staged cache as a new message, least-recently-used entry first.

        An untouched facade returns entries field-equal to what it loaded, in
        the same order (C04); a fresh one returns a versioned empty blob (C05).
        """
        self._blob.total_response_bytes = self._total
        blob = LlmCacheBlob()
        blob.CopyFrom(self._blob)
        return blob

    def to_bytes(self) -> bytes:
        """The ``llm_cache`` cell's bytes: ``to_blob()`` serialized deterministically (C14)."""
        self._blob.total_response_bytes = self._total
        return self._blob.SerializeToString(deterministic=True)

    # -- staging ---------------------------------------------------------------

    def get(self, cache_key: str) -> CachedResponse | None:
        """Return the live entry for `cache_key` and make it most-recently-used.

        A hit re-stamps ``last_access_ms`` with `now_ms` and moves the entry to
        the end of the LRU order (C06, C07); that is a mutation, so it sets
        `dirty`. An absent key is a clean miss (C08). An entry older than
        `TTL_MS` by its ``created_at_ms`` (never its last access, C11; an age
        of exactly `TTL_MS` is still live, C10) is purged and reported as a
        miss (C09). A digest-only hit has an empty `response` (C17).

        Raises:
            TypeError: `cache_key` is not a str.
            StateCorruptError: The loaded entry is marked digest-only yet carries
                response bytes, which this library never writes.
        """
        if not isinstance(cache_key, str):
            raise TypeError(f"cache_key must be str, got {type(cache_key).__name__}")
        if cache_key not in self._keyset:
            return None
        keys = self._keys
        index = keys.index(cache_key)
        entries = self._blob.entries
        entry = entries[index]
        now = self._now_ms
        created = entry.created_at_ms
        if now - created > TTL_MS:
            self._remove(index)
            return None
        response = entry.response
        digest = entry.response_digest
        digest_only = entry.digest_only
        if digest_only and response:
            raise StateCorruptError(
                f"llm_cache entry {cache_key!r} is digest-only yet carries "
                f"{len(response)} response bytes", cell=_CELL,
            )
        last_access = entry.last_access_ms
        grew = False
        if last_access != now:
            # Stamps of one varint length re-encode to the same size (the usual
            # case: both are recent epoch milliseconds), so only a stamp that
            # changes length costs a size computation.
            same_width = (last_access > 0 and now > 0
                          and varint_size(last_access) == varint_size(now))
            if not same_width:
                key_bytes = _utf8_length(cache_key)
                change = _entry_size(
                    key_bytes, len(response), digest_only, created, now
                ) - _entry_size(key_bytes, len(response), digest_only, created, last_access)
                self._entries_bytes += change
                grew = change > 0
            entry.last_access_ms = now
        if index != len(keys) - 1:
            del entries[index]
            entries.append(entry)
            del keys[index]
            keys.append(cache_key)
        if grew:
            self._fit_after_stamp()
        self._dirty = True
        return CachedResponse(cache_key=cache_key, response=response, digest=digest,
                              digest_only=digest_only, created_at_ms=created,
                              last_access_ms=now)

    def put(self, cache_key: str, response: bytes | str) -> CachedResponse:
        """Stage `response` under `cache_key` as the most-recently-used entry.

        In order: expired entries are purged (C09); an entry with the same key
        is replaced, so ``created_at_ms`` restarts at `now_ms`; then
        least-recently-used entries are evicted until both the 64-entry bound
        (C12, C13) and the 100 KiB cap (C15) hold with the new entry. An entry
        that would not fit even in an empty blob is stored digest-only: no
        response bytes, the sha256 of the full response (C16). Its own size
        evicts nothing, but it is still one of the 64 entries, so at the bound
        it displaces the LRU entry like any insert; and if the blob is within a
        digest entry's size (about 120 bytes) of the cap, the cap evicts just
        enough for it, because the cap is never exceeded (C14).

        Returns:
            The entry as stored (empty `response` when digest-only).

        Raises:
            TypeError: `cache_key` is not a str, or `response` is neither bytes
                nor str (str is stored UTF-8 encoded).
            ValueError: `cache_key` is so long that not even a digest-only entry
                fits in the cap, or a str is not valid Unicode. Nothing is staged.
        """
        if not isinstance(cache_key, str):
            raise TypeError(f"cache_key must be str, got {type(cache_key).__name__}")
        if isinstance(response, str):
            data = response.encode("utf-8")
        elif isinstance(response, bytes):
            data = response
        else:
            raise TypeError(f"response must be bytes or str, got {type(response).__name__}")
        key_bytes = _utf8_length(cache_key)
        now = self._now_ms
        stored, digest_only = data, False
        size = _entry_size(key_bytes, len(data), False, now, now)
        if _blob_size(size, len(data)) > MAX_BLOB_BYTES:
            stored, digest_only = b"", True
            size = _entry_size(key_bytes, 0, True, now, now)
            if _blob_size(size, 0) > MAX_BLOB_BYTES:
                raise ValueError(
                    f"cache_key of {key_bytes} bytes cannot fit a {MAX_BLOB_BYTES}-byte cache"
                )
        digest = hashlib.sha256(data).digest()

        # Everything that can fail has been checked; from here the put applies whole.
        if not self._purged:
            self._purge_expired()
        if cache_key in self._keyset:
            self._remove(self._keys.index(cache_key))
        keys = self._keys
        while keys:
            if len(keys) < MAX_ENTRIES and _blob_size(
                    self._entries_bytes + size, self._total + len(stored)) <= MAX_BLOB_BYTES:
                break
            if len(keys) < MAX_ENTRIES and not self._exact:
                self._measure()  # only the bound is over the cap; decide on the exact size
                continue
            self._remove(0)
        self._blob.entries.add(cache_key=cache_key, response=stored, response_digest=digest,
                               digest_only=digest_only, created_at_ms=now, last_access_ms=now)
        self._keys.append(cache_key)
        self._keyset.add(cache_key)
        self._entries_bytes += size
        self._total += len(stored)
        self._dirty = True
        return CachedResponse(cache_key=cache_key, response=stored, digest=digest,
                              digest_only=digest_only, created_at_ms=now, last_access_ms=now)

    def _fit_after_stamp(self) -> None:
        """Bring the blob back under the cap after a hit's stamp lengthened it (C14).

        A stamp of another varint length than the one it replaces (an entry
        written at an early clock, read at a later one) can take a blob that
        was within a few bytes of the cap over it. As for an insert, the
        least-recently-used entries are evicted until it fits, the hit (now
        the most recent) last; a hit that does not fit alone keeps its digest
        only (C16). The caller still gets the response it read.
        """
        while _blob_size(self._entries_bytes, self._total) > MAX_BLOB_BYTES:
            if not self._exact:
                self._measure()  # only the bound is over the cap; decide on the exact size
                continue
            entry = self._blob.entries[-1]
            if len(self._keys) > 1 or entry.digest_only:
                self._remove(0)
                continue
            response_bytes = len(entry.response)
            before = _entry_size_of(entry, response_bytes)
            entry.response = b""
            entry.digest_only = True
            self._entries_bytes += _entry_size_of(entry, 0) - before
            self._total -= response_bytes

    def _remove(self, index: int) -> None:
        entries = self._blob.entries
        entry = entries[index]
        response_bytes = len(entry.response)
        self._entries_bytes -= _entry_size_of(entry, response_bytes)
        self._total -= response_bytes
        del entries[index]
        self._keyset.remove(self._keys.pop(index))
        self._dirty = True

    def _purge_expired(self) -> None:
        cutoff = self._now_ms - TTL_MS
        created = list(map(_created_of, self._blob.entries))
        for index in range(len(created) - 1, -1, -1):
            if created[index] < cutoff:
                self._remove(index)
        self._purged = True


def _load(blob: LlmCacheBlob | bytes | None) -> LlmCacheBlob:
    """Return a private, version-checked working copy of the cell's blob."""
    if blob is None:
        return LlmCacheBlob(state_schema_version=STATE_SCHEMA_VERSION)
    if isinstance(blob, LlmCacheBlob):
        working = LlmCacheBlob()
        working.CopyFrom(blob)
    elif isinstance(blob, bytes | bytearray | memoryview):
        try:
            working = LlmCacheBlob.FromString(bytes(blob))
        except DecodeError as exc:
            raise StateCorruptError(
                f"llm_cache blob of {len(blob)} bytes does not decode as LlmCacheBlob: {exc}",
                cell=_CELL,
            ) from exc
    else:
        raise TypeError(f"blob must be LlmCacheBlob, bytes or None, got {type(blob).__name__}")
    version = working.state_schema_version
    if version != STATE_SCHEMA_VERSION:
        if version or working.entries or working.total_response_bytes:
            raise UnsupportedSchemaVersionError(
                cell=_CELL, version=version, supported=(STATE_SCHEMA_VERSION,)
            )
        working.state_schema_version = STATE_SCHEMA_VERSION  # all defaults: a fresh cache
    # Size deltas are computed from the known fields only, so fields from some
    # newer writer are dropped; the version check is what guards compatibility.
    working.DiscardUnknownFields()
    return working


def _utf8_length(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _entry_size(
    key_bytes: int, response_bytes: int, digest_only: bool, created_at_ms: int, last_access_ms: int
) -> int:
    """Serialized size of one entry inside the blob: field tag, length prefix, body.

    Each field has a one-byte tag (field numbers < 16); proto3 omits fields
    that hold their default (empty, false, zero), so they cost nothing.
    """
    body = 2 + _DIGEST_BYTES  # response_digest is always 32 bytes: tag, length, payload
    if key_bytes:
        body += 1 + varint_size(key_bytes) + key_bytes
    if response_bytes:
        body += 1 + varint_size(response_bytes) + response_bytes
    if digest_only:
        body += 2
    if created_at_ms:
        body += 1 + varint_size(created_at_ms)
    if last_access_ms:
        body += 1 + varint_size(last_access_ms)
    return 1 + varint_size(body) + body


def _entry_size_of(entry: LlmCacheEntry, response_bytes: int) -> int:
    return _entry_size(_utf8_length(entry.cache_key), response_bytes, entry.digest_only,
                       entry.created_at_ms, entry.last_access_ms)


def _blob_size(entries_bytes: int, total_response_bytes: int) -> int:
    """Serialized size of a blob: version 1 (two bytes), the entries, the total."""
    size = 2 + entries_bytes
    if total_response_bytes:
        size += 1 + varint_size(total_response_bytes)
    return size
