"""The bounded line reader: every line once, however the file is cut; huge lines reduced.

`read_lines` is how files reach the decoder on Beam, so it decides whether a
line that is not UTF-8 or is 50 MB long becomes a DECODE record (invariant 8)
or fails the read. These tests pin its splitting, its range rule and the
size limit's boundary.
"""

from __future__ import annotations

import hashlib
import io
import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from beam_agents.hosting import Oversize, read_lines
from beam_agents.runtime._lines import OVERSIZE_PREFIX_BYTES


def lines(data: bytes, *, max_bytes: int = 1 << 20, start: int = 0,
          end: int | None = None) -> list[bytes | Oversize]:
    return list(read_lines(io.BytesIO(data), max_bytes=max_bytes, start=start, end=end))


def test_lines_split_on_newline_keep_empty_lines_and_drop_a_carriage_return() -> None:
    assert lines(b"a\n\nb\r\nc") == [b"a", b"", b"b", b"c"]
    assert lines(b"") == []
    assert lines(b"\n") == [b""]


def test_bytes_that_are_not_utf8_come_through_unchanged() -> None:
    assert lines(b"caf\xe9\n\xff\xfe\n") == [b"caf\xe9", b"\xff\xfe"]


def test_a_line_of_exactly_the_limit_is_a_line_and_one_byte_more_is_oversize() -> None:
    limit = 1000
    exact, over = b"x" * limit, b"y" * (limit + 1)
    got = lines(exact + b"\n" + over + b"\n" + b"z\n", max_bytes=limit)
    assert got[0] == exact
    assert got[1] == Oversize(limit + 1, over[:OVERSIZE_PREFIX_BYTES],
                              hashlib.sha256(over).digest())
    assert got[2] == b"z"


def test_an_oversize_line_keeps_its_size_prefix_and_digest_and_the_next_line_survives() -> None:
    huge = bytes(b for b in range(256) if b != 0x0A) * 40_000  # 10 MB, many chunks
    got = lines(b"first\n" + huge + b"\nlast", max_bytes=4096)
    assert got[0] == b"first" and got[2] == b"last"
    oversize = got[1]
    assert isinstance(oversize, Oversize)
    assert oversize.size == len(huge)
    assert oversize.prefix == huge[:OVERSIZE_PREFIX_BYTES]
    assert oversize.sha256 == hashlib.sha256(huge).digest()


def test_a_range_reads_the_lines_that_start_in_it() -> None:
    data = b"aa\nbbb\ncccc\n"  # lines start at 0, 3 and 7
    assert lines(data, start=0, end=3) == [b"aa"]
    assert lines(data, start=1, end=4) == [b"bbb"]  # "aa" began before the range
    assert lines(data, start=3, end=7) == [b"bbb"]
    assert lines(data, start=4, end=12) == [b"cccc"]
    assert lines(data, start=8, end=12) == []


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=12),
       st.booleans(), st.lists(st.integers(min_value=0, max_value=400), max_size=5))
def test_any_cut_of_a_file_into_ranges_reads_every_line_exactly_once(
        parts: list[bytes], trailing_newline: bool, cuts: list[int]) -> None:
    data = b"\n".join(parts) + (b"\n" if trailing_newline and parts else b"")
    bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    whole = lines(data)
    pieces = [line for start, end in itertools.pairwise(bounds)
              for line in lines(data, start=start, end=end)]
    assert pieces == whole
    split = data.split(b"\n")
    if data.endswith(b"\n") or not data:
        split = split[:-1]  # no line after the last break
    assert whole == [part.removesuffix(b"\r") for part in split]
