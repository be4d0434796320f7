"""Properties of Memory over random operation sequences (seed 000, M03, M05, M10)."""

from __future__ import annotations

import contextlib
from collections import OrderedDict

from hypothesis import given
from hypothesis import strategies as st

from beam_agents._proto.memory_pb2 import ENTRY_KIND_RING, MemoryBlob
from beam_agents.memory import HARD_CAP_BYTES, Memory, MemoryOverflow
from beam_agents.memory._ring import encode_ring
from tests.strategies import memory_operations


class Reference:
    """A deliberately naive model: an OrderedDict in LRU order, sizes recomputed."""

    def __init__(self) -> None:
        self.entries: OrderedDict[str, tuple[str, object]] = OrderedDict()

    def apply(self, op: str, key: str, value: bytes, max_items: int) -> object:
        current = self.entries.get(key)
        if op == "set":
            self.entries[key] = ("scalar", value)
            self.entries.move_to_end(key)
            return None
        if op == "get":
            if current is None:
                return None
            if current[0] != "scalar":
                raise TypeError
            self.entries.move_to_end(key)
            return current[1]
        if op == "delete":
            self.entries.pop(key, None)
            return None
        if op == "append":
            if current is not None and current[0] != "ring":
                raise TypeError
            items = [] if current is None else list(current[1])  # type: ignore[call-overload]
            items = [*items, value][-max_items:]
            self.entries[key] = ("ring", items)
            self.entries.move_to_end(key)
            return None
        if current is None:
            return ()
        if current[0] != "ring":
            raise TypeError
        return tuple(current[1])  # type: ignore[arg-type]

    def size(self) -> int:
        return sum(len(v) if kind == "scalar" else len(encode_ring(v))  # type: ignore[arg-type]
                   for kind, v in self.entries.values())


def run(memory: Memory, op: str, key: str, value: bytes, max_items: int) -> object:
    if op == "set":
        return memory.set(key, value)
    if op == "get":
        return memory.get(key)
    if op == "delete":
        return memory.delete(key)
    if op == "append":
        return memory.append(key, value, max_items=max_items)
    return memory.ring(key)


@given(st.lists(memory_operations, max_size=40))
def test_accounting_lru_and_rejections_match_a_reference_model(operations: list) -> None:
    memory, reference = Memory(now_ms=7), Reference()
    for op, key, value, max_items in operations:
        before = memory.to_blob().SerializeToString()
        try:
            expected = reference.apply(op, key, value, max_items)
        except TypeError:
            try:
                run(memory, op, key, value, max_items)
            except TypeError:
                pass
            else:
                raise AssertionError(f"{op}({key!r}) should have raised TypeError") from None
            assert memory.to_blob().SerializeToString() == before  # rejected: nothing changed
        else:
            assert run(memory, op, key, value, max_items) == expected
        blob = memory.to_blob()
        assert memory.size_bytes == reference.size() == blob.total_value_bytes
        assert memory.size_bytes == sum(len(e.value) for e in blob.entries)
        assert memory.size_bytes == sum(memory.entry_size(k) for k in memory.keys())
        assert memory.keys() == tuple(reference.entries) == tuple(e.key for e in blob.entries)


@given(st.lists(memory_operations, max_size=30), st.integers(min_value=0, max_value=2**40))
def test_to_blob_round_trips_field_equal(operations: list, later_ms: int) -> None:
    memory = Memory(now_ms=3)
    for op, key, value, max_items in operations:
        with contextlib.suppress(TypeError):
            run(memory, op, key, value, max_items)
    blob = memory.to_blob()

    reloaded = Memory(blob.SerializeToString(), now_ms=later_ms)

    assert reloaded.to_blob() == blob
    assert reloaded.dirty is False
    assert reloaded.size_bytes == memory.size_bytes
    for entry in blob.entries:
        if entry.kind == ENTRY_KIND_RING:
            assert reloaded.ring(entry.key) == memory.ring(entry.key)
        else:
            assert reloaded.get(entry.key) == entry.value
    assert isinstance(MemoryBlob.FromString(reloaded.to_bytes()), MemoryBlob)


@given(st.lists(st.tuples(st.sampled_from(["set", "append"]), st.sampled_from(["a", "b", "c"]),
                          st.sampled_from([0, 1, 300_000, 600_000, 1_100_000])), max_size=12))
def test_a_write_past_the_hard_cap_changes_nothing(operations: list) -> None:
    memory = Memory(now_ms=11)
    for op, key, size in operations:
        before, size_before = memory.to_blob().SerializeToString(), memory.size_bytes
        try:
            run(memory, op, key, b"x" * size, 3)
        except TypeError:
            assert memory.to_blob().SerializeToString() == before
        except MemoryOverflow as overflow:
            assert overflow.attempted_size > HARD_CAP_BYTES
            assert memory.to_blob().SerializeToString() == before
            assert memory.size_bytes == size_before
        assert memory.size_bytes <= HARD_CAP_BYTES
