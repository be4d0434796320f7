"""Gemini provider: request/response translation at the google-genai boundary, and errors."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx
import pytest
from google.auth import exceptions as auth_errors
from google.genai import errors as genai_errors
from google.genai import types

from beam_agents.errors import ProviderRejected, ProviderUnavailable, RateLimitedError
from beam_agents.model._config import ModelConfig
from beam_agents.model._types import ModelRequest, ToolCall
from beam_agents.model.providers import build_provider
from beam_agents.model.providers.gemini import (
    GeminiProvider,
    build_config,
    build_contents,
    translate_error,
    translate_response,
)
from tests._http import LocalServer, send_json

CONVERSATION = ModelRequest(
    model_id="gemini-2.0-flash",
    messages=[
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "wx", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "rain, 7C"},
        {"role": "system", "content": "Answer in one line."},
    ],
    tools=[{"type": "function", "function": {
        "name": "wx", "description": "current weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
    sampling={"temperature": 0.2, "top_p": 0.9, "max_tokens": 128, "stop": "END", "seed": 3},
)


def test_messages_become_contents_and_a_system_instruction() -> None:
    contents, system = build_contents(CONVERSATION)
    assert system == "You are terse.\n\nAnswer in one line."
    assert [c.role for c in contents] == ["user", "model", "user"]
    assert contents[0].parts == [types.Part(text="Weather in Oslo?")]
    call = contents[1].parts[0].function_call
    assert (call.id, call.name, call.args) == ("c1", "wx", {"city": "Oslo"})
    answer = contents[2].parts[0].function_response
    assert (answer.id, answer.name, answer.response) == ("c1", "wx", {"output": "rain, 7C"})


def test_a_tool_answer_to_an_unknown_call_is_rejected() -> None:
    request = ModelRequest(model_id="g", messages=[
        {"role": "tool", "tool_call_id": "nope", "content": "x"}])
    with pytest.raises(ProviderRejected, match="nope"):
        build_contents(request)


def test_tools_and_sampling_become_the_generate_config() -> None:
    config = build_config(CONVERSATION, "sys")
    assert config.system_instruction == "sys"
    assert (config.temperature, config.top_p, config.max_output_tokens, config.seed) == (
        0.2, 0.9, 128, 3)
    assert config.stop_sequences == ["END"]
    assert config.automatic_function_calling.disable is True
    (declaration,) = config.tools[0].function_declarations
    assert declaration.name == "wx" and declaration.description == "current weather"
    assert declaration.parameters_json_schema == {
        "type": "object", "properties": {"city": {"type": "string"}}}


def test_a_plain_request_sets_no_tools_or_sampling() -> None:
    request = ModelRequest(model_id="g", messages=[{"role": "user", "content": "hi"}])
    config = build_config(request, None)
    assert config.tools is None and config.temperature is None
    assert config.system_instruction is None


def test_a_response_translates_text_calls_finish_and_usage() -> None:
    response = types.GenerateContentResponse(
        candidates=[types.Candidate(
            content=types.Content(role="model", parts=[
                types.Part(text="Let me think", thought=True),
                types.Part(text="It is "),
                types.Part(text="raining."),
                types.Part(function_call=types.FunctionCall(name="wx", args={"city": "Oslo"})),
            ]),
            finish_reason=types.FinishReason.STOP,
        )],
        usage_metadata=types.GenerateContentResponseUsageMetadata(
            prompt_token_count=11, candidates_token_count=4, total_token_count=15),
    )
    ours = translate_response(response, "gemini-2.0-flash")
    assert ours.text == "It is raining."
    assert ours.tool_calls == (ToolCall(id="call_0", name="wx", arguments={"city": "Oslo"}),)
    assert ours.finish_reason == "stop"
    assert ours.usage == {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15}
    assert ours.model_id == "gemini-2.0-flash" and not ours.cached


def test_a_blocked_prompt_is_rejected_and_an_empty_answer_is_unavailable() -> None:
    feedback = types.GenerateContentResponsePromptFeedback(block_reason=types.BlockedReason.SAFETY)
    blocked = types.GenerateContentResponse(prompt_feedback=feedback)
    with pytest.raises(ProviderRejected, match="SAFETY"):
        translate_response(blocked, "g")
    with pytest.raises(ProviderUnavailable, match="no candidates"):
        translate_response(types.GenerateContentResponse(candidates=[]), "g")


@pytest.mark.parametrize(("exc", "expected", "status"), [
    (genai_errors.ClientError(429, {"error": {"message": "quota", "status": "RESOURCE_EXHAUSTED"}}),
     RateLimitedError, 429),
    (genai_errors.ServerError(503, {"error": {"message": "down"}}), ProviderUnavailable, 503),
    (genai_errors.ServerError(500, {"error": {"message": "oops"}}), ProviderUnavailable, 500),
    (genai_errors.ClientError(408, {"error": {"message": "slow"}}), ProviderUnavailable, 408),
    (genai_errors.ClientError(400, {"error": {"message": "bad"}}), ProviderRejected, 400),
    (genai_errors.ClientError(403, {"error": {"message": "denied"}}), ProviderRejected, 403),
    (genai_errors.APIError(404, {"error": {"message": "no model"}}), ProviderRejected, 404),
    (httpx.ReadTimeout("slow"), ProviderUnavailable, None),
    (httpx.ConnectError("refused"), ProviderUnavailable, None),
    (TimeoutError(), ProviderUnavailable, None),
    (auth_errors.DefaultCredentialsError("none"), ProviderRejected, None),
    (auth_errors.TransportError("metadata server"), ProviderUnavailable, None),
])
def test_sdk_errors_map_onto_the_error_tree(exc, expected, status) -> None:
    mapped = translate_error(exc, "gemini-2.0-flash")
    assert type(mapped) is expected
    assert mapped.status == status and mapped.model_id == "gemini-2.0-flash"


def test_sdk_retries_are_off_and_the_timeout_is_in_milliseconds() -> None:
    options = GeminiProvider(model_id="g", api_key="k", timeout_s=2.5).http_options()
    assert options.retry_options is not None and options.retry_options.attempts == 1
    assert options.timeout == 2500


def test_build_provider_makes_a_vertex_or_api_key_provider() -> None:
    vertex = build_provider(ModelConfig(provider="gemini", model_id="gemini-2.0-flash",
                                        project="p", location="us-central1"))
    assert isinstance(vertex, GeminiProvider) and vertex.model_id == "gemini-2.0-flash"
    with pytest.raises(ValueError):
        GeminiProvider(model_id="g")


# Through the real SDK and its httpx transport, against a loopback server that
# speaks the Gemini REST shape: proves the translation end to end and that the
# SDK makes exactly one attempt.

@pytest.fixture
def gemini_server() -> Iterator[tuple[str, list[tuple[int, Any]], list[dict[str, Any]]]]:
    replies: list[tuple[int, Any]] = []
    seen: list[dict[str, Any]] = []

    def handle(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        seen.append({"path": handler.path, "json": json.loads(body)})
        status, reply = replies.pop(0)
        send_json(handler, json.dumps(reply).encode(), status)

    with LocalServer(handle) as server:
        yield server.url, replies, seen


def run(provider: GeminiProvider, request: ModelRequest):
    async def go():
        try:
            return await provider.complete(request)
        finally:
            await provider.aclose()

    return asyncio.run(go())


def test_the_sdk_round_trip_translates_and_makes_one_attempt(gemini_server) -> None:
    url, replies, seen = gemini_server
    replies.append((200, {"candidates": [{"content": {"role": "model", "parts": [{"text": "Hi!"}]},
                                          "finishReason": "MAX_TOKENS"}],
                          "usageMetadata": {"promptTokenCount": 2, "candidatesTokenCount": 1,
                                            "totalTokenCount": 3}}))
    replies.append((503, {"error": {"code": 503, "message": "overloaded",
                                    "status": "UNAVAILABLE"}}))
    provider = GeminiProvider(model_id="gemini-2.0-flash", api_key="k", base_url=url)
    response = run(provider, CONVERSATION)
    assert (response.text, response.finish_reason) == ("Hi!", "max_tokens")
    assert response.usage == {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3}
    assert seen[0]["path"].endswith("/models/gemini-2.0-flash:generateContent")
    body = seen[0]["json"]
    assert body["systemInstruction"]["parts"] == [{"text": "You are terse.\n\nAnswer in one line."}]
    assert body["generationConfig"]["maxOutputTokens"] == 128
    with pytest.raises(ProviderUnavailable, match="overloaded") as info:
        run(provider, CONVERSATION)
    assert info.value.status == 503
    assert len(seen) == 2  # one request per call: the SDK did not retry the 503
