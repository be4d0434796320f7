"""The ring encoding: compact, versioned, length-prefixed, with typed corruption errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from beam_agents._proto.memory_pb2 import ENTRY_KIND_RING, MemoryBlob
from beam_agents.errors import StateCorruptError
from beam_agents.memory import Memory, RingCorruptError
from beam_agents.memory._ring import decode_ring, encode_ring, item_cost


@given(st.lists(st.binary(max_size=300)))
def test_encoding_round_trips_and_its_size_is_predicted_exactly(items: list[bytes]) -> None:
    encoded = encode_ring(items)
    assert decode_ring("k", encoded) == items
    assert len(encoded) == 1 + sum(item_cost(len(i)) for i in items)


def test_encoding_is_compact() -> None:
    assert encode_ring([b"ab", b""]) == b"\x01\x02ab\x00"
    assert encode_ring([]) == b"\x01"


@pytest.mark.parametrize(("data", "reason"), [
    (b"", "empty value"),
    (b"\x02\x01a", "unknown ring encoding version 2"),
    (b"\x01\x05ab", "item 0 claims 5 bytes but 2 remain"),
    (b"\x01\x80", "truncated length prefix"),
    (b"\x01" + b"\xff" * 11, "length prefix too long"),
])
def test_a_corrupt_ring_names_its_key(data: bytes, reason: str) -> None:
    with pytest.raises(RingCorruptError, match=reason) as caught:
        decode_ring("history", data)
    assert caught.value.key == "history"
    assert "'history'" in str(caught.value)
    assert isinstance(caught.value, StateCorruptError)


def test_memory_raises_ring_corruption_on_first_use_and_keeps_the_bytes() -> None:
    blob = MemoryBlob(state_schema_version=1, total_value_bytes=3)
    blob.entries.add(key="history", value=b"\x01\x09a", kind=ENTRY_KIND_RING)
    memory = Memory(blob.SerializeToString(), now_ms=1)

    with pytest.raises(RingCorruptError, match="history"):
        memory.ring("history")
    with pytest.raises(RingCorruptError, match="history"):
        memory.append("history", b"x")

    assert memory.dirty is False
    assert memory.to_blob() == blob
