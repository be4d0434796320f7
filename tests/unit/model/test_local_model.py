"""LocalModel: deterministic templated replies, scripted JSONL replies, injected latency."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from beam_agents.errors import ConfigError
from beam_agents.model._config import LocalModelConfig, ModelConfig
from beam_agents.model._provider import ModelProvider
from beam_agents.model._types import ModelRequest, ToolCall
from beam_agents.model.providers import LocalModel, build_provider


def request(*contents: str) -> ModelRequest:
    messages = []
    for i, content in enumerate(contents):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": content})
    return ModelRequest(model_id="local", messages=messages)


def answer(model: LocalModel, req: ModelRequest):
    return asyncio.run(model.complete(req))


def test_it_satisfies_the_provider_port() -> None:
    assert isinstance(LocalModel(), ModelProvider)


def test_the_same_request_always_gets_byte_identical_responses() -> None:
    req = request("Can you summarise my last three orders?")
    assert answer(LocalModel(), req).to_bytes() == answer(LocalModel(), req).to_bytes()


def test_the_template_acknowledges_the_last_user_message_and_the_conversation() -> None:
    first = answer(LocalModel(), request("Where is my parcel?")).text
    later = answer(LocalModel(), request("Hi.", "Hello!", "My parcel is late. It was due Monday."))
    assert 'You asked: "Where is my parcel?"' in first
    assert "start of our conversation" in first
    assert '"My parcel is late."' in later.text
    assert "1 earlier message " in later.text
    assert later.finish_reason == "stop"
    assert later.usage["total_tokens"] == later.usage["prompt_tokens"] + len(later.text.split())


def test_different_messages_get_different_replies() -> None:
    texts = {answer(LocalModel(), request(f"Question number {i} about billing?")).text
             for i in range(5)}
    assert len(texts) == 5


def test_long_messages_are_summarised_not_echoed() -> None:
    long = "word " * 200
    reply = answer(LocalModel(), request(long)).text
    assert len(reply) < 400 and reply.count("word") < 30


def write_script(tmp_path: Path, *lines: str) -> str:
    path = tmp_path / "script.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def test_the_first_matching_script_line_wins_and_the_template_is_the_fallback(tmp_path) -> None:
    path = write_script(
        tmp_path,
        "# scripted replies",
        '{"match": "refund", "text": "Refund issued."}',
        "",
        '{"match": "refund", "text": "never used"}',
        '{"match": "order", "tool_calls": [{"name": "lookup", "arguments": {"id": "42"}}]}',
    )
    model = LocalModel.from_script_file(path)
    assert answer(model, request("I want a refund")).text == "Refund issued."
    tool = answer(model, request("where is my order"))
    assert tool.tool_calls == (ToolCall(id="call_0", name="lookup", arguments={"id": "42"}),)
    assert tool.finish_reason == "tool_calls"
    assert "Summary of your request" in answer(model, request("something else")).text


def test_scripts_match_only_the_last_user_message(tmp_path) -> None:
    model = LocalModel.from_script_file(write_script(tmp_path, '{"match": "refund", "text": "R"}'))
    assert answer(model, request("refund please", "ok", "thanks")).text != "R"


@pytest.mark.parametrize(("line", "why"), [
    ("{not json", "invalid JSON"),
    ('["a list"]', "JSON object"),
    ('{"match": 3, "text": "t"}', "'match' must be a str"),
    ('{"match": "", "text": "t"}', "'match' is empty"),
    ('{"match": "x"}', "'text' or 'tool_calls'"),
    ('{"match": "x", "text": "t", "extra": 1}', "unknown keys"),
    ('{"match": "x", "tool_calls": [{"arguments": {}}]}', "needs a str name"),
    ('{"match": "x", "tool_calls": [{"name": "f", "arguments": "[]"}]}', "must be an object"),
])
def test_a_bad_script_line_names_the_file_and_line(tmp_path, line, why) -> None:
    path = write_script(tmp_path, '{"match": "ok", "text": "fine"}', line)
    with pytest.raises(ConfigError, match=why) as info:
        LocalModel.from_script_file(path)
    assert f"{path}:2:" in str(info.value)
    assert info.value.field == "local.script_path"


def test_a_missing_script_is_a_config_error(tmp_path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        LocalModel.from_script_file(str(tmp_path / "missing.jsonl"))


def test_latency_goes_through_the_injected_sleep() -> None:
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    answer(LocalModel(latency_ms=250, sleep=fake_sleep), request("hi"))
    answer(LocalModel(sleep=fake_sleep), request("hi"))
    assert slept == [0.25]


def test_build_provider_makes_a_local_model_from_config(tmp_path) -> None:
    path = write_script(tmp_path, '{"text": "scripted"}')
    model = build_provider(ModelConfig(model_id="demo", local=LocalModelConfig(script_path=path)))
    assert isinstance(model, LocalModel) and model.model_id == "demo"
    assert answer(model, request("anything")).text == "scripted"


def test_building_a_local_model_loads_no_http_client_or_sdk() -> None:
    probe = ("import sys; from beam_agents.model.providers import build_provider;"
             "from beam_agents.model._config import ModelConfig; build_provider(ModelConfig());"
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'httpx'"
             " or m.startswith('google.genai')))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"
