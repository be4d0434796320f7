"""Fuzz the working-memory blob load (``memory/_blob.py``) through the `Memory` facade.

The ``memory`` cell is read on every activation. A load either succeeds or
raises `StateError` (invariant 8: the cell is reported, never replaced).
What loads must behave: every scalar reads back as the parser sees it, every
ring reads as an independent reference decoder reads it (or raises
`RingCorruptError` exactly when that decoder refuses it), an untouched
facade writes back the deterministic serialization of what it loaded, and
after edits the output is canonical, reloads, and accounts for the same
size.
"""

from __future__ import annotations

import atheris  # type: ignore[import-untyped]

from fuzz._harness import NOW_MS, check, fuzz, proto_mutator, reference_ring

with atheris.instrument_imports(include=["beam_agents"]):
    from beam_agents._proto.memory_pb2 import ENTRY_KIND_RING, MemoryBlob
    from beam_agents.errors import MemoryOverflow, RingCorruptError, StateError
    from beam_agents.memory import Memory
    from beam_agents.memory._wire import scan_canonical

_EDIT_KEY = "fuzz:new"


def test_one_input(data: bytes) -> None:
    """Load `data` as a memory cell, read every entry, edit, and check the output."""
    try:
        memory = Memory(data, now_ms=NOW_MS)
    except StateError:
        return
    parsed = MemoryBlob.FromString(data)  # a DecodeError here is a wrong acceptance
    parsed.DiscardUnknownFields()
    untouched = memory.to_bytes()
    if parsed.state_schema_version == 0:  # empty bytes or all defaults: a fresh memory
        check(not memory.keys() and untouched == b"\x08\x01", "a fresh memory is not empty")
    else:
        check(untouched == parsed.SerializeToString(deterministic=True),
              "an untouched facade does not write back what it loaded")
    check(list(memory.keys()) == [e.key for e in parsed.entries], "keys differ from the parser's")
    check(memory.size_bytes == sum(len(e.value) for e in parsed.entries), "size_bytes is wrong")

    for entry in parsed.entries:
        key = entry.key
        if entry.kind != ENTRY_KIND_RING:
            check(memory.get(key) == entry.value, f"scalar {key!r} reads back differently")
            continue
        expected = reference_ring(entry.value)
        try:
            items = list(memory.ring(key))
        except RingCorruptError:
            check(expected is None, f"ring {key!r} is valid but was refused")
            continue
        check(items == expected, f"ring {key!r} decodes differently from the reference")
        try:
            memory.append(key, b"fuzz", max_items=max(1, len(items)))
        except MemoryOverflow:
            return
        check(list(memory.ring(key)) == [*items, b"fuzz"][-max(1, len(items)):],
              f"ring {key!r} after an append")

    try:
        memory.set(_EDIT_KEY, bytes(data[:64]))
        memory.append(_EDIT_KEY + ":ring", b"x", max_items=2)
    except MemoryOverflow:
        return
    if parsed.entries:
        memory.delete(parsed.entries[0].key)
    edited = memory.to_bytes()
    written = MemoryBlob.FromString(edited)
    check(written.SerializeToString(deterministic=True) == edited,
          "the edited blob is not canonical")
    if all(entry.last_access_ms >= 0 for entry in written.entries):
        # The fast path takes all this library writes, bar a negative stamp
        # carried over from foreign state (``_wire``: a non-negative int64).
        scan_canonical(edited)  # anything raised here is a bug
    reloaded = Memory(edited, now_ms=NOW_MS)
    check(reloaded.keys() == memory.keys(), "the edited blob reloads with other keys")
    check(reloaded.size_bytes == memory.size_bytes, "the edited blob reloads with another size")


if __name__ == "__main__":
    fuzz(test_one_input, mutator=proto_mutator(MemoryBlob))
