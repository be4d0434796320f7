"""Read JSONL files as bounded byte lines: no line can fail the read or fill a worker's memory.

Beam's text source decodes each line as UTF-8, so one line that is not dies
inside the source, and it assembles a long line by growing one buffer, which
takes minutes and the line's size in memory for a line of 50 MB. Here lines
stay bytes (the decoder turns bad ones into DECODE records, invariant 8),
and `read_lines` reduces a line over ``max_event_bytes`` to its size, sha256
and prefix as it streams past.

The files are cut into byte ranges, shuffled to the workers, and each range
reads the lines that start in it: a large file is still read in parallel. A
compressed file cannot be cut and is read as one range.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_agents.hosting import Oversize, read_lines

__all__ = ["RANGE_BYTES", "ReadLines"]

#: Bytes per range: large enough that a range's open and seek cost nothing
#: beside its reading, small enough that a file of a few GB spreads out.
RANGE_BYTES = 64 << 20

_Range = tuple[str, int, int | None]  # path, first byte, one past the last (None: to the end)


class ReadLines(beam.PTransform):  # type: ignore[type-arg]
    """A file glob -> its lines as bytes, or `Oversize` for a line over `max_bytes`."""

    def __init__(self, pattern: str, max_bytes: int, *, range_bytes: int = RANGE_BYTES) -> None:
        super().__init__()
        self._pattern = pattern
        self._max_bytes = max_bytes
        self._range_bytes = range_bytes

    def expand(self, pbegin: Any) -> Any:
        """Match, cut into ranges, spread them out, read each."""
        return (pbegin
                | "Pattern" >> beam.Create([self._pattern])
                | "Match" >> fileio.MatchAll(empty_match_treatment="DISALLOW")
                | "Ranges" >> beam.FlatMap(_ranges, self._range_bytes)
                | "Spread" >> beam.Reshuffle()
                | "Lines" >> beam.ParDo(_ReadRange(self._max_bytes)))


def _ranges(found: Any, range_bytes: int) -> Iterator[_Range]:
    if _compression(found.path) != CompressionTypes.UNCOMPRESSED:
        yield found.path, 0, None
        return
    size = int(found.size_in_bytes)
    for start in range(0, max(size, 1), range_bytes):
        yield found.path, start, min(start + range_bytes, size)


def _compression(path: str) -> str:
    return str(CompressionTypes.detect_compression_type(path))


class _ReadRange(beam.DoFn):
    def __init__(self, max_bytes: int) -> None:
        super().__init__()
        self._max_bytes = max_bytes

    def process(self, item: _Range) -> Iterator[bytes | Oversize]:
        path, start, end = item
        compression = _compression(path)
        with FileSystems.open(path, compression_type=compression) as handle:
            stream = handle if compression == CompressionTypes.UNCOMPRESSED else (
                io.BufferedReader(_Raw(handle), 1 << 16))
            yield from read_lines(stream, max_bytes=self._max_bytes, start=start, end=end)


class _Raw(io.RawIOBase):
    """A stream with only ``read(n)`` (Beam's decompressing file) as raw I/O, to buffer."""

    def __init__(self, inner: Any) -> None:
        super().__init__()
        self._inner = inner

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._inner.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)
