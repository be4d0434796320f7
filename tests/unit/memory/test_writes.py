"""Seed 004 scenarios W01-W12: the write coordinator, plus its registry and scopes."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import Sequence

import pytest

from beam_agents.errors import MemoryContractError, MemoryUnavailable, ScopeViolation
from beam_agents.memory._store import DiscardReceipt, FlushReceipt, LongtermRecord
from beam_agents.memory._writes import (
    WRITE_OWNER,
    Scope,
    TaskRegistry,
    WriteCoordinator,
    WriteOutcome,
    WriteRequest,
)
from beam_agents.stores.memory import InMemoryLongtermStore

E = b"tenant-e"
F = b"tenant-f"
ROOT = Scope(entity_key=E)


def rec(key: str, *, seq: int = 1, value: bytes = b"v", entity: bytes = E) -> LongtermRecord:
    return LongtermRecord(entity_key=entity, key=key, value=value, seq=seq, updated_at_ms=7)


def request(*keys: str, scope: Scope = ROOT, seq: int = 1) -> WriteRequest:
    return WriteRequest(scope=scope, records=tuple(rec(k, seq=seq, entity=scope.entity_key)
                                                  for k in keys))


class SlowStageStore(InMemoryLongtermStore):
    """Yields to the loop a few times before staging, like a store with a round trip."""

    async def stage(self, entity_key: bytes, records: Sequence[LongtermRecord]) -> tuple[str, ...]:
        for _ in range(3):
            await asyncio.sleep(0)
        return await super().stage(entity_key, records)


class HangingStageStore(InMemoryLongtermStore):
    """Never finishes staging."""

    async def stage(self, entity_key: bytes, records: Sequence[LongtermRecord]) -> tuple[str, ...]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


class LossyStore(InMemoryLongtermStore):
    """Commits, but its receipt leaves out one key, as a store that lost a record would."""

    def __init__(self, lost: str) -> None:
        super().__init__()
        self.lost = lost

    async def flush(self, entity_key: bytes) -> FlushReceipt:
        receipt = await super().flush(entity_key)
        return dataclasses.replace(
            receipt, committed=tuple(k for k in receipt.committed if k != self.lost)
        )


class NoDiscardStore:
    """A store implementing the port without the optional discard."""

    def __init__(self) -> None:
        self.inner = InMemoryLongtermStore()

    async def load(self, entity_key: bytes, key: str) -> LongtermRecord | None:
        return await self.inner.load(entity_key, key)

    async def search(self, entity_key: bytes, prefix: str, limit: int
                     ) -> tuple[LongtermRecord, ...]:
        return await self.inner.search(entity_key, prefix, limit)

    async def stage(self, entity_key: bytes, records: Sequence[LongtermRecord]) -> tuple[str, ...]:
        return await self.inner.stage(entity_key, records)

    async def flush(self, entity_key: bytes) -> FlushReceipt:
        return await self.inner.flush(entity_key)

    async def close(self) -> None:
        await self.inner.close()


class UnreachableStore:
    """Every call fails as a store behind a broken network would; logs the calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def _fail(self, op: str) -> MemoryUnavailable:
        self.calls.append(op)
        return MemoryUnavailable(f"{op}: connection refused")

    async def load(self, entity_key: bytes, key: str) -> LongtermRecord | None:
        raise self._fail("load")

    async def search(self, entity_key: bytes, prefix: str, limit: int
                     ) -> tuple[LongtermRecord, ...]:
        raise self._fail("search")

    async def stage(self, entity_key: bytes, records: Sequence[LongtermRecord]) -> tuple[str, ...]:
        raise self._fail("stage")

    async def flush(self, entity_key: bytes) -> FlushReceipt:
        raise self._fail("flush")

    async def discard(self, entity_key: bytes) -> DiscardReceipt:
        raise self._fail("discard")

    async def close(self) -> None:
        self.calls.append("close")


# -- write_in_background ---


@pytest.mark.spec("W01")
def test_a_background_write_with_no_registry_bound_is_refused_and_nothing_is_spawned() -> None:
    """THEN it is refused with MemoryContractError and nothing is spawned."""
    store = InMemoryLongtermStore()
    coordinator = WriteCoordinator(store=store)

    async def scenario() -> set[object]:
        with pytest.raises(MemoryContractError, match="registry"):
            coordinator.write_in_background(request("a"))
        await asyncio.sleep(0)
        return set(asyncio.all_tasks()) - {asyncio.current_task()}

    assert asyncio.run(scenario()) == set()
    assert coordinator.in_flight == 0
    assert store.operations == []


