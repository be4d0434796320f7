"""The per-key queue: event-time order, O(1) state operations per event, and the cells as the truth.

`EventQueue` over in-process cells that count their reads, so the tests can
see that a key's bag is read once, not once per event (the hot-key cost,
invariant 10), and that a cache out of step with the cells is never used.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable

import pytest

from beam_agents.hosting import BagCell, KeyCells, ValueCell
from beam_agents.model._journal import journal_key
from beam_agents.runtime import AgentEvent
from beam_agents.runtime._queue import EventQueue, QueueCells, queue_order


class CountingBag(BagCell):
    """A bag that counts how often it is read in full."""

    __slots__ = ("reads",)

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def read(self) -> Iterable[bytes]:
        self.reads += 1
        return super().read()


def cells() -> QueueCells:
    return QueueCells(CountingBag(), CountingBag(), ValueCell())


def event(n: int, *, time_ms: int | None = None, event_id: str | None = None) -> bytes:
    return AgentEvent(entity_key=b"k", event_id=f"e{n}" if event_id is None else event_id,
                      event_time_ms=n if time_ms is None else time_ms,
                      payload=b"p").SerializeToString(deterministic=True)


def drain(queue: EventQueue, key: str, queued: QueueCells) -> list[bytes]:
    out = []
    while (head := queue.head(key, queued)) is not None:
        out.append(head)
        queue.remove(key, queued, head)
    return out


def test_ties_in_event_time_run_in_event_id_order_whatever_the_ids_lengths() -> None:
    """``e10`` before ``e9``: the order is the id's, not its serialized bytes'."""
    queue, queued = EventQueue(), cells()
    for event_id in ("e9", "e10", "e100", "e1"):
        queue.add("k", queued, event(0, time_ms=7, event_id=event_id))
    ran = [AgentEvent.FromString(e).event_id for e in drain(queue, "k", queued)]
    assert ran == ["e1", "e10", "e100", "e9"]


def test_a_hot_key_reads_its_bags_once_not_once_per_event() -> None:
    """4,000 events in and out of one key: each bag read when the key comes and once it is empty."""
    queue, queued = EventQueue(), cells()
    order = list(range(4_000))
    random.Random(7).shuffle(order)
    for n in order:
        queue.add("hot", queued, event(n))
    ran = drain(queue, "hot", queued)
    assert [AgentEvent.FromString(e).event_time_ms for e in ran] == list(range(4_000))
    assert isinstance(queued.queue, CountingBag) and isinstance(queued.dequeued, CountingBag)
    # An emptied key's heap is dropped, so the drain's last look reads the (empty) bags again.
    assert (queued.queue.reads, queued.dequeued.reads) == (2, 2)
    # Emptied, the key leaves nothing behind in state.
    assert list(queued.queue.read()) == [] and list(queued.dequeued.read()) == []


def test_the_bags_stay_within_three_times_the_live_queue() -> None:
    """Tombstones are folded away once they outnumber the live events."""
    queue, queued = EventQueue(), cells()
    for n in range(2_000):
        queue.add("k", queued, event(n))
    for _ in range(1_500):
        head = queue.head("k", queued)
        assert head is not None
        queue.remove("k", queued, head)
        live = queue.length("k", queued)
        stored = len(list(queued.queue.read())) + len(list(queued.dequeued.read()))
        assert stored <= 3 * live + 2 * 256, (live, stored)


def test_a_fresh_worker_rebuilds_the_queue_from_the_cells() -> None:
    """Another worker (a restore, a rebalance) reads what the cells hold, tombstones applied."""
    first, queued = EventQueue(), cells()
    for n in (5, 3, 9, 1):
        first.add("k", queued, event(n))
    head = first.head("k", queued)
    assert head is not None
    first.remove("k", queued, head)
    second = EventQueue()
    assert second.events("k", queued) == [event(3), event(5), event(9)]
    assert not second.holds("k", queued, event(1)) and second.holds("k", queued, event(9))


def test_cells_rolled_back_behind_the_cache_are_read_again() -> None:
    """A failed bundle's writes are discarded; the cache, out of step, must not be used."""
    queue = EventQueue()
    bag, tombs, meta = BagCell(), BagCell(), ValueCell()
    queued = QueueCells(bag, tombs, meta)
    queue.add("k", queued, event(1))
    saved = (list(bag.read()), list(tombs.read()), meta.read())
    queue.add("k", queued, event(0))  # the bundle that will fail
    # The runner discards the bundle's state changes.
    bag.values[:] = saved[0]
    tombs.values[:] = saved[1]
    meta.write(saved[2])
    assert queue.events("k", queued) == [event(1)]
    assert queue.head("k", queued) == event(1)


