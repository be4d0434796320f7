"""The stores' limits at their exact edges, and the fake's sharing rules, offline.

Firestore stores a document of up to 1 048 576 bytes; the store checks that
when a save is staged, before any I/O, so an activation fails at the save
and not in the commit tail. The SQLite store's prefix search is bounded by
the least string above the prefix, which is exact up to U+10FFFF. The
in-memory store is the fake users test with, so its sharing by name is part
of what they rely on.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from beam_agents.errors import (
    ConfigError,
    MemoryContractError,
    MemoryUnavailable,
    ScopeViolation,
    StoreLimitError,
)
from beam_agents.memory._store import LongtermRecord
from beam_agents.stores import (
    FirestoreLongtermConfig,
    FirestoreLongtermStore,
    InMemoryLongtermConfig,
    InMemoryLongtermStore,
    SqliteLongtermConfig,
)
from beam_agents.stores.firestore._rules import (
    MAX_DOCUMENT_BYTES,
    MAX_REQUEST_BYTES,
    check_commit,
    document_size,
    record_from_fields,
)
from beam_agents.stores.sqlite._longterm import prefix_upper_bound

E = b"\x00entity\xff"
MIB = 1_048_576


def rec(key: str, value: bytes = b"v", *, entity: bytes = E, seq: int = 1) -> LongtermRecord:
    return LongtermRecord(entity_key=entity, key=key, value=value, seq=seq, updated_at_ms=1)


def filling(collection: str, key: str, size: int) -> LongtermRecord:
    """A record of `key` whose Firestore document is exactly `size` bytes."""
    return rec(key, b"x" * (size - document_size(collection, rec(key, b""))))


def no_client() -> Any:
    raise AssertionError("staging must not build a Firestore client")


def test_firestores_document_limit_is_1_mib() -> None:
    assert MAX_DOCUMENT_BYTES == MIB and MAX_REQUEST_BYTES == 10 * MIB


def test_the_firestore_store_stages_a_1_mib_document_and_refuses_one_byte_more() -> None:
    """Exactly 1 048 576 bytes is a storable document; only exceeding it is refused, at stage."""
    config = FirestoreLongtermConfig(project="p")
    store = FirestoreLongtermStore(config, client_factory=no_client)
    fits = filling(config.collection, "fits", MIB)
    too_big = filling(config.collection, "big", MIB + 1)

    async def stage() -> StoreLimitError:
        assert await store.stage(E, [fits]) == ("fits",)
        with pytest.raises(StoreLimitError) as caught:
            await store.stage(E, [too_big])
        return caught.value

    refused = asyncio.run(stage())
    assert (refused.limit, refused.attempted) == (MIB, MIB + 1)
    assert sorted(store.pending_upserts.snapshot(E)) == ["fits"]


def test_a_commit_of_ten_1_mib_documents_is_over_the_request_limit() -> None:
    """Each write costs more than its document, so documents alone at the limit do not fit."""
    batch = {f"k{i}": filling("beam_agents", f"k{i}", MIB) for i in range(10)}
    assert sum(document_size("beam_agents", r) for r in batch.values()) == MAX_REQUEST_BYTES

    with pytest.raises(StoreLimitError) as caught:
        check_commit("beam_agents", batch)

    assert caught.value.limit == MAX_REQUEST_BYTES
    assert caught.value.attempted > MAX_REQUEST_BYTES


@pytest.mark.parametrize(("stored", "actual"), [(b"other", b"other"), ("text", b"")])
def test_a_document_of_another_entity_is_a_scope_violation_naming_both(
        stored: object, actual: bytes) -> None:
    """Invariant 7: the error carries the entity asked for and the one found."""
    fields = {"entity_key": stored, "key": "k", "key_utf8_hex": "6b", "value": b"v",
              "seq": 1, "updated_at_ms": 1}

    with pytest.raises(ScopeViolation) as caught:
        record_from_fields(E, "k", fields, where="c/e/records/k")

    assert (caught.value.expected, caught.value.actual) == (E, actual)


# -- SQLite ---------------------------------------------------------------------------------


def test_the_prefix_bound_raises_a_last_code_point_of_u10fffe_to_u10ffff() -> None:
    """U+10FFFE is the last code point that can still be raised in place."""
    assert prefix_upper_bound("a\U0010fffe") == "a\U0010ffff"
    assert prefix_upper_bound("a\U0010ffff") == "b"
    assert prefix_upper_bound("\U0010ffff") is None


def test_a_sqlite_search_for_a_prefix_ending_in_u10fffe_returns_only_its_keys(
        tmp_path: Path) -> None:
    config = SqliteLongtermConfig(path=str(tmp_path / "store.db"))
    store = config.open()
    keys = ["a\U0010fffe", "a\U0010fffez", "a\U0010ffff", "b"]

    async def search() -> list[str]:
        await store.stage(E, [rec(key) for key in keys])
        await store.flush(E)
        try:
            return [r.key for r in await store.search(E, "a\U0010fffe", 10)]
        finally:
            await store.close()

    assert asyncio.run(search()) == ["a\U0010fffe", "a\U0010fffez"]
    assert store.config is config


# -- the in-memory fake ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", 5, None])
def test_an_in_memory_store_needs_a_non_empty_str_name(name: object) -> None:
    with pytest.raises(ConfigError) as caught:
        InMemoryLongtermConfig(name=name)  # type: ignore[arg-type]

    assert caught.value.field == "name"


def test_rows_of_one_entity_leave_out_the_others() -> None:
    store = InMemoryLongtermStore()

    async def commit() -> None:
        for entity in (E, b"other"):
            await store.stage(entity, [rec("k", entity=entity)])
            await store.flush(entity)

    asyncio.run(commit())
    assert list(store.rows(E)) == [(E, "k")]
    assert len(store.rows()) == 2


def test_a_shared_store_stays_open_until_its_last_holder_closes() -> None:
    """Two DoFn instances open one store by name; the first to close must not close it."""
    config = InMemoryLongtermConfig(name="shared-by-two-holders")
    config.reset()
    inspected = config.store()  # inspecting adds no holder
    first, second = config.open(), config.open()
    assert first is second is inspected

    async def lifecycle() -> None:
        await first.stage(E, [rec("k")])
        await first.close()
        assert not first.closed
        assert [r.key for r in second.pending(E)] == ["k"]
        await second.close()
        assert second.closed
        assert second.pending(E) == ()
        with pytest.raises(MemoryContractError):
            await second.stage(E, [rec("late")])

    try:
        asyncio.run(lifecycle())
    finally:
        config.reset()


@pytest.mark.parametrize("operation", ["load", "search", "flush"])
def test_an_unopenable_sqlite_file_fails_each_call_naming_the_file_and_the_call(
        tmp_path: Path, operation: str) -> None:
    """The error an operator reads names which store and which call failed."""
    store = SqliteLongtermConfig(path=str(tmp_path)).open()  # a directory: never opens

    async def call() -> object:
        if operation == "load":
            return await store.load(E, "k")
        if operation == "search":
            return await store.search(E, "", 5)
        await store.stage(E, [rec("k")])
        return await store.flush(E)

    with pytest.raises(MemoryUnavailable) as caught:
        asyncio.run(call())

    assert f"SQLite long-term store {str(tmp_path)!r}: {operation} failed" in str(caught.value)
