"""What staging must record: dirtiness, the loadable forms of a blob, the long-term edges.

`dirty` decides whether the runtime writes the ``memory`` cell back, so a
mutation that leaves it False loses the write at commit (seed 000). A blob
that is empty loads as fresh memory, while one with entries but no version
is reported, never read as empty (invariant 8). The long-term handle and the
pending buffer hold the seq and size limits of invariant 5 at their exact
values. Each test pins one of these, so `make mutate` sees a change to it.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from beam_agents._proto.memory_pb2 import (
    ENTRY_KIND_RING,
    ENTRY_KIND_SCALAR,
    MemoryBlob,
    MemoryEntry,
)
from beam_agents.errors import (
    MemoryContractError,
    StateCorruptError,
    StoreLimitError,
    UnsupportedSchemaVersionError,
)
from beam_agents.memory import Memory
from beam_agents.memory._longterm import SAVE_OWNER, LongtermHandle
from beam_agents.memory._store import (
    MAX_SEQ,
    FlushReceipt,
    LongtermRecord,
    PendingUpserts,
    seq_guard_allows,
    validate_search,
)
from beam_agents.memory._wire import NotCanonicalError, scan_canonical
from beam_agents.memory._writes import OwnedWork, TaskRegistry
from beam_agents.stores.memory import InMemoryLongtermStore

T = TypeVar("T")
NOW = 1_700_000_000_000
E = b"user-1"


def loaded(*keys: str) -> bytes:
    """The bytes an earlier activation committed, holding `keys`."""
    earlier = Memory(now_ms=NOW - 1)
    for key in keys:
        earlier.set(key, key.encode())
    return earlier.to_bytes()


def record(key: str, *, seq: int = 1) -> LongtermRecord:
    return LongtermRecord(entity_key=E, key=key, value=b"v", seq=seq, updated_at_ms=1)


def bridge(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def handle(store: InMemoryLongtermStore, *, seq: int = 4, now_ms: int = NOW,
           background: TaskRegistry | None = None) -> LongtermHandle:
    return LongtermHandle(store=store, entity_key=E, seq=seq, now_ms=now_ms, run_sync=bridge,
                          background=background)


# -- dirty -----------------------------------------------------------------------------


@pytest.mark.spec("M01")
def test_setting_a_new_key_dirties_a_fresh_facade() -> None:
    """dirty turns True on the first successful mutation, or the write is never committed."""
    memory = Memory(now_ms=NOW)

    memory.set("k", b"v")

    assert memory.dirty


@pytest.mark.spec("M06")
def test_deleting_a_loaded_key_dirties_the_facade_and_an_absent_one_does_not() -> None:
    """A delete is a mutation to commit; an idempotent no-op delete is not."""
    memory = Memory(loaded("k"), now_ms=NOW)
    memory.delete("absent")
    assert not memory.dirty

    memory.delete("k")

    assert memory.dirty
    assert Memory(memory.to_bytes(), now_ms=NOW).keys() == ()


# -- loadable forms --------------------------------------------------------------------


@pytest.mark.spec("M02")
@pytest.mark.parametrize("empty", [None, b"", MemoryBlob()], ids=["none", "bytes", "message"])
def test_an_empty_blob_in_any_form_is_a_fresh_memory(empty: MemoryBlob | bytes | None) -> None:
    """THEN the result has state_schema_version 1, no entries, and total_value_bytes 0."""
    memory = Memory(empty, now_ms=NOW)

    blob = memory.to_blob()
    assert (blob.state_schema_version, len(blob.entries), blob.total_value_bytes) == (1, 0, 0)
    assert memory.keys() == () and not memory.dirty
    memory.set("k", b"v")
    assert memory.get("k") == b"v"


UNVERSIONED = MemoryBlob(entries=[MemoryEntry(key="a", value=b"v", last_access_ms=1)],
                         total_value_bytes=1)


@pytest.mark.parametrize("blob", [UNVERSIONED, UNVERSIONED.SerializeToString()],
                         ids=["message", "bytes"])
def test_a_blob_with_entries_but_no_version_is_refused_not_read_as_empty(
        blob: MemoryBlob | bytes) -> None:
    """Invariant 8: a cell this library cannot vouch for is reported, never replaced."""
    with pytest.raises(UnsupportedSchemaVersionError):
        Memory(blob, now_ms=NOW)


def corrupt(*entries: MemoryEntry, total: int | None = None) -> MemoryBlob:
    blob = MemoryBlob(state_schema_version=1, entries=entries)
    blob.total_value_bytes = sum(len(e.value) for e in entries) if total is None else total
    return blob


@pytest.mark.parametrize("cell", [
    b"\x08\x01\x12\x05\x0a",  # truncated
    corrupt(MemoryEntry(key="", value=b"v")),
    corrupt(MemoryEntry(key="a", value=b"v"), MemoryEntry(key="a", value=b"w")),
    corrupt(MemoryEntry(key="a", value=b"v", kind=7)),  # type: ignore[arg-type]
    corrupt(MemoryEntry(key="a", value=b"v"), total=2),
], ids=["undecodable", "empty-key", "repeated-key", "unknown-kind", "wrong-total"])
def test_a_corrupt_memory_blob_is_reported_against_the_memory_cell(
        cell: MemoryBlob | bytes) -> None:
    """StateCorruptError names the keyed-state cell, so the dead letter says which to repair."""
    with pytest.raises(StateCorruptError) as caught:
        Memory(cell, now_ms=NOW)

    assert caught.value.cell == "memory"


@pytest.mark.parametrize("data", [
    b"\x08\x01" + b"\x12\x86\x00" + b"\x0a\x01a" + b"\x12\x01v" + b"\x18\x01",
    b"\x08\x01" + b"\x12\x07" + b"\x0a\x01a" + b"\x12\x81\x00v" + b"\x18\x01",
], ids=["entry-length", "value-length"])
def test_a_padded_length_prefix_is_not_canonical_and_loads_through_the_parser(
        data: bytes) -> None:
    """Only minimal varints are copied as they are; a padded one is re-encoded on output."""
    with pytest.raises(NotCanonicalError):
        scan_canonical(data)

    memory = Memory(data, now_ms=NOW)

    assert memory.get("a") == b"v"
    fresh = MemoryBlob(state_schema_version=1, total_value_bytes=1)
    fresh.entries.add(key="a", value=b"v", last_access_ms=NOW)
    assert memory.to_bytes() == fresh.SerializeToString(deterministic=True)


@pytest.mark.spec("M18")
def test_the_longterm_property_returns_the_handle_the_facade_was_built_with() -> None:
    """A configured handle is what ctx.memory.longterm returns."""
    lt = handle(InMemoryLongtermStore())

    memory = Memory(now_ms=NOW, longterm=lt)

    assert memory.has_longterm
    assert memory.longterm is lt


# -- the canonical fast path ---------------------------------------------------------------

keys = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12),
    st.integers(1, 300).map(lambda n: "k" * n),  # two-byte key length prefixes
)
values = st.one_of(
    st.binary(max_size=40),
    st.sampled_from([127, 128, 16_383, 16_384, 20_000]).map(lambda n: b"v" * n),
)
stamps = st.one_of(st.integers(0, 300), st.integers(0, 2**63 - 1))
entries = st.lists(
    st.tuples(keys, values, stamps, st.sampled_from([ENTRY_KIND_SCALAR, ENTRY_KIND_RING])),
    max_size=6, unique_by=lambda entry: entry[0],
)


@given(entries)
@example([("k" * 128, b"", 0, ENTRY_KIND_SCALAR), ("b", b"v" * 128, 1, ENTRY_KIND_RING)])
@example([("k" * 256, b"v" * 16_384, 2**63 - 1, ENTRY_KIND_SCALAR),
          ("b", b"", 0, ENTRY_KIND_SCALAR)])
def test_every_canonical_blob_is_indexed_by_the_fast_path(
        items: list[tuple[str, bytes, int, int]]) -> None:
    """Bytes in canonical form are indexed without the parser, exactly as protobuf reads them.

    Every activation loads the memory cell, so a scan that refused canonical
    bytes would silently send every load through a full parse and re-encode.
    """
    blob = MemoryBlob(state_schema_version=1, total_value_bytes=sum(len(v) for _, v, _, _ in items))
    for key, value, stamp, kind in items:
        blob.entries.add(key=key, value=value, last_access_ms=stamp, kind=kind)  # type: ignore[arg-type]
    data = blob.SerializeToString(deterministic=True)

    index, total, _ = scan_canonical(data)

    assert list(index) == [key for key, _, _, _ in items]
    assert total == blob.total_value_bytes
    for (key, value, _, kind), message in zip(items, blob.entries, strict=True):
        entry_kind, size, start, end, vstart = index[key]
        assert (entry_kind, size) == (kind, len(value))
        assert data[vstart:vstart + size] == value
        alone = MemoryBlob(entries=[message]).SerializeToString(deterministic=True)
        assert data[start:end] == alone


# -- the long-term handle ------------------------------------------------------------------


@pytest.mark.spec("M21")
def test_a_handle_at_seq_0_and_time_0_stages_records_stamped_with_them() -> None:
    """Both lower bounds are inclusive: seq 0 and now_ms 0 are an activation's values."""
    store = InMemoryLongtermStore()
    lt = handle(store, seq=0, now_ms=0)

    lt.save("k", b"v")

    [staged] = lt.staged
    assert (staged.seq, staged.updated_at_ms) == (0, 0)


