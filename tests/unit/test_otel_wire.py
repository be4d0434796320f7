"""The OTLP edge's own pieces, checked against the OpenTelemetry SDK and proto as oracles.

Spans are written to protobuf's wire format by hand (`beam_agents.otel._otlp`)
and histograms aggregated in place (`beam_agents.otel._histograms`), both
for cost (B14); these tests read what they produce with opentelemetry-proto's
generated classes and compare the sampling decision with the SDK's sampler.
The end-to-end checks against a real Jaeger are in tests/otel.
"""

from __future__ import annotations

import hashlib
import time

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.sampling import Decision, ParentBased, TraceIdRatioBased
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from beam_agents.otel import OtelTracer
from beam_agents.otel._histograms import Histograms
from beam_agents.otel._otlp import SpanRecord, encode_request, encode_resource_scope, encode_span
from beam_agents.tracing import TracingConfig

TRACE = bytes(range(1, 17))
SPAN = bytes(range(20, 28))
PARENT = bytes(range(30, 38))


def _value(any_value: object) -> object:
    kind = any_value.WhichOneof("value")  # type: ignore[attr-defined]
    if kind == "array_value":
        return [_value(item) for item in any_value.array_value.values]  # type: ignore[attr-defined]
    return getattr(any_value, kind)


def _attrs(key_values: object) -> dict[str, object]:
    return {kv.key: _value(kv.value) for kv in key_values}  # type: ignore[attr-defined]


def test_a_span_written_by_hand_reads_back_field_for_field() -> None:
    record = SpanRecord(
        TRACE, SPAN, PARENT, "chat local-éché", 3, 1_700_000_000_123_456_789,
        1_700_000_000_223_456_789,
        attributes={"s": "text é", "b": True, "i": 1, "neg": -5, "big": 2**62, "f": 0.25,
                    "list": ["stop", "length"], "empty": ""},
        events=[("beam_agents.admission.wait", 1_700_000_000_150_000_000,
                 {"beam_agents.wait_ms": 12.5}),
                ("beam_agents.held_back", 1_700_000_000_160_000_000, {})],
        links=[(TRACE, PARENT, {"beam_agents.link": "first_attempt"})],
        error="ProviderUnavailable")
    resource_scope = encode_resource_scope({"service.name": "svc", "n": 3}, "beam_agents")
    request = ExportTraceServiceRequest.FromString(
        encode_request(resource_scope, [encode_span(record)] * 2))

    (resource_spans,) = request.resource_spans
    assert _attrs(resource_spans.resource.attributes) == {"service.name": "svc", "n": 3}
    (scope_spans,) = resource_spans.scope_spans
    assert scope_spans.scope.name == "beam_agents"
    assert len(scope_spans.spans) == 2
    span = scope_spans.spans[1]
    assert (span.trace_id, span.span_id, span.parent_span_id) == (TRACE, SPAN, PARENT)
    assert (span.name, span.kind) == ("chat local-éché", 3)
    assert (span.start_time_unix_nano, span.end_time_unix_nano) == (
        1_700_000_000_123_456_789, 1_700_000_000_223_456_789)
    assert _attrs(span.attributes) == record.attributes
    assert span.attributes[1].value.WhichOneof("value") == "bool_value", "True is not 1"
    event, second = span.events
    assert (event.name, event.time_unix_nano) == ("beam_agents.admission.wait",
                                                  1_700_000_000_150_000_000)
    assert _attrs(event.attributes) == {"beam_agents.wait_ms": 12.5}
    assert (second.name, second.time_unix_nano, _attrs(second.attributes)) == (
        "beam_agents.held_back", 1_700_000_000_160_000_000, {})
    (link,) = span.links
    assert (link.trace_id, link.span_id) == (TRACE, PARENT)
    assert _attrs(link.attributes) == {"beam_agents.link": "first_attempt"}
    assert (span.status.code, span.status.message) == (2, "ProviderUnavailable")


def test_a_name_whose_values_change_type_keeps_each_values_own_type() -> None:
    spans = [SpanRecord(TRACE, SPAN, b"", "s", 1, 1, 2, attributes={"flag": value})
             for value in (True, 1, "1", 1.0, True, ["a"], ["a"])]
    request = ExportTraceServiceRequest.FromString(
        encode_request(encode_resource_scope({}, "s"), [encode_span(span) for span in spans]))
    read = [span.attributes[0].value for span in request.resource_spans[0].scope_spans[0].spans]
    assert [value.WhichOneof("value") for value in read] == [
        "bool_value", "int_value", "string_value", "double_value", "bool_value", "array_value",
        "array_value"]
    assert [_value(value) for value in read] == [True, 1, "1", 1.0, True, ["a"], ["a"]]


