"""The tracing port's vocabulary, its flags and variables, and trace context on the wire."""

from __future__ import annotations

import json
import time

import pytest

from beam_agents.errors import ConfigError, EventDecodeError
from beam_agents.hosting import (
    ActivationRuntime,
    KeyedState,
    decode_event_json,
    error_from_json,
    error_to_json,
    load_agent,
    otel_flags_from_env,
    tracing_config_from_flags,
)
from beam_agents.model import ModelResponse
from beam_agents.runtime import AgentConfig, Committed, Failed, RetryPolicy
from beam_agents.testing import ScriptedModel, make_event
from beam_agents.tracing import RecordingTracer, TracingConfig

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _activate(script: list[object], tracer: RecordingTracer, *, attempt: int = 1,
              max_attempts: int = 3) -> Committed | Failed:
    config = AgentConfig(agent="tests.otel.agents:once",
                         retry=RetryPolicy(retry_initial_ms=1, retry_max_ms=1,
                                           max_attempts=max_attempts))
    with ActivationRuntime(config, agent=load_agent(config.agent), provider=ScriptedModel(script),
                           clock=time.monotonic, tracer=tracer) as runtime:
        return runtime.activate(KeyedState(), make_event(b"user-1", b"hi", event_id="e"),
                                attempt=attempt)


def test_prompts_stay_off_spans_unless_content_capture_is_on() -> None:
    answer = ModelResponse(text="secret answer", model_id="m", finish_reason="stop")
    quiet, loud = RecordingTracer(), RecordingTracer(capture_content=True)
    _activate([answer], quiet)
    _activate([answer], loud)
    (chat,) = quiet.named("chat")
    assert not any("messages" in name for name in chat.attributes)
    (chat,) = loud.named("chat")
    assert "secret answer" in str(chat.attributes["gen_ai.output.messages"])
    assert "hi" in str(chat.attributes["gen_ai.input.messages"])


def test_the_entity_key_goes_as_its_hash_unless_clear_keys_is_on() -> None:
    hashed, clear = RecordingTracer(), RecordingTracer(clear_keys=True)
    _activate(["ok"], hashed)
    _activate(["ok"], clear)
    assert "beam_agents.entity.key" not in hashed.named("invoke_agent")[0].attributes
    assert clear.named("invoke_agent")[0].attributes["beam_agents.entity.key"] == "user-1"


def test_a_failed_attempt_ends_suspended_until_its_last_then_dead_lettered() -> None:
    from beam_agents.errors import ProviderUnavailable  # noqa: PLC0415

    early, last = RecordingTracer(), RecordingTracer()
    assert isinstance(_activate([ProviderUnavailable("503")], early, attempt=1), Failed)
    assert isinstance(_activate([ProviderUnavailable("503")], last, attempt=3), Failed)
    (span,) = early.named("invoke_agent")
    assert span.attributes["beam_agents.outcome"] == "suspended" and span.error_type is None
    (span,) = last.named("invoke_agent")
    assert span.attributes["beam_agents.outcome"] == "dead_lettered"
    assert span.attributes["beam_agents.error.stage"] == "STAGE_MODEL"
    assert span.error_type == "beam_agents.errors.ProviderUnavailable" and span.link_attempt == 1
    (chat,) = last.named("chat")
    assert chat.error_type == "ProviderUnavailable"


def test_a_dead_letter_carries_the_attempts_context_and_reads_back() -> None:
    from beam_agents.errors import ProviderUnavailable  # noqa: PLC0415

    outcome = _activate([ProviderUnavailable("503")], RecordingTracer())
    assert isinstance(outcome, Failed) and outcome.error.traceparent.startswith("00-")
    assert error_from_json(error_to_json(outcome.error)).traceparent == outcome.error.traceparent


