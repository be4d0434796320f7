"""RingEdit and the slice-aware ring decoders: appends without decoding, same bytes as encoding."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from beam_agents.memory import RingCorruptError
from beam_agents.memory._ring import (
    RingEdit,
    decode_ring,
    encode_ring,
    item_cost,
    item_lengths,
)

items_lists = st.lists(st.one_of(st.binary(max_size=20), st.binary(min_size=120, max_size=300),
                                 st.just(b"x" * 16_400)), max_size=12)


@given(items_lists, st.lists(st.tuples(st.binary(max_size=200), st.integers(1, 8)), max_size=20))
def test_appends_give_the_encoding_of_the_same_items(base: list[bytes],
                                                     appends: list[tuple[bytes, int]]) -> None:
    """THEN encode(), items() and the size deltas agree with encoding the items afresh."""
    edit = RingEdit("log", encode_ring(base))
    expected, size = list(base), len(encode_ring(base))
    for item, max_items in appends:
        freed = edit.freed_by_append(max_items)
        delta = edit.append(item, max_items)
        expected = [*expected, item][-max_items:]
        assert delta == item_cost(len(item)) - freed
        size += delta
        assert edit.items("log") == expected
        assert edit.encode() == encode_ring(expected)
        assert size == len(encode_ring(expected))
        assert len(edit) == len(expected)


@given(items_lists, st.binary(max_size=10), st.binary(max_size=10))
def test_decoders_read_a_ring_inside_a_larger_buffer(items: list[bytes], before: bytes,
                                                     after: bytes) -> None:
    ring = encode_ring(items)
    buffer = before + ring + after
    start, end = len(before), len(before) + len(ring)
    assert decode_ring("k", buffer, start, end) == items
    assert item_lengths("k", buffer, start, end) == [len(i) for i in items]
    assert RingEdit("k", buffer, start, end).encode() == ring


@pytest.mark.parametrize(("data", "reason"), [
    (b"", "empty value"),
    (b"\x02\x01a", "unknown ring encoding version 2"),
    (b"\x01\x05ab", "item 0 claims 5 bytes but 2 remain"),
    (b"\x01\x01a\x80", "truncated length prefix"),
    (b"\x01" + b"\xff" * 11, "length prefix too long"),
    (b"\x01\x81\x01" + b"a" * 129 + b"\x05", "item 1 claims 5 bytes but 0 remain"),
])
def test_every_reader_reports_corruption_the_same_way(data: bytes, reason: str) -> None:
    """THEN decode, the length walk and a RingEdit all raise RingCorruptError naming the key."""
    for read in (decode_ring, item_lengths, RingEdit):
        with pytest.raises(RingCorruptError, match=reason) as caught:
            read("history", data)
        assert caught.value.key == "history"


def test_a_ring_ending_inside_its_buffer_is_not_read_past_its_end() -> None:
    """A length prefix cut by the slice's end is truncation, whatever bytes follow."""
    buffer = b"\x01\x81" + b"\x01" + b"z" * 200
    with pytest.raises(RingCorruptError, match="truncated length prefix"):
        decode_ring("k", buffer, 0, 2)
    with pytest.raises(RingCorruptError, match="item 0 claims 129 bytes"):
        item_lengths("k", buffer, 0, 20)
