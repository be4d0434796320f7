"""OpenAI-compatible provider against a real HTTP server on 127.0.0.1 (no patched client).

The last tests go through the provider's ``transport`` seam with
``httpx.MockTransport`` instead, the way a user tests an agent without a server.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx
import pytest

from beam_agents.errors import ProviderRejected, ProviderUnavailable, RateLimitedError
from beam_agents.model._config import ModelConfig
from beam_agents.model._provider import ModelProvider
from beam_agents.model._types import ModelRequest, ToolCall
from beam_agents.model.providers import build_provider
from beam_agents.model.providers.openai_compat import OpenAICompatibleProvider
from tests._http import serving

COMPLETION = {
    "id": "chatcmpl-1", "object": "chat.completion", "model": "served-name",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "Hello there."}}],
    "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12},
}


@dataclass
class Reply:
    status: int = 200
    body: Any = field(default_factory=lambda: COMPLETION)
    hang: bool = False  # hold the response until the test ends


@dataclass
class FakeServer:
    url: str
    replies: list[Reply]
    requests: list[dict[str, Any]]
    release: threading.Event


@pytest.fixture
def server() -> Iterator[FakeServer]:
    replies: list[Reply] = []
    seen: list[dict[str, Any]] = []
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append({"path": self.path, "headers": dict(self.headers),
                         "json": json.loads(raw)})
            reply = replies.pop(0) if replies else Reply()
            if reply.hang:
                release.wait(5)
            payload = reply.body if isinstance(reply.body, bytes) else json.dumps(
                reply.body).encode()
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except OSError:  # the client gave up (timeout test)
                pass

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as url:
        try:
            yield FakeServer(url, replies, seen, release)
        finally:
            release.set()  # unblock held handlers before the server shuts down


REQUEST = ModelRequest(model_id="llama3", messages=[{"role": "user", "content": "hi"}])


def call(provider: OpenAICompatibleProvider, request: ModelRequest = REQUEST):
    async def run():
        try:
            return await provider.complete(request)
        finally:
            await provider.aclose()

    return asyncio.run(run())


def make(server: FakeServer, **kwargs: Any) -> OpenAICompatibleProvider:
    return OpenAICompatibleProvider(model_id="llama3", base_url=server.url, **kwargs)


def test_a_completion_is_translated(server: FakeServer) -> None:
    provider = make(server)
    assert isinstance(provider, ModelProvider)
    response = call(provider)
    assert (response.text, response.finish_reason, response.model_id) == (
        "Hello there.", "stop", "llama3")
    assert response.usage == {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}
    assert not response.cached
    assert [r["path"] for r in server.requests] == ["/v1/chat/completions"]


def test_the_body_carries_messages_tools_sampling_and_the_bearer_key(server: FakeServer) -> None:
    request = ModelRequest(
        model_id="llama3", messages=[{"role": "system", "content": "be brief"},
                                     {"role": "user", "content": "weather?"}],
        tools=[{"name": "wx", "parameters": {"type": "object"}}],
        sampling={"temperature": 0.0, "max_tokens": 64, "stop": ["\n"]},
    )
    call(make(server, api_key="sk-test"), request)
    sent = server.requests[0]
    assert sent["headers"]["Authorization"] == "Bearer sk-test"
    assert sent["json"] == {
        "model": "llama3",
        "messages": [{"role": "system", "content": "be brief"},
                     {"role": "user", "content": "weather?"}],
        "tools": [{"type": "function",
                   "function": {"name": "wx", "parameters": {"type": "object"}}}],
        "temperature": 0.0, "max_tokens": 64, "stop": ["\n"],
    }


def test_tool_calls_are_parsed(server: FakeServer) -> None:
    server.replies.append(Reply(body={"choices": [{"finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "tool_calls": [
            {"id": "call_9", "type": "function",
             "function": {"name": "wx", "arguments": '{"city": "Oslo"}'}}]}}]}))
    response = call(make(server))
    assert response.text == ""
    assert response.tool_calls == (ToolCall(id="call_9", name="wx", arguments={"city": "Oslo"}),)
    assert response.finish_reason == "tool_calls" and response.usage == {}


@pytest.mark.parametrize(("status", "error"), [
    (429, RateLimitedError), (500, ProviderUnavailable), (503, ProviderUnavailable),
    (408, ProviderUnavailable), (400, ProviderRejected), (401, ProviderRejected),
    (404, ProviderRejected),
])
def test_statuses_map_to_typed_errors_after_exactly_one_request(server, status, error) -> None:
    server.replies.append(Reply(status=status, body={"error": {"message": "nope"}}))
    with pytest.raises(error) as info:
        call(make(server))
    assert info.value.status == status and info.value.model_id == "llama3"
    assert "nope" in str(info.value)
    assert len(server.requests) == 1


def test_a_slow_server_times_out_as_unavailable_without_retry(server: FakeServer) -> None:
    server.replies.append(Reply(hang=True))
    with pytest.raises(ProviderUnavailable, match=r"did not answer within 0\.2s"):
        call(make(server, timeout_s=0.2))
    assert len(server.requests) == 1


def test_a_refused_connection_is_unavailable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    provider = OpenAICompatibleProvider(model_id="m", base_url=f"http://127.0.0.1:{port}")
    with pytest.raises(ProviderUnavailable, match="cannot reach"):
        call(provider)


@pytest.mark.parametrize("body", [b"<html>bad gateway</html>", {"choices": []},
                                  {"choices": [{"message": {"content": 5}}]}, ["a list"]])
def test_a_2xx_that_is_not_a_completion_is_unavailable(server: FakeServer, body) -> None:
    server.replies.append(Reply(body=body))
    with pytest.raises(ProviderUnavailable, match="malformed"):
        call(make(server))
    assert len(server.requests) == 1


def test_one_provider_serves_successive_event_loops(server: FakeServer) -> None:
    provider = make(server)
    first = asyncio.run(provider.complete(REQUEST))
    second = asyncio.run(provider.complete(REQUEST))  # a fresh loop, as asyncio.run per call
    assert first == second
    assert len(server.requests) == 2
    asyncio.run(provider.aclose())


def test_build_provider_targets_the_configured_endpoint(server: FakeServer) -> None:
    config = ModelConfig(provider="openai", model_id="llama3", base_url=server.url + "/v1",
                         timeout_s=5)
    provider = build_provider(config)
    assert isinstance(provider, OpenAICompatibleProvider)
    assert provider.url == server.url + "/v1/chat/completions"
    assert call(provider).text == "Hello there."


# -- the transport seam -----------------------------------------------------------------


def mocked(handler: Callable[[httpx.Request], httpx.Response]) -> OpenAICompatibleProvider:
    return OpenAICompatibleProvider(model_id="llama3", base_url="http://llm.test",
                                    transport=httpx.MockTransport(handler))


def test_a_200_through_a_mock_transport_is_translated() -> None:
    response = call(mocked(lambda request: httpx.Response(200, json=COMPLETION)))

    assert (response.text, response.finish_reason, response.model_id) == (
        "Hello there.", "stop", "llama3")
    assert response.usage == {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}


def test_a_503_through_a_mock_transport_is_unavailable() -> None:
    provider = mocked(lambda request: httpx.Response(503, text="overloaded"))

    with pytest.raises(ProviderUnavailable) as info:
        call(provider)

    assert (info.value.status, info.value.model_id) == (503, "llama3")


def test_a_400_through_a_mock_transport_is_rejected() -> None:
    provider = mocked(lambda request: httpx.Response(400, json={"error": "bad model"}))

    with pytest.raises(ProviderRejected) as info:
        call(provider)

    assert (info.value.status, info.value.model_id) == (400, "llama3")


def test_the_body_sent_through_a_mock_transport_carries_the_model_and_messages() -> None:
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json=COMPLETION)

    call(mocked(answer))

    assert [(r.method, str(r.url)) for r in sent] == [
        ("POST", "http://llm.test/v1/chat/completions")]
    assert json.loads(sent[0].content) == {
        "model": "llama3", "messages": [{"role": "user", "content": "hi"}]}
