"""A provider outage on Flink suspends the key instead of dead-lettering it.

The job's agent asks an OpenAI-compatible server that runs in the test
process, so every provider call the Python worker makes is counted here. The
server answers HTTP 503 to the first calls of one entity, then recovers. The
activation is suspended and retried by timer with the same seq (invariant 1),
the entity's later events wait behind it (invariant 10), and nothing becomes
a dead letter (invariant 8).
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from tests._http import LocalServer, chat_completion, send_json
from tests.flink.conftest import part_lines, run_job

pytestmark = pytest.mark.timeout(300)

FLAKY, FAILURES = "blip", 3  # under the breaker's threshold and max_attempts (4)
CALM = ("calm-a", "calm-b")
EVENTS_PER_ENTITY = 4


@dataclass
class _Provider:
    """What the fake provider was asked, in arrival order: ``(entity, content, status)``."""

    url: str
    calls: list[tuple[str, str, int]] = field(default_factory=list)


@pytest.fixture
def provider() -> Iterator[_Provider]:
    """An OpenAI-compatible server whose first FAILURES calls for FLAKY answer 503."""
    lock = threading.Lock()
    calls: list[tuple[str, str, int]] = []

    def handle(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        content = str(json.loads(body)["messages"][-1]["content"])
        who = content.split(":", 1)[0]
        with lock:
            failed = sum(1 for c in calls if c[0] == who and c[2] == 503)
            status = 503 if who == FLAKY and failed < FAILURES else 200
            calls.append((who, content, status))
        send_json(handler, b'{"error": "overloaded"}' if status == 503 else chat_completion(
            f"ok {content}", model="fake"), status)

    with LocalServer(handle) as server:
        yield _Provider(url=server.url, calls=calls)


def _write_events(path: Path) -> None:
    with path.open("w", encoding="utf-8") as out:
        for n in range(EVENTS_PER_ENTITY):
            for entity in (FLAKY, *CALM):
                out.write(json.dumps({"entity_key": entity, "event_id": f"e{n}",
                                      "event_time_ms": 1_700_000_000_000 + n,
                                      "payload": f"m{n}"}) + "\n")


def test_a_provider_outage_suspends_the_key_and_its_later_events_wait(
        provider: _Provider, tmp_path: Path) -> None:
    """0 dead letters; calls = events + failures; the key's later events commit after it."""
    events, agent_config = tmp_path / "events.jsonl", tmp_path / "agent.json"
    _write_events(events)
    # A breaker that stays closed, so every attempt reaches the provider and is counted.
    agent_config.write_text(json.dumps({"model": {"breaker": {"failure_threshold": 100}}}))
    run_job(["templates/flink/agent_job.py", "--input_files", str(events),
             "--output_path", str(tmp_path / "intents"),
             "--errors_path", str(tmp_path / "errors"),
             "--agent", "tests.agents:ask", "--agent_config", str(agent_config),
             "--model_provider", "openai", "--model_id", "fake",
             "--model_base_url", provider.url,
             "--retry_initial_ms", "5", "--retry_max_ms", "20", "--max_attempts", "4",
             "--python_executable", sys.executable, "--parallelism", "1",
             "--checkpointing_interval_ms", "1000"],
             log_dir=tmp_path / "flink-log")

    assert part_lines(tmp_path / "errors") == []
    per_entity = {who: [c for c in provider.calls if c[0] == who] for who in (FLAKY, *CALM)}
    assert {who: len(c) for who, c in per_entity.items()} == {
        FLAKY: EVENTS_PER_ENTITY + FAILURES, **dict.fromkeys(CALM, EVENTS_PER_ENTITY)}
    # The suspended head was retried until it succeeded; only then did the
    # entity's later events reach the provider, one at a time, in event order.
    assert [(content, status) for _, content, status in per_entity[FLAKY]] == [
        (f"{FLAKY}: m0", 503)] * FAILURES + [
        (f"{FLAKY}: m{n}", 200) for n in range(EVENTS_PER_ENTITY)]

    answers: dict[str, list[dict[str, Any]]] = {}
    for line in part_lines(tmp_path / "intents"):
        intent = json.loads(line)
        answers.setdefault(intent["entity_key"], []).append(json.loads(intent["payload"]))
    flaky = sorted(answers[FLAKY], key=lambda a: a["seq"])
    # The retries ran with the same seq: the recovered event is seq 1, the rest follow it.
    assert [(a["seq"], a["text"]) for a in flaky] == [
        (n + 1, f"ok {FLAKY}: m{n}") for n in range(EVENTS_PER_ENTITY)]
