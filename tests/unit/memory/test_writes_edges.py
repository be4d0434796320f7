"""The write coordinator's reports, exact: what each outcome and receipt names (seed 004).

The W scenarios say *that* a write is reported; these pin *what* the report
carries, since a caller acts on it: the request an outcome belongs to, the
entity a degraded receipt is about, the ids a store did not take, and which
scopes' bookkeeping a store-level discard clears.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Sequence

import pytest

from beam_agents.memory._store import LongtermRecord
from beam_agents.memory._writes import Scope, TaskRegistry, WriteCoordinator
from beam_agents.stores.memory import InMemoryLongtermStore
from tests.unit.memory.test_writes import (
    ROOT,
    HangingStageStore,
    NoDiscardStore,
    UnreachableStore,
    request,
)

E = ROOT.entity_key


class HalfStore(InMemoryLongtermStore):
    """Accepts only the keys that do not start with ``x``."""

    async def stage(self, entity_key: bytes, records: Sequence[LongtermRecord]) -> tuple[str, ...]:
        return await super().stage(entity_key, [r for r in records if not r.key.startswith("x")])


def test_a_scope_part_must_be_non_empty() -> None:
    """An empty part would make two scopes share one path."""
    with pytest.raises(ValueError, match="non-empty"):
        Scope(entity_key=E, parts=("",))


@pytest.mark.spec("W03")
def test_join_reports_each_outcome_with_its_own_request() -> None:
    """THEN each outcome carries the request it reports on, success and failure alike."""
    coordinator = WriteCoordinator(store=InMemoryLongtermStore(), background=TaskRegistry())
    first, second = request("a"), request("b")

    async def activation() -> tuple[object, ...]:
        coordinator.write_in_background(first)
        coordinator.write_in_background(second)
        return await coordinator.join()

    outcomes = asyncio.run(activation())
    assert [o.request for o in outcomes] == [first, second]  # type: ignore[attr-defined]
    assert all(o.ok for o in outcomes)  # type: ignore[attr-defined]


@pytest.mark.spec("W03")
def test_a_cancelled_background_write_is_reported_as_a_cancellation() -> None:
    """A write that never finished is an error outcome, never a silent success."""
    coordinator = WriteCoordinator(store=HangingStageStore(), background=TaskRegistry())
    hung = request("a")

    async def activation() -> tuple[object, ...]:
        task = coordinator.write_in_background(hung)
        await asyncio.sleep(0)
        task.cancel()
        return await coordinator.join()

    [outcome] = asyncio.run(activation())
    assert outcome.request == hung  # type: ignore[attr-defined]
    assert not outcome.ok  # type: ignore[attr-defined]
    assert isinstance(outcome.error, asyncio.CancelledError)  # type: ignore[attr-defined]
    assert outcome.receipt is None  # type: ignore[attr-defined]


def test_a_cancelled_join_keeps_its_writes_for_the_next_join() -> None:
    """Cancelling the joiner cancels no write: they stay in flight and are joined later."""
    store = InMemoryLongtermStore()

    async def activation() -> tuple[int, int]:
        opened = asyncio.Event()

        class GatedStore(InMemoryLongtermStore):
            async def stage(self, entity_key: bytes,
                            records: Sequence[LongtermRecord]) -> tuple[str, ...]:
                await opened.wait()
                return await store.stage(entity_key, records)

        coordinator = WriteCoordinator(store=GatedStore(), background=TaskRegistry())
        coordinator.write_in_background(request("a"))
        joiner = asyncio.ensure_future(coordinator.join())
        await asyncio.sleep(0)
        joiner.cancel()
        with pytest.raises(asyncio.CancelledError):
            await joiner
        in_flight = coordinator.in_flight
        opened.set()
        return in_flight, len(await coordinator.join())

    assert asyncio.run(activation()) == (1, 1)
    assert [r.key for r in store.pending(E)] == ["a"]


def test_a_write_lists_the_records_the_store_did_not_take_as_rejected() -> None:
    coordinator = WriteCoordinator(store=HalfStore())

    receipt = asyncio.run(coordinator.write(request("a", "xb")))

    assert receipt.accepted == ("a",)
    assert receipt.rejected == (("xb", "the store did not accept it"),)
    assert coordinator.pending_ids == ("a",)


@pytest.mark.spec("W09")
def test_a_store_level_discard_clears_the_discarded_ids_from_sibling_scopes_too() -> None:
    """The store discards per entity, so bookkeeping never claims a dropped id is pending."""
    store = InMemoryLongtermStore()
    coordinator = WriteCoordinator(store=store)
    left, right = Scope(entity_key=E, parts=("left",)), Scope(entity_key=E, parts=("right",))

    async def activation() -> object:
        await coordinator.write(request("l", scope=left))
        await coordinator.write(request("r", scope=right))
        return await coordinator.abandon(left)

    receipt = asyncio.run(activation())
    assert receipt.discarded == ("l", "r")  # type: ignore[attr-defined]
    assert coordinator.pending_ids == () and coordinator.pending_scopes == ()


@pytest.mark.spec("W04")
def test_a_degraded_flush_receipt_names_the_entity() -> None:
    receipt = asyncio.run(WriteCoordinator(store=UnreachableStore()).flush(ROOT))

    assert receipt.degraded and receipt.entity_key == E


@pytest.mark.spec("W10")
def test_a_degraded_abandon_receipt_names_the_entity() -> None:
    coordinator = WriteCoordinator(store=NoDiscardStore())  # type: ignore[arg-type]
    asyncio.run(coordinator.write(request("a")))

    receipt = asyncio.run(coordinator.abandon(ROOT))

    assert receipt.degraded and receipt.entity_key == E and receipt.discarded == ("a",)


def test_registry_tasks_are_named_after_owner_and_purpose() -> None:
    async def spawn() -> str:
        task = TaskRegistry().spawn(asyncio.sleep(0), owner="me", purpose="why")
        await task
        return task.get_name()

    assert asyncio.run(spawn()) == "me:why"


def test_work_cancelled_before_it_started_is_closed_by_the_registry() -> None:
    """No coroutine is left un-awaited when its task is cancelled before its first step."""

    async def work() -> None:
        await asyncio.sleep(0)

    coroutine = work()

    async def spawn_and_cancel() -> None:
        task = TaskRegistry().spawn(coroutine, owner="me", purpose="why")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(spawn_and_cancel())
    assert inspect.getcoroutinestate(coroutine) == inspect.CORO_CLOSED