def test_a_background_write_is_spawned_through_the_registry_with_an_owner() -> None:
    registry = TaskRegistry()
    coordinator = WriteCoordinator(store=SlowStageStore(), background=registry)

    async def scenario() -> tuple[str, str]:
        coordinator.write_in_background(request("a"))
        (work,) = registry.running
        await coordinator.join()
        return work.owner, work.purpose

    assert asyncio.run(scenario()) == (WRITE_OWNER, f"longterm-write:{ROOT.path}")


# -- flush ---


@pytest.mark.spec("W02")
def test_flush_joins_in_flight_background_writes_before_committing() -> None:
    """THEN no half turn is published: every background write lands before the commit."""
    store = SlowStageStore()
    coordinator = WriteCoordinator(store=store, background=TaskRegistry())

    async def scenario() -> FlushReceipt:
        coordinator.write_in_background(request("a"))
        coordinator.write_in_background(request("b"))
        return await coordinator.flush(ROOT, required_ids=("a", "b"))

    receipt = asyncio.run(scenario())
    assert receipt.committed == ("a", "b")
    assert sorted(k for _, k in store.rows(E)) == ["a", "b"]
    assert coordinator.in_flight == 0


@pytest.mark.spec("W03")
def test_a_background_write_that_raised_is_reported_by_join_as_an_outcome() -> None:
    """THEN join reports it as an outcome and does not re-raise it."""
    store = InMemoryLongtermStore()
    store.fail_next("stage", RuntimeError("boom"))
    coordinator = WriteCoordinator(store=store, background=TaskRegistry())
    failing, fine = request("a"), request("b")

    async def scenario() -> tuple[WriteOutcome, ...]:
        coordinator.write_in_background(failing)
        coordinator.write_in_background(fine)
        return await coordinator.join()

    first, second = asyncio.run(scenario())
    assert first.request is failing and not first.ok and first.receipt is None
    assert isinstance(first.error, RuntimeError)
    assert second.ok and second.receipt is not None and second.receipt.accepted == ("b",)
    assert coordinator.pending_ids == ("b",)


def test_a_background_write_past_its_deadline_is_reported_as_timed_out() -> None:
    registry = TaskRegistry()
    coordinator = WriteCoordinator(store=HangingStageStore(), background=registry,
                                   deadline_s=0.01)

    async def scenario() -> BaseException | None:
        coordinator.write_in_background(request("a"))
        (outcome,) = await coordinator.join()
        return outcome.error

    assert isinstance(asyncio.run(scenario()), TimeoutError)
    assert registry.running == ()


@pytest.mark.spec("W04")
def test_a_flush_against_an_unreachable_store_is_degraded_and_the_next_flush_commits() -> None:
    """THEN the receipt is degraded, pending bookkeeping stays, and the next flush commits it."""
    store = InMemoryLongtermStore()
    coordinator = WriteCoordinator(store=store)

    async def scenario() -> tuple[FlushReceipt, tuple[str, ...], FlushReceipt]:
        await coordinator.write(request("a"))
        store.unreachable = True
        lost = await coordinator.flush(ROOT, required_ids=("a",))
        kept = coordinator.pending_ids
        store.unreachable = False
        return lost, kept, await coordinator.flush(ROOT, required_ids=("a",))

    lost, kept, committed = asyncio.run(scenario())
    assert lost.degraded and lost.committed == ()
    assert lost.reason == "in-memory store marked unreachable; flush failed"
    assert kept == ("a",)
    assert committed.committed == ("a",) and not committed.degraded
    assert coordinator.pending_ids == ()
    assert list(store.rows(E)) == [(E, "a")]


@pytest.mark.spec("W05")
def test_a_flush_whose_committed_set_lacks_a_required_id_raises_and_keeps_bookkeeping() -> None:
    """THEN MemoryContractError is raised and the pending bookkeeping is kept."""
    coordinator = WriteCoordinator(store=LossyStore(lost="b"))

    async def scenario() -> None:
        await coordinator.write(request("a", "b"))
        with pytest.raises(MemoryContractError, match=r"\['b'\]"):
            await coordinator.flush(ROOT, required_ids=("a", "b"))

    asyncio.run(scenario())
    assert coordinator.pending_ids == ("a", "b")
    assert coordinator.pending_scopes == (ROOT.path,)


def test_a_superseded_record_counts_as_published_for_required_ids() -> None:
    store = InMemoryLongtermStore()
    coordinator = WriteCoordinator(store=store)

    async def scenario() -> FlushReceipt:
        await coordinator.write(request("a", seq=9))
        await coordinator.flush(ROOT)
        await coordinator.write(request("a", seq=3))  # a replay that lost to a newer row
        return await coordinator.flush(ROOT, required_ids=("a",))

    receipt = asyncio.run(scenario())
    assert receipt.superseded == ("a",) and receipt.committed == ()
    assert store.rows(E)[(E, "a")].seq == 9
    assert coordinator.pending_ids == ()


