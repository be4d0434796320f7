"""Protobuf base-128 varints: encode, size and decode, for the hand-written wire paths.

The library reads and writes some protobuf bytes itself, where that beats
the parser (the MemoryBlob entry headers, ring length prefixes, the replay
cache's size accounting). All of them share this one definition of a varint:
seven bits a byte, least significant group first, the high bit set on every
byte but the last. A negative int64 is written as protobuf writes it,
sign-extended to 64 bits, so it always takes ten bytes.

Hot loops decode one- and two-byte prefixes inline and call `decode_varint`
only for longer ones; these functions are for everything else.
"""

from __future__ import annotations

__all__ = ["MAX_VARINT_BYTES", "decode_varint", "encode_varint", "varint_size"]

#: The longest varint protobuf writes: a 64-bit value, seven bits a byte.
MAX_VARINT_BYTES = 10
_UINT64 = (1 << 64) - 1
_ONE_BYTE = tuple(bytes((n,)) for n in range(0x80))


def encode_varint(value: int) -> bytes:
    """The minimal varint of `value`; a negative int64 gives its ten-byte two's-complement form."""
    if value < 0x80:
        if value >= 0:
            return _ONE_BYTE[value]
        value &= _UINT64
    elif value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varint_size(value: int) -> int:
    """``len(encode_varint(value))``, computed without encoding: ten for a negative int64."""
    if value < 0:
        return MAX_VARINT_BYTES
    return (value.bit_length() + 6) // 7 or 1


def decode_varint(data: bytes, pos: int, max_bytes: int = MAX_VARINT_BYTES) -> tuple[int, int]:
    """Decode the varint that starts at ``data[pos]``; returns ``(value, next position)``.

    The value comes back unsigned (a ten-byte negative int64 reads as
    ``value + 2**64``). Padding is accepted: a caller that needs the minimal
    form checks that a varint longer than one byte does not end in zero. A
    caller reading a sub-range of `data` checks that the next position is
    within it.

    Raises:
        IndexError: `data` ends inside the varint.
        ValueError: its first `max_bytes` bytes all carry the continuation bit.
    """
    value = shift = 0
    for index in range(pos, pos + max_bytes):
        byte = data[index]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, index + 1
        shift += 7
    raise ValueError(f"the varint at byte {pos} is longer than {max_bytes} bytes")
