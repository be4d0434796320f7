"""The native Flink job on a MiniCluster exports its spans to a real Jaeger.

The job ends with the input; whatever its workers' span buffers still hold
then must still leave (the runtime flushes its tracer at the function's
close, and the SDK's provider at the worker's exit), so Jaeger has one
``invoke_agent`` span per activation, each model call a ``chat`` child of
one. Which of the two flushes delivered the last spans is not told apart
here: with both removed the spans still arrive (the SDK exports every 5 s
while the job runs, and its provider shuts down at exit on its own).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.flink.conftest import REPO, run_job
from tools.jaeger.server import Jaeger

pytestmark = pytest.mark.timeout(300)

SERVICE = "beam-agents-flink-test"


def test_the_flink_job_exports_every_activations_spans_to_jaeger(jaeger: Jaeger,
                                                                tmp_path: Path) -> None:
    lines = (REPO / "examples" / "events.jsonl").read_bytes().splitlines()[:40]
    events = [line for line in lines if _is_event(line)]
    source = tmp_path / "events.jsonl"
    source.write_bytes(b"\n".join(events) + b"\n")
    run_job(["templates/flink/agent_job.py", "--input_files", str(source),
             "--output_path", str(tmp_path / "intents"), "--errors_path", str(tmp_path / "errors"),
             "--agent", "examples.support_agent:agent",
             "--otel_exporter_otlp_endpoint", jaeger.endpoint,
             "--otel_service_name", SERVICE, "--otel_metrics_exporter", "none",
             "--python_executable", sys.executable, "--parallelism", "1"])
    jaeger.wait_for_spans(SERVICE, 2 * len(events), timeout_s=30)
    spans = [span for trace in jaeger.traces(SERVICE) for span in trace["spans"]]
    agents = {s["spanID"]: s for s in spans if s["operationName"].startswith("invoke_agent ")}
    chats = [s for s in spans if s["operationName"].startswith("chat ")]
    # One activation per event, each of them exported though the job has ended.
    assert len(agents) == len(events), (len(agents), len(events))
    assert chats, "the support agent asks the model"
    for chat in chats:
        parents = [r["spanID"] for r in chat["references"] if r["refType"] == "CHILD_OF"]
        assert parents and parents[0] in agents, chat["operationName"]


def _is_event(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False