@pytest.mark.parametrize("field", ["seq", "now_ms"])
def test_a_negative_seq_or_time_is_a_value_error(field: str) -> None:
    settings = {"seq": 1, "now_ms": 1, field: -1}

    with pytest.raises(ValueError, match=field):
        LongtermHandle(store=InMemoryLongtermStore(), entity_key=E, run_sync=bridge,
                       **settings)


@pytest.mark.spec("M23")
def test_the_sync_search_passes_its_prefix_and_limit_through() -> None:
    """search() filters by prefix and stops at limit, as asearch() does; no prefix is all keys."""
    lt = handle(InMemoryLongtermStore())
    for key in ("a/1", "a/2", "a/3", "b/1"):
        lt.save(key, b"v")

    assert [r.key for r in lt.search("a/")] == ["a/1", "a/2", "a/3"]
    assert [r.key for r in lt.search("a/", limit=2)] == ["a/1", "a/2"]
    assert [r.key for r in lt.search()] == ["a/1", "a/2", "a/3", "b/1"]


def test_a_commit_with_nothing_staged_returns_a_receipt_for_the_entity() -> None:
    receipt = asyncio.run(handle(InMemoryLongtermStore()).commit())

    assert receipt.entity_key == E and receipt.committed == ()


class ForgetfulStore(InMemoryLongtermStore):
    """Commits nothing and says so: the receipt publishes none of the staged keys."""

    async def flush(self, entity_key: bytes) -> FlushReceipt:
        return FlushReceipt(entity_key=entity_key)


