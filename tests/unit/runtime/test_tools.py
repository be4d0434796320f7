"""Tools an agent declares, and durable tool calls: a recorded result is never run again.

Invariant 13, through the real engine (`KeyRuns` over `KeyedEngine`) with a
tool that logs each run to a file, as a side effect a test can count:
a transient outage, a rerun over the journal, a call cut off between its
effect and its record, a tool that asks to be tried later, one that fails,
and the bound on calls.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import pydantic
import pytest

from beam_agents.backend import JournalEntry, JournalWrite
from beam_agents.errors import ConfigError, JournalUnavailable, ProviderUnavailable
from beam_agents.hosting import KeyedEngine, start_runtime
from beam_agents.metrics import RecordingMetrics
from beam_agents.model import BreakerConfig, InMemoryCallJournal, ModelConfig, ModelRequest
from beam_agents.runtime import (
    AgentConfig,
    AgentEvent,
    ErrorRecord,
    RetryPolicy,
    Tool,
    agent,
    idempotency_key,
    tool,
)
from beam_agents.runtime._batch import KeyRuns
from beam_agents.runtime._scheduler import Scheduler
from beam_agents.testing import ScriptedModel, calls_tool
from tests import agents

pytestmark = pytest.mark.timeout(120)

RETRY = RetryPolicy(retry_initial_ms=5, retry_max_ms=20, max_attempts=6)
NS = "beam_agents.tools"


class JournalConfig:
    """Hands every runtime the same in-memory journal, as workers share a real one."""

    def __init__(self, journal: InMemoryCallJournal) -> None:
        self.journal = journal

    def open(self) -> InMemoryCallJournal:
        return self.journal


def event(key: str, n: int, payload: str) -> bytes:
    return AgentEvent(entity_key=key.encode(), event_id=f"e{n}", event_time_ms=1_000 * n,
                      payload=payload.encode()).SerializeToString(deterministic=True)


def run(agent_name: str, groups: dict[str, list[bytes]], provider: ScriptedModel, *,
        journal: InMemoryCallJournal | None = None, max_tool_calls: int = 32,
        agent_threads: int = 64) -> tuple[list[tuple[str, bytes]], RecordingMetrics]:
    metrics = RecordingMetrics()
    config = AgentConfig(agent=f"tests.agents:{agent_name}", retry=RETRY,
                         model=ModelConfig(breaker=BreakerConfig(failure_threshold=1000)),
                         call_journal=JournalConfig(journal) if journal else None,  # type: ignore[arg-type]
                         max_tool_calls_per_activation=max_tool_calls,
                         agent_threads=agent_threads)
    with start_runtime(config, metrics=metrics, provider=provider) as runtime:
        scheduler = Scheduler(runtime, max_in_flight=16, metrics=metrics)
        runs = KeyRuns(KeyedEngine(scheduler, retry=RETRY, metrics=metrics),
                       clock_ms=lambda: int(time.monotonic() * 1000))
        lines: list[tuple[str, bytes]] = []
        for key, events in groups.items():
            lines.extend(runs.add(key, events))
        lines.extend(runs.finish())
    return lines, metrics


def answers(content: str) -> str:
    return f"noted: {content}"


@pytest.fixture
def tool_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "tool-runs.log"
    monkeypatch.setenv(agents.TOOL_LOG_ENV, str(path))
    return path


GROUPS = {f"c{k}": [event(f"c{k}", n, f"A{k}{n}") for n in range(3)] for k in range(8)}


# -- declaring tools ---------------------------------------------------------------------------


def test_a_tools_schema_comes_from_its_type_hints_and_docstring() -> None:
    def refund(order_id: str, amount_cents: int, reason: Literal["late", "broken"] = "late",
               idempotency_key: str = "") -> dict[str, Any]:
        """Refund part of an order.

        Args:
            order_id: Which order.
            amount_cents: How much, in cents;
                never more than was paid.
            reason: Why.
        """
        return {}

    declared = tool(refund)
    assert declared.name == "refund" and declared.description == "Refund part of an order."
    assert declared.wants_key  # handed the key, never shown to the model
    assert declared.parameters == {
        "type": "object", "required": ["order_id", "amount_cents"],
        "properties": {
            "order_id": {"type": "string", "description": "Which order."},
            "amount_cents": {"type": "integer",
                             "description": "How much, in cents; never more than was paid."},
            "reason": {"enum": ["late", "broken"], "type": "string", "default": "late",
                       "description": "Why."}}}
    assert declared.spec()["function"]["name"] == "refund"
    assert declared.arguments({"order_id": "A1", "amount_cents": "150"}) == {
        "order_id": "A1", "amount_cents": 150, "reason": "late"}
    with pytest.raises(ValueError, match="amount_cents"):
        declared.arguments({"order_id": "A1", "amount_cents": "lots"})


def test_a_schema_given_whole_is_checked_as_json_schema() -> None:
    declared = tool(lambda city: {"city": city}, name="weather", parameters={
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    assert declared.arguments({"city": "Oslo"}) == {"city": "Oslo"}
    with pytest.raises(ValueError, match="'city' is a required property"):
        declared.arguments({})


class Address(pydantic.BaseModel):
    street: str
    zip_code: str


@pytest.mark.parametrize(("make", "names"), [
    (lambda: tool(lambda x: x, name="untyped"), "untyped"),
    (lambda: tool(lambda *parts: None, name="starred"), "starred"),
    (lambda: tool(lambda: None, name="has space"), "has space"),
    (lambda: agent(lambda ctx: None, tools=[tool(lambda: 1, name="twin"),
                                            tool(lambda: 2, name="twin")]), "twin"),
    (lambda: tool(lambda: None, name="whole", parameters={"type": "array"}), "whole"),
])
def test_a_bad_declaration_is_a_config_error_naming_the_tool(make: Any, names: str) -> None:
    with pytest.raises(ConfigError) as caught:
        make()
    assert names in str(caught.value) and caught.value.field is not None
    assert names in caught.value.field


def test_pydantic_models_describe_nested_arguments() -> None:
    def ship(order_id: str, to: Address) -> str:
        """Ship an order."""
        return order_id

    declared = tool(ship)
    assert isinstance(declared, Tool)
    assert declared.arguments({"order_id": "A", "to": {"street": "Main 1", "zip_code": "1"}}
                              )["to"] == Address(street="Main 1", zip_code="1")


# -- durable calls -----------------------------------------------------------------------------


def test_a_transient_model_outage_never_runs_a_recorded_tool_again(tool_log: Path) -> None:
    """Every first model call fails once: each event's tool still runs exactly once."""
    failed: set[str] = set()

    def flaky(request: ModelRequest) -> str | BaseException:
        content = str(request.messages[-1]["content"])
        if content not in failed:
            failed.add(content)
            return ProviderUnavailable("503 from the test server")
        return answers(content)

    lines, metrics = run("order_agent", GROUPS, ScriptedModel(flaky))

    assert Counter(channel for channel, _ in lines) == Counter({"intents": 24})
    assert metrics.get("beam_agents.runtime", "suspended") == 24
    runs = agents.tool_runs(str(tool_log))
    assert Counter(order for order, _ in runs) == Counter({f"A{k}{n}": 1 for k in range(8)
                                                           for n in range(3)})
    assert metrics.get(NS, "tool_calls") == 24
    assert metrics.get(NS, "tool_calls_replayed") == 24  # each retry replayed its record


