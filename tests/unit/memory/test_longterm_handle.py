"""Seed 000 scenario M23 and the long-term handle's staging, overlay and commit tail."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from beam_agents.errors import MemoryContractError, MemoryUnavailable, StoreLimitError
from beam_agents.memory._longterm import SAVE_OWNER, LongtermHandle
from beam_agents.memory._store import LongtermRecord, PendingUpserts
from beam_agents.memory._writes import TaskRegistry
from beam_agents.stores.memory import InMemoryLongtermStore

T = TypeVar("T")
E = b"user-1"
SEQ = 4
NOW = 1_700_000_000_000


def no_bridge(coro: Coroutine[Any, Any, T]) -> T:
    coro.close()
    raise AssertionError("an async test must not go through run_sync")


def handle(store: InMemoryLongtermStore, *, background: TaskRegistry | None = None,
           seq: int = SEQ, run_sync: Any = no_bridge) -> LongtermHandle:
    return LongtermHandle(store=store, entity_key=E, seq=seq, now_ms=NOW, run_sync=run_sync,
                          background=background)


def committed(store: InMemoryLongtermStore, *keys: str, seq: int = 1) -> None:
    """Put rows in the store as an earlier activation would have."""

    async def write() -> None:
        await store.stage(E, [LongtermRecord(entity_key=E, key=k, value=f"old-{k}".encode(),
                                             seq=seq, updated_at_ms=1) for k in keys])
        await store.flush(E)

    asyncio.run(write())
    store.operations.clear()


def keys_of(records: tuple[LongtermRecord, ...]) -> list[str]:
    return [r.key for r in records]


# -- M23 ---


@pytest.mark.spec("M23")
def test_staged_saves_are_visible_to_reads_before_any_flush() -> None:
    """THEN both reads reflect the staged record, and the store has still performed no write."""
    store = InMemoryLongtermStore()
    lt = handle(store)

    async def agent() -> tuple[LongtermRecord | None, tuple[LongtermRecord, ...]]:
        lt.save("profile", b"v")
        return await lt.aload("profile"), await lt.asearch("prof")

    loaded, found = asyncio.run(agent())
    assert loaded is not None and loaded.value == b"v"
    assert [(r.key, r.value) for r in found] == [("profile", b"v")]
    assert not {"stage", "flush"} & set(store.operation_names())
    # Staged, not written: the record waits in the store's pending buffer.
    assert store.rows() == {} and keys_of(store.pending(E)) == ["profile"]


# -- save ---


def test_save_stages_a_record_stamped_with_the_activation_and_the_last_save_wins() -> None:
    store = InMemoryLongtermStore()
    lt = handle(store)
    lt.save("b", b"1")
    lt.save("a", b"first")
    lt.save("a", b"second")
    assert [(r.entity_key, r.key, r.value, r.seq, r.updated_at_ms) for r in lt.staged] == [
        (E, "a", b"second", SEQ, NOW),
        (E, "b", b"1", SEQ, NOW),
    ]
    assert store.operations == []


@pytest.mark.parametrize("key", ["", 7, "x" * 513])
def test_save_rejects_an_unusable_key_with_a_value_error(key: object) -> None:
    lt = handle(InMemoryLongtermStore())
    with pytest.raises(ValueError, match="key"):
        lt.save(key, b"v")  # type: ignore[arg-type]
    assert lt.staged == ()


def test_save_rejects_a_value_that_is_not_bytes_naming_the_key() -> None:
    lt = handle(InMemoryLongtermStore())
    with pytest.raises(TypeError, match=r"'profile'.*str"):
        lt.save("profile", "text")  # type: ignore[arg-type]
    assert lt.staged == ()


def test_the_staged_snapshot_is_a_copy() -> None:
    lt = handle(InMemoryLongtermStore())
    lt.save("a", b"v")
    lt.staged[0].value = b"tampered"
    assert lt.staged[0].value == b"v"


# -- reads ---


def test_load_falls_through_to_the_store_and_a_staged_record_wins_over_it() -> None:
    store = InMemoryLongtermStore()
    committed(store, "a", "b")
    lt = handle(store)

    async def agent() -> tuple[bytes | None, bytes | None, LongtermRecord | None]:
        lt.save("a", b"new")
        a, b, c = await lt.aload("a"), await lt.aload("b"), await lt.aload("c")
        return (a.value if a else None), (b.value if b else None), c

    assert asyncio.run(agent()) == (b"new", b"old-b", None)


def test_a_staged_key_sorting_before_a_full_page_of_store_rows_displaces_the_last() -> None:
    store = InMemoryLongtermStore()
    committed(store, "p/b", "p/c", "p/d")
    lt = handle(store)
    lt.save("p/a", b"staged")
    assert keys_of(asyncio.run(lt.asearch("p/", limit=3))) == ["p/a", "p/b", "p/c"]


def test_a_staged_key_sorting_after_a_full_page_of_store_rows_is_left_out() -> None:
    store = InMemoryLongtermStore()
    committed(store, "p/a", "p/b")
    lt = handle(store)
    lt.save("p/z", b"staged")
    assert keys_of(asyncio.run(lt.asearch("p/", limit=2))) == ["p/a", "p/b"]


def test_search_replaces_store_rows_by_staged_ones_and_filters_staged_by_prefix() -> None:
    store = InMemoryLongtermStore()
    committed(store, "p/a", "p/b")
    lt = handle(store)
    lt.save("p/b", b"staged")
    lt.save("q/a", b"other prefix")
    found = asyncio.run(lt.asearch("p/", limit=10))
    assert [(r.key, r.value) for r in found] == [("p/a", b"old-p/a"), ("p/b", b"staged")]


def test_a_search_with_limit_zero_returns_nothing_without_reaching_the_store() -> None:
    store = InMemoryLongtermStore()
    lt = handle(store)
    lt.save("a", b"v")
    assert asyncio.run(lt.asearch("", limit=0)) == ()
    assert store.operations == []


def test_a_read_failure_propagates() -> None:
    store = InMemoryLongtermStore()
    store.unreachable = True
    lt = handle(store)
    with pytest.raises(MemoryUnavailable):
        asyncio.run(lt.aload("a"))
    with pytest.raises(MemoryUnavailable):
        asyncio.run(lt.asearch("a"))


def test_the_sync_reads_run_through_the_injected_bridge() -> None:
    store = InMemoryLongtermStore()
    committed(store, "k/1")
    bridged: list[str] = []

    def run_sync(coro: Coroutine[Any, Any, T]) -> T:
        bridged.append(coro.__qualname__)
        return asyncio.run(coro)

    lt = handle(store, run_sync=run_sync)
    lt.save("k/2", b"v")
    loaded = lt.load("k/1")
    assert loaded is not None and loaded.value == b"old-k/1"
    assert keys_of(lt.search("k/")) == ["k/1", "k/2"]
    assert bridged == ["LongtermHandle.aload", "LongtermHandle.asearch"]


# -- commit ---


def test_commit_with_nothing_staged_does_no_store_io() -> None:
    store = InMemoryLongtermStore()
    receipt = asyncio.run(handle(store).commit())
    assert receipt.committed == () and not receipt.degraded
    assert store.operations == []


def test_commit_flushes_every_staged_record_in_one_transaction() -> None:
    store = InMemoryLongtermStore()
    lt = handle(store)
    lt.save("b", b"2")
    lt.save("a", b"1")
    receipt = asyncio.run(lt.commit())
    assert receipt.committed == ("a", "b")
    assert store.operation_names() == ("flush",)
    assert {k: (r.value, r.seq, r.updated_at_ms) for (_, k), r in store.rows(E).items()} == {
        "a": (b"1", SEQ, NOW), "b": (b"2", SEQ, NOW)}


def test_a_replay_that_loses_to_a_newer_row_still_commits() -> None:
    store = InMemoryLongtermStore()
    committed(store, "a", seq=SEQ + 5)
    lt = handle(store)
    lt.save("a", b"replayed")
    assert asyncio.run(lt.commit()).superseded == ("a",)
    assert store.rows(E)[(E, "a")].value == b"old-a"


def test_a_failed_commit_raises_memory_unavailable_and_keeps_the_store_buffer() -> None:
    store = InMemoryLongtermStore()
    store.fail_next("flush", MemoryUnavailable("database is locked"))
    lt = handle(store)
    lt.save("a", b"v")
    # The store's own message reaches the dead letter: an operator sees why.
    with pytest.raises(MemoryUnavailable, match=r"\(database is locked\).*fails closed"):
        asyncio.run(lt.commit())
    assert keys_of(store.pending(E)) == ["a"] and store.rows() == {}


def test_a_save_the_store_cannot_take_is_refused_at_the_save_with_nothing_staged() -> None:
    limit = StoreLimitError("over the backend's record limit", limit=1, attempted=2)

    class LimitedStore(InMemoryLongtermStore):
        def __init__(self) -> None:
            super().__init__()
            self._pending = PendingUpserts(self._refuse)  # as a backend binds its limits

        def _refuse(self, entity_key: bytes, pending: object) -> None:
            raise limit

    store = LimitedStore()
    lt = handle(store)
    with pytest.raises(StoreLimitError) as refused:
        lt.save("a", b"vv")
    assert refused.value is limit
    assert store.pending(E) == () and lt.staged == () and store.operations == []


def test_abandon_after_a_failed_commit_discards_the_store_buffer() -> None:
    store = InMemoryLongtermStore()
    committed(store, "a")
    store.fail_next("flush")
    lt = handle(store)
    lt.save("a", b"v")
    lt.save("b", b"v")

    async def activation() -> object:
        with pytest.raises(MemoryUnavailable):
            await lt.commit()
        return await lt.abandon()

    receipt = asyncio.run(activation())
    assert receipt is not None and receipt.discarded == ("a", "b")  # type: ignore[attr-defined]
    assert store.pending(E) == ()
    assert store.rows(E)[(E, "a")].value == b"old-a"


def test_abandon_before_anything_reached_the_store_does_no_io() -> None:
    store = InMemoryLongtermStore()
    lt = handle(store)
    lt.save("a", b"v")
    assert asyncio.run(lt.abandon()).discarded == ("a",)
    assert store.operations == [] and lt.staged == () and store.pending(E) == ()


def test_saving_or_committing_after_the_activation_ended_is_refused() -> None:
    store = InMemoryLongtermStore()
    lt = handle(store)
    asyncio.run(lt.commit())
    with pytest.raises(MemoryContractError, match="'late'"):
        lt.save("late", b"v")
    with pytest.raises(MemoryContractError):
        asyncio.run(lt.commit())


# -- background saves ---


async def computed(value: bytes, *, yields: int = 3) -> bytes:
    for _ in range(yields):
        await asyncio.sleep(0)
    return value


def test_a_background_save_is_joined_by_commit() -> None:
    store = InMemoryLongtermStore()
    registry = TaskRegistry()
    lt = handle(store, background=registry)

    async def activation() -> tuple[str, ...]:
        lt.save_in_background("summary", computed(b"short"))
        owners = tuple(w.owner for w in registry.running)
        await lt.commit()
        return owners

    assert asyncio.run(activation()) == (SAVE_OWNER,)
    assert store.rows(E)[(E, "summary")].value == b"short"


def test_a_background_save_that_raised_fails_the_commit_and_writes_nothing() -> None:
    store = InMemoryLongtermStore()
    lt = handle(store, background=TaskRegistry())

    async def broken() -> bytes:
        await asyncio.sleep(0)
        raise RuntimeError("summariser down")

    async def activation() -> None:
        lt.save("profile", b"v")
        lt.save_in_background("summary", broken())
        await lt.commit()

    with pytest.raises(RuntimeError, match="summariser down"):
        asyncio.run(activation())
    assert store.operations == []


def test_a_background_value_that_is_not_bytes_fails_the_commit() -> None:
    lt = handle(InMemoryLongtermStore(), background=TaskRegistry())

    async def activation() -> None:
        lt.save_in_background("summary", computed("text"))  # type: ignore[arg-type]
        await lt.commit()

    with pytest.raises(TypeError, match="'summary'"):
        asyncio.run(activation())


def test_the_save_issued_last_wins_however_background_work_interleaves() -> None:
    store = InMemoryLongtermStore()
    lt = handle(store, background=TaskRegistry())

    async def activation() -> None:
        lt.save_in_background("k", computed(b"background", yields=5))
        lt.save("k", b"foreground")  # issued later, lands earlier
        lt.save_in_background("j", computed(b"slow", yields=5))
        lt.save_in_background("j", computed(b"fast", yields=0))
        await lt.commit()

    asyncio.run(activation())
    assert {k: r.value for (_, k), r in store.rows(E).items()} == {
        "j": b"fast", "k": b"foreground"}


def test_a_background_save_without_a_registry_is_refused_and_its_coroutine_closed() -> None:
    lt = handle(InMemoryLongtermStore())

    async def activation() -> None:
        coro = computed(b"v")
        with pytest.raises(MemoryContractError, match="registry"):
            lt.save_in_background("summary", coro)
        assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED

    asyncio.run(activation())


def test_a_background_save_refused_by_a_closed_registry_raises_and_closes_its_value() -> None:
    registry = TaskRegistry()
    lt = handle(InMemoryLongtermStore(), background=registry)

    async def activation() -> None:
        await registry.close()
        coro = computed(b"v")
        with pytest.raises(MemoryContractError, match="closed"):
            lt.save_in_background("summary", coro)
        assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED
        assert (await lt.commit()).committed == ()

    asyncio.run(activation())


def test_abandon_cancels_a_background_save_still_running() -> None:
    store = InMemoryLongtermStore()
    registry = TaskRegistry()
    lt = handle(store, background=registry)

    async def never() -> bytes:
        await asyncio.Event().wait()
        return b""

    async def activation() -> object:
        lt.save_in_background("summary", never())
        return await lt.abandon()

    assert asyncio.run(activation()).discarded == ()  # type: ignore[attr-defined]
    assert registry.running == () and store.operations == []


def test_a_sync_agent_in_a_worker_thread_saves_in_background_through_the_bridge() -> None:
    store = InMemoryLongtermStore()

    async def runtime() -> None:
        loop = asyncio.get_running_loop()

        def run_sync(coro: Coroutine[Any, Any, T]) -> T:
            return asyncio.run_coroutine_threadsafe(coro, loop).result()

        lt = handle(store, background=TaskRegistry(), run_sync=run_sync)

        def sync_agent() -> None:
            lt.save_in_background("summary", computed(b"from a thread"))
            lt.save("profile", b"p")
            assert "profile" in keys_of(lt.search(""))

        await asyncio.to_thread(sync_agent)
        await lt.commit()

    asyncio.run(runtime())
    assert {k: r.value for (_, k), r in store.rows(E).items()} == {
        "profile": b"p", "summary": b"from a thread"}
