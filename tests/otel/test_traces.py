"""Spans of activations, exported by the OpenTelemetry SDK to a real Jaeger and queried back."""

from __future__ import annotations

import socket
import time
import uuid
from typing import Any

import pytest

from beam_agents.errors import ProviderUnavailable
from beam_agents.hosting import ActivationRuntime, KeyedState, load_agent
from beam_agents.metrics import RecordingMetrics
from beam_agents.model import InMemoryCallJournal, ModelResponse
from beam_agents.otel import OtelTracer
from beam_agents.runtime import AgentConfig, Committed, Failed, RetryPolicy
from beam_agents.testing import ScriptedModel, make_event
from beam_agents.tracing import TracingConfig
from tools.jaeger.server import Jaeger

PRODUCER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PRODUCER_SPAN = "00f067aa0ba902b7"


def _tracer(endpoint: str, service: str, **config: Any) -> OtelTracer:
    return OtelTracer(TracingConfig(endpoint=endpoint, service_name=service,
                                    run_id=config.pop("run_id", "run-1"),
                                    schedule_delay_ms=50, export_metrics=False, **config))


def _runtime(agent: str, provider: Any, tracer: OtelTracer | None, *,
             metrics: RecordingMetrics | None = None, journal: Any = None,
             **config: Any) -> ActivationRuntime:
    settings = AgentConfig(agent=agent, retry=RetryPolicy(retry_initial_ms=1, retry_max_ms=1,
                                                          max_attempts=3), **config)
    return ActivationRuntime(settings, agent=load_agent(agent), provider=provider,
                             clock=time.monotonic, tracer=tracer, metrics=metrics,
                             journal=journal)


def _answer(text: str, model_id: str = "scripted") -> ModelResponse:
    return ModelResponse(text=text, model_id=model_id, finish_reason="stop",
                         usage={"prompt_tokens": 12, "completion_tokens": 5})


def _tags(span: dict[str, Any]) -> dict[str, Any]:
    return {tag["key"]: tag["value"] for tag in span["tags"]}


def _parent(span: dict[str, Any]) -> str | None:
    refs = [ref for ref in span["references"] if ref["refType"] == "CHILD_OF"]
    return refs[0]["spanID"] if refs else None


def _service() -> str:
    return f"test-{uuid.uuid4().hex[:8]}"


def test_an_activation_is_an_invoke_agent_span_under_the_producers_with_its_calls_as_children(
        jaeger: Jaeger) -> None:
    """THEN the producer's trace holds invoke_agent, execute_tool and chat; a repeat replays."""
    service = _service()
    tracer = _tracer(jaeger.endpoint, service)
    model = ScriptedModel([_answer("first answer", "scripted-1"),
                           _answer("second answer", "scripted-1")], model_id="scripted-1")
    event = make_event(b"user-7", b"A-42", event_id="e-1",
                       attributes={"traceparent": f"00-{PRODUCER_TRACE}-{PRODUCER_SPAN}-01"})
    with _runtime("tests.otel.agents:traced", model, tracer) as runtime:
        outcome = runtime.activate(KeyedState(), event)
    assert isinstance(outcome, Committed)
    tracer.shutdown()
    (intent,) = outcome.intents
    _, trace_id, span_id, flags = intent.traceparent.split("-")
    assert (trace_id, flags) == (PRODUCER_TRACE, "01")

    jaeger.wait_for_spans(service, 5)
    spans = {span["operationName"] + ("/replayed" if _tags(span).get(
        "beam_agents.call.replayed") else ""): span for span in jaeger.trace(PRODUCER_TRACE)
        if span["service"] == service}
    assert sorted(spans) == ["chat scripted-1", "chat scripted-1/replayed",
                             "execute_tool lookup", "invoke_agent tests.otel.agents:traced"]
    root = spans["invoke_agent tests.otel.agents:traced"]
    assert root["spanID"] == span_id, "the intent carries the activation's own context"
    assert _parent(root) == PRODUCER_SPAN
    assert {_parent(span) for name, span in spans.items() if span is not root} == {span_id}
    tags = _tags(root)
    assert tags["gen_ai.operation.name"] == "invoke_agent"
    assert tags["gen_ai.agent.name"] == "tests.otel.agents:traced"
    assert tags["beam_agents.outcome"] == "committed"
    assert tags["beam_agents.seq"] == 1 and tags["beam_agents.attempt"] == 1
    assert tags["beam_agents.event.id"] == "e-1"
    assert "beam_agents.entity.key" not in tags, "the key goes as its hash unless allowed"
    assert len(tags["beam_agents.entity.key_sha256"]) == 64
    assert tags["gen_ai.usage.input_tokens"] > 0
    assert tags["beam_agents.usage.replayed_tokens"] > 0
    paid = _tags(spans["chat scripted-1"])
    assert paid["gen_ai.request.model"] == "scripted-1"
    assert paid["gen_ai.response.model"] == "scripted-1"
    assert paid["gen_ai.response.finish_reasons"] == '["stop"]'
    assert paid["gen_ai.usage.input_tokens"] > 0 and paid["gen_ai.usage.output_tokens"] > 0
    assert "gen_ai.input.messages" not in paid, "no prompt text without the flag"
    replayed = _tags(spans["chat scripted-1/replayed"])
    assert replayed["beam_agents.call.source"] == "cache"
    assert "gen_ai.usage.input_tokens" not in replayed, "replayed tokens are never paid ones"
    assert replayed["beam_agents.usage.replayed_input_tokens"] > 0
    assert paid["span.kind"] == "client"
    assert _tags(spans["execute_tool lookup"])["gen_ai.tool.name"] == "lookup"


