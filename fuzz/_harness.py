"""What the fuzz targets share: the libFuzzer entry point, checks, and reference decoders.

This module imports nothing from `beam_agents`, so that each target can
import the library under ``atheris.instrument_imports()`` first: a module
that is already loaded is not instrumented, and without instrumentation
libFuzzer has no coverage to steer by.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, MutableMapping, MutableSequence
from typing import Any

import atheris  # type: ignore[import-untyped]
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message

__all__ = ["NOW_MS", "Mutator", "PropertyViolation", "check", "fuzz", "proto_mutator",
           "reference_ring"]

#: libFuzzer's custom-mutator hook: ``(data, max_size, seed) -> mutated data``.
Mutator = Callable[[bytes, int, int], bytes]

#: The clock every target gives the facades: the seeds' entries are stamped
#: shortly before it, so replay-cache seeds are live rather than expired.
NOW_MS = 1_700_000_000_000


class PropertyViolation(AssertionError):
    """A decoder accepted an input but broke a guarantee of its own (a round-trip, a size)."""


def check(condition: bool, message: str) -> None:
    """Raise `PropertyViolation` with `message` unless `condition`.

    Not ``assert``: ``python -O`` would strip the checks and the targets
    would silently test nothing.
    """
    if not condition:
        raise PropertyViolation(message)


def fuzz(test_one_input: Callable[[bytes], None], *, mutator: Mutator | None = None) -> None:
    """Run `test_one_input` under libFuzzer with this process's argv; libFuzzer exits.

    A crash names the input's ordinal on stderr (``fuzz: input N crashed``),
    so the runner can report how many inputs ran before it: libFuzzer prints
    its ``Done N runs`` line only when every run completed. `mutator`, if
    given, replaces libFuzzer's byte-level mutation (see `proto_mutator`).
    """
    count = 0

    def counted(data: bytes) -> None:
        nonlocal count
        count += 1
        try:
            test_one_input(data)
        except BaseException:
            print(f"\nfuzz: input {count} crashed", file=sys.stderr, flush=True)
            raise

    if mutator is None:
        atheris.Setup(sys.argv, counted)
    else:
        atheris.Setup(sys.argv, counted, custom_mutator=mutator)
    atheris.Fuzz()


def proto_mutator(message_type: type[Message]) -> Mutator:
    """A mutator that, half the time, edits one field of the parsed message instead of bytes.

    Byte mutation rarely keeps a protobuf parseable while changing what it
    means: shortening a 32-byte digest shifts every byte after it into a
    tag, and the parser refuses the result. Editing the parsed message (a
    repeated entry duplicated, dropped or moved, a length or a number set to
    an edge value, an unknown enum value) and serializing it deterministically
    yields valid, canonical bytes that only the library's own checks can
    refuse, which is where its typed errors come from.
    """

    def mutate(data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        if rng.random() < 0.5:
            return bytes(atheris.Mutate(data, max_size))
        try:
            message = message_type.FromString(data)
        except DecodeError:
            return bytes(atheris.Mutate(data, max_size))
        for _ in range(rng.randint(1, 3)):
            _edit(message, rng)
        return message.SerializeToString(deterministic=True)[:max_size]

    return mutate


_EDGE_INTS = (0, 1, -1, 0x7F, 0x80, 0x3FFF, 0x4000, 2**31 - 1, 2**63 - 1, -(2**63))
_EDGE_LENGTHS = (0, 1, 31, 32, 33, 127, 128)


def _edit(message: Message, rng: random.Random) -> None:
    """Change one field of `message` (or of a message inside it) to a nearby or edge value."""
    field: Any = rng.choice(message.DESCRIPTOR.fields)  # the stubs split upb's and Python's
    value: Any = getattr(message, field.name)
    if isinstance(value, MutableMapping):
        return  # a map field: the schemas keep only strings in them
    if isinstance(value, MutableSequence):
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            return
        elements: Any = value  # a repeated message field, which has add()
        items = list(elements)
        action = rng.randrange(4) if items else 3
        if action == 0:  # recurse into one element
            _edit(rng.choice(elements), rng)
        elif action == 1:  # duplicate an element
            elements.add().CopyFrom(rng.choice(items))
        elif action == 2:  # drop or move one
            index = rng.randrange(len(items))
            kept = items[:index] + items[index + 1:]
            if rng.random() < 0.5:
                kept.insert(rng.randrange(len(kept) + 1), items[index])
            copies = [type(item)() for item in kept]
            for copy, item in zip(copies, kept, strict=True):
                copy.CopyFrom(item)
            del elements[:]
            elements.extend(copies)
        else:
            elements.add()
        return
    kind = field.type
    if kind == FieldDescriptor.TYPE_MESSAGE:
        _edit(value, rng)
    elif kind == FieldDescriptor.TYPE_BOOL:
        setattr(message, field.name, not value)
    elif kind == FieldDescriptor.TYPE_ENUM:
        setattr(message, field.name, rng.choice((0, 1, 2, 3, 99)))
    elif kind == FieldDescriptor.TYPE_BYTES:
        size = max(0, rng.choice((*_EDGE_LENGTHS, len(value) - 1, len(value) + 1)))
        setattr(message, field.name, (bytes(value) * 2 + rng.randbytes(size))[:size])
    elif kind == FieldDescriptor.TYPE_STRING:
        setattr(message, field.name, rng.choice(("", value, value * 2, value[:-1], "é", "k")))
    else:  # an integer type: a neighbour or an edge value, kept in the field's range
        candidate = rng.choice((*_EDGE_INTS, value + 1, value - 1, value * 2))
        try:
            setattr(message, field.name, candidate)
        except ValueError:
            setattr(message, field.name, 0)


def reference_ring(value: bytes) -> list[bytes] | None:
    """Decode a ring encoding the plain way, byte by byte; None where it is not one.

    An independent model of ``memory/_ring.py``'s format (a version byte 0x01,
    then items each prefixed by a minimal base-128 varint of at most ten
    bytes), so the fast decoders are checked against something that shares
    none of their shortcuts.
    """
    if not value or value[0] != 1:
        return None
    items: list[bytes] = []
    pos = 1
    while pos < len(value):
        length = shift = 0
        for _ in range(10):
            if pos >= len(value):
                return None  # the prefix runs past the end
            byte = value[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                if shift > 7 and not byte:
                    return None  # a padded prefix
                break
        else:
            return None  # ten continuation bytes: too long for a varint
        if pos + length > len(value):
            return None
        items.append(value[pos:pos + length])
        pos += length
    return items
