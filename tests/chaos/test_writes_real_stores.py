"""Seed 004 scenarios W01-W12: the write coordinator over SQLite and the Firestore server.

`tests/unit/memory/test_writes.py` holds the coordinator to each scenario
with fakes that fail on demand. Here the same scenarios run against the real
backends, with their failures made real: a store that cannot be reached is a
SQLite path that cannot be opened or a Firestore client facing a closed port,
a record a store refuses is one it really refuses, and a lost publication is
another writer's flush of the same entity.

Two scenarios meet a property of the real stores that the fakes do not have:
staging and discarding touch only the store object's local buffer (seed 000:
a save does no I/O). So an unreachable store neither degrades a foreground
write (W07) nor an abandon (W11): the write is kept and the outage surfaces
at the flush (W04), and the rollback is enforced all the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from beam_agents.errors import MemoryContractError, ScopeViolation
from beam_agents.memory import (
    BufferedLongtermStore,
    DiscardReceipt,
    FlushReceipt,
    LongtermRecord,
    LongtermStoreConfig,
    Scope,
    TaskRegistry,
    WriteCoordinator,
    WriteOutcome,
    WriteRequest,
)
from beam_agents.memory._store import MAX_KEY_BYTES
from tests.chaos._faults import Outage
from tests.conftest import Run

pytestmark = pytest.mark.timeout(120)

E = b"tenant-e"
F = b"tenant-f"
ROOT = Scope(entity_key=E)
NOTES = Scope(entity_key=E, parts=("notes",))


def rec(key: str, *, seq: int = 1, value: bytes = b"v", entity: bytes = E) -> LongtermRecord:
    return LongtermRecord(entity_key=entity, key=key, value=value, seq=seq, updated_at_ms=7)


def request(*keys: str, scope: Scope = ROOT, seq: int = 1, value: bytes = b"v") -> WriteRequest:
    return WriteRequest(scope=scope, records=tuple(
        rec(k, seq=seq, value=value, entity=scope.entity_key) for k in keys))


def committed(run: Run[Any], store: BufferedLongtermStore, entity: bytes = E
              ) -> dict[str, bytes]:
    """The entity's committed rows, key to value, as the store serves them."""
    return {row.key: row.value for row in run(store.search(entity, "", 1000))}


def buffered(store: BufferedLongtermStore, entity: bytes = E) -> tuple[str, ...]:
    """The keys in the store's own pending buffer for the entity."""
    return tuple(sorted(store.pending_upserts.snapshot(entity)))


@pytest.fixture
def store(store_config: LongtermStoreConfig, run: Run[Any]) -> Iterator[BufferedLongtermStore]:
    """A real store, reachable, closed on the test's loop at the end."""
    opened = store_config.open()
    yield opened
    run(opened.close())


@pytest.fixture
def cut_off(unreachable: Outage, run: Run[Any]) -> Iterator[BufferedLongtermStore]:
    """A real store whose backend cannot be reached (see the `unreachable` fixture)."""
    opened = unreachable.config.open()
    yield opened
    run(opened.close())


class WithoutDiscard:
    """A real store seen through the port without the optional discard."""

    def __init__(self, inner: BufferedLongtermStore) -> None:
        self.inner = inner

    async def load(self, entity_key: bytes, key: str) -> LongtermRecord | None:
        return await self.inner.load(entity_key, key)

    async def search(self, entity_key: bytes, prefix: str, limit: int
                     ) -> tuple[LongtermRecord, ...]:
        return await self.inner.search(entity_key, prefix, limit)

    async def stage(self, entity_key: bytes, records: Sequence[LongtermRecord]
                    ) -> tuple[str, ...]:
        return await self.inner.stage(entity_key, records)

    async def flush(self, entity_key: bytes) -> FlushReceipt:
        return await self.inner.flush(entity_key)

    async def close(self) -> None:
        await self.inner.close()


# -- write_in_background ---


