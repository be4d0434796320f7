"""`KeyedEngine.on_end_of_input_round`: one round of the end of a bounded input, for one key.

A round finishes the key's running activation and starts its next, then
returns without waiting for it, so a host can start every key's next event
before it waits on any (the Flink end-of-input rounds). A key that cannot
start at once is drained where it stands, so every round makes progress.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from beam_agents.errors import ProviderUnavailable
from beam_agents.hosting import KeyCells, KeyedEngine, start_runtime
from beam_agents.metrics import RecordingMetrics
from beam_agents.model import ModelRequest
from beam_agents.runtime import AgentConfig, AgentEvent, RetryPolicy
from beam_agents.testing import ScriptedModel

pytestmark = pytest.mark.timeout(60)


def _clock() -> int:
    return int(time.monotonic() * 1000)


def _cells() -> KeyCells:
    return KeyCells.in_process()


def _event(n: int) -> bytes:
    return AgentEvent(entity_key=b"k", event_id=f"e{n}", event_time_ms=n,
                      payload=f"m{n}".encode()).SerializeToString(deterministic=True)


def _seqs(lines: tuple[tuple[str, bytes], ...]) -> list[tuple[str, int]]:
    return [(channel, json.loads(line)["seq"]) for channel, line in lines]


def test_a_round_applies_the_running_activation_and_starts_the_next_without_waiting() -> None:
    config = AgentConfig(agent="tests.agents:counter")
    with start_runtime(config, metrics=RecordingMetrics()) as runtime:
        engine, cells = KeyedEngine.over(runtime), _cells()
        engine.on_element("k", cells, _event(1), _clock())  # starts at once
        engine.enqueue("k", cells, _event(2))
        engine.enqueue("k", cells, _event(3))

        first = engine.on_end_of_input_round("k", cells, clock_ms=_clock)
        assert _seqs(first.lines) == [("intents", 1)]  # the second is started, not awaited
        assert first.wake_at_ms is not None and engine.scheduler.running("k") is not None
        assert engine.queue_length("k", cells) == 2

        second = engine.on_end_of_input_round("k", cells, clock_ms=_clock)
        assert _seqs(second.lines) == [("intents", 2)] and second.wake_at_ms is not None

        last = engine.on_end_of_input_round("k", cells, clock_ms=_clock)
        assert _seqs(last.lines) == [("intents", 3)] and last.wake_at_ms is None
        assert engine.queued("k", cells) == [] and engine.scheduler.running("k") is None
        assert list(cells.queue.read()) == [] and list(cells.dequeued.read()) == []
        assert engine.on_end_of_input_round("k", cells, clock_ms=_clock).lines == ()


def test_a_suspended_key_is_drained_in_its_round_and_commits_after_the_backoff() -> None:
    """Its next attempt cannot start before the backoff, so the round waits it out itself."""
    failed = threading.Event()

    def answer(request: ModelRequest) -> str | BaseException:
        if not failed.is_set():
            failed.set()
            return ProviderUnavailable("503 from the test")
        return f"ok {request.messages[-1]['content']}"

    metrics = RecordingMetrics()
    config = AgentConfig(agent="tests.agents:ask",
                         retry=RetryPolicy(retry_initial_ms=30, retry_max_ms=30, max_attempts=3))
    with start_runtime(config, metrics=metrics, provider=ScriptedModel(answer)) as runtime:
        engine, cells = KeyedEngine.over(runtime), _cells()
        engine.on_element("k", cells, _event(1), _clock())
        step = engine.on_end_of_input_round("k", cells, clock_ms=_clock)

    assert _seqs(step.lines) == [("intents", 1)] and step.wake_at_ms is None
    assert list(cells.queue.read()) == [] and list(cells.dequeued.read()) == []
    assert metrics.get("beam_agents.runtime", "suspended") == 1
