"""The MemoryBlob wire format, read and written in Python where that beats the parser.

An activation usually touches a few keys of a blob that may hold hundreds of
kilobytes. Parsing all of it into messages and serializing all of it again
costs protobuf a pass over every byte each way. For bytes in canonical form
(exactly what ``SerializeToString(deterministic=True)`` writes, and all this
library writes) `scan_canonical` instead reads only the entry headers, and
`Memory.to_bytes()` copies the encodings of unchanged entries out of the
loaded bytes, encoding only changed entries, with `entry_parts`.

Canonical means: fields in number order, each present field once, default
values omitted, minimal varints, no unknown fields. In that form an entry's
bytes are a pure function of (key, value, last_access_ms, kind), so copying
them is byte-identical to encoding the entry again, which is what keeps the
output equal to a deterministic serialization (the determinism tests rely on
it). Anything else is refused with `NotCanonicalError` and goes to the
protobuf parser, which either accepts it (its entries are then re-encoded)
or reports the corruption.
"""

from __future__ import annotations

import functools
import re

from beam_agents._proto.memory_pb2 import ENTRY_KIND_RING, ENTRY_KIND_SCALAR, EntryKind
from beam_agents._varint import decode_varint, encode_varint

__all__ = [
    "BLOB_HEADER",
    "LoadedEntry",
    "NotCanonicalError",
    "closing_fields",
    "entry_parts",
    "scan_canonical",
]

#: An entry as `scan_canonical` found it: ``(kind, size, start, end, vstart)``,
#: the value's size, where the entry's encoding starts and ends in the blob,
#: and where its value starts. A plain tuple costs a fraction of an object,
#: and most entries of a large blob are never reached by an operation.
LoadedEntry = tuple[EntryKind, int, int, int, int]


class NotCanonicalError(Exception):
    """The bytes are not in canonical form; load them through the protobuf parser."""


#: Field 1 (state_schema_version) with value 1: how every canonical blob begins.
BLOB_HEADER = b"\x08\x01"
_MAX_LENGTH_BYTES = 5  # a length prefix of up to 2**35 - 1
_MAX_STAMP_BYTES = 9  # a non-negative int64
_MAX_VERSION_BYTES = 5  # a uint32
_RING_KIND_FIELD = bytes([0x20, ENTRY_KIND_RING])
# A canonical stamp varint: continuation bytes, then a non-zero final byte
# (a zero stamp is omitted, and a zero final byte would be padding).
_CANONICAL_STAMP = re.compile(rb"[\x80-\xff]{0,8}[\x01-\x7f]")


def _read_varint(data: bytes, pos: int, max_bytes: int) -> tuple[int, int]:
    """Decode the minimal varint at `pos`; returns ``(value, next position)``.

    Raises:
        NotCanonicalError: the varint is longer than `max_bytes` or not minimal.
        IndexError: the data ends inside it.
    """
    try:
        value, following = decode_varint(data, pos, max_bytes)
    except ValueError:
        raise NotCanonicalError from None
    if following - pos > 1 and not data[following - 1]:
        raise NotCanonicalError  # a padded varint: not what protobuf writes
    return value, following