@pytest.mark.spec("W01")
def test_a_background_write_with_no_registry_is_refused_and_nothing_reaches_a_real_store(
        store: BufferedLongtermStore, run: Run[Any]) -> None:
    """THEN it is refused with MemoryContractError and nothing is spawned."""
    coordinator = WriteCoordinator(store=store)

    async def scenario() -> set[object]:
        with pytest.raises(MemoryContractError, match="registry"):
            coordinator.write_in_background(request("a"))
        await asyncio.sleep(0)
        return set(asyncio.all_tasks()) - {asyncio.current_task()}

    assert run(scenario()) == set()
    assert coordinator.in_flight == 0
    assert buffered(store) == ()
    assert committed(run, store) == {}


# -- flush ---


@pytest.mark.spec("W02")
def test_a_flush_joins_its_background_writes_before_committing_to_a_real_store(
        store: BufferedLongtermStore, run: Run[Any]) -> None:
    """THEN no half turn is published: every background write lands before the commit."""
    coordinator = WriteCoordinator(store=store, background=TaskRegistry())

    async def scenario() -> FlushReceipt:
        coordinator.write_in_background(request("a"))
        coordinator.write_in_background(request("b"))
        return await coordinator.flush(ROOT, required_ids=("a", "b"))

    assert run(scenario()).committed == ("a", "b")
    assert committed(run, store) == {"a": b"v", "b": b"v"}
    assert coordinator.in_flight == 0


@pytest.mark.spec("W02")
def test_a_flush_that_does_not_join_overtakes_its_own_background_writes(
        store: BufferedLongtermStore, run: Run[Any]) -> None:
    """Why W02 joins: on a real store, a flush that does not wait publishes none of them."""
    coordinator = WriteCoordinator(store=store, background=TaskRegistry())

    async def scenario() -> FlushReceipt:
        coordinator.write_in_background(request("a"))
        coordinator.write_in_background(request("b"))
        overtaking = await coordinator.flush(ROOT, join=False)
        await coordinator.join()
        return overtaking

    assert run(scenario()).committed == ()
    assert committed(run, store) == {}
    assert buffered(store) == ("a", "b")


@pytest.mark.spec("W03")
def test_a_background_write_a_real_store_refused_is_reported_by_join_as_an_outcome(
        store: BufferedLongtermStore, run: Run[Any]) -> None:
    """THEN join reports it as an outcome and does not re-raise it."""
    coordinator = WriteCoordinator(store=store, background=TaskRegistry())
    refused, fine = request("k" * (MAX_KEY_BYTES + 1)), request("b")

    async def scenario() -> tuple[WriteOutcome, ...]:
        coordinator.write_in_background(refused)
        coordinator.write_in_background(fine)
        return await coordinator.join()

    first, second = run(scenario())
    assert first.request is refused and not first.ok and first.receipt is None
    assert isinstance(first.error, ValueError) and "512-byte limit" in str(first.error)
    assert second.ok and second.receipt is not None and second.receipt.accepted == ("b",)
    assert coordinator.pending_ids == ("b",)
    assert buffered(store) == ("b",)  # the refused write staged nothing


@pytest.mark.spec("W04")
def test_a_flush_to_an_unreachable_real_store_is_degraded_and_the_next_flush_commits(
        unreachable: Outage, cut_off: BufferedLongtermStore, run: Run[Any]) -> None:
    """THEN the receipt is degraded, pending bookkeeping stays, and the next flush commits it."""
    coordinator = WriteCoordinator(store=cut_off)
    run(coordinator.write(request("a")))

    lost = run(coordinator.flush(ROOT, required_ids=("a",)))
    kept, still_buffered = coordinator.pending_ids, buffered(cut_off)
    unreachable.heal()
    unreachable.wait_reachable(lambda: run(cut_off.load(E, "probe")))
    later = run(coordinator.flush(ROOT, required_ids=("a",)))

    assert lost.degraded and lost.committed == () and "flush" in lost.reason
    assert kept == ("a",) and still_buffered == ("a",)
    assert later.committed == ("a",) and not later.degraded
    assert coordinator.pending_ids == ()
    assert committed(run, cut_off) == {"a": b"v"}


