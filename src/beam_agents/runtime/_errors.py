"""From a failed activation to one ErrorRecord: the dead letter (invariants 1 and 8)."""

from __future__ import annotations

import traceback

from beam_agents._proto.error_record_pb2 import ErrorRecord
from beam_agents._proto.event_pb2 import AgentEvent
from beam_agents.errors import (
    ActivationTimeoutError,
    BeamAgentsError,
    ConfigError,
    EventDecodeError,
    IntentTooLargeError,
    JournalCorruptError,
    JournalUnavailable,
    MemoryOverflow,
    ModelError,
    StateError,
    StoreError,
    StoreLimitError,
)
from beam_agents.runtime._codec import decode_event

__all__ = ["ErrorRecord", "decode_input", "error_record", "stage_of"]

Stage = ErrorRecord.Stage


#: Exception type -> stage, first match wins; order matters where the tree
#: overlaps (RingCorruptError is a StateError; StoreError outside the flush
#: can only come from a read, which is all the store serves mid-activation).
_STAGES: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], int], ...] = (
    (StateError, ErrorRecord.STAGE_STATE_CORRUPT),
    (ActivationTimeoutError, ErrorRecord.STAGE_TIMEOUT),
    (MemoryOverflow, ErrorRecord.STAGE_MEMORY_OVERFLOW),
    (ModelError, ErrorRecord.STAGE_MODEL),
    ((JournalUnavailable, JournalCorruptError), ErrorRecord.STAGE_JOURNAL),
    # A save that a backend's limits refuse is refused where it stages, before
    # the commit tail; it belongs to the flush it could never be part of.
    (StoreLimitError, ErrorRecord.STAGE_LONGTERM_FLUSH),
    (StoreError, ErrorRecord.STAGE_LONGTERM_READ),
    (EventDecodeError, ErrorRecord.STAGE_DECODE),
    (ConfigError, ErrorRecord.STAGE_CONFIG),
    (IntentTooLargeError, ErrorRecord.STAGE_OUTPUT),
)


def stage_of(exc: BaseException, *, flushing: bool = False) -> int:
    """The pipeline stage an exception belongs to; the dead-letter topic is triaged by it."""
    if flushing:
        return ErrorRecord.STAGE_LONGTERM_FLUSH
    for kind, stage in _STAGES:
        if isinstance(exc, kind):
            return stage
    return ErrorRecord.STAGE_AGENT


def _bounded_traceback(exc: BaseException, limit: int) -> str:
    text = "".join(traceback.format_exception(exc))
    if len(text) <= limit:
        return text
    # Keep the end: the innermost frames and the message say what broke.
    return "…" + text[len(text) - limit + 1:]


def error_record(exc: BaseException, *, stage: int, entity_key: bytes, seq: int, event: bytes,
                 event_id: str, traceback_bytes: int) -> ErrorRecord:
    """Describe `exc` as a dead letter that carries the original event for redrive."""
    kind = type(exc)
    return ErrorRecord(
        stage=stage,  # type: ignore[arg-type]
        error_type=f"{kind.__module__}.{kind.__qualname__}",
        message=str(exc) or kind.__name__,
        traceback=_bounded_traceback(exc, traceback_bytes),
        retriable=isinstance(exc, BeamAgentsError) and exc.retriable,
        entity_key=entity_key,
        seq=seq,
        event=event,
        event_id=event_id,
    )


def decode_input(data: bytes, input_format: str) -> AgentEvent | ErrorRecord:
    """Decode one input element, or describe why not as a DECODE dead letter (invariant 8).

    Every host's first step, so an undecodable element yields the same record
    on every engine; the record carries the raw element for repair and redrive.
    """
    try:
        return decode_event(data, input_format)
    except EventDecodeError as exc:
        return error_record(exc, stage=ErrorRecord.STAGE_DECODE, entity_key=b"", seq=0,
                            event=data, event_id="", traceback_bytes=0)
