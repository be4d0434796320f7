"""Bad input to Memory: typed errors that name the key, field or version (invariant 8)."""

from __future__ import annotations

import pytest

from beam_agents._proto.memory_pb2 import MemoryBlob
from beam_agents.errors import ConfigError, StateCorruptError, UnsupportedSchemaVersionError
from beam_agents.memory import Memory


@pytest.mark.parametrize("key", [1, b"k", None, ("k",)])
def test_a_key_that_is_not_str_is_a_type_error(key: object) -> None:
    memory = Memory(now_ms=0)
    for call in (memory.get, memory.delete, memory.ring, lambda k: memory.set(k, b"v"),
                 lambda k: memory.append(k, b"v"), memory.entry_size):
        with pytest.raises(TypeError, match="memory keys are str"):
            call(key)


def test_an_empty_key_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        Memory(now_ms=0).set("", b"v")


@pytest.mark.parametrize("value", ["text", 5, None, [b"a"]])
def test_a_value_that_is_not_bytes_like_names_the_key(value: object) -> None:
    memory = Memory(now_ms=0)
    with pytest.raises(TypeError, match="'profile'"):
        memory.set("profile", value)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'log'"):
        memory.append("log", value)  # type: ignore[arg-type]
    assert memory.dirty is False


def test_bytes_like_values_are_stored_as_bytes() -> None:
    memory = Memory(now_ms=0)
    memory.set("a", bytearray(b"xy"))
    memory.append("r", memoryview(b"z"))
    assert memory.get("a") == b"xy"
    assert memory.ring("r") == (b"z",)


@pytest.mark.parametrize("max_items", [0, -3])
def test_max_items_below_one_is_a_value_error(max_items: int) -> None:
    memory = Memory(now_ms=0)
    with pytest.raises(ValueError, match="max_items"):
        memory.append("log", b"x", max_items=max_items)
    assert memory.ring("log") == ()


def test_now_ms_must_be_an_int() -> None:
    with pytest.raises(TypeError, match="now_ms"):
        Memory(now_ms=1.5)  # type: ignore[arg-type]


def test_an_unknown_schema_version_names_the_version() -> None:
    blob = MemoryBlob(state_schema_version=7).SerializeToString()
    with pytest.raises(UnsupportedSchemaVersionError, match="state_schema_version 7") as caught:
        Memory(blob, now_ms=0)
    assert caught.value.version == 7
    assert caught.value.cell == "memory"


@pytest.mark.parametrize(("blob", "message"), [
    (b"\xff\xff\xff", "not a valid MemoryBlob"),
    (MemoryBlob(state_schema_version=1, total_value_bytes=9).SerializeToString(),
     "total_value_bytes=9"),
])
def test_a_malformed_blob_is_a_typed_error_never_an_empty_facade(blob: bytes, message: str) -> None:
    with pytest.raises(StateCorruptError, match=message):
        Memory(blob, now_ms=0)


def test_duplicate_and_empty_keys_are_corruption() -> None:
    dup = MemoryBlob(state_schema_version=1, total_value_bytes=2)
    dup.entries.add(key="k", value=b"a")
    dup.entries.add(key="k", value=b"b")
    with pytest.raises(StateCorruptError, match="'k' twice"):
        Memory(dup.SerializeToString(), now_ms=0)
    empty = MemoryBlob(state_schema_version=1, total_value_bytes=1)
    empty.entries.add(key="", value=b"a")
    with pytest.raises(StateCorruptError, match="empty key"):
        Memory(empty.SerializeToString(), now_ms=0)


def test_an_unknown_entry_kind_is_corruption() -> None:
    blob = MemoryBlob(state_schema_version=1, total_value_bytes=1)
    entry = blob.entries.add(key="k", value=b"a")
    entry.kind = 9  # type: ignore[assignment]
    with pytest.raises(StateCorruptError, match="unknown kind 9"):
        Memory(blob.SerializeToString(), now_ms=0)


def test_empty_bytes_are_a_fresh_memory() -> None:
    assert Memory(b"", now_ms=0).to_blob() == MemoryBlob(state_schema_version=1)


def test_longterm_without_configuration_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"AgentConfig\.longterm_memory") as caught:
        _ = Memory(now_ms=0).longterm
    assert caught.value.field == "AgentConfig.longterm_memory"
