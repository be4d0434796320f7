"""Durable tool calls on Flink: a suspended activation and a rerun never run a tool again.

`order_agent` runs `lookup_order` (which logs each run to a file named by an
environment variable the job's Python workers inherit), then asks an
OpenAI-compatible server in the test process, which answers each request's
first call with a 503. Every activation suspends after its tool ran, and its
timer-driven retry must take the tool's result from the replay cache
(invariant 13). A second run of the same input over the same call journal
then runs no tool and asks the provider nothing.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from tests import agents
from tests._http import LocalServer, chat_completion, send_json
from tests.flink.conftest import job_env, part_lines, run_job

pytestmark = pytest.mark.timeout(400)

ENTITIES, EVENTS_PER_ENTITY = ("c0", "c1", "c2"), 3
ORDERS = [f"A{k}{n}" for k in range(len(ENTITIES)) for n in range(EVENTS_PER_ENTITY)]


class _Provider:
    """Answers 503 to each request's first call (or to every call, once `down`)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.down = False
        self._lock = threading.Lock()
        self._server = LocalServer(self._handle)
        self.url = self._server.url

    def _handle(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        content = str(json.loads(body)["messages"][-1]["content"])
        with self._lock:
            self.calls[content] += 1
            fail = self.down or self.calls[content] == 1
        send_json(handler, b'{"error": "overloaded"}' if fail else chat_completion(
            f"ok {content}", model="fake"), 503 if fail else 200)

    def __enter__(self) -> _Provider:
        self._server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.__exit__(*exc)


def _run(tmp: Path, name: str, provider: _Provider, log: Path) -> tuple[list[dict], list[str]]:
    out = tmp / name
    run_job(["templates/flink/agent_job.py", "--input_files", str(tmp / "events.jsonl"),
             "--output_path", str(out / "intents"), "--errors_path", str(out / "errors"),
             "--agent", "tests.agents:order_agent", "--agent_config", str(tmp / "agent.json"),
             "--model_provider", "openai", "--model_id", "fake",
             "--model_base_url", provider.url,
             "--call_journal", "sqlite", "--call_journal_path", str(tmp / "calls.sqlite"),
             "--retry_initial_ms", "5", "--retry_max_ms", "20", "--max_attempts", "6",
             "--python_executable", sys.executable, "--parallelism", "2",
             "--checkpointing_interval_ms", "1000"],
            env=job_env(**{agents.TOOL_LOG_ENV: str(log)}), log_dir=out / "flink-log")
    return ([json.loads(line) for line in part_lines(out / "intents")],
            part_lines(out / "errors"))


def test_a_suspended_activation_and_a_rerun_over_the_journal_run_each_tool_once_on_flink(
        tmp_path: Path) -> None:
    with (tmp_path / "events.jsonl").open("w", encoding="utf-8") as events:
        for n in range(EVENTS_PER_ENTITY):
            for k, entity in enumerate(ENTITIES):
                events.write(json.dumps({"entity_key": entity, "event_id": f"e{n}",
                                         "event_time_ms": 1_700_000_000_000 + n,
                                         "payload": f"A{k}{n}"}) + "\n")
    # A breaker that stays closed, so every retry reaches the provider.
    (tmp_path / "agent.json").write_text(json.dumps(
        {"model": {"breaker": {"failure_threshold": 100}}}))
    log = tmp_path / "tool-runs.log"  # absolute: the Python workers append to it
    every_event = Counter({(e, f"e{n}"): 1 for e in ENTITIES for n in range(EVENTS_PER_ENTITY)})

    with _Provider() as provider:
        intents, errors = _run(tmp_path, "first", provider, log)
    assert errors == []
    assert Counter((i["entity_key"], i["event_id"]) for i in intents) == every_event
    # Each request failed once, then was answered: every activation suspended after its tool ran.
    assert set(provider.calls.values()) == {2} and len(provider.calls) == len(ORDERS)
    assert Counter(order for order, _ in agents.tool_runs(str(log))) == Counter(
        dict.fromkeys(ORDERS, 1))
    replies = {(i["entity_key"], i["event_id"]): json.loads(i["payload"]) for i in intents}

    with _Provider() as again:
        again.down = True  # a call the journal lacks would suspend until it dead-letters
        rerun, errors = _run(tmp_path, "again", again, log)
    assert errors == []
    assert again.calls == Counter()
    assert {(i["entity_key"], i["event_id"]): json.loads(i["payload"]) for i in rerun} == replies
    assert Counter(order for order, _ in agents.tool_runs(str(log))) == Counter(
        dict.fromkeys(ORDERS, 1))
