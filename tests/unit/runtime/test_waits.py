"""Waiting for an answer (invariant 14): answered in time, timed out, answered late, bounded.

Through the real engine on the batch host's rules (`KeyRuns`): an input in
event time, each key's events in order. A wait's timeout is queued at its
deadline, so whether the answer or the deadline comes first is decided by
event time alone, whatever order the lines arrive in.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

import pytest

from beam_agents.hosting import KeyCells, KeyedEngine, start_runtime
from beam_agents.metrics import RecordingMetrics
from beam_agents.runtime import AgentConfig, AgentEvent, ErrorRecord, RetryPolicy
from beam_agents.runtime._batch import KeyRuns
from beam_agents.runtime._scheduler import Scheduler
from beam_agents.runtime._waits import PendingWaits
from beam_agents.testing import ScriptedModel

pytestmark = pytest.mark.timeout(60)


def refund(key: str, at_s: int, amount: int) -> bytes:
    return AgentEvent(entity_key=key.encode(), event_id=f"r{at_s}", event_time_ms=at_s * 1000,
                      payload=str(amount).encode()).SerializeToString(deterministic=True)


def approve(key: str, at_s: int, approved: bool = True) -> bytes:
    return AgentEvent(entity_key=key.encode(), event_id=f"a{at_s}", event_time_ms=at_s * 1000,
                      answers="approval", payload=json.dumps({"approved": approved}).encode()
                      ).SerializeToString(deterministic=True)


def run(groups: dict[str, list[bytes]], *, max_pending_waits: int = 16
        ) -> tuple[dict[str, list[dict[str, Any]]], RecordingMetrics, dict[str, KeyCells]]:
    metrics = RecordingMetrics()
    retry = RetryPolicy(retry_initial_ms=5, retry_max_ms=10, max_attempts=2)
    config = AgentConfig(agent="tests.agents:approval_agent", retry=retry,
                         max_pending_waits=max_pending_waits)
    by_key: dict[str, list[dict[str, Any]]] = {}
    with start_runtime(config, metrics=metrics, provider=ScriptedModel([])) as runtime:
        scheduler = Scheduler(runtime, max_in_flight=8, metrics=metrics)
        runs = KeyRuns(KeyedEngine(scheduler, retry=retry, metrics=metrics),
                       clock_ms=lambda: int(time.monotonic() * 1000))
        for key, events in groups.items():
            shuffled = list(events)
            random.Random(key).shuffle(shuffled)  # arrival order says nothing
            lines = [*runs.add(key, shuffled), *runs.finish()]
            by_key[key] = [{"channel": channel, **json.loads(line)} for channel, line in lines]
    return by_key, metrics, {}


def outputs(lines: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    return [(line["kind"], json.loads(line["payload"])) if line["channel"] == "intents"
            else ("error", line["stage"]) for line in lines]


def test_a_wait_answered_in_time_hands_the_agent_the_answer_with_its_request() -> None:
    out, metrics, _ = run({"k": [refund("k", 1, 50), approve("k", 5)]})
    assert outputs(out["k"]) == [
        ("wait", {"name": "approval", "deadline_ms": 11_000, "request": {"amount": 50}}),
        ("refund", {"approved": True, "request": {"amount": 50}})]
    assert metrics.get("beam_agents.runtime", "wait_timeouts_moot") == 1  # its timeout ran nothing


def test_a_wait_unanswered_past_its_deadline_delivers_a_timeout_activation() -> None:
    out, _, _ = run({"k": [refund("k", 1, 70)]})
    assert outputs(out["k"]) == [
        ("wait", {"name": "approval", "deadline_ms": 11_000, "request": {"amount": 70}}),
        ("refund", {"approved": False, "why": "no answer", "request": {"amount": 70}})]
    timeout = out["k"][1]
    assert timeout["event_id"] == "wait-timeout/approval/1" and timeout["seq"] == 2


def test_an_answer_after_the_timeout_still_runs_marked_late() -> None:
    out, _, _ = run({"k": [refund("k", 1, 70), approve("k", 30)]})
    assert [kind for kind, _ in outputs(out["k"])] == ["wait", "refund", "late_answer"]
    assert outputs(out["k"])[2][1] == {"approved": True, "request": None}


def test_a_pending_wait_never_blocks_the_keys_other_events() -> None:
    out, _, _ = run({"k": [refund("k", 1, 10), refund("k", 2, 20), approve("k", 3)]})
    kinds = outputs(out["k"])
    assert kinds[0][0] == "wait"
    # The second refund ran while the first waited, and could not wait under the same name.
    assert kinds[1] == ("error", ErrorRecord.Stage.Name(ErrorRecord.STAGE_WAIT))
    assert kinds[2] == ("refund", {"approved": True, "request": {"amount": 10}})


def test_past_the_bound_on_pending_waits_the_next_is_a_wait_dead_letter() -> None:
    waits = PendingWaits(None, limit=2)
    for name in ("a", "b"):
        waits.add(entity_key=b"k", name=name, deadline_ms=1, request=b"", seq=1)
    from beam_agents.errors import TooManyWaitsError  # noqa: PLC0415

    with pytest.raises(TooManyWaitsError, match="--max_pending_waits"):
        waits.add(entity_key=b"k", name="c", deadline_ms=1, request=b"", seq=1)
    assert PendingWaits(waits.to_bytes(), limit=2).names() == ("a", "b")


def test_a_corrupt_waits_cell_is_a_state_corrupt_dead_letter() -> None:
    from beam_agents.errors import StateCorruptError  # noqa: PLC0415

    with pytest.raises(StateCorruptError, match="waits"):
        PendingWaits(b"\xff\xff garbage", limit=2)
