"""Loading canonical blobs without re-encoding them: same bytes, same errors, same content.

`Memory` indexes canonical bytes in one pass and copies unchanged entries into
its output instead of re-encoding them. These tests pin what that must never
change: the output is the deterministic serialization of the content, any
non-canonical input is still accepted and re-encoded, corruption is still
reported at load, and a corrupt ring fails the first operation that reads it.
"""

from __future__ import annotations

import contextlib

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st

from beam_agents._proto.memory_pb2 import (
    ENTRY_KIND_RING,
    ENTRY_KIND_SCALAR,
    MemoryBlob,
    MemoryEntry,
)
from beam_agents.errors import StateCorruptError, UnsupportedSchemaVersionError
from beam_agents.memory import Memory, RingCorruptError
from beam_agents.memory._ring import encode_ring
from beam_agents.memory._wire import NotCanonicalError, scan_canonical
from tests.strategies import memory_operations
from tests.unit.memory.test_memory_properties import run

NOW = 1_700_000_000_000


def canonical(blob: MemoryBlob) -> bytes:
    return blob.SerializeToString(deterministic=True)


def staged(operations: list, now_ms: int = NOW - 5, version: int = 0) -> bytes:
    memory = Memory(now_ms=now_ms)
    for op, key, value, max_items in operations:
        with contextlib.suppress(TypeError):
            run(memory, op, key, value, max_items)
    memory.set_version(version)
    return memory.to_bytes()


def apply(memory: Memory, operations: list) -> list[object]:
    results = []
    for op, key, value, max_items in operations:
        try:
            results.append(run(memory, op, key, value, max_items))
        except TypeError:
            results.append(TypeError)
    return results


@given(st.lists(memory_operations, max_size=25), st.lists(memory_operations, max_size=15))
def test_output_is_the_deterministic_serialization_and_matches_a_full_re_encode(
        first: list, second: list) -> None:
    """Reused entry bytes and re-encoded ones give the same blob, byte for byte."""
    data = staged(first)
    assert data == canonical(MemoryBlob.FromString(data))
    reused = Memory(data, now_ms=NOW)  # canonical bytes: entries are sliced, not re-encoded
    rebuilt = Memory(MemoryBlob.FromString(data), now_ms=NOW)  # a message: everything re-encoded

    assert apply(reused, second) == apply(rebuilt, second)

    out = reused.to_bytes()
    assert out == rebuilt.to_bytes()
    assert out == canonical(MemoryBlob.FromString(out))
    assert reused.to_blob() == rebuilt.to_blob()
    assert reused.size_bytes == rebuilt.size_bytes == MemoryBlob.FromString(out).total_value_bytes


def test_entries_nothing_touched_keep_their_stamps_and_bytes() -> None:
    """An activation that reads one key rewrites only that key's stamp."""
    first = Memory(now_ms=1)
    first.set("a", b"x" * 300)
    first.append("log", b"item")
    first.set("b", b"y")
    data = first.to_bytes()

    memory = Memory(data, now_ms=2)
    assert memory.ring("log") == (b"item",)  # a ring read does not stamp
    assert memory.get("a") == b"x" * 300  # a hit does
    out = memory.to_blob()

    assert [(e.key, e.last_access_ms) for e in out.entries] == [("log", 1), ("b", 1), ("a", 2)]
    untouched = [canonical(MemoryBlob(entries=[e])) for e in MemoryBlob.FromString(data).entries]
    assert untouched[1] in memory.to_bytes() and untouched[2] in memory.to_bytes()


def entry_bytes(*fields: bytes) -> bytes:
    body = b"".join(fields)
    return b"\x12" + bytes([len(body)]) + body


KEY_A = b"\x0a\x01a"
VALUE_V = b"\x12\x01v"
STAMP_5 = b"\x18\x05"
KIND_RING = b"\x20\x01"
RING = b"\x12\x02\x01\x00"  # a ring holding one empty item


