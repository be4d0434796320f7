"""The token budget: one activation's view of an entity's ``budget`` cell (invariant 12).

An agent that loops on the model pays for every turn. ``--max_tokens_per_entity``
caps what one entity may pay for in a window of ``--budget_window_ms`` of event
time (a day by default), kept in keyed state beside memory and the replay cache.
The model facade checks it twice per call: before paying, with the request's
estimate, and after, with the usage the provider reported. An activation that
would go over fails with `BudgetExceededError`, a dead letter of stage BUDGET
that is not retriable and carries the tokens used, and nothing more is paid for
the entity until its window resets; other entities are unaffected.

Windows are aligned to multiples of the window length in event time, so they
are a function of the events alone and a replay charges exactly as the first
run did (invariants 2 and 3). What is charged: every call paid, and every call
replayed from the durable journal, whose charge was lost with the commit a
crash or retry dropped; a call replayed from the replay cache was charged when
that cache was committed, so it is not charged again.

Pure: no clock, no I/O; the host writes `to_bytes` back when `dirty`, with any
outcome, because tokens paid stay paid whether the activation commits or not.
"""

from __future__ import annotations

from typing import Final

from google.protobuf.message import DecodeError

from beam_agents._checks import require_int
from beam_agents._proto.budget_pb2 import TokenBudgetBlob
from beam_agents.errors import BudgetExceededError, StateCorruptError, UnsupportedSchemaVersionError

__all__ = ["DEFAULT_BUDGET_WINDOW_MS", "STATE_SCHEMA_VERSION", "TokenBudget"]

#: The default budget window: a day of event time.
DEFAULT_BUDGET_WINDOW_MS: Final = 86_400_000
#: The only ``TokenBudgetBlob.state_schema_version`` this library reads or writes.
STATE_SCHEMA_VERSION: Final = 1
_CELL: Final = "budget"


class TokenBudget:
    """Stages one activation's charges against its entity's budget; raises past the cap.

    Args:
        blob: The ``budget`` cell's bytes, or None for an entity that never paid.
        entity_key: Whose budget it is, for the error.
        now_ms: The activation's event time; picks the window.
        max_tokens: The cap per window (``--max_tokens_per_entity``).
        window_ms: The window length (``--budget_window_ms``).

    Raises:
        StateCorruptError: The cell does not decode (stage STATE_CORRUPT; the
            cell is left as it was, invariant 8).
        UnsupportedSchemaVersionError: The blob is of a version this library
            cannot read.
    """

    __slots__ = ("_dirty", "_entity_key", "_max_tokens", "_used", "_window_ms", "_window_start")

    def __init__(self, blob: bytes | None, *, entity_key: bytes, now_ms: int, max_tokens: int,
                 window_ms: int = DEFAULT_BUDGET_WINDOW_MS) -> None:
        require_int(max_tokens, name="max_tokens_per_entity", low=1, error=ValueError)
        require_int(window_ms, name="budget_window_ms", low=1, error=ValueError)
        self._entity_key = entity_key
        self._max_tokens = max_tokens
        self._window_ms = window_ms
        self._window_start = now_ms - now_ms % window_ms
        self._used = 0
        self._dirty = False
        stored = _decode(blob)
        if stored is not None and stored.window_start_ms == self._window_start:
            self._used = stored.tokens_used
        elif stored is not None and stored.tokens_used:
            self._dirty = True  # a new window: the reset is written with the next charge

    @property
    def tokens_used(self) -> int:
        """Tokens charged in the current window, this activation's included."""
        return self._used

    @property
    def window_start_ms(self) -> int:
        """Event time at which the current window began."""
        return self._window_start

    @property
    def dirty(self) -> bool:
        """Whether the cell must be written back."""
        return self._dirty

    def check(self, tokens: int) -> None:
        """Refuse a call estimated at `tokens` if it would take the entity past its cap.

        Raises:
            BudgetExceededError: Before anything is paid.
        """
        if self._used + tokens > self._max_tokens:
            raise self._exceeded(tokens)

    def charge(self, tokens: int) -> None:
        """Record `tokens` paid (or replayed from the journal); raise if that passed the cap.

        The charge is kept either way: the call was paid for.

        Raises:
            BudgetExceededError: The entity is now over its cap.
        """
        if tokens <= 0:
            return
        self._used += tokens
        self._dirty = True
        if self._used > self._max_tokens:
            raise self._exceeded(0)

    def to_bytes(self) -> bytes:
        """The cell's new bytes."""
        return TokenBudgetBlob(state_schema_version=STATE_SCHEMA_VERSION,
                               window_start_ms=self._window_start,
                               tokens_used=self._used).SerializeToString(deterministic=True)

    def _exceeded(self, wanted: int) -> BudgetExceededError:
        return BudgetExceededError(entity_key=self._entity_key, tokens_used=self._used,
                                   tokens_wanted=wanted, max_tokens=self._max_tokens,
                                   window_start_ms=self._window_start, window_ms=self._window_ms)


def _decode(blob: bytes | None) -> TokenBudgetBlob | None:
    if not blob:
        return None
    try:
        parsed = TokenBudgetBlob.FromString(blob)
    except DecodeError as exc:
        raise StateCorruptError(f"budget blob does not decode: {exc}", cell=_CELL) from exc
    if parsed.state_schema_version != STATE_SCHEMA_VERSION:
        raise UnsupportedSchemaVersionError(cell=_CELL, version=parsed.state_schema_version,
                                            supported=(STATE_SCHEMA_VERSION,))
    return parsed