def test_sync_agents_holding_every_thread_still_get_their_sync_tools_run(
        tool_log: Path) -> None:
    """Sixteen keys in flight on two agent threads: each blocked agent's tool still runs."""
    lines, _ = run("sync_order_agent", GROUPS, ScriptedModel(lambda _: "unused"),
                   agent_threads=2)

    assert Counter(channel for channel, _ in lines) == Counter({"intents": 24})
    assert len(agents.tool_runs(str(tool_log))) == 24


def test_a_rerun_over_the_journal_runs_no_tool_and_pays_no_call(tool_log: Path) -> None:
    journal = InMemoryCallJournal()
    first, _ = run("order_agent", GROUPS, ScriptedModel(lambda r: answers(
        str(r.messages[-1]["content"]))), journal=journal)
    runs_before = len(agents.tool_runs(str(tool_log)))
    again_model = ScriptedModel(lambda r: ProviderUnavailable("must not be asked"))
    again, metrics = run("order_agent", GROUPS, again_model, journal=journal)

    assert runs_before == 24
    assert len(agents.tool_runs(str(tool_log))) == 24  # nothing ran again
    assert again_model.calls == 0
    assert sorted(line for _, line in again) == sorted(line for _, line in first)
    assert metrics.get(NS, "tool_journal_hits") == 24