@pytest.mark.parametrize(("data", "why"), [
    (b"\x08\x01" + entry_bytes(VALUE_V, KEY_A, STAMP_5) + b"\x18\x01", "fields out of order"),
    (b"\x08\x01" + entry_bytes(KEY_A, VALUE_V, STAMP_5, b"\x20\x00") + b"\x18\x01",
     "an explicit default kind"),
    (b"\x08\x01" + entry_bytes(KEY_A, VALUE_V, b"\x18\x85\x00") + b"\x18\x01",
     "a padded stamp varint"),
    (b"\x08\x01" + entry_bytes(KEY_A, VALUE_V, STAMP_5, b"\xf8\x07\x01") + b"\x18\x01",
     "an unknown field in an entry"),
    (b"\x08\x01" + entry_bytes(KEY_A, VALUE_V, STAMP_5) + b"\x18\x01\xf8\x07\x01",
     "an unknown field in the blob"),
    (entry_bytes(KEY_A, VALUE_V, STAMP_5) + b"\x18\x01\x08\x01", "the version written last"),
    (b"\x08\x01" + entry_bytes(KEY_A, VALUE_V, STAMP_5) + b"\x18\x01\x18\x01",
     "the total written twice"),
    (b"\x08\x01" + entry_bytes(KEY_A, b"\x12\x00", STAMP_5) + b"", "an explicit empty value"),
])
def test_non_canonical_bytes_are_read_through_the_parser_and_re_encoded(
        data: bytes, why: str) -> None:
    """Bytes some other writer produced load normally and come out canonical."""
    parsed = MemoryBlob.FromString(data)
    with pytest.raises(NotCanonicalError):
        scan_canonical(data)

    memory = Memory(data, now_ms=NOW)

    assert memory.keys() == ("a",), why
    assert memory.to_bytes() == canonical(MemoryBlob(
        state_schema_version=1, total_value_bytes=parsed.total_value_bytes,
        entries=[MemoryEntry(key=e.key, value=e.value, last_access_ms=e.last_access_ms,
                             kind=e.kind) for e in parsed.entries]))


@pytest.mark.parametrize(("data", "error", "match"), [
    (b"\x08\x01" + entry_bytes(KEY_A, VALUE_V, STAMP_5) + b"\x18\x02", StateCorruptError,
     "total_value_bytes=2"),
    (b"\x08\x01" + entry_bytes(KEY_A, VALUE_V) * 2 + b"\x18\x02", StateCorruptError,
     "'a' twice"),
    (b"\x08\x01" + entry_bytes(b"\x0a\x01\xff", VALUE_V) + b"\x18\x01", StateCorruptError,
     "not a valid MemoryBlob"),
    (b"\x08\x01" + entry_bytes(KEY_A, VALUE_V)[:-1], StateCorruptError, "not a valid"),
    (b"\x08\x01" + entry_bytes(KEY_A, b"\x20\x07"), StateCorruptError, "unknown kind 7"),
    (b"\x08\x02" + entry_bytes(KEY_A, VALUE_V), UnsupportedSchemaVersionError, "version 2"),
])
def test_corrupt_bytes_are_still_reported_when_loaded(
        data: bytes, error: type[Exception], match: str) -> None:
    """THEN loading raises the typed error; nothing is read as empty (invariant 8)."""
    with pytest.raises(error, match=match):
        Memory(data, now_ms=NOW)


