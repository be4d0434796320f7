"""Fuzz `scan_canonical`, the fast-path indexer of MemoryBlob bytes (``memory/_wire.py``).

The indexer may refuse anything, with the three errors its contract names
(its caller then hands the bytes to the protobuf parser), but whatever it
accepts must be exactly canonical: ``MemoryBlob.FromString(data)`` parses it,
serializes it deterministically back to `data`, and agrees with the index on
every entry. An input it accepts wrongly would be copied into the next
commit as if it were valid state.
"""

from __future__ import annotations

import atheris  # type: ignore[import-untyped]

from fuzz._harness import check, fuzz, proto_mutator

with atheris.instrument_imports(include=["beam_agents"]):
    from beam_agents._proto.memory_pb2 import (
        ENTRY_KIND_RING,
        ENTRY_KIND_SCALAR,
        MemoryBlob,
        MemoryEntry,
    )
    from beam_agents.memory._wire import NotCanonicalError, scan_canonical


def test_one_input(data: bytes) -> None:
    """Index `data`; if accepted, check the index against the protobuf parser."""
    try:
        entries, total, version = scan_canonical(data)
    except (NotCanonicalError, IndexError, UnicodeDecodeError):
        return  # refused: the general path decides (see memory_blob)
    blob = MemoryBlob.FromString(data)  # a DecodeError here is a wrong acceptance
    check(blob.state_schema_version == 1, "accepted a blob of another version")
    check(blob.SerializeToString(deterministic=True) == data,
          "accepted bytes that are not the canonical serialization")
    check(total == blob.total_value_bytes == sum(len(e.value) for e in blob.entries),
          "the indexed total disagrees with the entries")
    check(list(entries) == [e.key for e in blob.entries], "keys differ from the parser's")
    check(version == blob.memory_version, "the indexed memory_version disagrees")
    for msg, (kind, size, start, end, vstart) in zip(blob.entries, entries.values(), strict=True):
        check(kind == msg.kind and kind in (ENTRY_KIND_SCALAR, ENTRY_KIND_RING),
              f"entry {msg.key!r}: kind {kind} indexed, {msg.kind} parsed")
        check(data[vstart:vstart + size] == msg.value, f"entry {msg.key!r}: value misplaced")
        check(data[start:end] == _entry_bytes(msg), f"entry {msg.key!r}: span misplaced")


def _entry_bytes(entry: MemoryEntry) -> bytes:
    """The entry's encoding as a blob field: what its span must cover."""
    only = MemoryBlob()
    only.entries.append(entry)
    return only.SerializeToString(deterministic=True)


if __name__ == "__main__":
    fuzz(test_one_input, mutator=proto_mutator(MemoryBlob))