class CutOff(InMemoryCallJournal):
    """Refuses the write of one tool result, once: the effect happened, the record did not."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = False

    async def write(self, entry: JournalEntry) -> JournalWrite:
        if not self.refused and b'"order_id":"A00"' in entry.response:
            self.refused = True
            raise JournalUnavailable("the journal went away after the tool ran")
        return await super().write(entry)


def test_a_call_cut_off_before_its_record_runs_again_with_the_same_idempotency_key(
        tool_log: Path) -> None:
    journal = CutOff()
    lines, _ = run("order_agent", {"c0": [event("c0", 0, "A00")]},
                   ScriptedModel(lambda r: answers(str(r.messages[-1]["content"]))),
                   journal=journal)

    assert [channel for channel, _ in lines] == ["intents"]
    (first, second) = agents.tool_runs(str(tool_log))
    assert first == second == ("A00", idempotency_key(b"c0", 1, 0))


def test_a_call_cut_off_before_its_record_is_reconciled_instead_of_run_again(
        tool_log: Path) -> None:
    agents.RECONCILED.clear()
    journal = CutOff()
    lines, metrics = run("reconciling_agent", {"c0": [event("c0", 0, "A00")]},
                         ScriptedModel([]), journal=journal)

    assert len(agents.tool_runs(str(tool_log))) == 1  # the cut-off run only
    assert [idempotency_key(b"c0", 1, 0)] == agents.RECONCILED
    (line,) = [json.loads(line) for _, line in lines]
    assert json.loads(line["payload"])["status"] == "reconciled"
    assert metrics.get(NS, "tool_calls_reconciled") == 1


def test_a_tool_that_is_unavailable_suspends_the_activation_then_runs_once(
        tool_log: Path) -> None:
    agents.DOWN_ORDERS.add("A00")

    def recover(request: ModelRequest) -> str:
        return answers(str(request.messages[-1]["content"]))

    try:
        started = time.monotonic()
        model = ScriptedModel(lambda r: (agents.DOWN_ORDERS.discard("A00"), recover(r))[1])
        # The tool is down until the first model call of any event comes in.
        lines, metrics = run("order_agent", {"c0": [event("c0", 0, "A00")],
                                             "c1": [event("c1", 0, "A10")]}, model)
    finally:
        agents.DOWN_ORDERS.discard("A00")
    assert time.monotonic() - started < 60
    assert Counter(channel for channel, _ in lines) == Counter({"intents": 2})
    assert metrics.get(NS, "tool_errors") >= 1
    assert metrics.get("beam_agents.runtime", "suspended") >= 1


def test_a_tool_that_raises_is_a_tool_dead_letter_naming_it(tool_log: Path) -> None:
    lines, metrics = run("order_agent", {"c0": [event("c0", 0, "explode")]}, ScriptedModel([]))

    (record,) = [json.loads(line) for channel, line in lines if channel == "errors"]
    assert record["stage"] == ErrorRecord.Stage.Name(ErrorRecord.STAGE_TOOL)
    assert "tool 'lookup_order' raised KeyError" in record["message"]
    assert record.get("retriable", False) is False
    assert metrics.get(NS, "tool_errors") == 1


def test_past_the_bound_on_tool_calls_the_tool_does_not_run(tool_log: Path) -> None:
    lines, _ = run("two_lookups_agent", {"c0": [event("c0", 0, "A00")]}, ScriptedModel([]),
                   max_tool_calls=1)
    (record,) = [json.loads(line) for _, line in lines]
    assert "--max_tool_calls_per_activation 1" in record["message"]
    assert record["stage"] == ErrorRecord.Stage.Name(ErrorRecord.STAGE_TOOL)
    assert agents.tool_runs(str(tool_log))[-1][0] == "A00"  # only the first call ran


# -- the tool loop -----------------------------------------------------------------------------


def test_the_tool_loop_runs_what_the_model_asks_and_stops_at_its_answer(tool_log: Path) -> None:
    model = ScriptedModel([calls_tool("lookup_order", {"order_id": "A7"},
                                      ("lookup_order", {"order_id": "A88"})),
                           "A7 is packed and A88 is shipped"])
    lines, _ = run("order_loop_agent", {"c0": [event("c0", 0, "where are my orders?")]}, model)

    (line,) = [json.loads(line) for _, line in lines]
    assert json.loads(line["payload"]) == {"text": "A7 is packed and A88 is shipped", "steps": 2}
    assert sorted(order for order, _ in agents.tool_runs(str(tool_log))) == ["A7", "A88"]
    second = model.requests[1]
    results = [json.loads(m["content"]) for m in second.messages if m["role"] == "tool"]
    assert results == [{"result": {"order_id": "A7", "status": "packed"}},
                       {"result": {"order_id": "A88", "status": "shipped"}}]


def test_a_tool_loop_past_max_steps_is_a_typed_dead_letter(tool_log: Path) -> None:
    model = ScriptedModel([calls_tool("lookup_order", {"order_id": f"A{n}"}) for n in range(3)])
    lines, _ = run("order_loop_agent", {"c0": [event("c0", 0, "loop forever")]}, model)

    (record,) = [json.loads(line) for _, line in lines]
    assert record["stage"] == ErrorRecord.Stage.Name(ErrorRecord.STAGE_TOOL)
    assert "max_steps=3" in record["message"]


def test_a_call_the_model_gets_wrong_is_answered_with_the_error_for_it_to_correct(
        tool_log: Path) -> None:
    model = ScriptedModel([calls_tool("lookup_order", {"order": "A7"}),
                           calls_tool("lookup_order", {"order_id": "A7"}), "shipped"])
    lines, _ = run("order_loop_agent", {"c0": [event("c0", 0, "where is A7?")]}, model)

    assert [channel for channel, _ in lines] == ["intents"]
    fed_back = [json.loads(m["content"]) for m in model.requests[1].messages
                if m["role"] == "tool"]
    assert "order_id" in fed_back[0]["error"]
