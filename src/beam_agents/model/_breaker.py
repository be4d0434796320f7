"""Per-model circuit breaker: stop calling a provider that keeps failing.

States::

    CLOSED --(failure_threshold consecutive retriable failures)--> OPEN
    OPEN --(the cooldown elapsed; the next call is the trial)--> HALF_OPEN
    HALF_OPEN --(trial succeeds)--> CLOSED (the cooldown resets to cooldown_s)
    HALF_OPEN --(trial fails)--> OPEN (for twice the last cooldown, up to max_cooldown_s)

The breaker also gates the *start* of activations (invariant 11): while it
is open no new activation starts, and once it has cooled down the host lets
one activation through as its trial (`start_wait_s`). An activation started
only to meet an open breaker at its model call would be suspended and run
again for nothing, so an outage costs the failed calls and the activations
already in flight, never a suspension of every queued key.

Only retriable failures (`ProviderUnavailable`) count. A `ProviderRejected`
proves nothing about the provider's health, so it neither counts nor resets
the streak. The breaker sits *after* the replay cache (invariant 3): cached
responses are served while it is open.

The clock is injected: the core reads no time of its own (invariant 2). The
runner adapter supplies a monotonic clock and keeps one `BreakerRegistry`
per worker process, so every activation on the worker shares the breaker of
its model.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable

from beam_agents.errors import ProviderUnavailable
from beam_agents.model._config import BreakerConfig

__all__ = ["BreakerRegistry", "BreakerState", "CircuitBreaker"]


class BreakerState(enum.Enum):
    """Where a circuit breaker stands."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitBreaker:
    """Guards one model; thread-safe, and every decision uses the injected clock.

    Call `before_call` before each provider call; it raises while the breaker
    is open. Then report the outcome with exactly one of `record_success`,
    `record_failure` or `record_inconclusive`, or the half-open trial slot
    is held until `cooldown_s` passes.
    """

    def __init__(self, config: BreakerConfig, *, clock: Callable[[], float],
                 model_id: str | None = None) -> None:
        self._config = config
        self._clock = clock
        self._model_id = model_id
        self._lock = threading.Lock()
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self._cooldown_s = config.cooldown_s  # this opening's; doubles on a failed trial
        self._trial_started_at: float | None = None

    @property
    def config(self) -> BreakerConfig:
        """The settings this breaker was built with."""
        return self._config

    @property
    def state(self) -> BreakerState:
        """The current state; an open breaker past its cooldown reads as half-open."""
        with self._lock:
            if self._state is BreakerState.OPEN and self._cooled_down():
                return BreakerState.HALF_OPEN
            return self._state

    @property
    def consecutive_failures(self) -> int:
        """Retriable failures since the last success (or since the breaker closed)."""
        with self._lock:
            return self._failures

    @property
    def cooldown_s(self) -> float:
        """How long the breaker stays open this time (it doubles with each failed trial)."""
        with self._lock:
            return self._cooldown_s

    def start_wait_s(self) -> float | None:
        """How long a new activation must wait before it may start (invariant 11).

        Returns:
            None while the breaker is closed: activations start freely. Else
            the seconds left of the cooldown, 0.0 once it has passed: the host
            may then start one activation at a time, whose model call is the
            trial (it keeps the others waiting until the trial has answered).
        """
        with self._lock:
            if self._state is BreakerState.CLOSED:
                return None
            if self._state is BreakerState.HALF_OPEN:
                return 0.0
            return max(0.0, self._opened_at + self._cooldown_s - self._clock())

    def before_call(self) -> None:
        """Admit a call, or refuse it without touching the provider.

        Raises:
            ProviderUnavailable: The breaker is open and cooling down, or a
                half-open trial call is already in flight. Retriable.
        """
        with self._lock:
            now = self._clock()
            if self._state is BreakerState.CLOSED:
                return
            if self._state is BreakerState.OPEN:
                if not self._cooled_down():
                    remaining = self._opened_at + self._cooldown_s - now
                    raise self._refusal(f"open for another {remaining:.1f}s")
                self._state = BreakerState.HALF_OPEN
                self._trial_started_at = now
                return
            # HALF_OPEN: one trial at a time. A trial whose outcome was never
            # reported (a cancelled activation) is given up after a cooldown,
            # so a lost report cannot wedge the breaker.
            started = self._trial_started_at
            if started is not None and now - started < self._cooldown_s:
                raise self._refusal("half-open and its trial call is in flight")
            self._trial_started_at = now

    def record_success(self) -> None:
        """The provider answered: close the breaker and clear the failure streak."""
        with self._lock:
            self._state = BreakerState.CLOSED
            self._failures = 0
            self._cooldown_s = self._config.cooldown_s
            self._trial_started_at = None

    def record_failure(self) -> None:
        """A retriable failure: count it, opening (or re-opening) the breaker when due."""
        with self._lock:
            self._failures += 1
            # A late failure from a call admitted before the breaker opened
            # must not push the end of the cooldown further out.
            if self._state is BreakerState.OPEN:
                return
            if self._state is BreakerState.HALF_OPEN:
                # A failed trial: the outage goes on, so look again less often.
                self._cooldown_s = min(2 * self._cooldown_s, self._config.longest_cooldown_s)
            if (self._state is BreakerState.HALF_OPEN
                    or self._failures >= self._config.failure_threshold):
                self._state = BreakerState.OPEN
                self._opened_at = self._clock()
                self._trial_started_at = None

    def record_inconclusive(self) -> None:
        """The call ended without a health verdict (rejected, cancelled, a bug).

        The failure streak is untouched; a half-open breaker frees its trial
        slot so the next call becomes the trial.
        """
        with self._lock:
            self._trial_started_at = None

    def _cooled_down(self) -> bool:
        return self._clock() - self._opened_at >= self._cooldown_s

    def refusal(self) -> ProviderUnavailable:
        """The error of an activation held back by this open breaker, never started."""
        with self._lock:
            return self._refusal("open")

    def _refusal(self, why: str) -> ProviderUnavailable:
        name = self._model_id or "model"
        return ProviderUnavailable(
            f"circuit breaker for {name} is {why} after {self._failures} consecutive "
            "retriable failures; the provider was not called. Cached responses are "
            "still served; the activation can be retried.",
            model_id=self._model_id,
        )


class BreakerRegistry:
    """Hands out one shared `CircuitBreaker` per model id (and breaker config).

    The runner adapter keeps one registry per worker process. Two models with
    the same id but different `BreakerConfig`s (two pipelines in one test
    process) get separate breakers rather than an error.
    """

    def __init__(self, *, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._breakers: dict[tuple[str, BreakerConfig], CircuitBreaker] = {}

    def get(self, model_id: str, config: BreakerConfig) -> CircuitBreaker:
        """Return the breaker for `model_id`, creating it on first use."""
        key = (model_id, config)
        with self._lock:
            breaker = self._breakers.get(key)
            if breaker is None:
                breaker = CircuitBreaker(config, clock=self._clock, model_id=model_id)
                self._breakers[key] = breaker
            return breaker

    def __len__(self) -> int:
        with self._lock:
            return len(self._breakers)