def test_a_retry_after_a_suspension_links_to_its_first_attempt_in_one_trace(
        jaeger: Jaeger) -> None:
    """THEN attempt 2 is in attempt 1's trace, links to it, and replays what attempt 1 paid."""
    service = _service()
    tracer = _tracer(jaeger.endpoint, service)
    model = ScriptedModel([_answer("paid once"), ProviderUnavailable("503"), _answer("later")])
    event = make_event(b"user-9", b"A-1", event_id="e-9")
    with _runtime("tests.otel.agents:traced", model, tracer) as runtime:
        first = runtime.activate(KeyedState(), event)
        assert isinstance(first, Failed) and first.error.retriable
        second = runtime.activate(KeyedState(llm_cache=first.llm_cache), event, attempt=2)
    assert isinstance(second, Committed)
    tracer.shutdown()
    assert first.error.traceparent.split("-")[1] == second.intents[0].traceparent.split("-")[1]
    trace_id = first.error.traceparent.split("-")[1]

    jaeger.wait_for_spans(service, 9)
    spans = [span for span in jaeger.trace(trace_id) if span["service"] == service]
    roots = sorted((span for span in spans if span["operationName"].startswith("invoke_agent")),
                   key=lambda span: _tags(span)["beam_agents.attempt"])
    assert [_tags(root)["beam_agents.outcome"] for root in roots] == ["suspended", "committed"]
    assert _tags(roots[0])["beam_agents.error.stage"] == "STAGE_MODEL"
    assert [(ref["refType"], ref["spanID"]) for ref in roots[1]["references"]] == [
        ("FOLLOWS_FROM", roots[0]["spanID"])]
    replayed = {span["operationName"]: _tags(span) for span in spans
                if _parent(span) == roots[1]["spanID"]
                and _tags(span).get("beam_agents.call.replayed") is True}
    assert sorted(replayed) == ["chat scripted", "execute_tool lookup"]
    assert replayed["chat scripted"]["beam_agents.call.source"] == "cache"


def test_a_rerun_over_the_journal_shows_its_calls_replayed_from_the_journal(
        jaeger: Jaeger) -> None:
    """THEN the rerun's chat spans are marked replayed (source journal), with nothing paid."""
    service = _service()
    journal = InMemoryCallJournal()
    event = make_event(b"user-3", b"hello", event_id="e-3")
    tracer = _tracer(jaeger.endpoint, service, run_id="first")
    with _runtime("tests.otel.agents:once", ScriptedModel([_answer("hi")]), tracer,
                  journal=journal) as runtime:
        assert isinstance(runtime.activate(KeyedState(), event), Committed)
    tracer.shutdown()
    rerun = _tracer(jaeger.endpoint, service, run_id="second")
    with _runtime("tests.otel.agents:once", ScriptedModel([]), rerun,
                  journal=journal) as runtime:
        outcome = runtime.activate(KeyedState(), event)
    assert isinstance(outcome, Committed)
    rerun.shutdown()

    jaeger.wait_for_spans(service, 4)
    chats = [span for trace in jaeger.traces(service) for span in trace["spans"]
             if span["operationName"].startswith("chat")]
    sources = sorted(_tags(span)["beam_agents.call.source"] for span in chats)
    assert sources == ["journal", "provider"]
    (replayed,) = [span for span in chats if _tags(span)["beam_agents.call.replayed"]]
    assert "gen_ai.usage.input_tokens" not in _tags(replayed)


