"""Durable tool calls on the streaming host: a suspended activation replays its tool result.

`AgentDoFn` on the streaming DirectRunner, fed by a `TestStream`: `order_agent`
runs `lookup_order` (which logs each run to a file), then asks a model that
answers each request's first call with a 503. Every activation suspends after
its tool ran; its retry must take the tool's result from the replay cache
(invariant 13), so the log holds exactly one run per event.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.test_stream import TestStream as EventStream
from apache_beam.transforms.window import TimestampedValue

from beam_agents.beam import ERRORS, AgentDoFn, DecodeEvents
from beam_agents.errors import ProviderUnavailable
from beam_agents.model import BreakerConfig, ModelConfig, ModelRequest
from beam_agents.runtime import AgentConfig, RetryPolicy
from beam_agents.testing import ScriptedModel
from tests import agents

pytestmark = pytest.mark.timeout(180)

KEYED = beam.typehints.Tuple[bytes, bytes]
RETRY = RetryPolicy(retry_initial_ms=5, retry_max_ms=20, max_attempts=6)
KEYS, EVENTS = 3, 3

#: Lines the pipeline wrote, by output (filled in this process).
COLLECTED: dict[str, list[bytes]] = {"intents": [], "errors": []}
#: Model requests that already failed once, by their content.
FAILED: set[str] = set()
_LOCK = threading.Lock()


def collect(line: bytes, channel: str) -> None:
    COLLECTED[channel].append(line)


def fail_each_request_once(request: ModelRequest) -> str | BaseException:
    content = str(request.messages[-1]["content"])
    with _LOCK:
        first = content not in FAILED
        FAILED.add(content)
    return ProviderUnavailable("503 from the test provider") if first else f"noted: {content}"


def flaky_provider() -> ScriptedModel:
    return ScriptedModel(fail_each_request_once)


def line(key: int, n: int) -> bytes:
    return json.dumps({"entity_key": f"c{key}", "event_id": f"e{n}",
                       "event_time_ms": 1_000 * (n + 1), "payload": f"A{key}{n}"}).encode()


def stream() -> EventStream:
    # Past the wall clock: every wake timer the engine sets for a retry is due.
    events = EventStream().advance_processing_time(int(time.time()) + 86_400)
    for n in range(EVENTS):
        events = events.add_elements([TimestampedValue(line(k, n), n + 1) for k in range(KEYS)])
        events = events.advance_processing_time(1).advance_watermark_to(n + 1)
    return events.advance_watermark_to_infinity()


def test_an_outage_after_the_tool_ran_replays_its_result_on_retry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "tool-runs.log"
    monkeypatch.setenv(agents.TOOL_LOG_ENV, str(log))
    FAILED.clear()
    for lines in COLLECTED.values():
        lines.clear()
    config = AgentConfig(agent="tests.agents:order_agent", retry=RETRY,
                         model=ModelConfig(breaker=BreakerConfig(failure_threshold=1000)))
    options = PipelineOptions(["--runner=DirectRunner"])
    options.view_as(StandardOptions).streaming = True
    pipeline = TestPipeline(options=options)
    decoded = (pipeline
               | "Events" >> stream()
               | "Decode" >> beam.ParDo(DecodeEvents("json")).with_output_types(KEYED)
               .with_outputs(ERRORS, main="events"))
    activated = decoded.events | "Activate" >> beam.ParDo(
        AgentDoFn(config, provider=flaky_provider)).with_input_types(KEYED).with_outputs(
        ERRORS, main="intents")
    _ = activated.intents | "KeepIntents" >> beam.Map(collect, "intents")
    _ = ((decoded[ERRORS], activated[ERRORS])
         | "AllErrors" >> beam.Flatten()
         | "KeepErrors" >> beam.Map(collect, "errors"))
    pipeline.run().wait_until_finish()

    orders = [f"A{k}{n}" for k in range(KEYS) for n in range(EVENTS)]
    assert COLLECTED["errors"] == []
    assert len(FAILED) == KEYS * EVENTS  # every activation did suspend once
    intents = [json.loads(x) for x in COLLECTED["intents"]]
    assert Counter((i["entity_key"], i["event_id"]) for i in intents) == Counter(
        {(f"c{k}", f"e{n}"): 1 for k in range(KEYS) for n in range(EVENTS)})
    replies = sorted(json.loads(i["payload"])["order"]["order_id"] for i in intents)
    assert replies == sorted(orders)
    runs = agents.tool_runs(str(log))
    assert Counter(order for order, _ in runs) == Counter(dict.fromkeys(orders, 1))
