"""OTLP trace requests written straight to protobuf's wire format, from our own span records.

Why not the SDK's encoder: it builds a message object per span, per
attribute and per value, and at two spans an event that was a quarter of
what tracing cost (docs/benchmarks.md, B14). Here a span is a few byte
strings joined once: the ``KeyValue`` of an attribute name and a repeated
value (the agent, the model, a key's digest) is encoded once and reused,
and the resource and scope are encoded once per tracer. The field numbers
are those of ``opentelemetry/proto/trace/v1/trace.proto``; a unit test
parses what this writes with opentelemetry-proto's own classes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from itertools import chain
from typing import Any

__all__ = ["Flat", "Frozen", "SpanRecord", "encode_frozen", "encode_request",
           "encode_resource_scope", "encode_span", "freeze"]

_U64 = (1 << 64) - 1
_DOUBLE = struct.Struct("<d")
_FIXED64 = struct.Struct("<Q")

#: Cached ``KeyValue`` fields: by field tag, then name (with the type its values
#: have), then value. Each level is cleared when full, so unique values (event
#: ids, seqs) cost an insert, never unbounded memory.
_CACHE_LIMIT = 1024
_VALUES_PER_NAME = 4096
_kv_cache: dict[bytes, dict[str, tuple[dict[Any, bytes], type]]] = {}


class SpanRecord:
    """A span's fields, as `encode_span` reads them; the tracer's sampled spans are these.

    Attributes:
        trace_id: 16 bytes.
        span_id: 8 bytes.
        parent_id: 8 bytes, or b"" for a root (a producer's span id when the
            parent is remote).
        name: The span's name.
        kind: OTLP ``SpanKind`` (1 internal, 3 client).
        start_ns: Start, in Unix nanoseconds.
        end_ns: End, in Unix nanoseconds; 0 while the span runs.
        attributes: Name to value.
        events: (name, Unix nanoseconds, attributes) each, or None.
        links: (trace id, span id, attributes) each, or None.
        error: The ``error.type`` of a failed span (its status is ERROR), or None.
    """

    __slots__ = ("attributes", "end_ns", "error", "events", "kind", "links", "name",
                 "parent_id", "span_id", "start_ns", "trace_id")

    def __init__(self, trace_id: bytes, span_id: bytes, parent_id: bytes, name: str,  # noqa: PLR0917
                 kind: int, start_ns: int, end_ns: int = 0, *,
                 attributes: dict[str, Any] | None = None,
                 events: list[tuple[str, int, Mapping[str, Any]]] | None = None,
                 links: list[tuple[bytes, bytes, Mapping[str, Any]]] | None = None,
                 error: str | None = None) -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_id = parent_id
        self.name = name
        self.kind = kind
        self.start_ns = start_ns
        self.end_ns = end_ns
        self.attributes: dict[str, Any] = {} if attributes is None else attributes
        self.events = events
        self.links = links
        self.error = error


def _varint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _delimited(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: its tag, the payload's length, the payload."""
    return tag + _varint(len(payload)) + payload


def _any_value(value: Any) -> bytes:
    """An ``AnyValue``: string 1, bool 2, int 3, double 4, array 5."""
    if isinstance(value, str):
        return _delimited(b"\x0a", value.encode("utf-8", "surrogatepass"))
    if isinstance(value, bool):  # before int: a bool is an int
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        return b"\x18" + _varint(value & _U64)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE.pack(value)
    if isinstance(value, bytes):
        return _delimited(b"\x3a", value)
    if isinstance(value, Sequence):
        items = b"".join(_delimited(b"\x0a", _any_value(item)) for item in value)
        return _delimited(b"\x2a", items)
    return _delimited(b"\x0a", str(value).encode("utf-8", "surrogatepass"))


def _key_value(key: str, value: Any) -> bytes:
    """One attribute as a ``KeyValue`` message (key 1, value 2)."""
    return _delimited(b"\x0a", key.encode()) + _delimited(b"\x12", _any_value(value))


def _attributes(tag: bytes, attributes: Iterable[tuple[str, Any]]) -> bytes:
    """Each attribute as the field `tag` of a ``KeyValue``; repeats come from a cache.

    The cache holds the whole field (tag, length, message) by tag, name and
    value, so a repeated attribute (the agent, the model, a key's digest) is
    two dict lookups. Values of one type only share a name's cache (True is
    not 1): a name whose values change type is encoded every time.
    """
    by_name = _kv_cache.setdefault(tag, {})
    parts = []
    for key, value in attributes:
        values = by_name.get(key)
        if values is None:
            if len(by_name) >= _CACHE_LIMIT:
                by_name.clear()
            values = by_name[key] = ({}, value.__class__)
        cache, kind = values
        if value.__class__ is not kind or kind is list:  # a list is not hashable
            parts.append(_delimited(tag, _key_value(key, value)))
            continue
        encoded = cache.get(value)
        if encoded is None:
            encoded = _delimited(tag, _key_value(key, value))
            if len(cache) >= _VALUES_PER_NAME:
                cache.clear()  # a name of unique values (an event id) keeps few
            cache[value] = encoded
        parts.append(encoded)
    return b"".join(parts)