def test_a_json_lines_traceparent_becomes_the_events_and_a_conflict_names_the_field() -> None:
    line = json.dumps({"entity_key": "k", "event_time_ms": 1, "traceparent": PARENT})
    assert decode_event_json(line).attributes["traceparent"] == PARENT
    clash = json.dumps({"entity_key": "k", "event_time_ms": 1, "traceparent": PARENT,
                        "attributes": {"traceparent": "00-other"}})
    with pytest.raises(EventDecodeError) as raised:
        decode_event_json(clash)
    assert raised.value.field == "traceparent"


def test_standard_variables_become_flags_and_flags_win() -> None:
    argv = otel_flags_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
                                "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                                "OTEL_TRACES_SAMPLER_ARG": "0.1", "OTEL_SERVICE_NAME": "svc",
                                "OTEL_EXPORTER_OTLP_HEADERS": "api-key=a%3Db"})
    assert argv == ["--otel_exporter_otlp_endpoint=http://c:4318",
                    "--otel_exporter_otlp_headers=api-key=a%3Db", "--otel_service_name=svc",
                    "--otel_sample_ratio=0.1"]
    assert otel_flags_from_env({"OTEL_SDK_DISABLED": "true",
                                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}) == []
    with pytest.raises(ConfigError) as raised:
        otel_flags_from_env({"OTEL_TRACES_SAMPLER": "jaeger_remote"})
    assert raised.value.field == "OTEL_TRACES_SAMPLER"
    values = {"otel_exporter_otlp_endpoint": "http://c:4318", "otel_sample_ratio": "0.1",
              "otel_exporter_otlp_headers": "api-key=a%3Db"}
    config = tracing_config_from_flags(values.get, new_run_id=lambda: "r")
    assert config == TracingConfig(endpoint="http://c:4318", sample_ratio=0.1,
                                   headers=(("api-key", "a=b"),), run_id="r")
    assert config.url("traces") == "http://c:4318/v1/traces"


def test_tracing_is_off_without_an_endpoint_and_bad_values_name_their_flag() -> None:
    assert tracing_config_from_flags({}.get) is None
    for flag, value in (("otel_sample_ratio", "1.5"), ("otel_sample_ratio", "half"),
                        ("otel_capture_content", "yes"), ("otel_entity_keys", "raw"),
                        ("otel_exporter_otlp_endpoint", "collector:4318")):
        values = {"otel_exporter_otlp_endpoint": "http://c:4318", flag: value}
        with pytest.raises(ConfigError) as raised:
            tracing_config_from_flags(values.get)
        assert raised.value.field.startswith("otel_"), (flag, raised.value.field)


def test_the_providers_response_id_goes_on_the_paid_calls_span_and_never_into_its_record() -> None:
    """gen_ai.response.id: on the paid call's span only; the replayed bytes stay as they were."""
    with_id = ModelResponse(text="a", model_id="m", finish_reason="stop", response_id="chatcmpl-7")
    without = ModelResponse(text="a", model_id="m", finish_reason="stop")
    assert with_id.to_bytes() == without.to_bytes()
    paid = RecordingTracer()
    _activate([with_id], paid)
    (chat,) = paid.named("chat")
    assert chat.attributes["gen_ai.response.id"] == "chatcmpl-7"
    unnamed = RecordingTracer()
    _activate([without], unnamed)
    assert "gen_ai.response.id" not in unnamed.named("chat")[0].attributes


def test_an_openai_compatible_completions_id_becomes_the_response_id() -> None:
    from beam_agents.model.providers.openai_compat import OpenAICompatibleProvider  # noqa: PLC0415

    provider = OpenAICompatibleProvider(model_id="m", base_url="http://127.0.0.1:9")
    doc = {"id": "chatcmpl-42", "choices": [{"message": {"content": "hi"},
                                             "finish_reason": "stop"}]}
    assert provider.parse_completion(doc).response_id == "chatcmpl-42"
    assert provider.parse_completion({**doc, "id": 5}).response_id is None
