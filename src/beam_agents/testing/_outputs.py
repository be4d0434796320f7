"""What a test reads back: intents and dead letters as Python values, not wire bytes."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from beam_agents._proto.error_record_pb2 import ErrorRecord
from beam_agents._proto.event_pb2 import AgentEvent
from beam_agents._proto.intent_pb2 import Intent
from beam_agents.hosting import error_from_json

__all__ = ["DeadLetter", "Emitted", "decode_line", "decode_payload"]


def decode_payload(data: bytes) -> Any:
    """A payload as a Python value: parsed JSON when it is JSON, else text, else the bytes.

    An agent that emits a dict, a list or a number gets it back equal; one
    that emits a str gets the str back (unless the str itself is JSON, such
    as ``"42"``, which reads as 42); bytes that are not UTF-8 stay bytes.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data
    try:
        return json.loads(text)
    except ValueError:
        return text


def _key(entity_key: bytes) -> str:
    return entity_key.decode("utf-8", "backslashreplace")


def _field_bytes(doc: dict[str, Any], name: str) -> bytes:
    """A bytes field of a JSON line: text when it was UTF-8, else ``<name>_b64``."""
    if f"{name}_b64" in doc:
        return base64.b64decode(doc[f"{name}_b64"])
    return str(doc.get(name, "")).encode("utf-8")


def decode_line(channel: str, line: bytes) -> Emitted | DeadLetter:
    """A line of the intents output or the errors output, decoded."""
    return DeadLetter.of(error_from_json(line)) if channel == "errors" else Emitted.from_line(line)


@dataclass(frozen=True, slots=True, kw_only=True)
class Emitted:
    """One intent an agent emitted with ``ctx.emit(kind, payload)``, as the test reads it.

    Attributes:
        kind: The intent's kind, e.g. ``"reply"``.
        payload: What the agent emitted, decoded (see `decode_payload`).
        entity_key: The entity, as text.
        event_id: The id of the event whose activation emitted it.
        seq: That activation's sequence number for the entity, from 1.
        index: Its position among that activation's intents, from 0.
    """

    kind: str
    payload: Any
    entity_key: str
    event_id: str
    seq: int
    index: int

    @classmethod
    def of(cls, intent: Intent) -> Emitted:
        """Decode a wire `Intent`."""
        return cls(kind=intent.kind, payload=decode_payload(intent.payload),
                   entity_key=_key(intent.entity_key), event_id=intent.event_id,
                   seq=intent.seq, index=intent.index)

    @classmethod
    def from_line(cls, line: bytes | str) -> Emitted:
        """Decode a line of the intents output (``beam-agents run --output_path``)."""
        doc = json.loads(line)
        return cls(kind=doc["kind"], payload=decode_payload(_field_bytes(doc, "payload")),
                   entity_key=_key(_field_bytes(doc, "entity_key")),
                   event_id=doc.get("event_id", ""), seq=doc["seq"], index=doc["index"])


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetter:
    """One event that ended on the errors output, as the test reads it.

    Attributes:
        stage: Where it failed, by name: ``"AGENT"`` (the agent raised),
            ``"MODEL"``, ``"TOOL"``, ``"DECODE"``, ``"TIMEOUT"``, ``"BUDGET"``...
        error_type: The exception's qualified class name, e.g. ``"builtins.ValueError"``.
        message: The exception's message.
        entity_key: The entity, as text ("" when the input did not decode).
        event_id: The failed event's id.
        payload: The failed event's payload, decoded (see `decode_payload`);
            None when the input did not decode.
        retriable: Whether a retry might have succeeded (it failed on its
            last attempt).
        attempts: How many attempts were made.
        seq: The sequence number the activation ran with.
    """

    stage: str
    error_type: str
    message: str
    entity_key: str
    event_id: str
    payload: Any
    retriable: bool
    attempts: int
    seq: int

    @classmethod
    def of(cls, record: ErrorRecord) -> DeadLetter:
        """Decode a wire `ErrorRecord`."""
        payload: Any = None
        if record.stage != ErrorRecord.STAGE_DECODE and record.event:
            payload = decode_payload(AgentEvent.FromString(record.event).payload)
        return cls(stage=ErrorRecord.Stage.Name(record.stage).removeprefix("STAGE_"),
                   error_type=record.error_type, message=record.message,
                   entity_key=_key(record.entity_key), event_id=record.event_id,
                   payload=payload, retriable=record.retriable, attempts=record.attempts,
                   seq=record.seq)