@pytest.mark.spec("M22")
def test_a_commit_whose_flush_publishes_nothing_staged_fails_closed() -> None:
    """A store that did not publish a staged record fails the commit, naming the key."""
    lt = handle(ForgetfulStore())
    lt.save("profile", b"v")

    with pytest.raises(MemoryContractError, match="'profile'"):
        asyncio.run(lt.commit())


def test_commit_after_abandon_is_refused() -> None:
    """An abandoned activation can never commit: its rollback is final."""
    lt = handle(InMemoryLongtermStore())
    lt.save("k", b"v")
    receipt = asyncio.run(lt.abandon())
    assert (receipt.entity_key, receipt.discarded) == (E, ("k",))

    with pytest.raises(MemoryContractError):
        asyncio.run(lt.commit())


def test_a_background_save_is_registered_under_its_owner_and_key() -> None:
    """The registry shows whose work is running and why, for the report on close."""
    registry = TaskRegistry()
    lt = handle(InMemoryLongtermStore(), background=registry)

    async def activation() -> tuple[OwnedWork, ...]:
        gate = asyncio.Event()

        async def summary() -> bytes:
            await gate.wait()
            return b"v"

        lt.save_in_background("summary", summary())
        running = registry.running
        gate.set()
        await lt.commit()
        return running

    assert asyncio.run(activation()) == (
        OwnedWork(owner=SAVE_OWNER, purpose="longterm-save:summary"),)


def test_abandon_closes_a_background_value_its_cancelled_save_never_awaited() -> None:
    """A rollback leaves no un-awaited coroutine behind."""
    lt = handle(InMemoryLongtermStore(), background=TaskRegistry())

    async def value() -> bytes:
        return b"v"

    async def activation() -> Coroutine[Any, Any, bytes]:
        pending = value()
        lt.save_in_background("k", pending)
        await lt.abandon()  # cancels the save before its first step
        return pending

    assert inspect.getcoroutinestate(asyncio.run(activation())) == inspect.CORO_CLOSED


# -- the pending buffer and the seq guard -----------------------------------------------------


def test_the_backend_limit_check_sees_the_whole_merged_buffer_of_the_entity() -> None:
    """Limits are per commit, so each stage is checked with what is already buffered."""
    seen: list[tuple[bytes, list[str]]] = []
    buffer = PendingUpserts(lambda entity, pending: seen.append((entity, sorted(pending))))

    buffer.stage(E, [record("a")])
    buffer.stage(E, [record("b"), record("a")])

    assert seen == [(E, ["a"]), (E, ["a", "b"])]


def test_the_largest_storable_seq_is_accepted_and_one_more_is_refused() -> None:
    """seq is stored as a signed 64-bit integer: 2**63 - 1 fits, 2**63 does not."""
    buffer = PendingUpserts()
    assert buffer.stage(E, [record("max", seq=MAX_SEQ)]) == ("max",)

    with pytest.raises(StoreLimitError) as caught:
        buffer.stage(E, [record("over", seq=MAX_SEQ + 1)])

    assert (caught.value.limit, caught.value.attempted) == (MAX_SEQ, MAX_SEQ + 1)
    assert sorted(buffer.snapshot(E)) == ["max"]


@pytest.mark.spec("M21")
def test_the_seq_guard_overwrites_absent_lower_and_equal_seqs_only() -> None:
    """Invariant 5: equal re-applies a replay; a higher stored seq wins."""
    incoming = record("k", seq=5)

    assert seq_guard_allows(None, incoming)
    assert seq_guard_allows(4, incoming)
    assert seq_guard_allows(5, incoming)
    assert not seq_guard_allows(6, incoming)


@pytest.mark.parametrize("limit", [2.5, True, "3"])
def test_a_search_limit_must_be_an_int(limit: object) -> None:
    with pytest.raises(TypeError):
        validate_search("p", limit)  # type: ignore[arg-type]
