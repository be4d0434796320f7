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

Most activations touch a few keys of a large blob, so the blob is neither
parsed nor re-encoded as a whole: `_blob` loads it into entries that point
into the loaded bytes, and encodes them back copying what the activation did
not change. It also says where corruption is reported (invariant 8): at load
for everything the blob itself can get wrong, and at first use for a ring's
inner encoding, as `RingCorruptError` naming the key.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from beam_agents._proto.memory_pb2 import ENTRY_KIND_RING, ENTRY_KIND_SCALAR, MemoryBlob
from beam_agents.errors import ConfigError, MemoryOverflow
from beam_agents.memory._blob import (
    STATE_SCHEMA_VERSION,
    Entries,
    Entry,
    encode_entries,
    encoding_of,
    load_blob,
    value_of,
)
from beam_agents.memory._longterm import LongtermHandle
from beam_agents.memory._ring import RING_HEADER_BYTES, RingEdit, decode_ring, item_cost
from beam_agents.memory._wire import LoadedEntry
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


def _size_of(entry: Entry | LoadedEntry) -> int:
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
        "_version",
        "_warned",
    )

    def __init__(
        self,
        blob: MemoryBlob | bytes | None = None,
        *,
        now_ms: int,
        compactor: Compactor | None = None,
        metrics: MetricsSink | None = None,
        longterm: LongtermHandle | None = None,
    ) -> None:
        if isinstance(now_ms, bool) or not isinstance(now_ms, int):
            raise TypeError(f"now_ms must be an int of milliseconds, got {now_ms!r}")
        self._now_ms = now_ms
        self._compactor = compactor
        self._metrics: MetricsSink = metrics if metrics is not None else NoopMetrics()
        self._longterm = longterm
        self._dirty = False
        self._warned = False
        self._compacting = False
        loaded = load_blob(blob)
        self._entries: Entries = loaded.entries
        self._source = loaded.source  # the loaded bytes that unchanged entries are sliced from
        self._size = loaded.size_bytes
        self._version = loaded.memory_version

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
    def version(self) -> int:
        """The agent's `memory_version` this memory is in: the blob's, or what `set_version` set."""
        return self._version

    def set_version(self, version: int) -> None:
        """Mark the memory as `version`'s, written with it at commit; the runtime calls it.

        Raises:
            ValueError: `version` is not a uint32.
        """
        if isinstance(version, bool) or not isinstance(version, int) or not (
                0 <= version < 1 << 32):
            raise ValueError(f"memory_version must be an int in [0, 2**32), got {version!r}")
        if version != self._version:
            self._version = version
            self._dirty = True

    @property
    def dirty(self) -> bool:
        """Whether anything changed that the commit must write back (seed 000)."""
        return self._dirty

    @property
    def has_longterm(self) -> bool:
        """Whether a long-term store is configured, so `longterm` is usable."""
        return self._longterm is not None

    @property
    def longterm(self) -> LongtermHandle:
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
        return value_of(entry, self._source)

    def set(self, key: str, value: bytes) -> None:
        """Store `value` (empty allowed) at `key`, replacing a scalar or a ring (M04)."""
        value = _check_bytes(_check_key(key), value, "value")
        new_size = len(value)
        self._admit(key, lambda: new_size)
        entry = self._entry(key)
        if entry is None:
            self._entries[key] = Entry(ENTRY_KIND_SCALAR, value, new_size, self._now_ms)
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
            entry = Entry(ENTRY_KIND_RING, None, RING_HEADER_BYTES, self._now_ms)
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
        than re-encoded (see `_blob`).
        """
        return encode_entries(self._entries, self._source, self._size, self._version)

    # -- internals ---------------------------------------------------------------------

    def _entry(self, key: str) -> Entry | None:
        """The entry at `key`, made an `Entry` if no operation has reached it before."""
        entry = self._entries.get(key)
        if not isinstance(entry, tuple):
            return entry
        kind, size, start, end, vstart = entry
        reached = self._entries[key] = Entry(kind, None, size, None)
        reached.span, reached.vstart = (start, end), vstart
        return reached

    def _items(self, key: str, entry: Entry) -> list[bytes]:
        """A ring's items for reading, decoded once until the next append."""
        if entry.items is None:
            if entry.edit is not None:
                entry.items = entry.edit.items(key)
            else:
                entry.items = decode_ring(key, *encoding_of(entry, self._source))
        return entry.items

    def _edit(self, key: str, entry: Entry) -> RingEdit:
        """The ring's `RingEdit`, started from its encoded value on the first append.

        Raises:
            RingCorruptError: the stored encoding is broken; nothing has changed.
        """
        edit = entry.edit
        if edit is None:
            items = entry.items  # decoded by an earlier read: their lengths are known
            edit = RingEdit(key, *encoding_of(entry, self._source),
                            lengths=None if items is None else map(len, items))
            entry.edit, entry.value = edit, None
        return edit

    def _touch(self, key: str, entry: Entry) -> None:
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
