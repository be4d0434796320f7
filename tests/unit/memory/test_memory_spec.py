"""Seed 000 scenarios M01-M17, M25, M26: the working-memory facade."""

from __future__ import annotations

import logging

import pytest

from beam_agents._proto.memory_pb2 import (
    ENTRY_KIND_RING,
    ENTRY_KIND_SCALAR,
    MemoryBlob,
    MemoryEntry,
)
from beam_agents.memory import HARD_CAP_BYTES, SOFT_CAP_BYTES, Memory, MemoryOverflow
from beam_agents.metrics import RecordingMetrics

NOW = 1_700_000_000_000
KIB = 1024


def recomputed_size(memory: Memory) -> int:
    return sum(len(e.value) for e in memory.to_blob().entries)


def loaded(*entries: tuple[str, bytes, int]) -> MemoryBlob:
    blob = MemoryBlob(state_schema_version=1)
    for key, value, stamp in entries:
        blob.entries.add(key=key, value=value, last_access_ms=stamp)
    blob.total_value_bytes = sum(len(v) for _, v, _ in entries)
    return blob


class RecordingCompactor:
    """Counts invocations and optionally deletes keys or rewrites one."""

    def __init__(self, *, delete: tuple[str, ...] = (), rewrite: tuple[str, bytes] | None = None,
                 raise_with: Exception | None = None) -> None:
        self.calls = 0
        self.delete = delete
        self.rewrite = rewrite
        self.raise_with = raise_with

    def compact(self, memory: Memory) -> None:
        self.calls += 1
        if self.raise_with is not None:
            raise self.raise_with
        for key in self.delete:
            memory.delete(key)
        if self.rewrite is not None:
            memory.set(*self.rewrite)


# -- Facade stages mutations over an in-memory MemoryBlob ---


@pytest.mark.spec("M01")
def test_blob_round_trips_through_the_facade() -> None:
    """THEN field-equal entries in the same order, same total, version 1, dirty False."""
    blob = loaded(("b", b"22", 10), ("a", b"1", 20), ("c", b"", 30))
    blob.entries.add(key="r", value=b"\x01\x01x", last_access_ms=40, kind=ENTRY_KIND_RING)
    blob.total_value_bytes += 3
    memory = Memory(blob.SerializeToString(), now_ms=NOW)

    out = memory.to_blob()

    assert list(out.entries) == list(blob.entries)
    assert out.total_value_bytes == blob.total_value_bytes == 6
    assert out.state_schema_version == 1
    assert memory.dirty is False


@pytest.mark.spec("M02")
def test_fresh_facade_produces_a_versioned_empty_blob() -> None:
    """THEN state_schema_version 1, no entries, and total_value_bytes 0."""
    out = Memory(now_ms=NOW).to_blob()

    assert out.state_schema_version == 1
    assert len(out.entries) == 0
    assert out.total_value_bytes == 0


@pytest.mark.spec("M03")
@pytest.mark.parametrize("failing_call", ["overflow", "append_on_scalar", "get_on_ring",
                                          "ring_on_scalar", "set_non_bytes"])
