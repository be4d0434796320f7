"""The check both input-decoder targets share: `decode_input`, called through `InputDecoder`.

Imported by the targets inside ``atheris.instrument_imports()``, so the
library modules it pulls in are instrumented.
"""

from __future__ import annotations

from beam_agents._proto.error_record_pb2 import ErrorRecord
from beam_agents._proto.event_pb2 import AgentEvent
from beam_agents.metrics import RecordingMetrics
from beam_agents.runtime._codec import error_from_json, error_to_json, event_to_json
from beam_agents.runtime._errors import decode_input
from beam_agents.runtime._keyed import InputDecoder
from fuzz._harness import check

__all__ = ["MAX_EVENT_BYTES", "check_decode", "known_fields"]

#: Half the longest input the runner lets libFuzzer generate, so some inputs
#: take the oversize path of the decoder (a DECODE record with a prefix).
MAX_EVENT_BYTES = 2048
_NAMESPACE = "beam_agents.runtime"


def check_decode(data: bytes, input_format: str) -> None:
    """Decode `data` as a host does; an exception out of it is the bug this target hunts.

    Then check what came out: a DECODE record that carries the element and
    survives its own JSON line, or an event that survives the JSON line a
    redrive writes and its proto serialization.
    """
    metrics = RecordingMetrics()
    # InputDecoder calls decode_input; one call covers both (a DECODE record
    # formats a traceback, the most expensive step of the whole check).
    decoded = InputDecoder(input_format, metrics, max_event_bytes=MAX_EVENT_BYTES)(data)
    check(metrics.get(_NAMESPACE, "events") == 1, "events is not counted once")
    if isinstance(decoded, ErrorRecord):
        check(metrics.get(_NAMESPACE, "errors_decode") == 1, "errors_decode is not counted")
        check(decoded.stage == ErrorRecord.STAGE_DECODE, "a decode failure of another stage")
        check(decoded.error_type == "beam_agents.errors.EventDecodeError",
              f"a decode failure typed {decoded.error_type}")
        check(data.startswith(decoded.event) and (
            decoded.event == data or len(data) > MAX_EVENT_BYTES),
            "the record does not carry the element")
        check(error_from_json(error_to_json(decoded)) == decoded,
              "the dead-letter line does not read back as the record")
        return
    check(isinstance(decoded, AgentEvent), f"decoded to a {type(decoded).__name__}")
    check(metrics.get(_NAMESPACE, "errors_decode") == 0, "an event counted as an error")
    check(decode_input(event_to_json(decoded), "json") == known_fields(decoded),
          "the event's JSON line decodes to another event")
    check(decode_input(decoded.SerializeToString(), "proto") == decoded,
          "the event's serialization decodes to another event")


def known_fields(event: AgentEvent) -> AgentEvent:
    """A copy of `event` without the unknown fields a newer producer may have set.

    The proto decoder keeps them, for forward compatibility; a JSON line
    has no place for them, so the JSON round-trips compare without them.
    """
    copy = AgentEvent()
    copy.CopyFrom(event)
    copy.DiscardUnknownFields()
    return copy
