"""AgentTestEnv: one runtime per test, events as dicts, results as Python values, replay."""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

import pytest

from beam_agents import AgentConfig, AgentContext, ConfigError, agent, tool
from beam_agents.errors import ProviderUnavailable
from beam_agents.runtime import RetryPolicy
from beam_agents.stores import InMemoryLongtermConfig
from beam_agents.testing import AgentTestEnv, DeadLetter, Emitted, ScriptedModel, calls_tool
from beam_agents.testing import _env as env_module


def echo(ctx: AgentContext) -> None:
    """Keep every text, answer through the model, save the last text long-term."""
    text = ctx.payload_json()["text"]
    if text == "/crash":
        raise ValueError("no such command")
    ctx.memory.append("conversation", text.encode(), max_items=20)
    reply = ctx.model.complete([{"role": "user", "content": text}])
    if ctx.memory.has_longterm:
        ctx.memory.longterm.save("last", text.encode())
    ctx.emit("reply", {"text": reply.text})


def test_a_callable_agent_runs_without_an_import_path() -> None:
    with AgentTestEnv(echo, model=ScriptedModel(["Hi!"])) as env:
        sent = env.send("c-1", text="hello")
    assert sent.intents == (Emitted(kind="reply", payload={"text": "Hi!"}, entity_key="c-1",
                                    event_id="e-1", seq=1, index=0),)


def test_an_import_path_still_names_the_agent() -> None:
    with AgentTestEnv("tests.unit.testing.test_env:echo", model=ScriptedModel(["Hi!"])) as env:
        env.send("c-1", text="hello")
    assert env.config.agent_name == "tests.unit.testing.test_env:echo"
    assert [intent.payload for intent in env.intents] == [{"text": "Hi!"}]


def test_a_callable_names_itself_by_module_and_name() -> None:
    assert AgentConfig(agent=echo).agent_name == "tests.unit.testing.test_env:echo"


@pytest.mark.parametrize("bad", [42, None, "no_colon"])
def test_an_agent_that_is_neither_callable_nor_a_path_is_a_config_error(bad: object) -> None:
    with pytest.raises(ConfigError, match=repr(bad)) as raised:
        AgentTestEnv(bad)  # type: ignore[arg-type]
    assert raised.value.field == "AgentConfig.agent"


