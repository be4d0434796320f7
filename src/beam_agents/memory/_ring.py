"""The ring encoding: an ordered list of byte items inside one entry's value bytes.

Rings live inside `MemoryEntry.value` so that bounded histories need no schema
change (seed 000, "Append maintains a bounded ring per key"). The layout is
compact, versioned and length-prefixed::

    ring   := version item*
    version:= 0x01
    item   := varint(len) bytes      (a minimal varint: no zero final byte)

An empty ring is the single version byte. Every item costs its length plus
its varint prefix, which is what lets `Memory` keep the encoded size of a ring
exact on every append without re-encoding it (see `item_cost`).

The decoders take the ring as a slice ``data[start:end]`` of a larger buffer,
so `Memory` can read a ring straight out of the blob it loaded without first
copying its value out. They run once per item of every ring an activation
reads or appends to, so their loops check as little as they can per item and
re-walk with full checks only when something is off (`_walk_carefully`),
which then reports exactly what is wrong.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from beam_agents._varint import MAX_VARINT_BYTES, decode_varint, encode_varint, varint_size
from beam_agents.errors import RingCorruptError

__all__ = [
    "RING_HEADER_BYTES",
    "RING_VERSION",
    "RingEdit",
    "decode_ring",
    "encode_ring",
    "item_cost",
    "item_lengths",
]

RING_VERSION = 1
RING_HEADER_BYTES = 1
_HEADER = bytes([RING_VERSION])


def item_cost(item_len: int) -> int:
    """Encoded bytes one item of `item_len` bytes adds to a ring."""
    # Short items, the common case, cost no call.
    return item_len + 1 if item_len < 0x80 else item_len + varint_size(item_len)


def encode_ring(items: Iterable[bytes]) -> bytes:
    """Encode `items` oldest first; the inverse of `decode_ring`."""
    parts = [_HEADER]
    add = parts.append
    for item in items:
        add(encode_varint(len(item)))
        add(item)
    return b"".join(parts)


def decode_ring(key: str, data: bytes, start: int = 0, end: int | None = None) -> list[bytes]:
    """Decode the ring ``data[start:end]`` into its items, oldest first.

    Raises:
        RingCorruptError: the bytes are not a ring encoding; the error names
            `key`, never surfacing as IndexError or struct.error.
    """
    end = len(data) if end is None else end
    _check_header(key, data, start, end)
    return _walk_quickly(key, data, start, start + RING_HEADER_BYTES, end,  # type: ignore[return-value]
                         copy=True)


def item_lengths(key: str, data: bytes, start: int = 0, end: int | None = None) -> list[int]:
    """The lengths of the items of ring ``data[start:end]``, checked as `decode_ring` does.

    It walks the length prefixes only and copies no item, which is all an
    append needs to know (see `RingEdit`).

    Raises:
        RingCorruptError: the bytes are not a ring encoding; names `key`.
    """
    end = len(data) if end is None else end
    _check_header(key, data, start, end)
    return _walk_quickly(key, data, start, start + RING_HEADER_BYTES, end,  # type: ignore[return-value]
                         copy=False)


def _walk_quickly(key: str, data: bytes, origin: int, pos: int, end: int,
                  *, copy: bool) -> list[bytes] | list[int]:
    """Walk the items in ``data[pos:end]`` of the ring at `origin`: items, or their lengths.

    The loop decodes one- and two-byte prefixes inline and checks only that
    the items add up to `end`; anything else goes to `_walk_carefully`.
    """
    found: list[bytes] | list[int] = []
    add = found.append
    try:
        while pos < end:
            length = data[pos]
            if length < 0x80:
                pos += 1
            elif 0 < data[pos + 1] < 0x80:  # a zero final byte is padding: walk carefully
                length = (length & 0x7F) | (data[pos + 1] << 7)
                pos += 2
            else:
                break  # a longer prefix: the careful walk handles it
            following = pos + length
            add(data[pos:following] if copy else length)  # type: ignore[arg-type]
            pos = following
    except IndexError:
        pos = -1
    if pos != end:  # an overrun, a long prefix, or corruption: walk again with every check
        return _walk_carefully(key, data, origin, end, copy=copy)
    return found


def _walk_carefully(key: str, data: bytes, start: int, end: int,
                    *, copy: bool) -> list[bytes] | list[int]:
    """Walk the ring ``data[start:end]`` checking every byte; items or lengths.

    Raises:
        RingCorruptError: with the first problem found; positions count from
            the ring's version byte.
    """
    found: list[bytes] | list[int] = []
    pos = start + RING_HEADER_BYTES
    while pos < end:
        # `data` may run on past `end` into the next entry, so a prefix still
        # open at `end` is truncated, whatever its length; only one that runs
        # past ten bytes inside the ring is too long.
        try:
            length, following = decode_varint(data, pos)
        except IndexError:
            following = end + 1
        except ValueError:
            following = pos + MAX_VARINT_BYTES + 1
        if following > end:
            raise RingCorruptError(key, f"truncated length prefix at byte {end - start}")
        if following > pos + MAX_VARINT_BYTES:
            raise RingCorruptError(
                key, f"length prefix too long at byte {pos + MAX_VARINT_BYTES - start}"
            )
        if following - pos > 1 and not data[following - 1]:
            # A padded prefix: `item_cost` (and so every size delta of an
            # append) counts the minimal one, so the ring cannot be edited.
            raise RingCorruptError(key, f"padded length prefix at byte {pos - start}")
        pos = following
        if pos + length > end:
            raise RingCorruptError(
                key, f"item {len(found)} claims {length} bytes but {end - pos} remain"
            )
        found.append(data[pos:pos + length] if copy else length)  # type: ignore[arg-type]
        pos += length
    return found


def _check_header(key: str, data: bytes, start: int, end: int) -> None:
    if start >= end:
        raise RingCorruptError(key, "empty value, expected a version byte")
    if data[start] != RING_VERSION:
        raise RingCorruptError(key, f"unknown ring encoding version {data[start]}")


class RingEdit:
    """A ring being appended to, kept as its encoded bytes plus the items added since.

    An append costs O(item) and decodes nothing: `lengths` holds every current
    item's length, oldest first, so dropping the oldest items only moves
    `head` past them in the encoded base ``data[start:end]`` (or, once the
    base is used up, drops appended items). `encode` is one join of the kept
    base bytes and the new items. Building one walks the base's length
    prefixes once, which also checks the encoding (`RingCorruptError` names
    the key), unless the caller already knows the lengths from decoded items.
    """

    __slots__ = ("_base_items", "_data", "_end", "_head", "_lengths", "_tail")

    def __init__(self, key: str, data: bytes, start: int = 0, end: int | None = None,
                 lengths: Iterable[int] | None = None) -> None:
        end = len(data) if end is None else end
        self._lengths = deque(item_lengths(key, data, start, end) if lengths is None
                              else lengths)
        self._data, self._end = data, end
        self._head = start + RING_HEADER_BYTES  # where the first kept base item starts
        self._base_items = len(self._lengths)  # base items still kept
        self._tail: deque[bytes] = deque()  # items appended since, oldest first

    def __len__(self) -> int:
        return len(self._lengths)

    def freed_by_append(self, max_items: int) -> int:
        """Encoded bytes that one more append under `max_items` would drop from the front."""
        lengths = self._lengths
        return sum(item_cost(lengths[i]) for i in range(len(lengths) + 1 - max_items))

    def append(self, item: bytes, max_items: int) -> int:
        """Append `item`, dropping the oldest beyond `max_items`; returns the size change."""
        lengths, tail = self._lengths, self._tail
        lengths.append(len(item))
        tail.append(item)
        delta = item_cost(len(item))
        while len(lengths) > max_items:
            cost = item_cost(lengths.popleft())
            delta -= cost
            if self._base_items:
                self._base_items -= 1
                self._head += cost
            else:
                tail.popleft()
        return delta

    def items(self, key: str) -> list[bytes]:
        """The current items, oldest first."""
        base = _walk_quickly(key, self._data, self._head - RING_HEADER_BYTES, self._head,
                             self._end, copy=True) if self._base_items else []
        return [*base, *self._tail]

    def encode(self) -> bytes:
        """The current ring encoding; kept base items are copied, not re-encoded."""
        parts: list[bytes | memoryview] = [
            _HEADER, memoryview(self._data)[self._head:self._end]]
        for item in self._tail:
            parts += (encode_varint(len(item)), item)
        return b"".join(parts)