@pytest.mark.spec("W06")
def test_a_successful_flush_forgets_the_bookkeeping_of_the_scope_and_every_scope_below() -> None:
    """THEN the pending bookkeeping of the scope and of every scope below it is forgotten."""
    notes = Scope(entity_key=E, parts=("notes",))
    other = Scope(entity_key=F)
    # "c" is lost by the store and not required: its scope is below, so it is forgotten anyway.
    coordinator = WriteCoordinator(store=LossyStore(lost="c"))

    async def scenario() -> None:
        await coordinator.write(request("a"))
        await coordinator.write(request("b", scope=notes))
        await coordinator.write(request("c", scope=Scope(entity_key=E, parts=("notes", "x"))))
        await coordinator.write(request("z", scope=other))
        await coordinator.flush(ROOT, required_ids=("a", "b"))

    asyncio.run(scenario())
    assert coordinator.pending_scopes == (other.path,)
    assert coordinator.pending_ids == ("z",)


def test_a_sub_scope_flush_also_forgets_what_the_entity_wide_store_flush_published() -> None:
    notes = Scope(entity_key=E, parts=("notes",))
    store = InMemoryLongtermStore()
    coordinator = WriteCoordinator(store=store)

    async def scenario() -> FlushReceipt:
        await coordinator.write(request("a", scope=Scope(entity_key=E, parts=("profile",))))
        await coordinator.write(request("b", scope=notes))
        return await coordinator.flush(notes, required_ids=("b",))

    assert asyncio.run(scenario()).committed == ("a", "b")  # the store flushes per entity
    assert coordinator.pending_scopes == ()


def test_a_sub_scope_flush_keeps_a_sibling_id_the_store_did_not_publish() -> None:
    notes = Scope(entity_key=E, parts=("notes",))
    notes_x = Scope(entity_key=E, parts=("notesx",))  # a path prefix, but not below
    coordinator = WriteCoordinator(store=LossyStore(lost="a"))

    async def scenario() -> None:
        await coordinator.write(request("a", scope=notes_x))
        await coordinator.write(request("b", scope=notes))
        await coordinator.flush(notes, required_ids=("b",))

    asyncio.run(scenario())
    assert coordinator.pending_scopes == (notes_x.path,)
    assert coordinator.pending_ids == ("a",)


def test_scope_paths_and_below_use_a_separator_not_a_bare_prefix() -> None:
    notes = Scope(entity_key=E, parts=("notes",))
    assert ROOT.path == E.hex()
    assert notes.path == f"{E.hex()}/notes"
    assert ROOT.covers(notes) and notes.covers(Scope(entity_key=E, parts=("notes", "x")))
    assert not notes.covers(Scope(entity_key=E, parts=("notesx",)))
    assert not notes.covers(ROOT)
    with pytest.raises(ValueError, match="'a/b'"):
        Scope(entity_key=E, parts=("a/b",))


# -- write ---


@pytest.mark.spec("W07")
def test_a_foreground_write_to_an_unreachable_store_returns_a_degraded_receipt() -> None:
    """THEN the receipt is degraded, rejects every record, and write does not raise."""
    coordinator = WriteCoordinator(store=UnreachableStore())
    receipt = asyncio.run(coordinator.write(request("b", "a")))
    assert receipt.degraded and receipt.accepted == ()
    assert [key for key, _ in receipt.rejected] == ["a", "b"]
    assert all("unreachable" in reason for _, reason in receipt.rejected)
    assert coordinator.pending_ids == ()


@pytest.mark.spec("W08")
def test_a_scope_violation_propagates_from_write_and_is_never_reported_as_degraded() -> None:
    """THEN ScopeViolation propagates from write and is never reported as degraded."""
    store = UnreachableStore()
    coordinator = WriteCoordinator(store=store, background=TaskRegistry())
    crossing = WriteRequest(scope=ROOT, records=(rec("a"), rec("stolen", entity=F)))

    async def scenario() -> None:
        with pytest.raises(ScopeViolation) as caught:
            await coordinator.write(crossing)
        assert caught.value.expected == E and caught.value.actual == F
        with pytest.raises(ScopeViolation):
            coordinator.write_in_background(crossing)

    asyncio.run(scenario())
    assert store.calls == []
    assert coordinator.in_flight == 0 and coordinator.pending_ids == ()


