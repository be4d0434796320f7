"""One trace from a producer's traceparent through a Beam run to its intents, and its rerun."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from beam_agents.beam import run
from tools.jaeger.server import Jaeger

PRODUCER_SPAN = "00f067aa0ba902b7"


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _run(tmp_path: Path, events: Path, out: str, *extra: str) -> list[dict[str, Any]]:
    result = run(["--input_files", str(events),
                  "--output_path", str(tmp_path / out / "intents.jsonl"),
                  "--errors_path", str(tmp_path / out / "errors.jsonl"),
                  "--agent", "tests.otel.agents:once",
                  "--call_journal", "sqlite", "--call_journal_path", str(tmp_path / "calls.db"),
                  *extra])
    result.wait_until_finish()
    return _lines(tmp_path / out / "intents.jsonl")


def test_a_producers_trace_runs_through_the_activation_to_the_intent_and_its_rerun(
        tmp_path: Path, jaeger: Jaeger) -> None:
    """THEN intents name the activation's span in the producer's trace; a rerun's calls replay."""
    service = f"pipeline-{uuid.uuid4().hex[:8]}"
    trace_ids = [uuid.uuid4().hex for _ in range(3)]
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps({
        "entity_key": f"user-{index}", "event_id": f"e-{index}", "event_time_ms": 1000 + index,
        "payload": f"question {index}", "traceparent": f"00-{trace_id}-{PRODUCER_SPAN}-01"}) + "\n"
        for index, trace_id in enumerate(trace_ids)))
    tracing = ["--otel_exporter_otlp_endpoint", jaeger.endpoint, "--otel_service_name", service,
               "--otel_metrics_exporter", "none"]

    intents = _run(tmp_path, events, "first", *tracing)
    assert sorted(intent["traceparent"].split("-")[1] for intent in intents) == sorted(trace_ids)
    # The DoFn's teardown flushed the worker's exporter: every span is there.
    assert jaeger.wait_for_spans(service, 6) == 6
    for intent in intents:
        _, trace_id, span_id, _ = intent["traceparent"].split("-")
        spans = {span["spanID"]: span for span in jaeger.trace(trace_id)}
        root = spans[span_id]
        assert root["operationName"] == "invoke_agent tests.otel.agents:once"
        assert [ref["spanID"] for ref in root["references"]] == [PRODUCER_SPAN]
        (chat,) = [span for span in spans.values() if span is not root]
        assert chat["references"][0]["spanID"] == span_id
        assert {tag["key"]: tag["value"] for tag in chat["tags"]}[
            "beam_agents.call.source"] == "provider"

    rerun = _run(tmp_path, events, "rerun", *tracing)
    assert [intent["payload"] for intent in sorted(rerun, key=lambda i: i["event_id"])] == [
        intent["payload"] for intent in sorted(intents, key=lambda i: i["event_id"])]
    assert jaeger.wait_for_spans(service, 12) == 12
    sources = sorted({tag["key"]: tag["value"] for tag in span["tags"]}["beam_agents.call.source"]
                     for trace_id in trace_ids for span in jaeger.trace(trace_id)
                     if span["operationName"].startswith("chat"))
    assert sources == ["journal"] * 3 + ["provider"] * 3