#: An attribute set as it waits for export: name, value, name, value, ...
Flat = tuple[Any, ...]

#: An ended span as it waits for export (`freeze`): `SpanRecord`'s fields, with
#: its attributes `Flat` and its events and links as ``(a, b, Flat)`` each.
Frozen = tuple[bytes, bytes, bytes, str, int, int, int, Flat,
               tuple[tuple[str, int, Flat], ...], tuple[tuple[bytes, bytes, Flat], ...],
               str | None]


def _flat(attributes: Mapping[str, Any]) -> Flat:
    return tuple(chain.from_iterable(attributes.items()))


def _pairs(flat: Flat) -> Iterable[tuple[str, Any]]:
    return zip(flat[::2], flat[1::2], strict=True)


def freeze(record: SpanRecord) -> Frozen:
    """An ended span as flat tuples of its values, for the buffer it waits in.

    Why not its bytes: spans wait in the buffer until the export thread
    encodes a batch of them. Encoded one by one as each ended, between the
    host's own work, a span took about 10 us of the activation's thread; in a
    batch, about 5 (docs/benchmarks.md, B14). Why not the record itself: it
    holds the tracer, and each span would keep a dict per attribute set
    alive in the buffer; a few flat tuples of values are the fewest objects
    the collector has to walk (B14 counted as many full collections as with
    bytes).
    """
    return (record.trace_id, record.span_id, record.parent_id, record.name, record.kind,
            record.start_ns, record.end_ns, _flat(record.attributes),
            _flat_all(record.events), _flat_all(record.links), record.error)


def _flat_all(entries: Iterable[tuple[Any, Any, Mapping[str, Any]]] | None,
              ) -> tuple[tuple[Any, Any, Flat], ...]:
    """Events or links, each ``(a, b, Flat)``; see `freeze`."""
    return tuple((first, second, _flat(attributes))
                 for first, second, attributes in entries or ())


def encode_span(record: SpanRecord) -> bytes:
    """A ``Span`` message of `record`; see `encode_frozen`."""
    return encode_frozen(freeze(record))


def encode_frozen(span: Frozen) -> bytes:
    """A ``Span`` message (trace.proto field numbers in the comments) of a `freeze`d span."""
    (trace_id, span_id, parent_id, name_, kind, start_ns, end_ns, attributes_, events, links,
     error) = span
    parts = [b"\x0a\x10", trace_id, b"\x12\x08", span_id]  # 1, 2
    if parent_id:
        parts += (b"\x22\x08", parent_id)  # 4
    parts += (_delimited(b"\x2a", name_.encode()),  # 5
              b"\x30", _varint(kind),  # 6
              b"\x39", _FIXED64.pack(start_ns),  # 7
              b"\x41", _FIXED64.pack(end_ns),  # 8
              _attributes(b"\x4a", _pairs(attributes_)))  # 9
    for name, time_ns, attributes in events:  # 11: Event{time 1, name 2, attributes 3}
        parts.append(_delimited(b"\x5a", b"\x09" + _FIXED64.pack(time_ns)
                                + _delimited(b"\x12", name.encode())
                                + _attributes(b"\x1a", _pairs(attributes))))
    for linked_trace, linked_span, attributes in links:  # 13: Link{trace 1, span 2, attrs 4}
        parts.append(_delimited(b"\x6a", b"\x0a\x10" + linked_trace + b"\x12\x08" + linked_span
                                + _attributes(b"\x22", _pairs(attributes))))
    if error is not None:  # 15: Status{message 2, code 3 = ERROR}
        parts.append(_delimited(b"\x7a", _delimited(b"\x12", error.encode()) + b"\x18\x02"))
    return b"".join(parts)


def encode_resource_scope(resource: Mapping[str, Any], scope: str) -> tuple[bytes, bytes]:
    """A ``Resource`` and an ``InstrumentationScope``, encoded once per tracer."""
    return (_attributes(b"\x0a", resource.items()),  # Resource.attributes = 1
            _delimited(b"\x0a", scope.encode()))  # InstrumentationScope.name = 1


def encode_request(resource_scope: tuple[bytes, bytes], spans: Iterable[bytes]) -> bytes:
    """An ``ExportTraceServiceRequest`` of one resource and one scope holding `spans`.

    Args:
        resource_scope: From `encode_resource_scope`.
        spans: Each from `encode_span`.
    """
    resource, scope = resource_scope
    scope_spans = _delimited(b"\x0a", scope) + b"".join(
        _delimited(b"\x12", span) for span in spans)  # ScopeSpans{scope 1, spans 2}
    resource_spans = _delimited(b"\x0a", resource) + _delimited(b"\x12", scope_spans)
    return _delimited(b"\x0a", resource_spans)  # ExportTraceServiceRequest.resource_spans = 1