@pytest.mark.parametrize(("ratio", "low", "high"), [(0.0, 0, 0), (1.0, 60, 60), (0.25, 6, 30)])
def test_sampling_keeps_the_share_of_activations_it_is_given(
        jaeger: Jaeger, ratio: float, low: int, high: int) -> None:
    """THEN 0 keeps none, 1 keeps all, a ratio about its share; every intent carries a context."""
    service = _service()
    tracer = _tracer(jaeger.endpoint, service, sample_ratio=ratio)
    model = ScriptedModel(lambda request: "ok")
    flags = set()
    with _runtime("tests.otel.agents:once", model, tracer) as runtime:
        for index in range(60):
            outcome = runtime.activate(KeyedState(), make_event(
                f"key-{index}".encode(), b"hi", event_id=f"e-{index}"))
            assert isinstance(outcome, Committed)
            flags.add(outcome.intents[0].traceparent.rsplit("-", 1)[1])
    tracer.shutdown()
    if high:
        jaeger.wait_for_spans(service, 2 * low)
    else:
        time.sleep(1.0)  # what was sent has had time to land
    kept = len(jaeger.traces(service))
    assert low <= kept <= high
    assert flags <= {"00", "01"} and (("01" in flags) == bool(high)), flags


def test_an_unreachable_collector_never_holds_an_activation_and_its_drops_are_counted() -> None:
    """THEN activations run while every export hangs; the spans that never got out are counted."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)  # accepts the connection and never answers
    try:
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        tracer = OtelTracer(TracingConfig(endpoint=endpoint, export_timeout_ms=5000,
                                          max_queue_size=8, schedule_delay_ms=10,
                                          export_metrics=False, run_id="x"))
        metrics = RecordingMetrics()
        tracer.report_to(metrics)
        model = ScriptedModel(lambda request: "ok")
        with _runtime("tests.otel.agents:once", model, tracer, metrics=metrics) as runtime:
            started = time.monotonic()
            outcomes = [runtime.activate(KeyedState(), make_event(
                f"k{index}".encode(), b"hi", event_id=f"e{index}")) for index in range(100)]
            elapsed = time.monotonic() - started
        assert all(isinstance(outcome, Committed) for outcome in outcomes)
        # A span export waiting on the collector would hold one activation for the
        # whole 5 s export timeout; 100 activations take far less than one of them.
        assert elapsed < 5.0, elapsed
        dropped = metrics.get("beam_agents.tracing", "spans_dropped")
        assert dropped >= 100, "a full buffer drops spans, and each is counted"
        assert tracer.spans_exported == 0
    finally:
        tracer.shutdown()
        silent.close()


def test_tracing_off_sends_nothing_and_passes_the_producers_context_on(jaeger: Jaeger) -> None:
    """THEN no span reaches the collector; the intent carries the producer's traceparent as is."""
    trace_id = uuid.uuid4().hex
    parent = f"00-{trace_id}-{PRODUCER_SPAN}-01"
    model = ScriptedModel(["ok"])
    with _runtime("tests.otel.agents:once", model, None) as runtime:
        outcome = runtime.activate(KeyedState(), make_event(
            b"k", b"hi", event_id="e", attributes={"traceparent": parent}))
    assert isinstance(outcome, Committed)
    assert outcome.intents[0].traceparent == parent
    time.sleep(1.0)
    assert jaeger.trace(trace_id) == []


def test_gen_ai_metrics_reach_the_collector_as_histograms(jaeger: Jaeger) -> None:
    """THEN gen_ai.client.token.usage (by token type) and .operation.duration arrive."""
    service = _service()
    tracer = OtelTracer(TracingConfig(endpoint=jaeger.endpoint, service_name=service,
                                      metrics_interval_ms=200, run_id="m"))
    model = ScriptedModel([_answer("ok"), _answer("ok")])
    with _runtime("tests.otel.agents:once", model, tracer) as runtime:
        for index in range(2):
            runtime.activate(KeyedState(), make_event(b"k", b"hi", event_id=f"m{index}"))
    tracer.shutdown()
    deadline = time.monotonic() + 20
    text = ""
    while time.monotonic() < deadline:
        text = jaeger.metrics_text()
        if service in text and "gen_ai_client_operation_duration" in text:
            break
        time.sleep(0.2)
    lines = [line for line in text.splitlines() if service in line]
    assert any(line.startswith("gen_ai_client_token_usage_count")
               and 'gen_ai_token_type="input"' in line and line.endswith(" 2") for line in lines)
    assert any(line.startswith("gen_ai_client_token_usage_bucket")
               and 'gen_ai_token_type="output"' in line for line in lines)
    assert any(line.startswith("gen_ai_client_operation_duration") for line in lines)
