"""The circuit breaker: closed → open → half-open, on an injected clock."""

from __future__ import annotations

import threading

import pytest

from beam_agents.errors import ConfigError, ProviderUnavailable
from beam_agents.model._breaker import BreakerRegistry, BreakerState, CircuitBreaker
from beam_agents.model._config import BreakerConfig


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(threshold: int = 3, cooldown_s: float = 10.0) -> tuple[CircuitBreaker, FakeClock]:
    clock = FakeClock()
    config = BreakerConfig(failure_threshold=threshold, cooldown_s=cooldown_s)
    return CircuitBreaker(config, clock=clock, model_id="m"), clock


def fail(breaker: CircuitBreaker, times: int) -> None:
    for _ in range(times):
        breaker.before_call()
        breaker.record_failure()


def test_it_opens_after_threshold_consecutive_failures() -> None:
    breaker, _ = make(threshold=3)
    fail(breaker, 2)
    assert breaker.state is BreakerState.CLOSED
    fail(breaker, 1)
    assert breaker.state is BreakerState.OPEN


def test_an_open_breaker_refuses_with_a_retriable_error_naming_the_model() -> None:
    breaker, _ = make(threshold=1)
    fail(breaker, 1)
    with pytest.raises(ProviderUnavailable, match="circuit breaker for m is open") as info:
        breaker.before_call()
    assert info.value.retriable and info.value.model_id == "m"


def test_a_success_resets_the_streak() -> None:
    breaker, _ = make(threshold=3)
    fail(breaker, 2)
    breaker.before_call()
    breaker.record_success()
    fail(breaker, 2)
    assert breaker.state is BreakerState.CLOSED
    assert breaker.consecutive_failures == 2


def test_inconclusive_outcomes_neither_count_nor_reset() -> None:
    breaker, _ = make(threshold=2)
    fail(breaker, 1)
    breaker.before_call()
    breaker.record_inconclusive()
    assert breaker.consecutive_failures == 1
    fail(breaker, 1)
    assert breaker.state is BreakerState.OPEN


def test_after_the_cooldown_exactly_one_trial_call_is_admitted() -> None:
    breaker, clock = make(threshold=1, cooldown_s=10)
    fail(breaker, 1)
    clock.now += 9.99
    with pytest.raises(ProviderUnavailable):
        breaker.before_call()
    clock.now += 0.01
    assert breaker.state is BreakerState.HALF_OPEN
    breaker.before_call()  # the trial
    with pytest.raises(ProviderUnavailable, match="trial"):
        breaker.before_call()


def test_a_successful_trial_closes_the_breaker() -> None:
    breaker, clock = make(threshold=1, cooldown_s=10)
    fail(breaker, 1)
    clock.now += 10
    breaker.before_call()
    breaker.record_success()
    assert breaker.state is BreakerState.CLOSED
    breaker.before_call()
    breaker.before_call()


def test_a_failed_trial_reopens_for_twice_the_last_cooldown() -> None:
    breaker, clock = make(threshold=5, cooldown_s=10)
    fail(breaker, 5)
    clock.now += 10
    breaker.before_call()
    breaker.record_failure()
    assert breaker.state is BreakerState.OPEN
    clock.now += 19.99
    with pytest.raises(ProviderUnavailable):
        breaker.before_call()
    clock.now += 0.01
    breaker.before_call()


def test_the_cooldown_doubles_up_to_its_cap_and_a_success_resets_it() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(BreakerConfig(failure_threshold=1, cooldown_s=1,
                                           max_cooldown_s=5), clock=clock)
    fail(breaker, 1)
    cooldowns = []
    for _ in range(5):
        cooldowns.append(breaker.cooldown_s)
        clock.now += breaker.cooldown_s
        breaker.before_call()  # the trial, which fails
        breaker.record_failure()
    assert cooldowns == [1, 2, 4, 5, 5]
    clock.now += 5
    breaker.before_call()
    breaker.record_success()
    assert breaker.cooldown_s == 1


def test_starts_wait_out_the_cooldown_then_go_while_it_is_half_open() -> None:
    """An open breaker holds activation starts; a closed one never does (invariant 11)."""
    breaker, clock = make(threshold=1, cooldown_s=10)
    assert breaker.start_wait_s() is None
    fail(breaker, 1)
    assert breaker.start_wait_s() == 10
    clock.now += 4
    assert breaker.start_wait_s() == 6
    clock.now += 6
    assert breaker.start_wait_s() == 0.0
    breaker.before_call()  # the trial
    assert breaker.start_wait_s() == 0.0
    breaker.record_success()
    assert breaker.start_wait_s() is None


def test_a_max_cooldown_below_the_cooldown_is_refused_naming_the_field() -> None:
    with pytest.raises(ConfigError, match=r"breaker\.max_cooldown_s") as caught:
        BreakerConfig(cooldown_s=10, max_cooldown_s=5)
    assert caught.value.field == "breaker.max_cooldown_s"
    assert BreakerConfig(cooldown_s=60).longest_cooldown_s == 60
    assert BreakerConfig().longest_cooldown_s == 30


def test_an_inconclusive_trial_frees_the_slot_for_the_next_call() -> None:
    breaker, clock = make(threshold=1, cooldown_s=10)
    fail(breaker, 1)
    clock.now += 10
    breaker.before_call()
    breaker.record_inconclusive()
    assert breaker.state is BreakerState.HALF_OPEN
    breaker.before_call()


def test_a_trial_whose_outcome_is_never_reported_expires_after_a_cooldown() -> None:
    breaker, clock = make(threshold=1, cooldown_s=10)
    fail(breaker, 1)
    clock.now += 10
    breaker.before_call()  # lost: never reported
    clock.now += 10
    breaker.before_call()


def test_a_late_failure_does_not_extend_an_open_cooldown() -> None:
    breaker, clock = make(threshold=1, cooldown_s=10)
    breaker.before_call()  # admitted while closed, fails late
    fail(breaker, 1)
    clock.now += 5
    breaker.record_failure()
    clock.now += 5
    breaker.before_call()


def test_concurrent_failures_open_it_exactly_at_the_threshold() -> None:
    breaker, _ = make(threshold=400)
    barrier = threading.Barrier(8)

    def worker() -> None:
        barrier.wait()
        for _ in range(50):
            breaker.record_failure()

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert breaker.consecutive_failures == 400
    assert breaker.state is BreakerState.OPEN


def test_the_registry_shares_one_breaker_per_model_and_config() -> None:
    registry = BreakerRegistry(clock=FakeClock())
    config = BreakerConfig(failure_threshold=2)
    a = registry.get("gemini-2.0-flash", config)
    assert registry.get("gemini-2.0-flash", BreakerConfig(failure_threshold=2)) is a
    assert registry.get("other", config) is not a
    assert registry.get("gemini-2.0-flash", BreakerConfig(failure_threshold=3)) is not a
    assert len(registry) == 3
    assert a.config is config
