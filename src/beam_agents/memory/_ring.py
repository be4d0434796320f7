"""The ring encoding: an ordered list of byte items inside one entry's value bytes.

Rings live inside `MemoryEntry.value` so that bounded histories need no schema
change (seed 000, "Append maintains a bounded ring per key"). The layout is
compact, versioned and length-prefixed::

    ring   := version item*
    version:= 0x01
    item   := varint(len) bytes

An empty ring is the single version byte. Every item costs its length plus
its varint prefix, which is what lets `Memory` keep the encoded size of a ring
exact on every append without re-encoding it (see `item_cost`).
"""

from __future__ import annotations

from collections.abc import Iterable

from beam_agents.errors import RingCorruptError

__all__ = ["RING_HEADER_BYTES", "RING_VERSION", "decode_ring", "encode_ring", "item_cost"]

RING_VERSION = 1
RING_HEADER_BYTES = 1
_HEADER = bytes([RING_VERSION])


def item_cost(item_len: int) -> int:
    """Encoded bytes one item of `item_len` bytes adds to a ring."""
    return item_len + (1 if item_len < 0x80 else (item_len.bit_length() + 6) // 7)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_ring(items: Iterable[bytes]) -> bytes:
    """Encode `items` oldest first; the inverse of `decode_ring`."""
    parts = [_HEADER]
    for item in items:
        parts.append(_varint(len(item)))
        parts.append(item)
    return b"".join(parts)


def decode_ring(key: str, data: bytes) -> list[bytes]:
    """Decode a ring's value bytes into its items, oldest first.

    Raises:
        RingCorruptError: the bytes are not a ring encoding; the error names
            `key`, never surfacing as IndexError or struct.error.
    """
    if not data:
        raise RingCorruptError(key, "empty value, expected a version byte")
    if data[0] != RING_VERSION:
        raise RingCorruptError(key, f"unknown ring encoding version {data[0]}")
    items: list[bytes] = []
    pos, end = 1, len(data)
    while pos < end:
        length = shift = 0
        while True:
            if pos >= end:
                raise RingCorruptError(key, f"truncated length prefix at byte {pos}")
            if shift > 63:
                raise RingCorruptError(key, f"length prefix too long at byte {pos}")
            byte = data[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
        if pos + length > end:
            raise RingCorruptError(
                key, f"item {len(items)} claims {length} bytes but {end - pos} remain"
            )
        items.append(data[pos : pos + length])
        pos += length
    return items