def test_a_root_span_has_no_parent_and_an_unset_status() -> None:
    record = SpanRecord(TRACE, SPAN, b"", "invoke_agent chat", 1, 1, 2)
    request = ExportTraceServiceRequest.FromString(
        encode_request(encode_resource_scope({}, "s"), [encode_span(record)]))
    span = request.resource_spans[0].scope_spans[0].spans[0]
    assert span.parent_span_id == b"" and span.status.code == 0 and not span.attributes


def test_samples_of_one_series_aggregate_whatever_the_order_of_their_attributes() -> None:
    histograms = Histograms(Resource.create({}), "beam_agents")
    assert histograms.data() is None
    name = "gen_ai.client.token.usage"
    histograms.record(name, 4, {"a": "x", "b": "y"})  # on a bound: (1, 4] is bucket 1
    histograms.record(name, 5, {"b": "y", "a": "x"})
    histograms.record(name, 0.5, {"a": "other"})
    histograms.record("not.a.genai.histogram", 1, {})
    data = histograms.data()
    assert data is not None
    (metric,) = data.resource_metrics[0].scope_metrics[0].metrics
    points = {tuple(sorted(point.attributes.items())): point for point in metric.data.data_points}
    both = points[(("a", "x"), ("b", "y"))]
    assert (both.count, both.sum, both.min, both.max) == (2, 9, 4, 5)
    assert both.bucket_counts[:3] == [0, 1, 1] and sum(both.bucket_counts) == 2
    assert points[(("a", "other"),)].bucket_counts[0] == 1


def _sdk_samples(trace_id: int, ratio: float, parent: str) -> bool:
    context = TraceContextTextMapPropagator().extract({"traceparent": parent}) if parent else None
    return ParentBased(TraceIdRatioBased(ratio)).should_sample(
        context, trace_id, "span").decision is Decision.RECORD_AND_SAMPLE


def test_the_sampling_decision_is_the_sdks_parent_based_ratio() -> None:
    producers = ["", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                 "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
                 "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # invalid version
                 "00-00000000000000000000000000000000-00f067aa0ba902b7-01"]  # invalid id
    for ratio in (0.0, 0.3, 1.0):
        tracer = OtelTracer(TracingConfig(endpoint="http://127.0.0.1:9", sample_ratio=ratio,
                                          export_metrics=False, run_id="r"))
        try:
            for parent in producers:
                for seq in range(200):
                    span = tracer.start("invoke_agent a", parent=parent,
                                        identity=(b"k", seq, "e"), attempt=1)
                    trace_id = int(span.traceparent.split("-")[1], 16)
                    assert span.recording == _sdk_samples(trace_id, ratio, parent), (
                        ratio, parent, seq)
                    if span.recording and parent.startswith("00-4bf9"):
                        assert span.traceparent.split("-")[1] == parent.split("-")[1]
        finally:
            tracer.shutdown()


def test_every_attempt_shares_a_trace_and_the_ids_are_derived_from_the_identity() -> None:
    tracer = OtelTracer(TracingConfig(endpoint="http://127.0.0.1:9", export_metrics=False,
                                      run_id="run-7"))
    try:
        first = tracer.start("invoke_agent a", parent="", identity=(b"k", 3, "e"), attempt=1)
        again = tracer.start("invoke_agent a", parent="", identity=(b"k", 3, "e"), attempt=2)
    finally:
        tracer.shutdown()
    seed = b"run-7|3|e|k"
    assert first.traceparent == (f"00-{hashlib.blake2b(seed, digest_size=16).hexdigest()}-"
                                 f"{hashlib.blake2b(seed + b'|1', digest_size=8).hexdigest()}-01")
    assert again.traceparent.split("-")[1] == first.traceparent.split("-")[1]
    assert again.traceparent.split("-")[2] != first.traceparent.split("-")[2]


def test_a_full_batch_is_sent_at_once_and_the_rest_waits_for_the_schedule_delay() -> None:
    """The export thread sends only full batches when one fills, never chasing the buffer.

    Draining to the end after each wake sent a request for every few spans that
    came in meanwhile (B14: 16-26 requests for 3,600 spans where 8 do).
    """
    sent: list[int] = []
    tracer = OtelTracer(TracingConfig(endpoint="http://127.0.0.1:9", export_metrics=False,
                                      schedule_delay_ms=600_000, max_queue_size=4096))

    def send(body: bytes) -> object:
        request = ExportTraceServiceRequest.FromString(body)
        sent.append(len(request.resource_spans[0].scope_spans[0].spans))
        return type("Sent", (), {"success": True})()

    tracer._send = send
    try:
        for index in range(1100):
            tracer.buffer(SpanRecord(TRACE, SPAN, b"", f"s{index}", 1, 1, 2,
                                     attributes={"finish": ("stop",), "n": index},
                                     events=[("e", 3, {"k": "v"})]))
        deadline = time.monotonic() + 30
        while sum(sent) < 1024 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # a thread that chased the buffer would send the rest now
        assert sent == [512, 512]
        tracer.flush()
        assert sent == [512, 512, 76]
    finally:
        tracer.shutdown()
