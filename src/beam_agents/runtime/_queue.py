"""A key's queue of events in keyed state: O(1) state operations and an O(log n) head.

Keyed state offers bags (Beam ``BagState``, Flink ``ListState``): adding is
cheap, but removing one value means rewriting the bag, and finding the
smallest means reading and parsing all of it. Doing both per event made a
key with n queued events cost O(n) per event, O(n²) in all. So the queue is
three cells:

* ``queue``, a bag of the event bytes, only ever added to;
* ``dequeued``, a bag of tombstones, one digest per event that left;
* ``queue_meta``, a fingerprint of both bags: how many adds and removals,
  and the XOR of their digests.

What is queued is ``queue`` minus ``dequeued``. Each worker keeps, per key, a
heap of those events by ``(event_time_ms, event_id)`` (invariant 10), built
once from the cells and then kept in step with them. It is used only while its
fingerprint equals the cell's: state restored from a checkpoint, moved from
another worker, or rolled back with a failed bundle has another fingerprint,
and the heap is rebuilt from the cells, which stay the truth. Tombstones are
folded away when the queue empties, or when they outnumber the live events,
so the bags hold at most three times the live queue.
"""

from __future__ import annotations

import hashlib
import heapq
import struct
from collections import Counter, OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from beam_agents._proto.event_pb2 import AgentEvent
from beam_agents.runtime._keyed import QueueCell, StateCell

__all__ = ["EventQueue", "QueueCells", "queue_order"]

_DIGEST_BYTES = 16
_META = struct.Struct(">qq16s16s")

#: Tombstones kept before the bag may be rewritten without them.
_FOLD_AT = 256


@dataclass(frozen=True, slots=True)
class QueueCells:
    """The three cells of one key's queue (see the module docstring)."""

    queue: QueueCell
    dequeued: QueueCell
    meta: StateCell


def queue_order(event: bytes) -> tuple[int, str, bytes]:
    """The run order: ``(event_time_ms, event_id)``, so ``e10`` before ``e9``; bytes break ties."""
    parsed = AgentEvent.FromString(event)
    return parsed.event_time_ms, parsed.event_id, event


def _digest(event: bytes) -> bytes:
    return hashlib.blake2b(event, digest_size=_DIGEST_BYTES).digest()


def _xor(left: bytes, right: bytes) -> bytes:
    return (int.from_bytes(left, "big") ^ int.from_bytes(right, "big")).to_bytes(
        _DIGEST_BYTES, "big")


_ZERO = bytes(_DIGEST_BYTES)


@dataclass(slots=True)
class _Heap:
    """One key's queued events in order, and the fingerprint of the cells they came from."""

    entries: list[tuple[int, str, bytes]] = field(default_factory=list)
    live: Counter[bytes] = field(default_factory=Counter)
    gone: Counter[bytes] = field(default_factory=Counter)
    adds: int = 0
    removes: int = 0
    added: bytes = _ZERO
    removed: bytes = _ZERO

    @property
    def size(self) -> int:
        return self.adds - self.removes

    @property
    def meta(self) -> bytes:
        """The fingerprint as stored; empty for a queue that never held anything since a fold."""
        if not self.adds:
            return b""
        return _META.pack(self.adds, self.removes, self.added, self.removed)

    def push(self, event: bytes) -> None:
        heapq.heappush(self.entries, queue_order(event))
        self.live[event] += 1

    def head(self) -> bytes | None:
        entry = self.first()
        return None if entry is None else entry[2]

    def first(self) -> tuple[int, str, bytes] | None:
        while self.entries:
            event = self.entries[0][2]
            if not self.gone[event]:
                return self.entries[0]
            heapq.heappop(self.entries)
            for counts in (self.gone, self.live):
                counts[event] -= 1
                if not counts[event]:
                    del counts[event]
        return None

    def second_time(self) -> int | None:
        """The event time of the event after the head, or None when there is none.

        The head's children hold it, unless one of them has left the queue
        (removed while not at the head, which is rare): then the whole heap
        is searched.
        """
        if self.first() is None:
            return None
        children = [entry for entry in self.entries[1:3] if not self.gone[entry[2]]]
        if len(children) == len(self.entries[1:3]):
            return min(children)[0] if children else None
        rest = self.events()[1:2]
        return queue_order(rest[0])[0] if rest else None

    def events(self) -> list[bytes]:
        """The live events in order."""
        gone = Counter(self.gone)
        ordered = []
        for entry in sorted(self.entries):
            if gone[entry[2]]:
                gone[entry[2]] -= 1
            else:
                ordered.append(entry[2])
        return ordered