@pytest.mark.spec("W05")
def test_a_flush_that_publishes_none_of_the_required_ids_raises_and_keeps_bookkeeping(
        store: BufferedLongtermStore, run: Run[Any]) -> None:
    """THEN MemoryContractError is raised and the pending bookkeeping is kept.

    The store flushes per entity, so another writer's flush of the same
    entity publishes this coordinator's records; its own flush then commits
    nothing, and it must not claim that it published them.
    """
    mine, other_writer = WriteCoordinator(store=store), WriteCoordinator(store=store)

    async def scenario() -> None:
        await mine.write(request("a", "b"))
        assert (await other_writer.flush(ROOT)).committed == ("a", "b")
        with pytest.raises(MemoryContractError, match=r"\['a', 'b'\]"):
            await mine.flush(ROOT, required_ids=("a", "b"))

    run(scenario())
    assert mine.pending_ids == ("a", "b")
    assert mine.pending_scopes == (ROOT.path,)


@pytest.mark.spec("W06")
def test_a_successful_flush_to_a_real_store_forgets_the_scope_and_every_scope_below(
        store: BufferedLongtermStore, run: Run[Any]) -> None:
    """THEN the pending bookkeeping of the scope and of every scope below it is forgotten."""
    other = Scope(entity_key=F)
    coordinator = WriteCoordinator(store=store)

    async def scenario() -> FlushReceipt:
        await coordinator.write(request("a"))
        await coordinator.write(request("b", scope=NOTES))
        await coordinator.write(request("c", scope=Scope(entity_key=E, parts=("notes", "x"))))
        await coordinator.write(request("z", scope=other))
        return await coordinator.flush(ROOT, required_ids=("a", "b"))

    assert run(scenario()).committed == ("a", "b", "c")
    assert coordinator.pending_scopes == (other.path,)
    assert coordinator.pending_ids == ("z",)
    assert committed(run, store) == {"a": b"v", "b": b"v", "c": b"v"}
    assert committed(run, store, F) == {} and buffered(store, F) == ("z",)


# -- write ---


@pytest.mark.spec("W07")
def test_a_foreground_write_to_an_unreachable_real_store_does_not_raise_and_keeps_the_write(
        cut_off: BufferedLongtermStore, run: Run[Any]) -> None:
    """The write does not raise; a real store stages locally, so the outage shows at the flush."""
    coordinator = WriteCoordinator(store=cut_off)

    receipt = run(coordinator.write(request("b", "a")))
    flushed = run(coordinator.flush(ROOT))

    assert not receipt.degraded and receipt.accepted == ("a", "b") and receipt.rejected == ()
    assert flushed.degraded
    assert coordinator.pending_ids == ("a", "b") and buffered(cut_off) == ("a", "b")


@pytest.mark.spec("W08")
def test_a_scope_violation_propagates_from_a_write_to_a_real_store_and_is_not_degraded(
        cut_off: BufferedLongtermStore, run: Run[Any]) -> None:
    """THEN ScopeViolation propagates from write and is never reported as degraded."""
    coordinator = WriteCoordinator(store=cut_off, background=TaskRegistry())
    crossing = WriteRequest(scope=ROOT, records=(rec("a"), rec("stolen", entity=F)))

    async def scenario() -> None:
        with pytest.raises(ScopeViolation) as caught:
            await coordinator.write(crossing)
        assert caught.value.expected == E and caught.value.actual == F
        with pytest.raises(ScopeViolation):
            coordinator.write_in_background(crossing)

    run(scenario())
    assert coordinator.in_flight == 0 and coordinator.pending_ids == ()
    assert buffered(cut_off, E) == () and buffered(cut_off, F) == ()


# -- abandon ---


