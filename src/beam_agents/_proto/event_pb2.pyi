from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Mapping as _Mapping, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class AgentEvent(_message.Message):
    __slots__ = ("entity_key", "event_id", "event_time_ms", "payload", "attributes", "answers", "wait_timed_out")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ENTITY_KEY_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    WAIT_TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    entity_key: bytes
    event_id: str
    event_time_ms: int
    payload: bytes
    attributes: _containers.ScalarMap[str, str]
    answers: str
    wait_timed_out: str
    def __init__(self, entity_key: _Optional[bytes] = ..., event_id: _Optional[str] = ..., event_time_ms: _Optional[int] = ..., payload: _Optional[bytes] = ..., attributes: _Optional[_Mapping[str, str]] = ..., answers: _Optional[str] = ..., wait_timed_out: _Optional[str] = ...) -> None: ...
