"""ScriptedModel: replies in order, failures on cue, loud exhaustion, calls counted."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from beam_agents.errors import ProviderRejected, ProviderUnavailable
from beam_agents.hosting import KeyedState
from beam_agents.model import ModelProvider, ModelRequest, ModelResponse
from beam_agents.runtime import AgentConfig, Committed, ErrorRecord, Failed
from beam_agents.testing import (
    ScriptedModel,
    ScriptExhaustedError,
    make_event,
    make_events,
    run_activation,
)
from tests.conftest import Run

pytestmark = pytest.mark.timeout(60)

SUPPORT_AGENT = AgentConfig(agent="examples.support_agent:agent")


def request(text: str = "hi") -> ModelRequest:
    return ModelRequest(model_id="scripted", messages=[{"role": "user", "content": text}])


def test_it_is_a_model_provider() -> None:
    assert isinstance(ScriptedModel([]), ModelProvider)


def test_replies_come_in_script_order_and_calls_are_counted(run: Run[Any]) -> None:
    model = ScriptedModel(["first", "second"], model_id="m-1")

    first = run(model.complete(request("a")))
    second = run(model.complete(request("b")))

    assert (first.text, second.text) == ("first", "second")
    assert (first.model_id, first.finish_reason, first.cached) == ("m-1", "stop", False)
    assert model.calls == 2
    assert [r.messages[0]["content"] for r in model.requests] == ["a", "b"]


def test_a_model_response_reply_is_returned_as_given(run: Run[Any]) -> None:
    scripted = ModelResponse(text="", model_id="scripted", finish_reason="tool_calls",
                             usage={"total_tokens": 3})
    model = ScriptedModel([scripted])
    assert run(model.complete(request())) is scripted


def test_an_exception_reply_raises_on_its_call_and_counts(run: Run[Any]) -> None:
    model = ScriptedModel([ProviderUnavailable("503"), "recovered"])

    with pytest.raises(ProviderUnavailable, match="503"):
        run(model.complete(request()))
    assert model.calls == 1
    assert run(model.complete(request())).text == "recovered"
    assert model.calls == 2


def test_running_out_of_replies_fails_loudly_naming_the_counts(run: Run[Any]) -> None:
    model = ScriptedModel(["only"])
    run(model.complete(request()))

    with pytest.raises(ScriptExhaustedError,
                       match="1 scripted reply but was called 2 times") as info:
        run(model.complete(request("one more question")))
    assert (info.value.scripted, info.value.call) == (1, 2)
    assert "one more question" in str(info.value)
    assert isinstance(info.value, AssertionError)
    assert model.calls == 2


def test_an_empty_script_fails_on_the_first_call(run: Run[Any]) -> None:
    with pytest.raises(ScriptExhaustedError, match="0 scripted replies"):
        run(ScriptedModel([]).complete(request()))


def test_a_callable_script_answers_from_the_request(run: Run[Any]) -> None:
    def answer(req: ModelRequest) -> str | Exception:
        content = str(req.messages[-1]["content"])
        return ProviderRejected("400") if content == "bad" else content.upper()

    model = ScriptedModel(answer)

    assert run(model.complete(request("echo"))).text == "ECHO"
    with pytest.raises(ProviderRejected):
        run(model.complete(request("bad")))
    assert model.calls == 2


def test_a_callable_script_returning_a_non_reply_raises_type_error(run: Run[Any]) -> None:
    model = ScriptedModel(lambda req: 42)  # type: ignore[arg-type, return-value]
    with pytest.raises(TypeError, match="reply to call 1"):
        run(model.complete(request()))


@pytest.mark.parametrize(("script", "names"), [
    (["ok", 3], r"script\[1\]"),
    ([ProviderUnavailable], r"script\[0\] is the exception class ProviderUnavailable"),
    ("reply", "script must be a list"),
    (7, "script must be a list"),
])
def test_bad_scripts_are_rejected_at_construction(script: Any, names: str) -> None:
    with pytest.raises(TypeError, match=names):
        ScriptedModel(script)


def test_model_id_must_be_a_non_empty_str() -> None:
    with pytest.raises(TypeError, match="model_id"):
        ScriptedModel([], model_id="")


def test_aclose_keeps_the_counters_and_the_position(run: Run[Any]) -> None:
    model = ScriptedModel(["a", "b"])
    run(model.complete(request()))
    run(model.aclose())
    run(model.aclose())
    assert model.calls == 1
    assert run(model.complete(request())).text == "b"


def test_concurrent_calls_each_take_one_reply(run: Run[Any]) -> None:
    model = ScriptedModel(["a", "b", "c"])

    async def three() -> list[ModelResponse]:
        return list(await asyncio.gather(*(model.complete(request(t)) for t in "xyz")))

    assert sorted(r.text for r in run(three())) == ["a", "b", "c"]
    assert model.calls == 3


def test_the_support_agent_replies_with_the_scripted_text() -> None:
    """One activation, one provider call; state fed back, the next event calls again."""
    model = ScriptedModel(["Your refund is on its way.", "Anything else?"])
    first_event, second_event = make_events(
        "customer-1", [{"text": "where is my refund", "name": "Ada"}, {"text": "thanks"}])

    first = run_activation(SUPPORT_AGENT, first_event, provider=model)

    assert isinstance(first, Committed), first
    [intent] = first.intents
    assert intent.kind == "reply"
    assert json.loads(intent.payload) == {"customer": "customer-1", "turns": 1,
                                          "text": "Your refund is on its way."}
    assert model.calls == 1
    [seen] = model.requests
    assert seen.messages[-1] == {"role": "user", "content": "where is my refund"}
    assert "Ada" in seen.messages[0]["content"]

    second = run_activation(
        SUPPORT_AGENT, second_event,
        KeyedState(memory=first.memory, llm_cache=first.llm_cache, seq=first.seq),
        provider=model)

    assert isinstance(second, Committed), second
    assert json.loads(second.intents[0].payload)["text"] == "Anything else?"
    assert second.seq == 2
    assert model.calls == 2


def test_a_replayed_activation_is_served_by_the_cache_not_the_model() -> None:
    model = ScriptedModel(["Hello!"])
    event = make_event("customer-1", {"text": "hi"}, event_id="e-1")
    first = run_activation(SUPPORT_AGENT, event, provider=model)
    assert isinstance(first, Committed)

    # The same seq from the same (empty) memory, with the committed replay cache.
    replay = run_activation(SUPPORT_AGENT, event, KeyedState(llm_cache=first.llm_cache),
                            provider=model)

    assert isinstance(replay, Committed)
    assert replay.intents == first.intents
    assert model.calls == 1


def test_a_scripted_provider_failure_fails_the_activation_at_stage_model() -> None:
    model = ScriptedModel([ProviderUnavailable("503 from the scripted model")])

    outcome = run_activation(SUPPORT_AGENT, make_event("customer-1", {"text": "hi"}),
                             provider=model)

    assert isinstance(outcome, Failed)
    assert outcome.error.stage == ErrorRecord.STAGE_MODEL
    assert outcome.error.retriable
    assert model.calls == 1


def test_an_exhausted_script_shows_in_the_failed_outcome() -> None:
    model = ScriptedModel([])

    outcome = run_activation(SUPPORT_AGENT, make_event("customer-1", {"text": "hi"}),
                             provider=model)

    assert isinstance(outcome, Failed)
    assert outcome.error.error_type.endswith("ScriptExhaustedError")
    assert "0 scripted replies" in outcome.error.message
