"""A producer's trace runs through the native Flink job on Kafka to the intents it commits.

A producer puts its span's W3C ``traceparent`` in each record's header of that
name. The job (arrival order, tracing to a real Jaeger) makes each activation
a child of that span, and writes the activation's own ``traceparent`` as a
header of every intent and dead letter it commits, so a consumer continues
the one trace. Events without the header start traces of their own.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from beam_agents.hosting import error_from_json
from tests._kafka import consume, produce
from tests.flink.conftest import background_job, job_env, kafka_job, kafka_topics
from tools.jaeger.server import Jaeger

pytestmark = pytest.mark.timeout(300)

SERVICE = "beam-agents-flink-kafka"
PRODUCER_SPAN = "00f067aa0ba902b7"


def _event(key: str, payload: str) -> bytes:
    return json.dumps({"entity_key": key, "event_id": f"{key}-0", "event_time_ms": 1_000,
                       "payload": payload}).encode()


def test_a_producers_traceparent_header_runs_through_the_flink_job_to_its_outputs(
        kafka_broker: str, jaeger: Jaeger, tmp_path: Path) -> None:
    """Intents and dead letters carry the activation's traceparent, a child of the producer's."""
    name, topics = kafka_topics(kafka_broker)
    traced = {f"k{n}": uuid.uuid4().hex for n in range(3)}  # entity -> the producer's trace id
    events = [_event(key, "hello") for key in traced] + [_event("k3", "fail"),
                                                        _event("plain", "hello")]
    parent = {key: {"traceparent": f"00-{trace}-{PRODUCER_SPAN}-01".encode()}
              for key, trace in traced.items()}
    traced["k3"] = uuid.uuid4().hex
    parent["k3"] = {"traceparent": f"00-{traced['k3']}-{PRODUCER_SPAN}-01".encode()}
    keys = [json.loads(event)["entity_key"] for event in events]
    produce(kafka_broker, topics["events"], events, keys=[key.encode() for key in keys],
            headers=[parent.get(key, {}) for key in keys])
    command = kafka_job(kafka_broker, name, topics, "--event_order", "arrival",
                        "--agent", "tests.agents:counter", "--checkpointing_interval_ms", "500",
                        "--otel_exporter_otlp_endpoint", jaeger.endpoint,
                        "--otel_service_name", SERVICE, "--otel_metrics_exporter", "none",
                        "--parallelism", "1")
    with background_job(command, env=job_env(), log_dir=tmp_path / "flink-log"):
        intents = consume(kafka_broker, topics["intents"], expect=4, timeout_s=180)
        errors = consume(kafka_broker, topics["errors"], expect=1, timeout_s=60)
        spans = jaeger.wait_for_spans(SERVICE, 5, timeout_s=60)
    assert len(intents) == 4 and len(errors) == 1, (intents, errors)
    assert spans >= 5

    outputs = [(json.loads(value), headers) for _, value, headers in intents]
    outputs += [(json.loads(value), headers) for _, value, headers in errors]
    assert error_from_json(errors[0][1]).entity_key == b"k3"
    for doc, headers in outputs:
        # The header is the line's own field: one context, whichever a consumer reads.
        assert headers["traceparent"].decode() == doc["traceparent"]
        _, trace_id, span_id, _ = doc["traceparent"].split("-")
        key = doc["entity_key"]
        if key == "plain":  # no producer context: a trace of its own
            assert trace_id not in traced.values()
            continue
        assert trace_id == traced[key]
        spans_of_trace = {span["spanID"]: span for span in jaeger.trace(trace_id)}
        activation = spans_of_trace[span_id]
        assert activation["operationName"].startswith("invoke_agent ")
        assert [ref["spanID"] for ref in activation["references"]] == [PRODUCER_SPAN]
