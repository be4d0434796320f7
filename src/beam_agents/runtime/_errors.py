"""From a failed activation to one ErrorRecord: the dead letter (invariants 1 and 8)."""

from __future__ import annotations

import traceback

from beam_agents._proto.error_record_pb2 import ErrorRecord
from beam_agents.errors import (
    ActivationTimeoutError,
    BeamAgentsError,
    ConfigError,
    EventDecodeError,
    MemoryOverflow,
    ModelError,
    StateError,
    StoreError,
)
from beam_agents.runtime._context import IntentTooLargeError

__all__ = ["ErrorRecord", "error_record", "stage_of"]

Stage = ErrorRecord.Stage


def stage_of(exc: BaseException, *, flushing: bool = False) -> int:
    """The pipeline stage an exception belongs to; the dead-letter topic is triaged by it."""
    if flushing:
        return ErrorRecord.STAGE_LONGTERM_FLUSH
    if isinstance(exc, StateError):
        return ErrorRecord.STAGE_STATE_CORRUPT
    if isinstance(exc, ActivationTimeoutError):
        return ErrorRecord.STAGE_TIMEOUT
    if isinstance(exc, MemoryOverflow):
        return ErrorRecord.STAGE_MEMORY_OVERFLOW
    if isinstance(exc, ModelError):
        return ErrorRecord.STAGE_MODEL
    if isinstance(exc, StoreError):  # outside the flush, only reads reach the store
        return ErrorRecord.STAGE_LONGTERM_READ
    if isinstance(exc, EventDecodeError):
        return ErrorRecord.STAGE_DECODE
    if isinstance(exc, ConfigError):
        return ErrorRecord.STAGE_CONFIG
    if isinstance(exc, IntentTooLargeError):
        return ErrorRecord.STAGE_OUTPUT
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
