"""A MemoryBlob in and out of the working-memory facade's entries (seed 000).

Most activations touch a few keys of a large blob, so the blob is not
re-encoded as a whole. Canonical bytes (all this library writes) are indexed
by one pass over the entry headers (`_wire.scan_canonical`), values located
but not copied; `encode_entries` copies the encodings of entries the
activation did not change out of the loaded bytes, coalescing neighbours into
one slice, and encodes only the changed ones. The output is byte-identical to
a deterministic serialization of the same entries. Any other input (a
message, or bytes in some non-canonical form) goes through the protobuf
parser and is re-encoded in full.

Corruption is found when it was found before, and reported the same way
(invariant 8). Everything the blob itself can get wrong is checked at load,
before the agent runs: the fast path accepts only bytes that are exactly a
canonical blob (a property test damages blobs at random and checks that
whatever it accepts, protobuf reads identically), and everything else goes
to the parser, which raises `StateCorruptError` for bad wire bytes, an empty
or repeated key, an unknown kind, or a total that disagrees with the entries.
The one check that waits for use is a ring's inner encoding, as it always
has: checking it at load would be a Python loop over every item of every
ring on every activation. The first read or append of a corrupt ring raises
`RingCorruptError` naming the key, inside the activation, so nothing built
on it can commit; a corrupt ring that nothing touches is carried to the
output byte for byte, never rewritten or dropped, and the next activation
that reads it fails the same way.

This module is pure: stdlib, protobuf and beam_agents only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias, cast

from google.protobuf.message import DecodeError

from beam_agents._proto.memory_pb2 import (
    ENTRY_KIND_RING,
    ENTRY_KIND_SCALAR,
    EntryKind,
    MemoryBlob,
)
from beam_agents.errors import StateCorruptError, UnsupportedSchemaVersionError
from beam_agents.memory._ring import RingEdit
from beam_agents.memory._wire import (
    BLOB_HEADER,
    LoadedEntry,
    NotCanonicalError,
    closing_fields,
    entry_parts,
    scan_canonical,
)

__all__ = [
    "STATE_SCHEMA_VERSION",
    "Entries",
    "Entry",
    "LoadedBlob",
    "encode_entries",
    "encoding_of",
    "load_blob",
    "value_of",
]

STATE_SCHEMA_VERSION = 1


class Entry:
    """One stored value that an operation has reached.

    `span` is ``(start, end)`` of the entry's canonical encoding in the facade's
    source bytes while the entry is exactly as loaded; any change clears it.
    `value` is the encoded value, None while it has not been copied out of the
    source (it starts at ``vstart``) or while a ring is being appended to, in
    which case `edit` holds it. `items` caches a ring's decoded items for
    reads. `last_access_ms` is None only while `span` is set: the stamp is
    then part of the reused encoding and never needs decoding.
    """

    __slots__ = ("edit", "items", "kind", "last_access_ms", "size", "span", "value", "vstart")

    def __init__(self, kind: EntryKind, value: bytes | None, size: int,
                 last_access_ms: int | None) -> None:
        self.kind = kind
        self.value = value
        self.size = size
        self.last_access_ms = last_access_ms
        self.items: list[bytes] | None = None  # decoded ring items, oldest first
        self.edit: RingEdit | None = None
        self.span: tuple[int, int] | None = None
        self.vstart = -1


#: The facade's entries in LRU order (least recently used first): an `Entry`
#: once an operation has reached it, the scan's tuple until then.
Entries: TypeAlias = dict[str, Entry | LoadedEntry]


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadedBlob:
    """A loaded blob: its entries, the bytes unchanged entries point into, and their total.

    Attributes:
        entries: The entries, least recently used first; the facade owns and
            mutates this dict from here on.
        source: The loaded bytes when the fast path indexed them, else empty.
        size_bytes: The exact sum of the entries' value sizes.
        memory_version: The agent's memory version that wrote the blob (0: none).
    """

    entries: Entries
    source: bytes = b""
    size_bytes: int = 0
    memory_version: int = 0


def load_blob(blob: MemoryBlob | bytes | bytearray | memoryview | None) -> LoadedBlob:
    """Load a `memory` cell into entries; None or empty bytes is a fresh memory.

    Raises:
        StateCorruptError: the blob is not a valid MemoryBlob (see the module docstring).
        UnsupportedSchemaVersionError: the blob has another state_schema_version.
        TypeError: ``blob`` is neither a MemoryBlob, bytes-like, nor None.
    """
    if isinstance(blob, MemoryBlob):
        return _load_parsed(blob)
    if blob is None:
        return LoadedBlob(entries={})
    if not isinstance(blob, bytes | bytearray | memoryview):
        raise TypeError(f"blob must be MemoryBlob, bytes or None, got {type(blob).__name__}")
    if not blob:
        return LoadedBlob(entries={})
    data = bytes(blob)
    try:
        loaded, size, version = scan_canonical(data)
    except (NotCanonicalError, IndexError, UnicodeDecodeError):
        pass  # not canonical, or corrupt: the parser below decides which
    else:
        return LoadedBlob(entries=cast("Entries", loaded), source=data, size_bytes=size,
                          memory_version=version)
    try:
        parsed = MemoryBlob.FromString(data)
    except DecodeError as exc:
        raise StateCorruptError(
            f"memory blob is not a valid MemoryBlob: {exc}", cell="memory"
        ) from exc
    return _load_parsed(parsed)


def _load_parsed(blob: MemoryBlob) -> LoadedBlob:
    version = blob.state_schema_version
    if version != STATE_SCHEMA_VERSION:
        if version == 0 and blob.ByteSize() == 0:
            return LoadedBlob(entries={})  # an empty serialization is a fresh memory
        raise UnsupportedSchemaVersionError(
            cell="memory", version=version, supported=(STATE_SCHEMA_VERSION,)
        )
    entries: Entries = {}
    total = 0
    for msg in blob.entries:
        key, kind = msg.key, msg.kind
        if not key:
            raise StateCorruptError("memory blob holds an entry with an empty key",
                                    cell="memory")
        if key in entries:
            raise StateCorruptError(f"memory blob holds key {key!r} twice", cell="memory")
        if kind not in (ENTRY_KIND_SCALAR, ENTRY_KIND_RING):
            raise StateCorruptError(
                f"memory entry {key!r} has unknown kind {kind}", cell="memory"
            )
        value = msg.value
        entries[key] = Entry(kind, value, len(value), msg.last_access_ms)
        total += len(value)
    if total != blob.total_value_bytes:
        raise StateCorruptError(
            f"memory blob says total_value_bytes={blob.total_value_bytes} but its entries "
            f"hold {total} bytes",
            cell="memory",
        )
    return LoadedBlob(entries=entries, size_bytes=total, memory_version=blob.memory_version)


def value_of(entry: Entry, source: bytes) -> bytes:
    """The entry's encoded value bytes, copied out of `source` once or encoded if edited."""
    if entry.edit is not None:
        return entry.edit.encode()
    value = entry.value
    if value is None:
        value = entry.value = source[entry.vstart:entry.vstart + entry.size]
    return value