def test_one_runtime_serves_every_event_of_the_test(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[object] = []
    real = env_module.start_runtime

    def counting(*args: Any, **kwargs: Any) -> Any:
        started.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(env_module, "start_runtime", counting)
    with AgentTestEnv(echo, model=ScriptedModel(["a", "b", "c"])) as env:
        for text in ("one", "two", "three"):
            env.send("c-1", text=text)
    assert len(started) == 1
    assert len(env.intents) == 3


def test_state_is_kept_between_events_without_threading_it_by_hand() -> None:
    with AgentTestEnv(echo, model=ScriptedModel(["a", "b"])) as env:
        env.send("c-1", text="first")
        env.send("c-1", text="second")
        assert env.memory("c-1").ring("conversation") == (b"first", b"second")
        assert env.intents[1].seq == 2


def test_a_payload_is_a_dict_or_keyword_fields_never_both() -> None:
    with AgentTestEnv(echo, model=ScriptedModel(["a", "b"])) as env:
        env.send("c-1", {"text": "x"})
        env.send("c-1", text="x")
        assert [intent.payload for intent in env.intents] == [{"text": "a"}, {"text": "b"}]
        with pytest.raises(TypeError, match="not both"):
            env.send("c-1", {"text": "x"}, text="y")


def test_a_failing_agent_is_a_dead_letter_with_a_stage_name() -> None:
    with AgentTestEnv(echo, model=ScriptedModel([])) as env:
        sent = env.send("c-1", text="/crash")
    assert sent.intents == ()
    [letter] = env.dead_letters
    assert isinstance(letter, DeadLetter)
    assert (letter.stage, letter.error_type, letter.message) == (
        "AGENT", "builtins.ValueError", "no such command")
    assert letter.payload == {"text": "/crash"}
    assert (letter.entity_key, letter.event_id, letter.retriable) == ("c-1", "e-1", False)


def test_a_transient_model_failure_is_retried_at_once_and_committed() -> None:
    """The backoff passes on the environment's clock, not the test's wall time."""
    model = ScriptedModel([ProviderUnavailable("503"), "back"])
    started = time.monotonic()
    with AgentTestEnv(echo, model=model, retry=RetryPolicy(retry_initial_ms=30_000)) as env:
        env.send("c-1", text="hello")
    assert time.monotonic() - started < 10
    assert [intent.payload for intent in env.intents] == [{"text": "back"}]
    assert env.dead_letters == [] and model.calls == 2


def test_working_memory_of_an_entity_that_never_ran_is_empty() -> None:
    with AgentTestEnv(echo, model=ScriptedModel([])) as env:
        assert len(env.memory("nobody")) == 0


def test_long_term_rows_are_read_per_entity() -> None:
    with AgentTestEnv(echo, model=ScriptedModel(["a", "b"])) as env:
        env.send("c-1", text="one")
        env.send("c-2", text="two")
        assert env.longterm("c-1") == {"last": b"one"}
        assert env.longterm("c-2") == {"last": b"two"}


def test_each_environment_has_a_long_term_store_of_its_own() -> None:
    with AgentTestEnv(echo, model=ScriptedModel(["a"])) as first:
        first.send("c-1", text="one")
    with AgentTestEnv(echo, model=ScriptedModel([])) as second:
        assert second.longterm("c-1") == {}


def test_without_a_long_term_store_the_agent_sees_none_and_reading_rows_says_why() -> None:
    with AgentTestEnv(echo, model=ScriptedModel(["a"]), longterm=False) as env:
        env.send("c-1", text="one")
        with pytest.raises(ConfigError, match="longterm=False"):
            env.longterm("c-1")


def test_a_store_of_the_configs_own_is_refused() -> None:
    with pytest.raises(ConfigError, match="longterm_memory") as raised:
        AgentTestEnv(AgentConfig(agent=echo, longterm_memory=InMemoryLongtermConfig(name="x")))
    assert raised.value.field == "AgentConfig.longterm_memory"


def test_an_unknown_setting_is_named() -> None:
    with pytest.raises(TypeError, match="max_tokens"):
        AgentTestEnv(echo, max_tokens=5)


def test_closing_the_environment_closes_its_runtime() -> None:
    with AgentTestEnv(echo, model=ScriptedModel([])) as env:
        runtime = env._run.runtime
    with pytest.raises(RuntimeError, match="after close"):
        runtime.run(_nothing())
    env.close()  # idempotent


async def _nothing() -> None:
    return None


def test_replay_reruns_every_event_over_the_recorded_calls_and_pays_nothing() -> None:
    model = ScriptedModel([ProviderUnavailable("503"), "a", "b"])
    with AgentTestEnv(echo, model=model) as env:
        env.send("c-1", text="one")
        env.send("c-2", text="two")
        env.send("c-1", text="/crash")
        env.replay()
        assert model.calls == 3


_counter = itertools.count()


def forgetful(ctx: AgentContext) -> None:
    """Emits what a process-wide counter says: not a function of its inputs."""
    reply = ctx.model.complete([{"role": "user", "content": "hi"}])
    ctx.emit("reply", {"text": reply.text, "n": next(_counter)})


def test_replay_fails_when_the_intents_differ() -> None:
    with AgentTestEnv(forgetful, model=ScriptedModel(["a"])) as env:
        env.send("c-1", text="x")
        with pytest.raises(AssertionError, match="intents differ at #0"):
            env.replay()


def untidy(ctx: AgentContext) -> None:
    """Remembers what a process-wide counter says."""
    ctx.memory.set("n", str(next(_counter)).encode())
    ctx.emit("done", {})


def test_replay_fails_when_the_working_memory_differs() -> None:
    with AgentTestEnv(untidy, model=ScriptedModel([])) as env:
        env.send("c-1", text="x")
        with pytest.raises(AssertionError, match="working memory of 'c-1' differs"):
            env.replay()


def chatty(ctx: AgentContext) -> None:
    """Asks the model something new each run."""
    reply = ctx.model.complete([{"role": "user", "content": f"hi {next(_counter)}"}])
    ctx.emit("reply", {"text": reply.text})


def test_replay_fails_when_a_call_would_be_paid_again() -> None:
    model = ScriptedModel(["a"])
    with AgentTestEnv(chatty, model=model) as env:
        env.send("c-1", text="x")
        with pytest.raises(AssertionError, match="1 model call"):
            env.replay()
    assert model.calls == 1


looked_up: list[str] = []


@tool
def lookup(order_id: str) -> dict[str, str]:
    """Look up an order.

    Args:
        order_id: The order's id.
    """
    looked_up.append(order_id)
    return {"order_id": order_id, "status": "shipped"}


@agent(tools=[lookup])
def shop(ctx: AgentContext) -> None:
    """Let the model call the tool, then answer."""
    result = ctx.model.run_tools([{"role": "user", "content": ctx.payload_json()["text"]}])
    ctx.emit("reply", {"text": result.text})


def test_replay_replays_tool_results_and_runs_no_tool() -> None:
    looked_up.clear()
    model = ScriptedModel([calls_tool("lookup", {"order_id": "A1"}), "It shipped."])
    with AgentTestEnv(shop, model=model) as env:
        env.send("c-1", text="where is A1?")
        assert env.intents[0].payload == {"text": "It shipped."}
        env.replay()
    assert looked_up == ["A1"] and model.calls == 2


def approver(ctx: AgentContext) -> None:
    """Waits an hour for an approval; says what became of it."""
    if ctx.timed_out is not None:
        ctx.emit("refund", {**ctx.timed_out.request_json(), "approved": False})
    elif ctx.answer is not None:
        ctx.emit("refund", {**(ctx.answer.request_json() or {}),
                            "approved": bool(ctx.answer.payload_json()["approved"])})
    else:
        ctx.wait_for("refund-A1", deadline_ms=ctx.now_ms + 3_600_000, request={"order": "A1"})
        ctx.emit("waiting", {})


def test_a_wait_is_answered_by_an_event_that_names_it() -> None:
    with AgentTestEnv(approver) as env:
        env.send("c-1", text="refund please")
        sent = env.send("c-1", {"approved": True}, answers="refund-A1")
    assert [intent.payload for intent in sent.intents] == [{"order": "A1", "approved": True}]


def test_a_wait_times_out_once_event_time_passes_its_deadline() -> None:
    with AgentTestEnv(approver) as env:
        env.send("c-1", text="refund please", event_time_ms=0)
        env.send("c-2", text="unrelated", event_time_ms=60_000)
        # Each wait is announced with an intent of its own, then the agent's.
        assert [i.kind for i in env.intents] == ["wait", "waiting", "wait", "waiting"]
        sent = env.advance_to(3_600_001)
        assert [intent.payload for intent in sent.intents] == [{"order": "A1",
                                                                 "approved": False}]
        env.replay()


def test_event_times_grow_by_step_unless_given() -> None:
    times: list[int] = []

    def clock(ctx: AgentContext) -> None:
        times.append(ctx.now_ms)

    with AgentTestEnv(clock, start_ms=1_000, step_ms=10) as env:
        env.send("c-1", text="a")
        env.send("c-1", text="b")
        env.send("c-1", text="c", event_time_ms=5_000)
        env.send("c-1", text="d")
    assert times == [1_000, 1_010, 5_000, 5_010]


def test_a_payload_that_is_not_json_reads_back_as_text_or_bytes() -> None:
    def raw(ctx: AgentContext) -> None:
        ctx.emit("text", "plain words")
        ctx.emit("bytes", b"\xff\x00")

    with AgentTestEnv(raw) as env:
        env.send("c-1", text="x")
    assert [intent.payload for intent in env.intents] == ["plain words", b"\xff\x00"]
    assert json.dumps([i.kind for i in env.intents]) == '["text", "bytes"]'


def test_agent_config_names_an_agent_that_is_not_callable() -> None:
    with pytest.raises(ConfigError, match="got 42") as raised:
        AgentConfig(agent=42)  # type: ignore[arg-type]
    assert raised.value.field == "AgentConfig.agent"