# -- abandon ---


@pytest.mark.spec("W09")
def test_abandon_with_a_discard_capable_store_drops_the_buffer_and_touches_nothing_committed(
) -> None:
    """THEN the pending buffer is dropped at the store and nothing committed is touched."""
    store = InMemoryLongtermStore()
    coordinator = WriteCoordinator(store=store)

    async def scenario() -> tuple[DiscardReceipt, FlushReceipt]:
        await coordinator.write(WriteRequest(scope=ROOT, records=(rec("old", value=b"v1"),)))
        await coordinator.flush(ROOT)
        await coordinator.write(WriteRequest(
            scope=ROOT, records=(rec("old", seq=2, value=b"v2"), rec("new", seq=2))))
        receipt = await coordinator.abandon(ROOT)
        return receipt, await coordinator.flush(ROOT)

    receipt, later = asyncio.run(scenario())
    assert receipt.discarded == ("new", "old") and not receipt.degraded
    assert store.pending(E) == ()
    rows = store.rows(E)
    assert list(rows) == [(E, "old")] and rows[(E, "old")].value == b"v1"
    assert later.committed == ()
    assert coordinator.pending_ids == ()


@pytest.mark.spec("W10")
def test_abandon_with_a_store_lacking_discard_returns_a_degraded_receipt_listing_the_ids(
) -> None:
    """THEN the receipt is degraded and lists the abandoned ids."""
    store = NoDiscardStore()
    coordinator = WriteCoordinator(store=store)

    async def scenario() -> DiscardReceipt:
        await coordinator.write(request("b", "a"))
        return await coordinator.abandon(ROOT)

    receipt = asyncio.run(scenario())
    assert receipt.degraded and receipt.discarded == ("a", "b")
    assert coordinator.pending_ids == ()
    assert len(store.inner.pending(E)) == 2  # the rollback was not enforced, and says so


@pytest.mark.spec("W11")
def test_abandon_with_the_store_unreachable_returns_a_degraded_receipt() -> None:
    """THEN abandon returns a degraded receipt."""
    store = InMemoryLongtermStore()
    coordinator = WriteCoordinator(store=store)

    async def scenario() -> DiscardReceipt:
        await coordinator.write(request("a"))
        store.fail_next("discard")
        return await coordinator.abandon(ROOT)

    receipt = asyncio.run(scenario())
    assert receipt.degraded and receipt.discarded == ("a",)
    assert coordinator.pending_ids == ()


def test_abandon_joins_background_writes_first() -> None:
    store = SlowStageStore()
    coordinator = WriteCoordinator(store=store, background=TaskRegistry())

    async def scenario() -> DiscardReceipt:
        coordinator.write_in_background(request("a"))
        return await coordinator.abandon(ROOT)

    assert asyncio.run(scenario()).discarded == ("a",)
    assert store.pending(E) == () and coordinator.in_flight == 0


# -- properties ---


@pytest.mark.spec("W12")
def test_pending_ids_and_scopes_are_sorted_and_in_flight_counts_unjoined_background_writes(
) -> None:
    """THEN pending_ids and pending_scopes are sorted; in_flight counts spawned, unjoined writes."""
    coordinator = WriteCoordinator(store=InMemoryLongtermStore(), background=TaskRegistry())
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

    assert asyncio.run(scenario()) == (2, 0)
    assert coordinator.pending_ids == ("c", "k", "m", "y", "z")
    assert coordinator.pending_scopes == (a_scope.path, b_scope.path)


# -- the task registry ---


def test_the_registry_refuses_work_with_no_owner_and_closes_it() -> None:
    registry = TaskRegistry()

    async def work() -> None:
        return None

    async def scenario() -> None:
        coro = work()
        with pytest.raises(MemoryContractError, match="no owner"):
            registry.spawn(coro, owner=" ", purpose="p")
        assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED
        assert registry.running == ()

    asyncio.run(scenario())


def test_closing_the_registry_reports_and_cancels_what_was_still_running() -> None:
    registry = TaskRegistry()

    async def scenario() -> None:
        hung = registry.spawn(asyncio.Event().wait(), owner="agent", purpose="hung")
        done = registry.spawn(asyncio.sleep(0), owner="agent", purpose="quick")
        await done
        leftover = await registry.close()
        assert [(w.owner, w.purpose) for w in leftover] == [("agent", "hung")]
        assert hung.cancelled()
        coro = asyncio.sleep(0)
        with pytest.raises(MemoryContractError, match="closed"):
            registry.spawn(coro, owner="agent", purpose="late")
        assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED

    asyncio.run(scenario())
