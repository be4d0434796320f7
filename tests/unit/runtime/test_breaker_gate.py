"""An open circuit breaker holds activation starts, as a 429 holds calls (invariant 11).

Without the gate, every activation admitted while the breaker is open runs
its agent up to the model call, is refused there, suspends and runs again:
31 failed calls became 384 suspensions in a run of 320 events. With it, an
outage costs one suspension per failed call plus one per activation already
in flight when the breaker opened.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter

import pytest

from beam_agents.errors import ProviderUnavailable
from beam_agents.hosting import KeyedEngine, start_runtime
from beam_agents.metrics import RecordingMetrics
from beam_agents.model import BreakerConfig, ModelConfig, ModelRequest
from beam_agents.runtime import AgentConfig, AgentEvent, RetryPolicy
from beam_agents.runtime._batch import KeyRuns
from beam_agents.runtime._scheduler import Scheduler
from beam_agents.testing import ScriptedModel

pytestmark = pytest.mark.timeout(120)

KEYS, PER_KEY, IN_FLIGHT = 120, 2, 16


class Clock:
    def __call__(self) -> int:
        return int(time.monotonic() * 1000)


def event(key: str, n: int) -> bytes:
    return AgentEvent(entity_key=key.encode(), event_id=f"e{n}", event_time_ms=1_000 * n,
                      payload=f"m{n}".encode()).SerializeToString(deterministic=True)


class Outage:
    """A provider down for `down_s` from its 20th call, as a real outage is: in time.

    Every call in that span answers 503, however few the breaker lets through.
    """

    def __init__(self, down_s: float) -> None:
        self.calls = 0
        self.failed = 0
        self._down_s = down_s
        self._began: float | None = None
        self._lock = threading.Lock()

    def __call__(self, request: ModelRequest) -> str | BaseException:
        with self._lock:
            self.calls += 1
            if self.calls >= 20:
                now = time.monotonic()
                self._began = now if self._began is None else self._began
                if now - self._began < self._down_s:
                    self.failed += 1
                    return ProviderUnavailable("503 from the test server")
        return f"ok {request.messages[-1]['content']}"


def run(outage: Outage, breaker: BreakerConfig, *, max_attempts: int = 8,
        ) -> tuple[list[tuple[str, bytes]], RecordingMetrics]:
    metrics = RecordingMetrics()
    # The retry window (about 1 s) outlasts the outage: nothing should be dead-lettered.
    retry = RetryPolicy(retry_initial_ms=20, retry_max_ms=200, max_attempts=max_attempts)
    config = AgentConfig(agent="tests.agents:ask", max_in_flight=IN_FLIGHT, retry=retry,
                         model=ModelConfig(breaker=breaker))
    with start_runtime(config, metrics=metrics, provider=ScriptedModel(outage)) as runtime:
        scheduler = Scheduler(runtime, max_in_flight=IN_FLIGHT, metrics=metrics)
        runs = KeyRuns(KeyedEngine(scheduler, retry=retry, metrics=metrics), clock_ms=Clock())
        lines: list[tuple[str, bytes]] = []
        for k in range(KEYS):
            key = f"k{k:03d}"
            lines.extend(runs.add(key, [event(key, n) for n in range(PER_KEY)]))
        lines.extend(runs.finish())
    return lines, metrics


def test_an_open_breaker_holds_starts_so_suspensions_stay_within_failed_calls_and_in_flight(
        ) -> None:
    """A 0.3 s outage, 16 in flight: suspensions <= failed calls + 16, no dead letter."""
    outage = Outage(down_s=0.3)
    lines, metrics = run(outage, BreakerConfig(failure_threshold=3, cooldown_s=0.05))

    assert Counter(channel for channel, _ in lines) == Counter({"intents": KEYS * PER_KEY})
    suspended = metrics.get("beam_agents.runtime", "suspended")
    assert 0 < suspended <= outage.failed + IN_FLIGHT, (suspended, outage.failed)
    # The breaker refused only calls of activations already running when it
    # opened, never one it let start afterwards.
    assert metrics.get("beam_agents.model", "breaker_rejections") <= IN_FLIGHT
    # Keys the breaker held waited without running (their attempts ticked).
    assert metrics.get("beam_agents.runtime", "breaker_held") > 0
    seqs = Counter(json.loads(line)["entity_key"] for _, line in lines)
    assert set(seqs.values()) == {PER_KEY}


def test_a_long_outage_is_probed_by_one_activation_at_a_time() -> None:
    """Past the first wave, each failed call is a trial: one activation started for it.

    A failed trial counts as its activation's attempt, as any failure does: a
    request that itself brings the provider down dead-letters in the end
    instead of holding every key behind it.
    """
    outage = Outage(down_s=1.5)
    lines, metrics = run(outage, BreakerConfig(failure_threshold=2, cooldown_s=0.01,
                                               max_cooldown_s=0.08), max_attempts=50)

    assert Counter(channel for channel, _ in lines) == Counter({"intents": KEYS * PER_KEY})
    assert metrics.get("beam_agents.runtime", "suspended") <= outage.failed + IN_FLIGHT
    assert metrics.get("beam_agents.runtime", "retries_exhausted") == 0
