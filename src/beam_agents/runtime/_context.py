"""AgentContext: everything an agent sees during one activation."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from beam_agents._canonical import canonical_json
from beam_agents._proto.intent_pb2 import Intent
from beam_agents.errors import IntentTooLargeError

if TYPE_CHECKING:
    from beam_agents._proto.event_pb2 import AgentEvent
    from beam_agents.memory import Memory
    from beam_agents.model import ModelFacade

__all__ = ["AgentContext", "encode_payload"]


def encode_payload(payload: object) -> bytes:
    """Bytes pass through, str is UTF-8, anything else is canonical JSON.

    Canonical JSON (sorted keys, compact, no NaN) makes equal payloads
    byte-identical however their dicts were built, which replay determinism
    (invariant 3) needs.

    Raises:
        TypeError: the payload is not JSON-encodable.
        ValueError: it holds NaN or Infinity.
    """
    if isinstance(payload, bytes):
        return payload
    if isinstance(payload, bytearray | memoryview):
        return bytes(payload)
    if isinstance(payload, str):
        return payload.encode()
    return canonical_json(payload)


class AgentContext:
    """The activation as the agent sees it: the event, its memory, its model, its outputs.

    Attributes:
        event: The input `AgentEvent`.
        entity_key: The entity this activation runs for.
        seq: This activation's number; committed seqs grow by one (invariant 6).
        now_ms: The event time, the only clock an agent should use (invariant 2).
        memory: Working memory; ``memory.longterm`` reaches the long-term store.
        model: The replay-cached model facade.
    """

    __slots__ = ("_intents", "_max_intent_bytes", "entity_key", "event", "memory", "model",
                 "now_ms", "seq")

    def __init__(self, *, event: AgentEvent, seq: int, memory: Memory, model: ModelFacade,
                 max_intent_bytes: int) -> None:
        self.event = event
        self.entity_key: bytes = event.entity_key
        self.seq = seq
        self.now_ms: int = event.event_time_ms
        self.memory = memory
        self.model = model
        self._max_intent_bytes = max_intent_bytes
        self._intents: list[Intent] = []

    @property
    def payload(self) -> bytes:
        """The event's payload bytes."""
        return self.event.payload

    def payload_json(self) -> Any:
        """The event's payload parsed as JSON."""
        return json.loads(self.event.payload)

    def emit(self, kind: str, payload: object = b"") -> None:
        """Stage an intent; it is published only if the activation commits (invariant 1).

        Raises:
            ValueError: `kind` is empty, or the payload holds NaN/Infinity.
            TypeError: `kind` is not str, or the payload is not encodable.
            IntentTooLargeError: the encoded payload exceeds the configured bound.
        """
        if not isinstance(kind, str):
            raise TypeError(f"intent kind must be str, got {type(kind).__name__}")
        if not kind:
            raise ValueError("intent kind must be non-empty")
        data = encode_payload(payload)
        if len(data) > self._max_intent_bytes:
            raise IntentTooLargeError(kind=kind, size=len(data), limit=self._max_intent_bytes)
        self._intents.append(Intent(entity_key=self.entity_key, seq=self.seq,
                                    index=len(self._intents), kind=kind, payload=data,
                                    event_id=self.event.event_id))

    @property
    def intents(self) -> tuple[Intent, ...]:
        """Intents staged so far, in emission order."""
        return tuple(self._intents)
