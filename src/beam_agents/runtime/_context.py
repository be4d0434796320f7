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
    from beam_agents.runtime._tool_calls import ToolCalls
    from beam_agents.runtime._waits import PendingWaits, WaitAnswer, WaitTimeout

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
        seq: This activation's number for the entity; each committed
            activation's is one more than the last.
        now_ms: The event time, the only clock an agent should use: a retry
            or a replay sees the same time, so it decides the same way.
        memory: Working memory; ``memory.longterm`` reaches the long-term store.
        model: The replay-cached model facade; ``model.run_tools`` runs a tool loop.
        tools: The agent's tools, each call recorded and never run twice
            (``tools.call(name, args)``, ``await tools.acall(...)``).
        answer: When this event answers a wait the agent recorded (its
            ``answers`` field names it): the answer, with the request.
        timed_out: When this activation delivers a wait's timeout: which one.
    """

    __slots__ = ("_intents", "_max_intent_bytes", "_traceparent", "_waits", "answer",
                 "entity_key", "event", "memory", "model", "now_ms", "seq", "timed_out", "tools")

    def __init__(self, *, event: AgentEvent, seq: int, memory: Memory, model: ModelFacade,
                 max_intent_bytes: int, tools: ToolCalls | None = None,
                 waits: PendingWaits | None = None, answer: WaitAnswer | None = None,
                 timed_out: WaitTimeout | None = None, traceparent: str = "") -> None:
        self.event = event
        self.entity_key: bytes = event.entity_key
        self.seq = seq
        self.now_ms: int = event.event_time_ms
        self.memory = memory
        self.model = model
        self.tools = tools
        self.answer = answer
        self.timed_out = timed_out
        self._waits = waits
        self._max_intent_bytes = max_intent_bytes
        # The activation's trace context: each intent carries it onward, so
        # whatever acts on the intent joins the producer's trace.
        self._traceparent = traceparent
        self._intents: list[Intent] = []

    @property
    def payload(self) -> bytes:
        """The event's payload bytes."""
        return self.event.payload

    def payload_json(self) -> Any:
        """The event's payload parsed as JSON."""
        return json.loads(self.event.payload)

    def emit(self, kind: str, payload: object = b"") -> None:
        """Stage an intent; it is published only if the activation commits.

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
                                    event_id=self.event.event_id,
                                    traceparent=self._traceparent))

    def wait_for(self, name: str, *, deadline_ms: int, request: object = b"") -> None:
        """Wait for an answer named `name`, until `deadline_ms` (event time); never blocks.

        The request goes out as a ``wait`` intent (``{"name", "deadline_ms",
        "request"}``) for whoever answers; an input event whose ``answers`` is
        `name` comes back as ``ctx.answer``, or, past the deadline, the
        timeout as ``ctx.timed_out``. Both only if this activation commits.

        Raises:
            ValueError: The name is empty or the deadline is not an int.
            WaitError: A wait of that name is pending, or the request is too large.
            TooManyWaitsError: ``--max_pending_waits`` waits are pending.
        """
        if self._waits is None:
            raise RuntimeError("wait_for needs an activation's waits (ctx in an agent)")
        data = encode_payload(request)
        self._waits.add(entity_key=self.entity_key, name=name, deadline_ms=deadline_ms,
                        request=data, seq=self.seq)
        body = {"name": name, "deadline_ms": deadline_ms}
        try:
            body["request"] = json.loads(data) if data else None
        except ValueError:
            body["request"] = data.decode("utf-8", "replace")
        self.emit("wait", body)

    @property
    def pending_waits(self) -> tuple[str, ...]:
        """The names of the entity's pending waits, as this activation leaves them."""
        return () if self._waits is None else self._waits.names()

    @property
    def intents(self) -> tuple[Intent, ...]:
        """Intents staged so far, in emission order."""
        return tuple(self._intents)
