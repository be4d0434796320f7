"""run_file: an agent over a file of JSON lines, as `beam-agents run` runs it, without Beam."""

from __future__ import annotations

import json
import random
from pathlib import Path

from beam_agents import AgentContext
from beam_agents.hosting import decode_event_json, error_from_json
from beam_agents.testing import AgentTestEnv, ScriptedModel, run_file


def counter(ctx: AgentContext) -> None:
    """Counts an entity's messages and says which one this is."""
    if ctx.payload_json().get("crash"):
        raise RuntimeError("asked to crash")
    seen = int(ctx.memory.get("seen") or b"0") + 1
    ctx.memory.set("seen", str(seen).encode())
    if ctx.memory.has_longterm:
        ctx.memory.longterm.save("seen", str(seen).encode())
    ctx.emit("count", {"n": seen, "text": ctx.payload_json()["text"]})


def _lines(path: Path) -> list[str]:
    events = [{"entity_key": f"c-{n % 3}", "event_id": f"evt-{n:02d}",
               "event_time_ms": 1_000 * n, "payload": {"text": f"m{n}"}} for n in range(12)]
    events.append({"entity_key": "c-0", "event_id": "evt-99", "event_time_ms": 99_000,
                   "payload": {"text": "boom", "crash": True}})
    lines = [json.dumps(event) for event in events] + ["{not json"]
    random.Random(7).shuffle(lines)  # arrival order says nothing: event time decides
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return lines


def test_each_entity_runs_in_event_time_order_whatever_the_file_order(tmp_path: Path) -> None:
    _lines(tmp_path / "events.jsonl")
    result = run_file(counter, tmp_path / "events.jsonl")
    by_key: dict[str, list[str]] = {}
    for intent in result.intents:
        by_key.setdefault(intent.entity_key, []).append(intent.payload["text"])
    assert by_key == {f"c-{k}": [f"m{n}" for n in range(k, 12, 3)] for k in range(3)}
    assert result.longterm == {"c-0": {"seen": b"4"}, "c-1": {"seen": b"4"},
                               "c-2": {"seen": b"4"}}


def test_a_malformed_line_and_a_failing_agent_are_dead_letters(tmp_path: Path) -> None:
    _lines(tmp_path / "events.jsonl")
    result = run_file(counter, tmp_path / "events.jsonl")
    assert sorted((d.stage, d.event_id) for d in result.dead_letters) == [
        ("AGENT", "evt-99"), ("DECODE", "")]


def test_the_outputs_are_written_as_beam_agents_run_writes_them(tmp_path: Path) -> None:
    _lines(tmp_path / "events.jsonl")
    out, errors = tmp_path / "intents.jsonl", tmp_path / "errors.jsonl"
    result = run_file(counter, tmp_path / "events.jsonl", output_path=out, errors_path=errors)
    written = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [(doc["kind"], doc["event_id"]) for doc in written] == [
        (intent.kind, intent.event_id) for intent in result.intents]
    records = [error_from_json(line) for line in errors.read_bytes().splitlines()]
    assert len(records) == 2


def test_a_file_run_agrees_with_the_test_environment_fed_the_same_events(tmp_path: Path) -> None:
    lines = _lines(tmp_path / "events.jsonl")
    result = run_file(counter, tmp_path / "events.jsonl", model=ScriptedModel([]))
    events = []
    for line in lines:
        try:
            events.append(decode_event_json(line))
        except ValueError:
            continue
    events.sort(key=lambda e: (e.entity_key, e.event_time_ms, e.event_id))
    with AgentTestEnv(counter) as env:
        for event in events:
            env.send(event.entity_key, event.payload, event_id=event.event_id,
                     event_time_ms=event.event_time_ms)
        assert sorted(env.intents, key=repr) == sorted(result.intents, key=repr)
