r"""Bounded line reading: a file's lines, however long, in memory bounded by the size limit.

A reader that holds each whole line (Beam's text source among them) spends
memory, and for one very long line time, in proportion to the line. An
element over ``max_event_bytes`` can only ever become a DECODE dead letter
(invariant 8), so this reader keeps no more of it than that record holds:
its size, its sha256 and a prefix, computed while the bytes stream past.

Lines are split on ``\n``; a ``\r`` before it is dropped, as text readers do.
A byte range ``[start, end)`` selects the lines whose first byte lies in it,
so a file cut into ranges is read by several workers, each line exactly once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

__all__ = ["OVERSIZE_PREFIX_BYTES", "Oversize", "read_lines"]

#: What a DECODE record keeps of an element over the size limit: enough to
#: recognise it, never enough to carry its size into the errors output.
OVERSIZE_PREFIX_BYTES = 4096
#: Bytes read per call while a line is being assembled.
_CHUNK = 1 << 16


@dataclass(frozen=True, slots=True)
class Oversize:
    """A line over the size limit, reduced to what its dead letter needs.

    Attributes:
        size: The line's length in bytes, line break excluded.
        prefix: Its first `OVERSIZE_PREFIX_BYTES` bytes.
        sha256: The digest of the whole line, to find it at the source.
    """

    size: int
    prefix: bytes
    sha256: bytes

    @classmethod
    def of(cls, data: bytes) -> Oversize:
        """What its dead letter keeps of `data`, held whole."""
        return cls(len(data), data[:OVERSIZE_PREFIX_BYTES], hashlib.sha256(data).digest())


def read_lines(stream: BinaryIO, *, max_bytes: int, start: int = 0,
               end: int | None = None) -> Iterator[bytes | Oversize]:
    """The lines of `stream` that begin in ``[start, end)``; longer than `max_bytes`: `Oversize`.

    Args:
        stream: A binary stream, seekable if `start` is above 0.
        max_bytes: The longest line returned as bytes.
        start: The range's first byte; a line that began before it belongs to
            the previous range and is skipped.
        end: One past the range's last byte, or None for the end of the stream.
    """
    position = start
    if start > 0:
        stream.seek(start - 1)
        if stream.read(1) != b"\n":  # mid-line: that line is the previous range's
            position += _skip_line(stream)
    while end is None or position < end:
        line = _read_line(stream, max_bytes)
        if line is None:
            return
        item, consumed = line
        position += consumed
        yield item


def _skip_line(stream: BinaryIO) -> int:
    skipped = 0
    while chunk := stream.readline(_CHUNK):
        skipped += len(chunk)
        if chunk.endswith(b"\n"):
            break
    return skipped


def _read_line(stream: BinaryIO, max_bytes: int) -> tuple[bytes | Oversize, int] | None:
    """The next line and the bytes it took, break included; None at the end of the stream."""
    parts: list[bytes] = []
    size = 0  # the line's bytes so far, break excluded
    digest = None  # set once the line is over the limit
    prefix = b""
    consumed = 0
    while chunk := stream.readline(_CHUNK):
        consumed += len(chunk)
        ended = chunk.endswith(b"\n")
        if ended:
            chunk = chunk[:-1]
        size += len(chunk)
        if digest is None:
            parts.append(chunk)
            if size > max_bytes + 1:  # one byte of slack: a `\r` before the break
                head = b"".join(parts)
                digest, prefix, parts = hashlib.sha256(head), head[:OVERSIZE_PREFIX_BYTES], []
        else:
            digest.update(chunk)
            if len(prefix) < OVERSIZE_PREFIX_BYTES:
                prefix += chunk[:OVERSIZE_PREFIX_BYTES - len(prefix)]
        if ended:
            break
    if consumed == 0:
        return None
    if digest is None:
        line = b"".join(parts).removesuffix(b"\r")
        if len(line) <= max_bytes:
            return line, consumed
        return Oversize.of(line), consumed
    # Once hashed, a `\r` before the break is part of the line's size and digest.
    return Oversize(size, prefix, digest.digest()), consumed