class EventQueue:
    """Every key's queue on one worker: the cells' operations, and the cached heaps.

    Args:
        max_cached_events: Events the cached heaps hold in all; past it, the
            least recently used keys' heaps are dropped (and rebuilt from
            their cells when the key comes back).
    """

    def __init__(self, *, max_cached_events: int = 200_000) -> None:
        self._heaps: OrderedDict[Hashable, _Heap] = OrderedDict()
        self._cached = 0
        self._max_cached = max_cached_events

    def add(self, key: Hashable, cells: QueueCells, event: bytes) -> int:
        """Queue `event` durably; returns the key's queue length with it."""
        heap = self._heap(key, cells)
        cells.queue.add(event)
        heap.push(event)
        heap.adds += 1
        heap.added = _xor(heap.added, _digest(event))
        cells.meta.write(heap.meta)
        self._cached += 1
        self._trim()
        return heap.size

    def head(self, key: Hashable, cells: QueueCells) -> bytes | None:
        """The queued event to run next, or None when the queue is empty."""
        return self._heap(key, cells).head()

    def head_time(self, key: Hashable, cells: QueueCells) -> int | None:
        """The event time of the event to run next, or None when the queue is empty."""
        entry = self._heap(key, cells).first()
        return None if entry is None else entry[0]

    def time_after_head(self, key: Hashable, cells: QueueCells) -> int | None:
        """The event time of the event that runs after the head, or None."""
        return self._heap(key, cells).second_time()

    def length(self, key: Hashable, cells: QueueCells) -> int:
        """How many events the key has queued."""
        return self._heap(key, cells).size

    def holds(self, key: Hashable, cells: QueueCells, event: bytes) -> bool:
        """Whether `event` is still queued (an activation's outcome applies only then)."""
        heap = self._heap(key, cells)
        return heap.live[event] > heap.gone[event]

    def events(self, key: Hashable, cells: QueueCells) -> list[bytes]:
        """The key's queued events in the order they will run."""
        return self._heap(key, cells).events()

    def remove(self, key: Hashable, cells: QueueCells, event: bytes) -> None:
        """Take one copy of `event` out of the queue, durably.

        Raises:
            KeyError: `event` is not queued.
        """
        heap = self._heap(key, cells)
        if heap.live[event] <= heap.gone[event]:
            raise KeyError("the event is not queued")
        digest = _digest(event)
        heap.gone[event] += 1
        heap.removes += 1
        heap.removed = _xor(heap.removed, digest)
        self._cached -= 1
        if not heap.size:
            self._fold(key, cells, [])
        elif heap.removes >= _FOLD_AT and heap.removes > heap.size:
            self._fold(key, cells, heap.events())
        else:
            cells.dequeued.add(digest)
            cells.meta.write(heap.meta)

    def forget(self, key: Hashable) -> None:
        """Drop the key's cached heap (its cells are untouched)."""
        heap = self._heaps.pop(key, None)
        if heap is not None:
            self._cached -= heap.size

    def _fold(self, key: Hashable, cells: QueueCells, live: list[bytes]) -> None:
        """Rewrite the bags with the live events only, and no tombstones."""
        cells.queue.clear()
        cells.dequeued.clear()
        fresh = _Heap()
        for event in live:
            cells.queue.add(event)
            fresh.push(event)
            fresh.adds += 1
            fresh.added = _xor(fresh.added, _digest(event))
        cells.meta.write(fresh.meta)
        if live:
            self._heaps[key] = fresh
        else:
            del self._heaps[key]  # an idle key costs nothing here

    def _heap(self, key: Hashable, cells: QueueCells) -> _Heap:
        stored = _as_bytes(cells.meta.read())
        heap = self._heaps.get(key)
        if heap is not None and heap.meta == stored:
            self._heaps.move_to_end(key)
            return heap
        self.forget(key)
        heap = _rebuild(cells)
        if heap.meta != stored:
            cells.meta.write(heap.meta)  # a queue written before the fingerprint existed
        self._heaps[key] = heap
        self._cached += heap.size
        self._trim()
        return heap

    def _trim(self) -> None:
        while self._cached > self._max_cached and len(self._heaps) > 1:
            _, oldest = self._heaps.popitem(last=False)
            self._cached -= oldest.size


def _rebuild(cells: QueueCells) -> _Heap:
    """A key's heap from its cells: the bag's events minus one per tombstone."""
    heap = _Heap()
    tombstones = Counter(bytes(value) for value in cells.dequeued.read())
    for value in cells.queue.read():
        event = bytes(value)
        digest = _digest(event)
        heap.adds += 1
        heap.added = _xor(heap.added, digest)
        if tombstones[digest]:
            tombstones[digest] -= 1
            heap.removes += 1
            heap.removed = _xor(heap.removed, digest)
            continue
        heap.push(event)
    heap.entries.sort()
    return heap


def _as_bytes(value: Any) -> bytes:
    return b"" if value is None else bytes(value)
