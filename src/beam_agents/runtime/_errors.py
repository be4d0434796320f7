"""From a failed activation to one ErrorRecord: the dead letter (invariants 1 and 8)."""

from __future__ import annotations

import traceback

from beam_agents._proto.error_record_pb2 import ErrorRecord
from beam_agents._proto.event_pb2 import AgentEvent
from beam_agents.errors import (
    ActivationTimeoutError,
    BacklogFullError,
    BeamAgentsError,
    BudgetExceededError,
    ConfigError,
    EventDecodeError,
    IntentTooLargeError,
    JournalCorruptError,
    JournalUnavailable,
    LateEventError,
    MemoryOverflow,
    ModelError,
    ScopeViolation,
    StateError,
    StoreError,
    StoreLimitError,
    ToolError,
    WaitError,
)
from beam_agents.runtime._codec import decode_event
from beam_agents.runtime._lines import Oversize

__all__ = ["ErrorRecord", "decode_input", "error_record", "stage_of"]

Stage = ErrorRecord.Stage


#: Exception type -> stage, first match wins; order matters where the tree
#: overlaps (RingCorruptError is a StateError; StoreError outside the flush
#: can only come from a read, which is all the store serves mid-activation).
_STAGES: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], int], ...] = (
    (StateError, ErrorRecord.STAGE_STATE_CORRUPT),
    (ActivationTimeoutError, ErrorRecord.STAGE_TIMEOUT),
    (BudgetExceededError, ErrorRecord.STAGE_BUDGET),
    (BacklogFullError, ErrorRecord.STAGE_BACKLOG),
    (LateEventError, ErrorRecord.STAGE_LATE),
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
    (ToolError, ErrorRecord.STAGE_TOOL),
    (WaitError, ErrorRecord.STAGE_WAIT),
)


def stage_of(exc: BaseException, *, flushing: bool = False) -> int:
    """The pipeline stage an exception belongs to; the dead-letter topic is triaged by it."""
    if isinstance(exc, ScopeViolation):
        # A tenant boundary crossed is never a store failure, wherever it is
        # caught, the flush included (invariant 7).
        return ErrorRecord.STAGE_SCOPE_VIOLATION
    if flushing:
        return ErrorRecord.STAGE_LONGTERM_FLUSH
    for kind, stage in _STAGES:
        if isinstance(exc, kind):
            return stage
    return ErrorRecord.STAGE_AGENT


def _utf8(text: str) -> str:
    # A message may quote input holding a lone surrogate (a JSON \ud800 escape),
    # which a proto string cannot hold; the record keeps its escape instead.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _bounded_traceback(exc: BaseException, limit: int) -> str:
    if limit <= 0:  # a DECODE record: no traceback, and none formatted to be thrown away
        return ""
    text = _utf8("".join(traceback.format_exception(exc)))  # escaped first, then bounded
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
        message=_utf8(str(exc) or kind.__name__),
        traceback=_bounded_traceback(exc, traceback_bytes),
        retriable=isinstance(exc, BeamAgentsError) and exc.retriable,
        entity_key=entity_key,
        seq=seq,
        event=event,
        event_id=event_id,
        tokens_used=exc.tokens_used if isinstance(exc, BudgetExceededError) else 0,
    )


def decode_input(data: bytes | Oversize, input_format: str, *,
                 max_event_bytes: int | None = None) -> AgentEvent | ErrorRecord:
    """Decode one input element, or describe why not as a DECODE dead letter (invariant 8).

    Every host's first step, so an undecodable element yields the same record
    on every engine; the record carries the raw element for repair and redrive.
    An element over `max_event_bytes` (or one a bounded reader already
    reduced to an `Oversize`) is refused before it is parsed: its record
    names the size and the limit and keeps a prefix and the sha256 of the
    whole, so one huge line never travels on as a whole.
    """
    if isinstance(data, bytes) and max_event_bytes is not None and len(data) > max_event_bytes:
        data = Oversize.of(data)
    if isinstance(data, Oversize):
        limit = "the size limit" if max_event_bytes is None else (
            f"max_event_bytes {max_event_bytes}")
        exc = EventDecodeError(
            f"event of {data.size} bytes exceeds {limit}; the record keeps its first "
            f"{len(data.prefix)} bytes and its sha256", field="max_event_bytes")
        record = error_record(exc, stage=ErrorRecord.STAGE_DECODE, entity_key=b"", seq=0,
                              event=data.prefix, event_id="", traceback_bytes=0)
        record.event_bytes = data.size
        record.event_sha256 = data.sha256
        return record
    try:
        return decode_event(data, input_format)
    except EventDecodeError as exc:
        return error_record(exc, stage=ErrorRecord.STAGE_DECODE, entity_key=b"", seq=0,
                            event=data, event_id="", traceback_bytes=0)
