"""The JSON forms of events, intents and error records, shared by every host.

Files and Pub/Sub carry JSON so people and tools can read them. Bytes
fields are written as text when they are valid UTF-8 (``"payload"``) and as
base64 otherwise (``"payload_b64"``), so the mapping is lossless both ways.
Encoding is canonical (sorted keys, compact), so equal records are
byte-identical on every runner.

Input lines look like::

    {"entity_key": "user-7", "event_id": "e-1", "event_time_ms": 1700000000000,
     "payload": {"text": "hi"}, "attributes": {"channel": "web"}}

``payload`` may be a string (taken as UTF-8) or any JSON value (encoded
canonically); ``payload_b64`` and ``entity_key_b64`` carry raw bytes. A
``"traceparent"`` (W3C trace context) makes the activation a child of the
producer's span; it travels as the event's ``traceparent`` attribute, where a
Pub/Sub attribute or a Kafka header of that name puts it too (`with_traceparent`).
Intents and error records carry the activation's ``traceparent`` onward.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from google.protobuf.message import DecodeError

from beam_agents._canonical import canonical_json
from beam_agents._proto.error_record_pb2 import ErrorRecord
from beam_agents._proto.event_pb2 import AgentEvent
from beam_agents._proto.intent_pb2 import Intent
from beam_agents.errors import EventDecodeError
from beam_agents.tracing import TRACEPARENT

__all__ = [
    "decode_event",
    "decode_event_json",
    "decode_event_proto",
    "error_from_json",
    "error_to_json",
    "event_to_json",
    "intent_to_json",
    "with_traceparent",
]

_EVENT_FIELDS = {"entity_key", "entity_key_b64", "event_id", "event_time_ms", "payload",
                 "payload_b64", "attributes", "answers", "wait_timed_out",
                 "traceparent"}

#: Most a traceparent may take (W3C version 00 is 55 characters; later versions may add).
_TRACEPARENT_MAX = 256


def _put_bytes(out: dict[str, Any], name: str, value: bytes) -> None:
    try:
        out[name] = value.decode()
    except UnicodeDecodeError:
        out[f"{name}_b64"] = base64.b64encode(value).decode()


def _get_bytes(doc: dict[str, Any], name: str, *, required: bool,
               error: type[EventDecodeError] = EventDecodeError) -> bytes:
    if name in doc and f"{name}_b64" in doc:
        raise error(f"give {name!r} or {name + '_b64'!r}, not both", field=name)
    if f"{name}_b64" in doc:
        raw = doc[f"{name}_b64"]
        if not isinstance(raw, str):
            raise error(f"{name}_b64 must be a base64 string", field=f"{name}_b64")
        try:
            return base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise error(f"{name}_b64 is not valid base64: {exc}", field=f"{name}_b64") from exc
    if name not in doc:
        if required:
            raise error(f"missing required field {name!r}", field=name)
        return b""
    value = doc[name]
    if isinstance(value, str):
        try:
            return value.encode()
        except UnicodeEncodeError as exc:  # a lone surrogate, from a \ud800 escape
            raise error(f"{name} is not valid Unicode: {exc}", field=name) from exc
    if name == "payload":
        try:
            return canonical_json(value)
        except ValueError as exc:  # NaN/Infinity
            raise error(f"payload is not canonical JSON: {exc}", field="payload") from exc
    raise error(f"{name} must be a string, got {type(value).__name__}", field=name)


def decode_event_json(line: bytes | str) -> AgentEvent:
    """Parse one JSON input line.

    Raises:
        EventDecodeError: the line is not JSON, a field is missing, unknown or
            of the wrong type; `field` names it.
    """
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise EventDecodeError(
                f"input is not UTF-8: byte 0x{exc.object[exc.start]:02x} at offset {exc.start} "
                f"({exc.reason})") from exc
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
        raise EventDecodeError(f"input is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise EventDecodeError(f"input must be a JSON object, got {type(doc).__name__}")
    unknown = sorted(set(doc) - _EVENT_FIELDS)
    if unknown:
        raise EventDecodeError(f"unknown event field(s): {', '.join(unknown)}", field=unknown[0])
    entity_key = _get_bytes(doc, "entity_key", required=True, error=EventDecodeError)
    event_time = doc.get("event_time_ms")
    if isinstance(event_time, bool) or not isinstance(event_time, int) or event_time < 0:
        raise EventDecodeError(f"event_time_ms must be a non-negative int, got {event_time!r}",
                               field="event_time_ms")
    event_id = doc.get("event_id", "")
    if not isinstance(event_id, str):
        raise EventDecodeError("event_id must be a string", field="event_id")
    attributes = doc.get("attributes", {})
    if not isinstance(attributes, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in attributes.items()):
        raise EventDecodeError("attributes must map strings to strings", field="attributes")
    if TRACEPARENT in doc:
        traceparent = doc[TRACEPARENT]
        if not isinstance(traceparent, str) or len(traceparent) > _TRACEPARENT_MAX:
            raise EventDecodeError(f"traceparent must be a string of at most {_TRACEPARENT_MAX} "
                                   "characters (W3C trace context)", field=TRACEPARENT)
        if attributes.get(TRACEPARENT, traceparent) != traceparent:
            raise EventDecodeError("traceparent and attributes.traceparent differ; give one",
                                   field=TRACEPARENT)
        attributes = {**attributes, TRACEPARENT: traceparent}
    payload = _get_bytes(doc, "payload", required=False, error=EventDecodeError)
    waits: dict[str, str] = {}
    for name in ("answers", "wait_timed_out"):
        value = doc.get(name, "")
        if not isinstance(value, str):
            raise EventDecodeError(f"{name} must be the name of a wait, a string", field=name)
        waits[name] = value
    try:
        event = AgentEvent(entity_key=entity_key, event_id=event_id, event_time_ms=event_time,
                           payload=payload, attributes=attributes, **waits)
    except ValueError as exc:  # an int64 overflow, or a lone surrogate in a string field
        raise EventDecodeError(f"input does not fit an AgentEvent: {exc}") from exc
    return _checked(event)


def decode_event_proto(data: bytes) -> AgentEvent:
    """Parse a serialized AgentEvent (TFRecord files, Pub/Sub with input_format=proto)."""
    try:
        event = AgentEvent.FromString(data)
    except DecodeError as exc:
        raise EventDecodeError(f"input is not a serialized AgentEvent: {exc}") from exc
    return _checked(event)


def decode_event(data: bytes, input_format: str) -> AgentEvent:
    """Decode with the configured format, ``"json"`` or ``"proto"``."""
    if input_format == "proto":
        return decode_event_proto(data)
    return decode_event_json(data)


def with_traceparent(event: AgentEvent, traceparent: str | bytes | None) -> AgentEvent:
    """Put a transport's trace context (a Pub/Sub attribute, a Kafka header) on `event`.

    One the event already carries (a JSON line's own field) wins; a value
    that is not text of at most 256 characters is ignored, as W3C trace
    context asks of a malformed header: the event still runs, untraced by it.
    """
    if isinstance(traceparent, bytes):
        try:
            traceparent = traceparent.decode("ascii")
        except UnicodeDecodeError:
            return event
    if traceparent and len(traceparent) <= _TRACEPARENT_MAX \
            and TRACEPARENT not in event.attributes:
        event.attributes[TRACEPARENT] = traceparent
    return event


def _checked(event: AgentEvent) -> AgentEvent:
    if not event.entity_key:
        raise EventDecodeError("entity_key must be non-empty", field="entity_key")
    if event.event_time_ms < 0:
        raise EventDecodeError("event_time_ms must be non-negative", field="event_time_ms")
    return event


def event_to_json(event: AgentEvent) -> bytes:
    """The JSON input line that decodes back to `event` (used to redrive dead letters)."""
    out: dict[str, Any] = {"event_id": event.event_id, "event_time_ms": event.event_time_ms}
    _put_bytes(out, "entity_key", event.entity_key)
    structured = _structured(event.payload)
    if structured is not None:
        out["payload"] = structured
    else:
        _put_bytes(out, "payload", event.payload)
    if event.attributes:
        out["attributes"] = dict(event.attributes)
    if event.answers:
        out["answers"] = event.answers
    if event.wait_timed_out:
        out["wait_timed_out"] = event.wait_timed_out
    return canonical_json(out)


def _structured(payload: bytes) -> dict[str, Any] | list[Any] | None:
    """The JSON object or array a payload was decoded from, when writing it back is lossless.

    A line's object payload is kept as its canonical JSON bytes, so writing
    those bytes back as an object decodes to the very same bytes; a text
    payload that merely looks like JSON (spaces, other key order) stays text.
    """
    if payload[:1] not in (b"{", b"["):
        return None
    try:
        value = json.loads(payload)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict | list):
        return None
    try:
        return value if canonical_json(value) == payload else None
    except (ValueError, TypeError):
        return None


def intent_to_json(intent: Intent) -> bytes:
    """One intent as a canonical JSON line."""
    out: dict[str, Any] = {"seq": intent.seq, "index": intent.index, "kind": intent.kind,
                           "event_id": intent.event_id}
    if intent.traceparent:
        out[TRACEPARENT] = intent.traceparent
    _put_bytes(out, "entity_key", intent.entity_key)
    _put_bytes(out, "payload", intent.payload)
    return canonical_json(out)


def error_to_json(record: ErrorRecord) -> bytes:
    """One error record as a canonical JSON line; the stage is its enum name."""
    out: dict[str, Any] = {
        "stage": ErrorRecord.Stage.Name(record.stage),
        "error_type": record.error_type, "message": record.message,
        "traceback": record.traceback, "retriable": record.retriable, "seq": record.seq,
        "event_id": record.event_id,
    }
    if record.attempts:  # absent in records older than the field, and in DECODE records
        out["attempts"] = record.attempts
    if record.event_bytes:  # only for an element cut to a prefix (over --max_event_bytes)
        out["event_bytes"] = record.event_bytes
    if record.event_sha256:  # written whenever read, so every line round-trips
        out["event_sha256"] = record.event_sha256.hex()
    if record.tokens_used:  # only in BUDGET records
        out["tokens_used"] = record.tokens_used
    if record.traceparent:  # the failed attempt's trace context
        out[TRACEPARENT] = record.traceparent
    _put_bytes(out, "entity_key", record.entity_key)
    _put_bytes(out, "event", record.event)
    return canonical_json(out)


def error_from_json(line: bytes | str) -> ErrorRecord:
    """Parse a line written by `error_to_json`.

    Raises:
        EventDecodeError: the line is not an error record.
    """
    try:
        doc = json.loads(line)
        stage = ErrorRecord.Stage.Value(doc["stage"])
        return ErrorRecord(
            stage=stage,  # type: ignore[arg-type]
            error_type=doc.get("error_type", ""), message=doc.get("message", ""),
            traceback=doc.get("traceback", ""), retriable=bool(doc.get("retriable", False)),
            seq=int(doc.get("seq", 0)), event_id=doc.get("event_id", ""),
            attempts=int(doc.get("attempts", 0)),
            event_bytes=int(doc.get("event_bytes", 0)),
            event_sha256=bytes.fromhex(doc.get("event_sha256", "")),
            tokens_used=int(doc.get("tokens_used", 0)),
            traceparent=str(doc.get(TRACEPARENT, "")),
            entity_key=_get_bytes(doc, "entity_key", required=False, error=EventDecodeError),
            event=_get_bytes(doc, "event", required=False, error=EventDecodeError),
        )
    except EventDecodeError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError,
            RecursionError) as exc:  # OverflowError: int(1e999); RecursionError: nesting
        raise EventDecodeError(f"not an error record line: {exc}") from exc
