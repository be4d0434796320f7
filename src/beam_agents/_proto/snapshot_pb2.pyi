from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class KeyStateSnapshot(_message.Message):
    __slots__ = ("state_schema_version", "entity_key", "cells")
    STATE_SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    ENTITY_KEY_FIELD_NUMBER: _ClassVar[int]
    CELLS_FIELD_NUMBER: _ClassVar[int]
    state_schema_version: int
    entity_key: bytes
    cells: _containers.RepeatedCompositeFieldContainer[StateCellValue]
    def __init__(self, state_schema_version: _Optional[int] = ..., entity_key: _Optional[bytes] = ..., cells: _Optional[_Iterable[_Union[StateCellValue, _Mapping]]] = ...) -> None: ...

class StateCellValue(_message.Message):
    __slots__ = ("name", "blob", "number", "bag")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BLOB_FIELD_NUMBER: _ClassVar[int]
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    BAG_FIELD_NUMBER: _ClassVar[int]
    name: str
    blob: bytes
    number: int
    bag: StateBag
    def __init__(self, name: _Optional[str] = ..., blob: _Optional[bytes] = ..., number: _Optional[int] = ..., bag: _Optional[_Union[StateBag, _Mapping]] = ...) -> None: ...

class StateBag(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, items: _Optional[_Iterable[bytes]] = ...) -> None: ...
