from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PendingWait(_message.Message):
    __slots__ = ("name", "deadline_ms", "request", "seq")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    name: str
    deadline_ms: int
    request: bytes
    seq: int
    def __init__(self, name: _Optional[str] = ..., deadline_ms: _Optional[int] = ..., request: _Optional[bytes] = ..., seq: _Optional[int] = ...) -> None: ...

class PendingWaitsBlob(_message.Message):
    __slots__ = ("state_schema_version", "waits")
    STATE_SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    WAITS_FIELD_NUMBER: _ClassVar[int]
    state_schema_version: int
    waits: _containers.RepeatedCompositeFieldContainer[PendingWait]
    def __init__(self, state_schema_version: _Optional[int] = ..., waits: _Optional[_Iterable[_Union[PendingWait, _Mapping]]] = ...) -> None: ...