@pytest.mark.spec("W09")
def test_abandon_on_a_real_store_drops_its_buffer_and_touches_nothing_committed(
        store: BufferedLongtermStore, run: Run[Any]) -> None:
    """THEN the pending buffer is dropped at the store and nothing committed is touched."""
    coordinator = WriteCoordinator(store=store)

    async def scenario() -> tuple[DiscardReceipt, FlushReceipt]:
        await coordinator.write(request("old", value=b"v1"))
        await coordinator.flush(ROOT)
        await coordinator.write(WriteRequest(
            scope=ROOT, records=(rec("old", seq=2, value=b"v2"), rec("new", seq=2))))
        receipt = await coordinator.abandon(ROOT)
        return receipt, await coordinator.flush(ROOT)

    receipt, later = run(scenario())
    assert receipt.discarded == ("new", "old") and not receipt.degraded
    assert buffered(store) == ()
    assert committed(run, store) == {"old": b"v1"}
    assert later.committed == ()
    assert coordinator.pending_ids == ()


@pytest.mark.spec("W10")
def test_abandon_through_a_port_without_discard_is_degraded_and_lists_the_ids(
        store: BufferedLongtermStore, run: Run[Any]) -> None:
    """THEN the receipt is degraded and lists the abandoned ids; the store still holds them."""
    coordinator = WriteCoordinator(store=WithoutDiscard(store))

    async def scenario() -> DiscardReceipt:
        await coordinator.write(request("b", "a"))
        return await coordinator.abandon(ROOT)

    receipt = run(scenario())
    assert receipt.degraded and receipt.discarded == ("a", "b")
    assert coordinator.pending_ids == ()
    # Degraded for a reason: the next flush of the entity, by anyone, publishes them.
    assert run(store.flush(E)).committed == ("a", "b")


@pytest.mark.spec("W11")
def test_abandon_with_a_real_store_unreachable_still_drops_the_local_buffer(
        cut_off: BufferedLongtermStore, run: Run[Any]) -> None:
    """The rollback needs no I/O on a real store, so it is enforced: nothing is left to publish."""
    coordinator = WriteCoordinator(store=cut_off)

    async def scenario() -> tuple[DiscardReceipt, FlushReceipt]:
        await coordinator.write(request("a"))
        receipt = await coordinator.abandon(ROOT)
        return receipt, await coordinator.flush(ROOT)

    receipt, later = run(scenario())
    assert receipt.discarded == ("a",) and not receipt.degraded
    assert buffered(cut_off) == () and coordinator.pending_ids == ()
    assert later == FlushReceipt(entity_key=E)  # nothing pending, so no I/O to fail


# -- properties ---


@pytest.mark.spec("W12")
def test_pending_ids_and_scopes_are_sorted_and_in_flight_counts_unjoined_writes_on_a_real_store(
        store: BufferedLongtermStore, run: Run[Any]) -> None:
    """THEN pending_ids and pending_scopes are sorted; in_flight counts spawned, unjoined writes."""
    coordinator = WriteCoordinator(store=store, background=TaskRegistry())
    b_scope = Scope(entity_key=E, parts=("b",))
    a_scope = Scope(entity_key=E, parts=("a",))

    async def scenario() -> tuple[int, int]:
        await coordinator.write(request("z", "m", scope=b_scope))
        await coordinator.write(request("k", scope=a_scope))
        coordinator.write_in_background(request("y", scope=a_scope))
        coordinator.write_in_background(request("c", scope=b_scope))
        for _ in range(5):
            await asyncio.sleep(0)  # both finish, neither is joined yet
        before = coordinator.in_flight
        await coordinator.join()
        return before, coordinator.in_flight

    assert run(scenario()) == (2, 0)
    assert coordinator.pending_ids == ("c", "k", "m", "y", "z")
    assert coordinator.pending_scopes == (a_scope.path, b_scope.path)
    assert buffered(store) == ("c", "k", "m", "y", "z")