def test_a_queue_written_before_the_fingerprint_reads_as_it_was() -> None:
    """State from before this layout (a bag and no meta) is read, and the meta written once."""
    legacy = QueueCells(BagCell(), BagCell(), ValueCell())
    for n in (4, 2, 6):
        legacy.queue.add(event(n))
    queue = EventQueue()
    assert queue.events("k", legacy) == [event(2), event(4), event(6)]
    assert legacy.meta.read()


def test_duplicate_events_leave_one_copy_at_a_time() -> None:
    queue, queued = EventQueue(), cells()
    queue.add("k", queued, event(1))
    queue.add("k", queued, event(1))
    queue.remove("k", queued, event(1))
    assert queue.length("k", queued) == 1 and queue.holds("k", queued, event(1))
    assert EventQueue().events("k", queued) == [event(1)]
    queue.remove("k", queued, event(1))
    with pytest.raises(KeyError):
        queue.remove("k", queued, event(1))


def test_keys_past_the_cache_bound_are_rebuilt_and_stay_exact() -> None:
    """With room for few events cached, many keys still each run in order."""
    queue = EventQueue(max_cached_events=10)
    keyed = {f"k{k}": cells() for k in range(20)}
    rng = random.Random(3)
    expected: dict[str, list[bytes]] = {key: [] for key in keyed}
    for n in range(200):
        key = rng.choice(list(keyed))
        queue.add(key, keyed[key], event(n, time_ms=rng.randrange(50)))
        expected[key].append(event(n, time_ms=0))
    for key, queued in keyed.items():
        ran = drain(queue, key, queued)
        assert ran == sorted(ran, key=queue_order) and len(ran) == len(expected[key])


def test_random_adds_and_removes_match_a_sorted_list() -> None:
    queue, queued = EventQueue(), cells()
    reference: list[bytes] = []
    rng = random.Random(11)
    for step in range(3_000):
        if reference and rng.random() < 0.45:
            victim = min(reference, key=queue_order) if rng.random() < 0.8 else rng.choice(
                reference)
            reference.remove(victim)
            queue.remove("k", queued, victim)
        else:
            added = event(step, time_ms=rng.randrange(100))
            reference.append(added)
            queue.add("k", queued, added)
        ordered = sorted(reference, key=queue_order)
        assert queue.head("k", queued) == (ordered[0] if ordered else None)
        assert queue.time_after_head("k", queued) == (
            queue_order(ordered[1])[0] if len(ordered) > 1 else None)
    assert EventQueue().events("k", queued) == sorted(reference, key=queue_order)


def test_two_events_with_the_same_cache_key_get_different_journal_keys() -> None:
    """A dead letter leaves seq as it was, so the next event shares its cache keys (invariant 9)."""
    cache_key = hashlib.sha256(b"same request at the same seq").hexdigest()
    first = journal_key(cache_key, hashlib.sha256(event(1)).digest())
    second = journal_key(cache_key, hashlib.sha256(event(2)).digest())
    assert first != second
    assert journal_key(cache_key, hashlib.sha256(event(1)).digest()) == first


def test_key_cells_bind_the_queue_cells() -> None:
    key_cells = KeyCells.in_process()
    assert key_cells.queued.queue is key_cells.queue
    assert key_cells.queued.dequeued is key_cells.dequeued
    assert key_cells.queued.meta is key_cells.queue_meta