def encoding_of(entry: Entry, source: bytes) -> tuple[bytes, int, int]:
    """Where a value's encoding is: its own bytes, or a stretch of `source`."""
    if entry.value is not None:
        return entry.value, 0, len(entry.value)
    return source, entry.vstart, entry.vstart + entry.size


def encode_entries(entries: Entries, source: bytes, size_bytes: int,
                   memory_version: int = 0) -> bytes:
    """Serialize the entries as a MemoryBlob, deterministically, in their order.

    Byte-identical to ``SerializeToString(deterministic=True)`` of the same
    entries; unchanged ones are copied out of `source`, the bytes they were
    loaded from, rather than re-encoded (see the module docstring).
    """
    view = memoryview(source)
    parts: list[bytes | memoryview] = [BLOB_HEADER]
    run_start = run_end = -1  # a stretch of unchanged, adjacent source entries
    for key, entry in entries.items():
        if isinstance(entry, tuple):
            start, end = entry[2], entry[3]
        elif entry.span is not None:
            start, end = entry.span
        else:
            if run_end >= 0:
                parts.append(view[run_start:run_end])
                run_start = run_end = -1
            assert entry.last_access_ms is not None  # only a stamp clears a span
            parts += entry_parts(key, value_of(entry, source), entry.last_access_ms, entry.kind)
            continue
        if start != run_end:
            if run_end >= 0:
                parts.append(view[run_start:run_end])
            run_start = start
        run_end = end
    if run_end >= 0:
        parts.append(view[run_start:run_end])
    parts.append(closing_fields(size_bytes, memory_version))
    return b"".join(parts)
