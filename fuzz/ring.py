"""Fuzz the ring encoding (``memory/_ring.py``): decode, lengths, and `RingEdit`.

A ring is read as a slice of a larger buffer (the loaded blob), so the
input's first byte picks how many bytes before and after the slice belong
to other data: a decoder must stop at the slice's end even when the bytes
after it would continue a length prefix. Every decoder must agree with an
independent reference (`reference_ring`), raising `RingCorruptError`
exactly when the reference refuses the bytes; an edit must keep the items,
its size deltas and its encoding consistent.
"""

from __future__ import annotations

import atheris  # type: ignore[import-untyped]

from fuzz._harness import check, fuzz, reference_ring

with atheris.instrument_imports(include=["beam_agents"]):
    from beam_agents.errors import RingCorruptError
    from beam_agents.memory._ring import (
        RING_HEADER_BYTES,
        RingEdit,
        decode_ring,
        encode_ring,
        item_cost,
        item_lengths,
    )

_KEY = "ring"


def test_one_input(data: bytes) -> None:
    """Decode the slice the first byte describes; check it, re-encode it, append to it."""
    if not data:
        return
    before, after = data[0] & 0x0F, data[0] >> 4
    start = min(1 + before, len(data))
    end = max(start, len(data) - after)
    expected = reference_ring(data[start:end])
    try:
        items = decode_ring(_KEY, data, start, end)
    except RingCorruptError as exc:
        check(expected is None, f"a valid ring was refused: {exc}")
        _check_refused(data, start, end)
        return
    check(items == expected, "decode_ring differs from the reference")
    check(item_lengths(_KEY, data, start, end) == [len(item) for item in items],
          "item_lengths differs from decode_ring")
    encoded = encode_ring(items)
    check(decode_ring(_KEY, encoded) == items, "encode_ring does not round-trip")
    check(len(encoded) == RING_HEADER_BYTES + sum(item_cost(len(i)) for i in items),
          "item_cost does not account for the encoding")

    max_items = 1 + data[-1] % 4
    item = bytes(data[1:1 + data[-1] % 200])
    for edit in (RingEdit(_KEY, data, start, end),
                 RingEdit(_KEY, data, start, end, lengths=map(len, items))):
        check(len(edit) == len(items) and edit.items(_KEY) == items, "RingEdit reads differently")
        freed = edit.freed_by_append(max_items)
        delta = edit.append(item, max_items)
        check(delta == item_cost(len(item)) - freed, "freed_by_append mispredicts the append")
        kept = [*items, item][-max_items:]
        check(edit.items(_KEY) == kept, "RingEdit keeps the wrong items")
        out = edit.encode()
        check(decode_ring(_KEY, out) == kept, "RingEdit.encode does not decode to its items")
        check(len(out) == end - start + delta, "the append's size delta is wrong")


def _check_refused(data: bytes, start: int, end: int) -> None:
    """A refused ring is refused by every reader, each with the typed error."""
    for read in (lambda: item_lengths(_KEY, data, start, end),
                 lambda: RingEdit(_KEY, data, start, end)):
        try:
            read()
        except RingCorruptError:
            continue
        raise AssertionError("decode_ring refused a ring that another reader accepted")


if __name__ == "__main__":
    fuzz(test_one_input)
