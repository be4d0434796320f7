"""Structured output: an answer checked against a JSON schema or a pydantic model.

Valid at once; invalid, then valid after the model is told what was wrong;
invalid to the bound, a typed error. The schema is part of the cache key, the
OpenAI-compatible provider asks for it natively over HTTP, and the local model
answers in the shape.
"""

from __future__ import annotations

import asyncio
import json
from http.server import BaseHTTPRequestHandler
from typing import Any, Literal

import pydantic
import pytest

from beam_agents.errors import StructuredOutputError
from beam_agents.metrics import RecordingMetrics
from beam_agents.model import (
    BreakerConfig,
    CircuitBreaker,
    ModelClient,
    ModelFacade,
    ModelRequest,
    ReplayCache,
)
from beam_agents.model.providers.local import LocalModel
from beam_agents.model.providers.openai_compat import OpenAICompatibleProvider
from beam_agents.testing import ScriptedModel
from tests._http import LocalServer, chat_completion

pytestmark = pytest.mark.timeout(60)


class Triage(pydantic.BaseModel):
    category: Literal["billing", "bug", "question"]
    urgent: bool


SCHEMA = {"type": "object", "required": ["category"],
          "properties": {"category": {"enum": ["billing", "bug"]}}}
ASK = [{"role": "user", "content": "my invoice is wrong"}]


def facade(provider: Any, *, cache: ReplayCache | None = None,
           metrics: RecordingMetrics | None = None) -> ModelFacade:
    cache = cache if cache is not None else ReplayCache(now_ms=1)
    client = ModelClient(provider=provider,
                         breaker=CircuitBreaker(BreakerConfig(), clock=lambda: 0.0),
                         metrics=metrics or RecordingMetrics())
    return ModelFacade(client=client, cache=cache, entity_key=b"e", seq=1)


def test_a_valid_answer_comes_back_parsed_into_the_model_asked_for() -> None:
    model = ScriptedModel(['{"category": "billing", "urgent": true}'])
    answer = asyncio.run(facade(model).acomplete(ASK, response_schema=Triage))
    assert answer.parsed == Triage(category="billing", urgent=True)
    assert model.requests[0].response_schema == Triage.model_json_schema()


def test_an_invalid_answer_is_asked_again_with_what_was_wrong() -> None:
    metrics = RecordingMetrics()
    model = ScriptedModel(['{"category": "refund"}', '{"category": "bug"}'])
    answer = asyncio.run(facade(model, metrics=metrics).acomplete(ASK, response_schema=SCHEMA))
    assert answer.parsed == {"category": "bug"}
    retry = model.requests[1].messages
    assert retry[-2] == {"role": "assistant", "content": '{"category": "refund"}'}
    assert "'refund' is not one of ['billing', 'bug']" in retry[-1]["content"]
    assert metrics.get("beam_agents.model", "schema_retries") == 1


def test_answers_invalid_up_to_the_bound_are_a_typed_error_naming_the_problem() -> None:
    model = ScriptedModel(["not json", '{"urgent": "yes"}', '{"category": 3}'])
    with pytest.raises(StructuredOutputError) as caught:
        asyncio.run(facade(model).acomplete(ASK, response_schema=Triage, schema_attempts=3))
    assert caught.value.attempts == 3 and model.calls == 3
    assert "category" in caught.value.errors
    assert not caught.value.retriable


def test_the_schema_is_part_of_the_cache_key_and_a_replay_is_parsed_again() -> None:
    cache = ReplayCache(now_ms=1)
    model = ScriptedModel(['{"category": "bug", "urgent": false}', "plain answer",
                           '{"category": "bug"}'])
    first = asyncio.run(facade(model, cache=cache).acomplete(ASK, response_schema=Triage))
    plain = asyncio.run(facade(model, cache=cache).acomplete(ASK))
    other = asyncio.run(facade(model, cache=cache).acomplete(ASK, response_schema=SCHEMA))
    again = asyncio.run(facade(model, cache=cache).acomplete(ASK, response_schema=Triage))
    assert model.calls == 3  # three shapes, three calls; the fourth replayed
    assert plain.parsed is None and other.parsed == {"category": "bug"}
    assert again.cached and again.parsed == first.parsed


def test_the_local_model_answers_in_the_shape_asked_for() -> None:
    answer = asyncio.run(facade(LocalModel()).acomplete(ASK, response_schema=Triage))
    assert isinstance(answer.parsed, Triage)
    again = asyncio.run(facade(LocalModel()).acomplete(ASK, response_schema=Triage))
    assert again.text == answer.text  # deterministic


def test_the_openai_provider_asks_for_json_schema_natively_over_http() -> None:
    bodies: list[dict[str, Any]] = []

    def handle(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        bodies.append(json.loads(body))
        reply = chat_completion('{"category": "question", "urgent": false}')
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(reply)))
        handler.end_headers()
        handler.wfile.write(reply)

    async def ask(url: str) -> Any:
        provider = OpenAICompatibleProvider(model_id="m", base_url=url)
        try:
            return await facade(provider).acomplete(ASK, response_schema=Triage)
        finally:
            await provider.aclose()

    with LocalServer(handle) as server:
        answer = asyncio.run(ask(server.url))
    assert answer.parsed == Triage(category="question", urgent=False)
    (body,) = bodies
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == Triage.model_json_schema()


def test_a_request_with_a_schema_that_is_not_a_mapping_is_refused() -> None:
    with pytest.raises(TypeError, match="response_schema"):
        ModelRequest(model_id="m", messages=ASK, response_schema=["not", "a", "schema"])
    with pytest.raises(TypeError, match="pydantic model class"):
        asyncio.run(facade(ScriptedModel([])).acomplete(ASK, response_schema=42))
