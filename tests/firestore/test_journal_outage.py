"""A Firestore journal that goes away suspends the activation; when it is back, the retry commits.

Invariant 9 with a real Firestore-protocol server: a journal read that cannot
reach the store is a retriable failure, so the engine suspends the key instead
of dead-lettering its event, and the retry (same seq) succeeds once the
server answers again.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest

from beam_agents.hosting import KeyedEngine, KeyRuns, start_runtime
from beam_agents.metrics import RecordingMetrics
from beam_agents.model import BreakerConfig, ModelConfig
from beam_agents.runtime import AgentConfig, AgentEvent, RetryPolicy
from beam_agents.stores import FirestoreCallJournalConfig
from tests._firestore_server import FirestoreServer

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def server(private_firestore_server: FirestoreServer) -> FirestoreServer:
    """The private server (of the run's kind), which the test stops and restarts."""
    return private_firestore_server


def _events(key: str, count: int) -> list[bytes]:
    return [AgentEvent(entity_key=key.encode(), event_id=f"e{n}", event_time_ms=1_000 + n,
                       payload=f"question {n}".encode()).SerializeToString()
            for n in range(count)]


def test_an_unreachable_journal_suspends_the_key_and_the_retry_commits_once_it_is_back(
        server: FirestoreServer) -> None:
    metrics = RecordingMetrics()
    config = AgentConfig(
        agent="tests.agents:ask",
        model=ModelConfig(breaker=BreakerConfig(failure_threshold=1000)),
        call_journal=FirestoreCallJournalConfig(project=f"journal-outage-{uuid.uuid4().hex[:8]}",
                                                timeout_ms=1_000),
        retry=RetryPolicy(retry_initial_ms=200, retry_max_ms=800, max_attempts=20))
    with start_runtime(config, metrics=metrics) as runtime:
        runs = KeyRuns(KeyedEngine.over(runtime), clock_ms=lambda: int(time.monotonic() * 1000))
        # Reach the server once, so the outage hits a live client, then take it away.
        lines = runs.add("warm", _events("warm", 1))
        lines += runs.finish()
        server.stop()

        def come_back() -> None:
            deadline = time.monotonic() + 60
            while metrics.get("beam_agents.runtime", "suspended") < 1:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.05)
            server.start()

        returning = threading.Thread(target=come_back, daemon=True)
        returning.start()
        lines += runs.add("k", _events("k", 3))
        lines += runs.finish()
        returning.join(timeout=60)

    channels = [channel for channel, _ in lines]
    assert channels.count("errors") == 0, [line for channel, line in lines if channel == "errors"]
    seqs = [json.loads(line)["seq"] for channel, line in lines
            if channel == "intents" and json.loads(line)["entity_key"] == "k"]
    assert seqs == [1, 2, 3]
    assert metrics.get("beam_agents.runtime", "suspended") >= 1
    assert metrics.get("beam_agents.runtime", "retries_exhausted") == 0
