"""When a suspended activation runs again: exponential backoff with deterministic jitter.

A retriable failure (a provider that is down, an open breaker, a timeout, a
store that cannot be reached) suspends the activation instead of
dead-lettering it (DESIGN's "Durable, concurrent activations"). Its retry waits
``min(retry_max_ms, retry_initial_ms * 2**(attempt - 1))`` scaled by a jitter
in [0.5, 1.0]. The jitter spreads the keys that one outage suspended at once,
so they do not all retry in the same instant, and it is derived from
``(entity_key, seq, attempt)`` rather than drawn from a random generator: a
replay, a restore and every engine compute the same schedule (invariant 2).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from beam_agents._checks import require_int

__all__ = ["RetryPolicy"]

_MAX_DELAY_MS = 86_400_000
_MAX_ATTEMPTS = 1_000


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How often and how late a suspended activation is retried before it is dead-lettered.

    Attributes:
        retry_initial_ms: Delay before the first retry, in [1, 86 400 000].
        retry_max_ms: Longest delay between two attempts, in
            [retry_initial_ms, 86 400 000].
        max_attempts: Attempts in all, the first included, in [1, 1000];
            after the last one the event becomes a dead letter carrying the
            attempt count. 1 dead-letters at once, as with no suspension.
    """

    retry_initial_ms: int = 1_000
    retry_max_ms: int = 60_000
    max_attempts: int = 8

    def __post_init__(self) -> None:
        for name, low, high in (("retry_initial_ms", 1, _MAX_DELAY_MS),
                                ("retry_max_ms", self.retry_initial_ms, _MAX_DELAY_MS),
                                ("max_attempts", 1, _MAX_ATTEMPTS)):
            require_int(getattr(self, name), name=f"--{name}", low=low, high=high, field=name)

    def gives_up_after(self, attempt: int) -> bool:
        """Whether a retriable failure of attempt number `attempt` (from 1) is final."""
        return attempt >= self.max_attempts

    def delay_ms(self, entity_key: bytes, seq: int, attempt: int) -> int:
        """The wait after failed attempt `attempt` (from 1) of activation `seq` of `entity_key`.

        Never below half the exponential step, never above `retry_max_ms`, and
        the same on every call with the same arguments.
        """
        step = min(self.retry_max_ms, self.retry_initial_ms << min(attempt - 1, 40))
        return _jittered(step, entity_key, seq, attempt)

    def long_delay_ms(self, entity_key: bytes, seq: int, attempt: int) -> int:
        """The wait of a key whose provider's quota is out: `retry_max_ms`, jittered.

        Exhaustion lasts minutes to a day, so the exponential climb from
        `retry_initial_ms` would only probe it in vain (invariant 11).
        """
        return _jittered(self.retry_max_ms, entity_key, seq, attempt)


def _jittered(step_ms: int, entity_key: bytes, seq: int, attempt: int) -> int:
    """`step_ms` scaled into [0.5, 1.0] by a fraction derived from the key, seq and attempt."""
    digest = hashlib.sha256(b"%d:%d:" % (seq, attempt) + entity_key).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64  # uniform in [0, 1)
    return max(1, int(step_ms * (0.5 + fraction / 2)))
