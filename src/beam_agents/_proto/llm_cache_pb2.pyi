from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LlmCacheEntry(_message.Message):
    __slots__ = ("cache_key", "response", "response_digest", "digest_only", "created_at_ms", "last_access_ms")
    CACHE_KEY_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    DIGEST_ONLY_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_ACCESS_MS_FIELD_NUMBER: _ClassVar[int]
    cache_key: str
    response: bytes
    response_digest: bytes
    digest_only: bool
    created_at_ms: int
    last_access_ms: int
    def __init__(self, cache_key: _Optional[str] = ..., response: _Optional[bytes] = ..., response_digest: _Optional[bytes] = ..., digest_only: bool = ..., created_at_ms: _Optional[int] = ..., last_access_ms: _Optional[int] = ...) -> None: ...

class LlmCacheBlob(_message.Message):
    __slots__ = ("state_schema_version", "entries", "total_response_bytes")
    STATE_SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_RESPONSE_BYTES_FIELD_NUMBER: _ClassVar[int]
    state_schema_version: int
    entries: _containers.RepeatedCompositeFieldContainer[LlmCacheEntry]
    total_response_bytes: int
    def __init__(self, state_schema_version: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[LlmCacheEntry, _Mapping]]] = ..., total_response_bytes: _Optional[int] = ...) -> None: ...