@given(st.lists(memory_operations, min_size=1, max_size=12), st.data())
def test_the_fast_path_accepts_only_what_protobuf_reads_identically(
        operations: list, data: st.DataObject) -> None:
    """A damaged canonical blob is either indexed exactly as the parser reads it, or refused."""
    original = staged(operations, version=data.draw(st.sampled_from([0, 1, 300, 2**32 - 1])))
    mutation = data.draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
    position = data.draw(st.integers(0, len(original) - 1))
    byte = data.draw(st.integers(0, 255))
    damaged = {
        "flip": original[:position] + bytes([byte]) + original[position + 1:],
        "insert": original[:position] + bytes([byte]) + original[position:],
        "delete": original[:position] + original[position + 1:],
        "truncate": original[:position],
    }[mutation]
    try:
        entries, total, version = scan_canonical(damaged)
    except (NotCanonicalError, IndexError, UnicodeDecodeError):
        return
    parsed = MemoryBlob.FromString(damaged)  # must not raise: the scan accepted it
    assert canonical(parsed) == damaged
    assert list(entries) == [e.key for e in parsed.entries]
    assert (total, version) == (parsed.total_value_bytes, parsed.memory_version)
    for e in parsed.entries:
        kind, size = entries[e.key][:2]  # type: ignore[index]
        assert (kind, size) == (e.kind, len(e.value))


def test_an_invalid_utf8_key_is_refused_by_both_readers() -> None:
    data = b"\x08\x01" + entry_bytes(b"\x0a\x02\xed\xa0", VALUE_V) + b"\x18\x01"
    with pytest.raises(UnicodeDecodeError):
        scan_canonical(data)
    with pytest.raises(DecodeError):
        MemoryBlob.FromString(data)


def test_a_corrupt_ring_that_nothing_reads_is_kept_byte_for_byte() -> None:
    """The ring is carried unchanged when other keys change, and fails whoever reads it.

    Ring contents are checked when a ring is first read or appended to, not at
    load (decoding every ring of every activation would cost a Python loop per
    item). Nothing built on a corrupt ring can commit: the read raises inside
    the activation. What does commit is the ring's original bytes, so the
    corruption is never rewritten or dropped and stays reportable.
    """
    blob = MemoryBlob(state_schema_version=1, total_value_bytes=4)
    blob.entries.add(key="history", value=b"\x01\x09a", kind=ENTRY_KIND_RING, last_access_ms=1)
    blob.entries.add(key="a", value=b"x", kind=ENTRY_KIND_SCALAR, last_access_ms=1)
    memory = Memory(canonical(blob), now_ms=NOW)

    memory.set("a", b"y")
    with pytest.raises(RingCorruptError, match="history"):
        memory.ring("history")
    with pytest.raises(RingCorruptError, match="history"):
        memory.append("history", b"z")

    out = MemoryBlob.FromString(memory.to_bytes())
    assert out.entries[0] == blob.entries[0]
    assert memory.size_bytes == 4


def test_appends_after_a_read_and_reads_after_appends_agree_with_a_fresh_encoding() -> None:
    first = Memory(now_ms=1)
    for index in range(5):
        first.append("log", bytes([index]) * (100 + index * 60), max_items=5)
    memory = Memory(first.to_bytes(), now_ms=2)

    before = memory.ring("log")
    memory.append("log", b"new", max_items=5)
    memory.append("log", b"newer" * 40, max_items=3)
    after = memory.ring("log")
    memory.append("log", b"last", max_items=3)

    assert after == (*before[3:], b"new", b"newer" * 40)[-3:]
    assert memory.ring("log") == (b"new", b"newer" * 40, b"last")
    value = MemoryBlob.FromString(memory.to_bytes()).entries[0].value
    assert value == encode_ring(memory.ring("log"))
    assert memory.entry_size("log") == len(value) == memory.size_bytes


@pytest.mark.parametrize("stamp", [-1, -(2**63), 2**63 - 1, 0, 127, 128])
def test_re_encoded_entries_match_protobuf_at_every_stamp_width(stamp: int) -> None:
    """Entries re-encoded by hand carry the stamp exactly as protobuf writes an int64."""
    blob = MemoryBlob(state_schema_version=1, total_value_bytes=2)
    blob.entries.add(key="old", value=b"o", last_access_ms=stamp)
    blob.entries.add(key="ключ", value=b"k", last_access_ms=stamp, kind=ENTRY_KIND_SCALAR)
    memory = Memory(blob, now_ms=stamp)  # a message: every entry is re-encoded

    memory.get("ключ")

    assert memory.to_bytes() == canonical(memory.to_blob()) == canonical(blob)