def scan_canonical(data: bytes) -> tuple[dict[str, LoadedEntry], int, int]:  # noqa: PLR0915
    """Index canonical MemoryBlob bytes without copying any value.

    Returns the entries, their total size and the blob's ``memory_version``.

    Entries come back in blob order (least-recently-used first). Keys are
    decoded as strict UTF-8, as the parser decodes them.

    This is one hot loop, run per entry on every activation, so it stays in
    one frame, compares against literal tags (0x12 entries and values, 0x0A
    keys, 0x18 stamps and the total, 0x20 kinds), decodes length prefixes
    under 16 KiB inline, and checks the stamp's form without decoding it (an
    unchanged entry is emitted as it is; a changed one is stamped anew).

    Raises:
        NotCanonicalError, IndexError, UnicodeDecodeError: the bytes are not
            canonical, or not a valid blob at all; the caller then loads them
            through the protobuf parser, which either accepts them (and they
            are re-encoded on output) or reports the precise corruption.
    """
    if not data.startswith(BLOB_HEADER):
        raise NotCanonicalError
    entries: dict[str, LoadedEntry] = {}
    end, pos, total = len(data), 2, 0
    read, canonical_stamp = _read_varint, _CANONICAL_STAMP.fullmatch
    while pos < end and data[pos] == 0x12:
        start = pos
        length = data[pos + 1]
        if length < 0x80:
            pos += 2
        elif 0 < data[pos + 2] < 0x80:
            length = (length & 0x7F) | (data[pos + 2] << 7)
            pos += 3
        else:
            length, pos = read(data, pos + 1, _MAX_LENGTH_BYTES)
        body_end = pos + length
        if data[pos] != 0x0A or body_end > end:
            raise NotCanonicalError  # a canonical entry starts with its non-empty key
        key_len = data[pos + 1]
        if key_len < 0x80:
            pos += 2
        else:
            key_len, pos = read(data, pos + 1, _MAX_LENGTH_BYTES)
        if not key_len:
            raise NotCanonicalError
        key = data[pos:pos + key_len].decode("utf-8")
        pos += key_len
        size, vstart, kind = 0, pos, ENTRY_KIND_SCALAR
        if pos < body_end and data[pos] == 0x12:
            size = data[pos + 1]
            if size < 0x80:
                pos += 2
            elif 0 < data[pos + 2] < 0x80:
                size = (size & 0x7F) | (data[pos + 2] << 7)
                pos += 3
            else:
                size, pos = read(data, pos + 1, _MAX_LENGTH_BYTES)
            if not size:
                raise NotCanonicalError
            vstart = pos
            pos += size
        if pos < body_end and data[pos] == 0x18:
            # The stamp runs to the entry's end, or to a kind field there
            # (0x20 is no varint continuation byte, so it cannot be the stamp's).
            stamp_end = body_end - 2 if data[body_end - 2] == 0x20 else body_end
            if canonical_stamp(data, pos + 1, stamp_end) is None:
                raise NotCanonicalError
            pos = stamp_end
        if pos < body_end and data[pos] == 0x20:
            if data[pos + 1] != ENTRY_KIND_RING:
                raise NotCanonicalError  # an explicit 0 or an unknown kind
            kind = ENTRY_KIND_RING
            pos += 2
        if pos != body_end or key in entries:
            raise NotCanonicalError
        entries[key] = (kind, size, start, body_end, vstart)
        total += size
    recorded = version = 0
    if pos < end and data[pos] == 0x18:
        recorded, pos = read(data, pos + 1, _MAX_STAMP_BYTES)
        if not recorded:
            raise NotCanonicalError
    if pos < end and data[pos] == 0x20:
        version, pos = read(data, pos + 1, _MAX_VERSION_BYTES)
        if not version or version >= 1 << 32:
            raise NotCanonicalError
    if pos != end or recorded != total:
        raise NotCanonicalError  # the general path reports the disagreement
    return entries, total, version


def entry_parts(key: str, value: bytes, stamp: int, kind: int) -> list[bytes]:
    """One entry's canonical encoding inside the blob, in pieces for one final join.

    Field by field what the protobuf encoder writes: number order, defaults
    omitted, minimal varints, a negative int64 stamp as ten bytes.
    """
    key_bytes = key.encode("utf-8")
    key_prefix = encode_varint(len(key_bytes))
    parts = [b"\x12", b"", b"\x0a", key_prefix, key_bytes]
    length = 1 + len(key_prefix) + len(key_bytes)
    if value:
        value_prefix = encode_varint(len(value))
        parts += (b"\x12", value_prefix, value)
        length += 1 + len(value_prefix) + len(value)
    if stamp:
        stamp_field = _stamp_field(stamp)
        parts.append(stamp_field)
        length += len(stamp_field)
    if kind:
        parts.append(_RING_KIND_FIELD)
        length += 2
    parts[1] = encode_varint(length)
    return parts


def closing_fields(total: int, memory_version: int) -> bytes:
    """The blob's total_value_bytes and memory_version fields; each omitted when 0."""
    return ((b"\x18" + encode_varint(total) if total else b"")
            + (b"\x20" + encode_varint(memory_version) if memory_version else b""))


@functools.lru_cache(maxsize=256)
def _stamp_field(stamp: int) -> bytes:
    """The last_access_ms field for `stamp`; an activation stamps every entry alike."""
    return b"\x18" + encode_varint(stamp)
