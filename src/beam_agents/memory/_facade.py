"""The working-memory facade: staged, bounded, exactly accounted (seed 000).

`Memory` is built once per activation over the `memory` keyed-state blob and
hands back a new blob at the end. It performs no state I/O and reads no clock
(invariant 2): every mutation lands in Python objects, and only a successful
activation's commit writes `to_blob()` back (invariant 1).

Cost model: entries sit in an insertion-ordered dict kept in LRU order, so a
stamp is a `move_to_end`. `size_bytes` is adjusted by each mutation's delta,
never recomputed. A ring being appended to is a `RingEdit`: its encoded
bytes, the lengths of its items and the items appended since, so an append is
O(item), decodes no item, and `to_bytes()` copies the kept part of the old
encoding instead of re-encoding it. Reading a ring decodes it once per facade.

Most activations touch a few keys of a large blob, so the blob is not
re-encoded as a whole. Canonical bytes (all this library writes) are indexed
by one pass over the entry headers (`_wire.scan_canonical`), values located
but not copied; `to_bytes()` copies the encodings of entries the activation
did not change out of the loaded bytes, coalescing neighbours into one slice,
and encodes only the changed ones. The output is byte-identical to a
deterministic serialization of the same entries. Any other input (a message,
or bytes in some non-canonical form) goes through the protobuf parser and is
re-encoded in full.

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
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol, cast, runtime_checkable

from google.protobuf.message import DecodeError

from beam_agents._proto.memory_pb2 import (
    ENTRY_KIND_RING,
    ENTRY_KIND_SCALAR,
    EntryKind,
    MemoryBlob,
)
from beam_agents.errors import (
    ConfigError,
    MemoryOverflow,
    StateCorruptError,
    UnsupportedSchemaVersionError,
)
from beam_agents.memory._ring import RING_HEADER_BYTES, RingEdit, decode_ring, item_cost
from beam_agents.memory._wire import (
    BLOB_HEADER,
    LoadedEntry,
    NotCanonicalError,
    entry_parts,
    scan_canonical,
    total_field,
)
from beam_agents.metrics import MetricsSink, NoopMetrics

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "DEFAULT_MAX_ITEMS",
    "HARD_CAP_BYTES",
    "SOFT_CAP_BYTES",
    "STATE_SCHEMA_VERSION",
    "Compactor",
    "Memory",
]

STATE_SCHEMA_VERSION = 1
HARD_CAP_BYTES = 1_048_576
SOFT_CAP_BYTES = HARD_CAP_BYTES * 3 // 4  # 786 432: warn and compact here (M11)
DEFAULT_MAX_ITEMS = 64
_EMPTY_RING = bytes([1])  # the ring encoding's version byte and no items

_log = logging.getLogger("beam_agents.memory")


@runtime_checkable
class Compactor(Protocol):
    """Frees working memory when a cap is reached.

    `compact` receives the facade itself, so a strategy can only mutate memory
    through the guarded API; caps are suspended while it runs so its own
    writes cannot re-trigger it (M16). Exceptions propagate unmodified (M17).
    Iterate candidates with `Memory.keys()` and `Memory.entry_size()`, which
    do not perturb LRU order (M25, M26).
    """

    def compact(self, memory: Memory) -> None:
        """Shrink `memory` in place."""


class _Entry:
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


def _size_of(entry: _Entry | LoadedEntry) -> int:
    return entry[1] if isinstance(entry, tuple) else entry.size


def _check_key(key: object) -> str:
    if not isinstance(key, str):
        raise TypeError(f"memory keys are str, got {type(key).__name__}: {key!r}")
    if not key:
        raise ValueError("memory keys must be non-empty")
    return key


def _check_bytes(key: str, value: object, what: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"{what} for memory key {key!r} must be bytes-like, got {type(value).__name__}")


class Memory:
    """Per-activation working memory: scalars and bounded rings, staged in memory.

    Guarantees (seed 000, invariants 2 and 4):
        * no I/O and no clock: `now_ms` stamps every access;
        * `size_bytes` is exact after every operation (M10);
        * at `SOFT_CAP_BYTES` a warning and `beam_agents.memory:soft_cap_warnings`
          fire once per facade and the compactor runs (M11, M12);
        * no write lands past `HARD_CAP_BYTES`: the compactor gets one chance,
          then `MemoryOverflow` is raised with the write unapplied (M13-M15);
        * a rejected call changes nothing but compaction effects (M03).
    """

    __slots__ = (
        "_compacting",
        "_compactor",
        "_dirty",
        "_entries",
        "_longterm",
        "_metrics",
        "_now_ms",
        "_size",
        "_source",
        "_warned",
    )

    def __init__(
        self,
        blob: MemoryBlob | bytes | None = None,
        *,
        now_ms: int,
        compactor: Compactor | None = None,
        metrics: MetricsSink | None = None,
        longterm: object | None = None,
    ) -> None:
        if isinstance(now_ms, bool) or not isinstance(now_ms, int):
            raise TypeError(f"now_ms must be an int of milliseconds, got {now_ms!r}")
        self._now_ms = now_ms
        self._compactor = compactor
        self._metrics: MetricsSink = metrics if metrics is not None else NoopMetrics()
        self._longterm = longterm
        self._entries: dict[str, _Entry | LoadedEntry] = {}
        self._source = b""  # the loaded bytes that unchanged entries are sliced from
        self._size = 0
        self._dirty = False
        self._warned = False
        self._compacting = False
        if blob is not None:
            self._load(blob)

    # -- loading -----------------------------------------------------------------

    def _load(self, blob: MemoryBlob | bytes | bytearray | memoryview) -> None:
        if isinstance(blob, MemoryBlob):
            parsed = blob
        elif isinstance(blob, bytes | bytearray | memoryview):
            if not blob:
                return
            data = bytes(blob)
            try:
                loaded, self._size = scan_canonical(data)
            except (NotCanonicalError, IndexError, UnicodeDecodeError):
                pass  # not canonical, or corrupt: the parser below decides which
            else:
                self._entries = cast("dict[str, _Entry | LoadedEntry]", loaded)
                self._source = data
                return
            try:
                parsed = MemoryBlob.FromString(data)
            except DecodeError as exc:
                raise StateCorruptError(
                    f"memory blob is not a valid MemoryBlob: {exc}", cell="memory"
                ) from exc
        else:
            raise TypeError(f"blob must be MemoryBlob, bytes or None, got {type(blob).__name__}")
        self._load_parsed(parsed)

    def _load_parsed(self, blob: MemoryBlob) -> None:
        version = blob.state_schema_version
        if version != STATE_SCHEMA_VERSION:
            if version == 0 and blob.ByteSize() == 0:
                return  # an empty serialization is a fresh memory
            raise UnsupportedSchemaVersionError(
                cell="memory", version=version, supported=(STATE_SCHEMA_VERSION,)
            )
        entries: dict[str, _Entry | LoadedEntry] = {}
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
            entries[key] = _Entry(kind, value, len(value), msg.last_access_ms)
            total += len(value)
        if total != blob.total_value_bytes:
            raise StateCorruptError(
                f"memory blob says total_value_bytes={blob.total_value_bytes} but its entries "
                f"hold {total} bytes",
                cell="memory",
            )
        self._entries, self._size = entries, total

    # -- read-only views -----------------------------------------------------------

    @property
    def now_ms(self) -> int:
        """The activation's clock value, stamped on every access."""
        return self._now_ms

    @property
    def size_bytes(self) -> int:
        """Exact sum of stored value sizes, ring encoding included (M10)."""
        return self._size

    @property
    def dirty(self) -> bool:
        """Whether anything changed that the commit must write back (seed 000)."""
        return self._dirty

    @property
    def has_longterm(self) -> bool:
        """Whether a long-term store is configured, so `longterm` is usable."""
        return self._longterm is not None

    @property
    def longterm(self) -> object:
        """The activation-scoped long-term memory handle (explicit access only, M18)."""
        if self._longterm is None:
            raise ConfigError(
                "ctx.memory.longterm is not available: no long-term store is configured. "
                "Set AgentConfig.longterm_memory (e.g. SqliteLongtermConfig or "
                "FirestoreLongtermConfig) to enable it.",
                field="AgentConfig.longterm_memory",
            )
        return self._longterm

    def keys(self) -> tuple[str, ...]:
        """Stored keys, least-recently-used first; never stamps or dirties (M25)."""
        return tuple(self._entries)

    def entry_size(self, key: str) -> int:
        """Encoded value size of `key`; never stamps or dirties (M26).

        Raises:
            KeyError: `key` is absent.
        """
        return _size_of(self._entries[_check_key(key)])

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __repr__(self) -> str:
        return f"Memory(entries={len(self._entries)}, size_bytes={self._size}, dirty={self._dirty})"

    # -- scalars ---------------------------------------------------------------------

    def get(self, key: str) -> bytes | None:
        """Return the scalar stored at `key`, or None; a hit becomes most-recently-used.

        Raises:
            TypeError: `key` holds a ring (M09).
        """
        entry = self._entry(_check_key(key))
        if entry is None:
            return None
        if entry.kind != ENTRY_KIND_SCALAR:
            raise TypeError(f"memory key {key!r} holds a ring; read it with ring({key!r})")
        self._touch(key, entry)
        return self._value(entry)

    def set(self, key: str, value: bytes) -> None:
        """Store `value` (empty allowed) at `key`, replacing a scalar or a ring (M04)."""
        value = _check_bytes(_check_key(key), value, "value")
        new_size = len(value)
        self._admit(key, lambda: new_size)
        entry = self._entry(key)
        if entry is None:
            self._entries[key] = _Entry(ENTRY_KIND_SCALAR, value, new_size, self._now_ms)
            self._size += new_size
        else:
            self._size += new_size - entry.size
            entry.kind, entry.value, entry.items = ENTRY_KIND_SCALAR, value, None
            entry.size, entry.vstart, entry.edit = new_size, -1, None
            self._touch(key, entry)
        self._dirty = True
        self._after_growth()

    def delete(self, key: str) -> None:
        """Remove `key`; deleting an absent key is a no-op (M06)."""
        entry = self._entries.pop(_check_key(key), None)
        if entry is not None:
            self._size -= _size_of(entry)
            self._dirty = True

    # -- rings -----------------------------------------------------------------------

    def ring(self, key: str) -> tuple[bytes, ...]:
        """Items of the ring at `key`, oldest first; an absent key is an empty ring.

        Reading a ring does not stamp it: only get hits, set and append do (seed 000).

        Raises:
            TypeError: `key` holds a scalar (M09).
            RingCorruptError: the stored encoding is broken.
        """
        entry = self._entry(_check_key(key))
        if entry is None:
            return ()
        if entry.kind != ENTRY_KIND_RING:
            raise TypeError(f"memory key {key!r} holds a scalar; read it with get({key!r})")
        return tuple(self._items(key, entry))

    def append(self, key: str, item: bytes, max_items: int = DEFAULT_MAX_ITEMS) -> None:
        """Append `item` to the ring at `key`, dropping the oldest beyond `max_items` (M07, M08).

        Raises:
            TypeError: `key` holds a scalar (M09), or `item` is not bytes-like.
            ValueError: `max_items` < 1.
        """
        item = _check_bytes(_check_key(key), item, "ring item")
        if isinstance(max_items, bool) or not isinstance(max_items, int):
            raise TypeError(f"max_items must be an int, got {max_items!r}")
        if max_items < 1:
            raise ValueError(f"max_items must be >= 1, got {max_items}")
        current = self._entry(key)
        if current is not None and current.kind != ENTRY_KIND_RING:
            raise TypeError(f"memory key {key!r} holds a scalar; append needs a ring")

        def ring_size_after() -> int:
            entry = self._entry(key)
            if entry is None or entry.kind != ENTRY_KIND_RING:
                return RING_HEADER_BYTES + item_cost(len(item))  # a scalar is rejected below
            freed = self._edit(key, entry).freed_by_append(max_items)
            return entry.size + item_cost(len(item)) - freed

        self._admit(key, ring_size_after)
        entry = self._entry(key)
        if entry is None:
            entry = _Entry(ENTRY_KIND_RING, None, RING_HEADER_BYTES, self._now_ms)
            entry.edit = RingEdit(key, _EMPTY_RING, lengths=())
            self._entries[key] = entry
            self._size += RING_HEADER_BYTES
        elif entry.kind != ENTRY_KIND_RING:  # a compactor rewrote the key as a scalar
            raise TypeError(f"memory key {key!r} holds a scalar; append needs a ring")
        delta = self._edit(key, entry).append(item, max_items)
        entry.size += delta
        self._size += delta
        entry.items = None
        self._touch(key, entry)
        self._after_growth()

    # -- the blob ----------------------------------------------------------------------

    def to_blob(self) -> MemoryBlob:
        """The staged state as a versioned MemoryBlob, least-recently-used first (M01, M02)."""
        return MemoryBlob.FromString(self.to_bytes())

    def to_bytes(self) -> bytes:
        """The staged state serialized deterministically, as keyed state stores it.

        Byte-identical to ``SerializeToString(deterministic=True)`` of the
        same entries; unchanged entries are copied from the loaded bytes rather
        than re-encoded (see the module docstring).
        """
        source = memoryview(self._source)
        parts: list[bytes | memoryview] = [BLOB_HEADER]
        run_start = run_end = -1  # a stretch of unchanged, adjacent source entries
        for key, entry in self._entries.items():
            if isinstance(entry, tuple):
                start, end = entry[2], entry[3]
            elif entry.span is not None:
                start, end = entry.span
            else:
                if run_end >= 0:
                    parts.append(source[run_start:run_end])
                    run_start = run_end = -1
                assert entry.last_access_ms is not None  # only a stamp clears a span
                parts += entry_parts(key, self._value(entry), entry.last_access_ms, entry.kind)
                continue
            if start != run_end:
                if run_end >= 0:
                    parts.append(source[run_start:run_end])
                run_start = start
            run_end = end
        if run_end >= 0:
            parts.append(source[run_start:run_end])
        parts.append(total_field(self._size))
        return b"".join(parts)

    # -- internals ---------------------------------------------------------------------

    def _entry(self, key: str) -> _Entry | None:
        """The entry at `key`, made an `_Entry` if no operation has reached it before."""
        entry = self._entries.get(key)
        if not isinstance(entry, tuple):
            return entry
        kind, size, start, end, vstart = entry
        reached = self._entries[key] = _Entry(kind, None, size, None)
        reached.span, reached.vstart = (start, end), vstart
        return reached

    def _value(self, entry: _Entry) -> bytes:
        """The entry's encoded value bytes, copied out of the source or encoded if edited."""
        if entry.edit is not None:
            return entry.edit.encode()
        value = entry.value
        if value is None:
            value = entry.value = self._source[entry.vstart:entry.vstart + entry.size]
        return value

    def _items(self, key: str, entry: _Entry) -> list[bytes]:
        """A ring's items for reading, decoded once until the next append."""
        if entry.items is None:
            if entry.edit is not None:
                entry.items = entry.edit.items(key)
            else:
                entry.items = decode_ring(key, *self._encoded(entry))
        return entry.items

    def _edit(self, key: str, entry: _Entry) -> RingEdit:
        """The ring's `RingEdit`, started from its encoded value on the first append.

        Raises:
            RingCorruptError: the stored encoding is broken; nothing has changed.
        """
        edit = entry.edit
        if edit is None:
            items = entry.items  # decoded by an earlier read: their lengths are known
            edit = RingEdit(key, *self._encoded(entry),
                            lengths=None if items is None else map(len, items))
            entry.edit, entry.value = edit, None
        return edit

    def _encoded(self, entry: _Entry) -> tuple[bytes, int, int]:
        """Where a value's encoding is: its own bytes, or a stretch of the source."""
        if entry.value is not None:
            return entry.value, 0, len(entry.value)
        return self._source, entry.vstart, entry.vstart + entry.size

    def _touch(self, key: str, entry: _Entry) -> None:
        entry.last_access_ms = self._now_ms
        entry.span = None
        entries = self._entries
        entries[key] = entries.pop(key)  # move to most-recently-used
        self._dirty = True

    def _admit(self, key: str, new_size: Callable[[], int]) -> None:
        """Enforce the hard cap before a write to `key` lands (M13-M15).

        `new_size` is re-evaluated after compaction, which may have changed or
        removed `key` itself.
        """
        if self._compacting:
            return  # caps are suspended inside compact() (M16)
        prospective = self._prospective(key, new_size)
        if prospective <= HARD_CAP_BYTES:
            return
        if self._compactor is not None:
            self._run_compactor()
            prospective = self._prospective(key, new_size)
        if prospective > HARD_CAP_BYTES:
            raise MemoryOverflow(key=key, attempted_size=prospective, cap=HARD_CAP_BYTES)

    def _prospective(self, key: str, new_size: Callable[[], int]) -> int:
        entry = self._entries.get(key)
        return self._size - (0 if entry is None else _size_of(entry)) + new_size()

    def _after_growth(self) -> None:
        """Soft-cap handling once a write has landed (M11, M12)."""
        if self._compacting or self._size < SOFT_CAP_BYTES:
            return
        if not self._warned:
            self._warned = True
            self._metrics.inc("beam_agents.memory", "soft_cap_warnings")
            _log.warning(
                "working memory reached %d bytes, at or above the %d-byte soft cap (75%% of %d); "
                "compacting",
                self._size, SOFT_CAP_BYTES, HARD_CAP_BYTES,
            )
        self._run_compactor()

    def _run_compactor(self) -> None:
        if self._compactor is None:
            return
        self._compacting = True
        try:
            self._compactor.compact(self)
        finally:
            self._compacting = False
