from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EntryKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENTRY_KIND_SCALAR: _ClassVar[EntryKind]
    ENTRY_KIND_RING: _ClassVar[EntryKind]
ENTRY_KIND_SCALAR: EntryKind
ENTRY_KIND_RING: EntryKind

class MemoryEntry(_message.Message):
    __slots__ = ("key", "value", "last_access_ms", "kind")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    LAST_ACCESS_MS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    last_access_ms: int
    kind: EntryKind
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ..., last_access_ms: _Optional[int] = ..., kind: _Optional[_Union[EntryKind, str]] = ...) -> None: ...

class MemoryBlob(_message.Message):
    __slots__ = ("state_schema_version", "entries", "total_value_bytes", "memory_version")
    STATE_SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_VALUE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_VERSION_FIELD_NUMBER: _ClassVar[int]
    state_schema_version: int
    entries: _containers.RepeatedCompositeFieldContainer[MemoryEntry]
    total_value_bytes: int
    memory_version: int
    def __init__(self, state_schema_version: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[MemoryEntry, _Mapping]]] = ..., total_value_bytes: _Optional[int] = ..., memory_version: _Optional[int] = ...) -> None: ...