def test_rejected_mutation_leaves_staged_state_unchanged(failing_call: str) -> None:
    """THEN reads and to_blob() reflect the state as of before the failed call."""
    memory = Memory(now_ms=NOW)
    memory.set("s", b"scalar")
    memory.append("r", b"item")
    memory.set("big", b"x" * (HARD_CAP_BYTES // 2))
    before = memory.to_blob().SerializeToString()
    size_before = memory.size_bytes

    with pytest.raises((MemoryOverflow, TypeError)):
        if failing_call == "overflow":
            memory.set("s", b"y" * (HARD_CAP_BYTES // 2 + 100))
        elif failing_call == "append_on_scalar":
            memory.append("s", b"x")
        elif failing_call == "get_on_ring":
            memory.get("r")
        elif failing_call == "ring_on_scalar":
            memory.ring("s")
        else:
            memory.set("s", "not bytes")  # type: ignore[arg-type]

    assert memory.to_blob().SerializeToString() == before
    assert memory.size_bytes == size_before
    assert memory.get("s") == b"scalar"
    assert memory.ring("r") == (b"item",)


# -- Scalar get/set/delete with LRU stamping ---


@pytest.mark.spec("M04")
def test_set_then_get_round_trips_bytes() -> None:
    """THEN get returns b"v", and get("missing") returns None."""
    memory = Memory(now_ms=NOW)
    memory.set("k", b"v")

    assert memory.get("k") == b"v"
    assert memory.get("missing") is None


@pytest.mark.spec("M05")
def test_access_order_is_persisted_for_lru() -> None:
    """THEN to_blob() emits b, c, a with a.last_access_ms equal to the facade's now_ms."""
    first = Memory(now_ms=100)
    for key in ("a", "b", "c"):
        first.set(key, key.encode())
    memory = Memory(first.to_bytes(), now_ms=NOW)

    assert memory.get("a") == b"a"

    entries = memory.to_blob().entries
    assert [e.key for e in entries] == ["b", "c", "a"]
    assert entries[2].last_access_ms == NOW
    assert entries[0].last_access_ms == entries[1].last_access_ms == 100
    assert memory.dirty is True


@pytest.mark.spec("M06")
def test_delete_removes_and_is_idempotent() -> None:
    """THEN no error, get("k") returns None, and total_value_bytes reflects the removal."""
    memory = Memory(now_ms=NOW)
    memory.set("other", b"12345")
    memory.set("k", b"v")
    memory.delete("k")
    memory.delete("k")

    assert memory.get("k") is None
    assert memory.to_blob().total_value_bytes == 5 == memory.size_bytes


# -- Append maintains a bounded ring per key ---


@pytest.mark.spec("M07")
def test_appends_preserve_order_and_survive_blob_round_trip() -> None:
    """THEN ring("log") on the new facade returns (b"1", b"2", b"3")."""
    memory = Memory(now_ms=NOW)
    for item in (b"1", b"2", b"3"):
        memory.append("log", item)

    reloaded = Memory(memory.to_blob(), now_ms=NOW + 1)

    assert reloaded.ring("log") == (b"1", b"2", b"3")


@pytest.mark.spec("M08")
def test_ring_drops_oldest_at_capacity() -> None:
    """THEN ring returns the last three in order and the dropped item is no longer accounted."""
    memory = Memory(now_ms=NOW)
    for item in (b"first-item", b"2", b"3", b"4"):
        memory.append("log", item, max_items=3)

    assert memory.ring("log") == (b"2", b"3", b"4")
    blob = memory.to_blob()
    assert blob.total_value_bytes == memory.size_bytes == len(blob.entries[0].value)
    assert b"first-item" not in blob.entries[0].value
    three = Memory(now_ms=NOW)
    for item in (b"2", b"3", b"4"):
        three.append("log", item)
    assert memory.size_bytes == three.size_bytes


@pytest.mark.spec("M09")
def test_kind_mixing_raises() -> None:
    """THEN each wrong-kind call raises TypeError and the stored entry is unchanged."""
    memory = Memory(now_ms=NOW)
    memory.set("k", b"v")
    with pytest.raises(TypeError, match="'k'"):
        memory.append("k", b"x")
    memory.append("r", b"x")
    with pytest.raises(TypeError, match="'r'"):
        memory.get("r")

    blob = memory.to_blob()
    by_key = {e.key: e for e in blob.entries}
    assert (by_key["k"].value, by_key["k"].kind) == (b"v", ENTRY_KIND_SCALAR)
    assert by_key["r"].kind == ENTRY_KIND_RING
    assert memory.ring("r") == (b"x",)
    assert memory.get("k") == b"v"


# -- Size accounting is incremental and exact ---


@pytest.mark.spec("M10")
def test_accounting_matches_recomputation_under_mixed_operations() -> None:
    """THEN after every op size_bytes equals the sum of value lengths and the blob's total."""
    memory = Memory(now_ms=NOW)
    operations = [
        lambda: memory.set("a", b"x" * 100),
        lambda: memory.append("log", b"y" * 200, max_items=2),
        lambda: memory.append("log", b"z" * 5, max_items=2),
        lambda: memory.append("log", b"w" * 300, max_items=2),
        lambda: memory.set("a", b""),
        lambda: memory.set("log", b"scalar now"),
        lambda: memory.append("log2", b"q" * 127),
        lambda: memory.append("log2", b"q" * 128),
        lambda: memory.delete("a"),
        lambda: memory.delete("nope"),
    ]
    for operation in operations:
        operation()
        assert memory.size_bytes == recomputed_size(memory) == memory.to_blob().total_value_bytes


# -- Soft cap warns and triggers compaction at 75% ---


@pytest.mark.spec("M11")
def test_crossing_the_soft_cap_warns_once_and_compacts(caplog: pytest.LogCaptureFixture) -> None:
    """THEN one warning, the counter once, compact invoked, every write under the hard cap lands."""
    metrics = RecordingMetrics()
    compactor = RecordingCompactor()
    memory = Memory(now_ms=NOW, compactor=compactor, metrics=metrics)
    memory.set("base", b"x" * (SOFT_CAP_BYTES - 10))
    assert compactor.calls == 0

    with caplog.at_level(logging.WARNING, logger="beam_agents.memory"):
        memory.set("cross", b"y" * 10)  # lands exactly at the soft cap
        memory.set("more", b"z" * 1000)
        memory.append("log", b"w" * 1000)

    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert metrics.get("beam_agents.memory", "soft_cap_warnings") == 1
    assert compactor.calls >= 1
    assert memory.get("cross") == b"y" * 10
    assert memory.get("more") == b"z" * 1000
    assert memory.ring("log") == (b"w" * 1000,)


@pytest.mark.spec("M12")
def test_no_compactor_configured_is_not_an_error(caplog: pytest.LogCaptureFixture) -> None:
    """THEN the warning and counter still fire and the write succeeds."""
    metrics = RecordingMetrics()
    memory = Memory(now_ms=NOW, metrics=metrics)

    with caplog.at_level(logging.WARNING, logger="beam_agents.memory"):
        memory.set("big", b"x" * SOFT_CAP_BYTES)

    assert memory.get("big") == b"x" * SOFT_CAP_BYTES
    assert metrics.get("beam_agents.memory", "soft_cap_warnings") == 1
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


# -- Hard cap raises MemoryOverflow at 1 MiB ---


@pytest.mark.spec("M13")
def test_overflowing_write_is_rejected_atomically() -> None:
    """THEN MemoryOverflow is raised, get returns the prior value, and size_bytes is unchanged."""
    memory = Memory(now_ms=NOW)
    memory.set("fill", b"f" * (HARD_CAP_BYTES - 100))
    memory.set("target", b"prior")
    size = memory.size_bytes

    with pytest.raises(MemoryOverflow) as caught:
        memory.set("target", b"t" * 200)

    assert memory.get("target") == b"prior"
    assert memory.size_bytes == size
    assert caught.value.key == "target"
    assert caught.value.cap == HARD_CAP_BYTES
    assert caught.value.attempted_size == HARD_CAP_BYTES - 100 + 200


@pytest.mark.spec("M14")
def test_compaction_that_frees_space_lets_the_write_succeed() -> None:
    """THEN no exception, the write is applied, and the deletions are reflected in to_blob()."""
    compactor = RecordingCompactor(delete=("old",))
    memory = Memory(now_ms=NOW, compactor=compactor)
    memory.set("old", b"o" * (HARD_CAP_BYTES // 2))
    memory.set("keep", b"k" * 1000)
    compactor.calls = 0

    memory.set("new", b"n" * (HARD_CAP_BYTES // 2 + 10))

    assert compactor.calls >= 1
    keys = [e.key for e in memory.to_blob().entries]
    assert "old" not in keys
    assert memory.get("new") == b"n" * (HARD_CAP_BYTES // 2 + 10)
    assert memory.get("keep") == b"k" * 1000


@pytest.mark.spec("M15")
def test_compaction_that_frees_too_little_still_rejects() -> None:
    """THEN MemoryOverflow, the triggering write is not applied, the deletions persist."""
    compactor = RecordingCompactor(delete=("small",))
    memory = Memory(now_ms=NOW, compactor=compactor)
    memory.set("small", b"s" * 1000)
    memory.set("large", b"l" * (HARD_CAP_BYTES // 2))
    compactor.calls = 0

    with pytest.raises(MemoryOverflow):
        memory.set("new", b"n" * (HARD_CAP_BYTES // 2 + 10))

    assert compactor.calls == 1
    keys = [e.key for e in memory.to_blob().entries]
    assert keys == ["large"]
    assert memory.get("new") is None
    assert memory.size_bytes == HARD_CAP_BYTES // 2


# -- Compaction hook is a stable protocol with a safe default ---


@pytest.mark.spec("M16")
def test_compactor_mutates_through_the_facade_with_correct_accounting() -> None:
    """THEN size_bytes equals a recomputation and the compactor's writes trigger no nesting."""
    compactor = RecordingCompactor(delete=("a", "b"), rewrite=("summary", b"s" * SOFT_CAP_BYTES))
    memory = Memory(now_ms=NOW, compactor=compactor)
    memory.set("a", b"a" * 400_000)
    memory.set("b", b"b" * 300_000)

    memory.set("c", b"c" * 100_000)  # crosses the soft cap: one compaction

    assert compactor.calls == 1  # the rewrite is itself >= soft cap, yet did not re-trigger
    assert memory.size_bytes == recomputed_size(memory) == SOFT_CAP_BYTES + 100_000
    assert memory.keys() == ("c", "summary")


class CompactionFailed(Exception):
    pass


@pytest.mark.spec("M17")
def test_compactor_exceptions_propagate() -> None:
    """THEN that exception (not MemoryOverflow) propagates to the caller."""
    boom = CompactionFailed("strategy broke")
    full = Memory(now_ms=NOW)
    full.set("fill", b"f" * (HARD_CAP_BYTES - 10))
    memory = Memory(full.to_bytes(), now_ms=NOW, compactor=RecordingCompactor(raise_with=boom))
    with pytest.raises(CompactionFailed) as caught:
        memory.set("over", b"o" * 100)

    assert caught.value is boom
    assert memory.get("over") is None


# -- Read-only LRU-order enumeration for compaction strategies ---


@pytest.mark.spec("M25")
def test_keys_reports_lru_order_without_dirtying_the_facade() -> None:
    """THEN fresh keys() is (a, b, c) undirtied, mutated is (a, c, b); keys() changes nothing."""
    blob = loaded(("a", b"1", 1), ("b", b"2", 2), ("c", b"3", 3)).SerializeToString()
    fresh = Memory(blob, now_ms=NOW)
    mutated = Memory(blob, now_ms=NOW)
    mutated.get("b")

    assert fresh.keys() == ("a", "b", "c")
    assert fresh.dirty is False
    assert mutated.keys() == ("a", "c", "b")
    assert fresh.keys() == ("a", "b", "c")
    assert fresh.dirty is False
    assert [e.key for e in fresh.to_blob().entries] == ["a", "b", "c"]
    assert [e.key for e in mutated.to_blob().entries] == ["a", "c", "b"]


@pytest.mark.spec("M26")
def test_entry_size_does_not_perturb_eviction_order() -> None:
    """THEN the LRU key is still evicted first and entry_size over keys() sums to size_bytes."""
    memory = Memory(loaded(("a", b"1" * 10, 1), ("b", b"2" * 20, 2)).SerializeToString(),
                    now_ms=NOW)
    memory.append("c", b"3" * 30)

    assert memory.entry_size("a") == 10
    assert memory.dirty is True  # from the append, not from entry_size
    evicted = []
    for key in memory.keys():
        evicted.append(key)
        memory.delete(key)
        break

    assert evicted == ["a"]
    assert sum(memory.entry_size(k) for k in memory.keys()) == memory.size_bytes == 20 + 32
    with pytest.raises(KeyError):
        memory.entry_size("a")


def test_entry_size_and_keys_leave_a_clean_facade_clean() -> None:
    memory = Memory(loaded(("a", b"1", 1), ("b", b"22", 2)).SerializeToString(), now_ms=NOW)
    assert memory.entry_size("b") == 2
    assert memory.keys() == ("a", "b")
    assert memory.dirty is False
    assert [e.last_access_ms for e in memory.to_blob().entries] == [1, 2]


def test_loaded_entries_are_not_mutated_in_the_callers_blob() -> None:
    blob = loaded(("a", b"1", 1))
    memory = Memory(blob, now_ms=NOW)
    memory.get("a")
    assert blob.entries[0] == MemoryEntry(key="a", value=b"1", last_access_ms=1)
