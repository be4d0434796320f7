"""Event builders: the `AgentEvent` a pipeline would decode, built in one call.

`make_event` writes the JSON input line for its arguments and decodes it with
`decode_event_json`, the decoder the pipelines use, so a built event is
byte-for-byte what the pipeline would hand the activation core for that line:
a str payload is its UTF-8 bytes, bytes pass through, and any other JSON value
is encoded canonically (sorted keys, compact, NaN rejected).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from typing import Any

from beam_agents.errors import EventDecodeError
from beam_agents.hosting import decode_event_json
from beam_agents.runtime import AgentEvent

__all__ = ["DEFAULT_EVENT_TIME_MS", "make_event", "make_events"]

#: The event time `make_event` uses when none is given (2023-11-14T22:13:20Z).
#: Fixed, not the wall clock, so tests are deterministic (invariant 2).
DEFAULT_EVENT_TIME_MS = 1_700_000_000_000


def _text(name: str, value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{name} is not encodable as UTF-8: {exc}") from None
    return value


def _put_bytes(doc: dict[str, Any], name: str, value: bytes) -> None:
    """Write `value` as the codec reads it: text when it is UTF-8, else ``<name>_b64``."""
    try:
        doc[name] = value.decode("utf-8")
    except UnicodeDecodeError:
        doc[f"{name}_b64"] = base64.b64encode(value).decode("ascii")


def _check_time(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int (milliseconds), got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


def make_event(entity_key: str | bytes, payload: object = b"", *, event_id: str | None = None,
               event_time_ms: int = DEFAULT_EVENT_TIME_MS,
               attributes: Mapping[str, str] | None = None) -> AgentEvent:
    """Build the event the pipeline decodes from the equivalent JSON input line.

    Args:
        entity_key: The entity; a str is taken as UTF-8. Must be non-empty.
        payload: Bytes (kept as they are), a str (UTF-8), or any JSON value
            (dicts, lists, numbers, booleans, None), encoded canonically.
        event_id: The event's id; None gives ``""``, as a line without one does.
        event_time_ms: Event time in milliseconds, >= 0; it is the activation's
            ``now_ms``. Defaults to `DEFAULT_EVENT_TIME_MS`.
        attributes: String-to-string attributes.

    Returns:
        The decoded `AgentEvent`, equal to ``decode_event_json(line)`` for the
        same line.

    Raises:
        TypeError: An argument has the wrong type, or `payload` is not JSON
            data; the message names the argument.
        ValueError: `entity_key` is empty, `event_time_ms` is negative, a
            string is not encodable as UTF-8, or `payload` holds NaN or
            Infinity.
    """
    return _build(entity_key, payload, event_id=event_id, event_time_ms=event_time_ms,
                  attributes=attributes, payload_name="payload")


def _build(entity_key: object, payload: object, *, event_id: object, event_time_ms: object,
           attributes: object, payload_name: str) -> AgentEvent:
    doc: dict[str, Any] = {}
    if isinstance(entity_key, str):
        doc["entity_key"] = _text("entity_key", entity_key)
    elif isinstance(entity_key, bytes | bytearray | memoryview):
        _put_bytes(doc, "entity_key", bytes(entity_key))
    else:
        raise TypeError(f"entity_key must be str or bytes, got {type(entity_key).__name__}")
    if not entity_key:
        raise ValueError("entity_key must be non-empty")

    if event_id is not None:
        if not isinstance(event_id, str):
            raise TypeError(f"event_id must be a str or None, got {type(event_id).__name__}")
        doc["event_id"] = _text("event_id", event_id)
    doc["event_time_ms"] = _check_time("event_time_ms", event_time_ms)

    if attributes is not None:
        if not isinstance(attributes, Mapping):
            raise TypeError(f"attributes must be a mapping of str to str, "
                            f"got {type(attributes).__name__}")
        for key, value in attributes.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"attributes must map str to str, got {key!r}: {value!r}")
            _text("attributes", key)
            _text(f"attributes[{key!r}]", value)
        doc["attributes"] = dict(attributes)

    if isinstance(payload, bytes | bytearray | memoryview):
        _put_bytes(doc, "payload", bytes(payload))
    elif isinstance(payload, str):
        doc["payload"] = _text(payload_name, payload)
    else:
        # A JSON value is left for the decoder to canonicalise, exactly as the
        # pipeline does with the same line.
        doc["payload"] = payload

    # Only the payload can fail to serialise: every other field was checked above.
    try:
        line = json.dumps(doc, ensure_ascii=False, allow_nan=False)
    except TypeError as exc:
        raise TypeError(f"{payload_name} must be bytes, str or JSON data: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"{payload_name} is not canonical JSON (NaN or Infinity): "
                         f"{exc}") from None
    try:
        return decode_event_json(line)
    except EventDecodeError as exc:
        if exc.field != "payload":
            raise
        # E.g. a lone surrogate nested inside a JSON payload.
        raise ValueError(f"{payload_name} is not valid event data: {exc}") from None


def make_events(entity_key: str | bytes, payloads: Iterable[object], *,
                start_ms: int = DEFAULT_EVENT_TIME_MS, step_ms: int = 1_000,
                attributes: Mapping[str, str] | None = None) -> tuple[AgentEvent, ...]:
    """Build one event per payload for one entity, in order, with increasing times.

    Event ``i`` (from 1) has id ``"e-<i>"`` and time ``start_ms + (i - 1) * step_ms``,
    so a sequence of activations fed these events sees ``now_ms`` grow.

    Args:
        entity_key: The entity every event belongs to (see `make_event`).
        payloads: One payload per event (see `make_event`); a list, not a
            single str or bytes.
        start_ms: The first event's time, >= 0.
        step_ms: The gap between consecutive events, >= 1.
        attributes: Attributes given to every event.

    Raises:
        TypeError: `payloads` is a str, bytes or not iterable, or another
            argument has the wrong type.
        ValueError: `start_ms` < 0 or `step_ms` < 1, or a payload is invalid
            (the message names its index, ``payloads[2]``).
    """
    if isinstance(payloads, str | bytes | bytearray | memoryview) or not isinstance(
            payloads, Iterable):
        raise TypeError(f"payloads must be an iterable of payloads (e.g. a list), "
                        f"got {type(payloads).__name__}")
    _check_time("start_ms", start_ms)
    if isinstance(step_ms, bool) or not isinstance(step_ms, int):
        raise TypeError(f"step_ms must be an int (milliseconds), got {type(step_ms).__name__}")
    if step_ms < 1:
        raise ValueError(f"step_ms must be >= 1 so event times increase, got {step_ms}")
    return tuple(
        _build(entity_key, payload, event_id=f"e-{index + 1}",
               event_time_ms=start_ms + index * step_ms, attributes=attributes,
               payload_name=f"payloads[{index}]")
        for index, payload in enumerate(payloads))
