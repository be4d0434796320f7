"""MCP tools: listed once per worker from a real MCP server (the official SDK), called durably.

The server (`tests.mcp_server`) runs in a subprocess, over streamable HTTP on
loopback (refusing requests without the bearer token the worker reads from an
environment variable) and over stdio; its tools log each run.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from beam_agents.errors import ToolUnavailable
from beam_agents.hosting import KeyedState, start_runtime
from beam_agents.metrics import RecordingMetrics
from beam_agents.model import InMemoryCallJournal
from beam_agents.runtime import AgentConfig, AgentEvent, Committed, ErrorRecord, Failed
from beam_agents.testing import ScriptedModel
from tests._emulators import free_port
from tests.mcp import agents

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]


class Journal:
    def __init__(self) -> None:
        self.journal = InMemoryCallJournal()

    def open(self) -> InMemoryCallJournal:
        return self.journal


@pytest.fixture
def http_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    log, port = tmp_path / "mcp.log", free_port()
    process = subprocess.Popen([sys.executable, "-m", "tests.mcp_server", "http", "--port",
                                str(port), "--token", "s3cret", "--log", str(log)], cwd=ROOT)
    try:
        deadline = time.monotonic() + 30
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert process.poll() is None and time.monotonic() < deadline, "no MCP server"
            time.sleep(0.05)
        monkeypatch.setenv(agents.URL_ENV, f"http://127.0.0.1:{port}/mcp")
        monkeypatch.setenv(agents.TOKEN_ENV, "Bearer s3cret")
        yield log
    finally:
        process.terminate()
        process.wait(10)


def event(n: int, title: str) -> AgentEvent:
    return AgentEvent(entity_key=b"k", event_id=f"e{n}", event_time_ms=n, payload=title.encode())


def activate(agent: str, events: list[AgentEvent], journal: Journal
             ) -> tuple[list[Committed | Failed], RecordingMetrics]:
    metrics = RecordingMetrics()
    config = AgentConfig(agent=agent, call_journal=journal)  # type: ignore[arg-type]
    outcomes: list[Committed | Failed] = []
    with start_runtime(config, metrics=metrics, provider=ScriptedModel([])) as runtime:
        state = KeyedState()
        for each in events:
            outcome = runtime.activate(state, each)
            outcomes.append(outcome)
            if isinstance(outcome, Committed):
                state = state.after(outcome)
    return outcomes, metrics


def runs(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_mcp_tools_over_streamable_http_are_called_once_and_replayed_on_a_rerun(
        http_server: Path) -> None:
    journal = Journal()
    first, metrics = activate("tests.mcp.agents:http_agent", [event(1, "printer on fire")],
                              journal)
    again, replayed = activate("tests.mcp.agents:http_agent", [event(1, "printer on fire")],
                               journal)

    (committed,) = first
    assert isinstance(committed, Committed)
    ticket = json.loads(committed.intents[0].payload)
    assert ticket["priority"] == 2 and ticket["ticket"].startswith("T-")
    assert isinstance(again[0], Committed) and again[0].intents == committed.intents
    assert runs(http_server) == ["create_ticket printer on fire"]  # the rerun ran nothing
    assert metrics.get("beam_agents.tools", "tool_calls") == 1
    assert replayed.get("beam_agents.tools", "tool_journal_hits") == 1


def test_mcp_tools_over_stdio_are_listed_and_called(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "stdio.log"
    monkeypatch.setenv(agents.LOG_ENV, str(log))
    outcomes, _ = activate("tests.mcp.agents:stdio_agent", [event(1, "a"), event(2, "b")],
                           Journal())
    assert [isinstance(o, Committed) for o in outcomes] == [True, True]
    assert runs(log) == ["create_ticket a", "create_ticket b"]


def test_without_its_token_the_server_is_unreachable_and_the_activation_suspends(
        http_server: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(agents.TOKEN_ENV, "Bearer wrong")
    (outcome,), _ = activate("tests.mcp.agents:http_agent", [event(1, "x")], Journal())
    assert isinstance(outcome, Failed) and outcome.error.retriable
    assert outcome.error.error_type.endswith(ToolUnavailable.__name__)
    assert "desk" in outcome.error.message and runs(http_server) == []


def test_a_tool_the_server_reports_as_failed_is_a_tool_dead_letter_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(agents.LOG_ENV, str(tmp_path / "stdio.log"))
    (outcome,), _ = activate("tests.mcp.agents:failing_agent", [event(1, "x")], Journal())
    assert isinstance(outcome, Failed) and not outcome.error.retriable
    assert outcome.error.stage == ErrorRecord.STAGE_TOOL
    assert "desk__fail" in outcome.error.message and "reported an error" in outcome.error.message
