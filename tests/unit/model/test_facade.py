"""The model facade: cache before breaker before provider (invariant 3), and its value types."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from typing import Any

import pytest

from beam_agents.errors import ProviderRejected, ProviderUnavailable, StateCorruptError
from beam_agents.metrics import RecordingMetrics
from beam_agents.model import _facade
from beam_agents.model._breaker import BreakerState, CircuitBreaker
from beam_agents.model._cache_key import compute_cache_key
from beam_agents.model._config import BreakerConfig
from beam_agents.model._facade import ModelClient, ModelFacade
from beam_agents.model._replay_cache import ReplayCache
from beam_agents.model._types import ModelRequest, ModelResponse, ToolCall

NS = "beam_agents.model"
ENTITY = b"user-7"
HELLO = [{"role": "user", "content": "hello"}]
BIG = 150_000  # characters: past the 100 KiB blob cap, so the cache keeps only a digest


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class ScriptedProvider:
    """Answers from a queue of texts or exceptions, and logs every call."""

    model_id = "scripted"

    def __init__(self, *outcomes: str | Exception, log: list[str] | None = None) -> None:
        self.outcomes = list(outcomes)
        self.requests: list[ModelRequest] = []
        self.log = log if log is not None else []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.log.append("provider.complete")
        self.requests.append(request)
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return ModelResponse(text=outcome, model_id=self.model_id, finish_reason="stop")

    async def aclose(self) -> None:
        pass


class LoggingCache:
    """Delegates to a real ReplayCache and logs get/put."""

    def __init__(self, inner: ReplayCache, log: list[str]) -> None:
        self.inner, self.log = inner, log

    def get(self, key: str) -> Any:
        self.log.append("cache.get")
        return self.inner.get(key)

    def put(self, key: str, response: bytes) -> Any:
        self.log.append("cache.put")
        return self.inner.put(key, response)


class LoggingBreaker(CircuitBreaker):
    def __init__(self, log: list[str]) -> None:
        super().__init__(BreakerConfig(), clock=FakeClock())
        self.log = log

    def before_call(self) -> None:
        self.log.append("breaker.before_call")
        super().before_call()

    def record_success(self) -> None:
        self.log.append("breaker.record_success")
        super().record_success()


def make_facade(provider: Any, *, cache: Any = None, breaker: CircuitBreaker | None = None,
                metrics: RecordingMetrics | None = None, seq: int = 1,
                run_sync: Callable[..., Any] | None = None) -> ModelFacade:
    client = ModelClient(
        provider=provider,
        breaker=breaker or CircuitBreaker(BreakerConfig(failure_threshold=1), clock=FakeClock()),
        metrics=metrics if metrics is not None else RecordingMetrics(), run_sync=run_sync)
    return ModelFacade(client=client,
                       cache=cache if cache is not None else ReplayCache(now_ms=1_000),
                       entity_key=ENTITY, seq=seq)


def ask(facade: ModelFacade, messages: Any = HELLO, **kwargs: Any) -> ModelResponse:
    return asyncio.run(facade.acomplete(messages, **kwargs))


def test_a_miss_runs_key_then_cache_then_breaker_then_provider_then_put(monkeypatch) -> None:
    log: list[str] = []

    def logging_key(*args: Any) -> str:
        log.append("compute_cache_key")
        return compute_cache_key(*args)

    monkeypatch.setattr(_facade, "compute_cache_key", logging_key)
    provider = ScriptedProvider("hi", log=log)
    facade = make_facade(provider, cache=LoggingCache(ReplayCache(now_ms=1), log),
                         breaker=LoggingBreaker(log))
    assert ask(facade).text == "hi"
    assert log == ["compute_cache_key", "cache.get", "breaker.before_call",
                   "provider.complete", "breaker.record_success", "cache.put"]


def test_a_hit_touches_neither_breaker_nor_provider() -> None:
    log: list[str] = []
    cache = ReplayCache(now_ms=1)
    metrics = RecordingMetrics()
    first = ask(make_facade(ScriptedProvider("hi"), cache=cache, metrics=metrics))
    provider = ScriptedProvider(log=log)  # an empty script: any call would fail
    replay = make_facade(provider, cache=LoggingCache(cache, log), breaker=LoggingBreaker(log),
                         metrics=metrics)
    again = ask(replay)
    assert log == ["cache.get"]
    assert again.cached and not first.cached
    assert again.to_bytes() == first.to_bytes()
    assert (metrics.get(NS, "cache_hits"), metrics.get(NS, "cache_misses"),
            metrics.get(NS, "provider_calls")) == (1, 1, 1)


def test_cached_responses_are_served_while_the_breaker_is_open() -> None:
    cache = ReplayCache(now_ms=1)
    breaker = CircuitBreaker(BreakerConfig(failure_threshold=1), clock=FakeClock())
    ask(make_facade(ScriptedProvider("kept"), cache=cache, breaker=breaker))
    breaker.record_failure()
    assert breaker.state is BreakerState.OPEN
    metrics = RecordingMetrics()
    provider = ScriptedProvider()
    facade = make_facade(provider, cache=cache, breaker=breaker, metrics=metrics)
    assert ask(facade).text == "kept"
    with pytest.raises(ProviderUnavailable) as info:
        ask(facade, [{"role": "user", "content": "something new"}])
    assert info.value.retriable
    assert provider.requests == []
    assert metrics.get(NS, "breaker_rejections") == 1
    assert metrics.get(NS, "provider_calls") == 0


def test_identical_requests_in_one_activation_replay_the_first_response() -> None:
    provider = ScriptedProvider("first", "second")
    facade = make_facade(provider)
    one, two = ask(facade, temperature=0.5), ask(facade, temperature=0.5)
    assert (one.text, two.text) == ("first", "first")
    assert two.cached
    assert len(provider.requests) == 1


def test_identical_requests_awaited_concurrently_also_replay_the_first() -> None:
    class Gated(ScriptedProvider):
        async def complete(self, request: ModelRequest) -> ModelResponse:
            await gate.wait()
            return await super().complete(request)

    provider = Gated("first", "second")
    facade = make_facade(provider)

    async def both() -> list[ModelResponse]:
        calls = [asyncio.ensure_future(facade.acomplete(HELLO)) for _ in range(2)]
        await asyncio.sleep(0)  # a yield, not a wait: both calls reach the provider gate
        gate.set()
        return list(await asyncio.gather(*calls))

    gate = asyncio.Event()
    one, two = asyncio.run(both())
    assert (one.text, two.text) == ("first", "first")
    assert [one.cached, two.cached] == [False, True]
    assert len(provider.requests) == 1


def test_a_changed_request_or_a_new_seq_asks_the_provider_again() -> None:
    cache = ReplayCache(now_ms=1)
    provider = ScriptedProvider("a", "b", "c")
    facade = make_facade(provider, cache=cache)
    ask(facade)
    assert ask(facade, seed=7).text == "b"
    assert ask(make_facade(provider, cache=cache, seq=2)).text == "c"


def test_a_digest_only_hit_calls_the_provider_and_counts_divergence_once_logged(caplog) -> None:
    cache = ReplayCache(now_ms=1)
    ask(make_facade(ScriptedProvider("a" * BIG), cache=cache))
    metrics = RecordingMetrics()
    provider = ScriptedProvider("b" * BIG, "c" * BIG)
    replay = make_facade(provider, cache=cache, metrics=metrics)
    with caplog.at_level(logging.WARNING, logger=_facade.__name__):
        first, second = ask(replay), ask(replay)
    assert (first.text, second.text) == ("b" * BIG, "c" * BIG)
    assert not first.cached
    assert len(provider.requests) == 2
    assert metrics.get(NS, "digest_only_hits") == 2
    assert metrics.get(NS, "replay_divergence") == 2
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "divergence" in warnings[0].getMessage()


def test_a_digest_only_hit_that_matches_is_not_divergence_and_keeps_the_entry() -> None:
    cache = ReplayCache(now_ms=1)
    ask(make_facade(ScriptedProvider("a" * BIG), cache=cache))
    metrics = RecordingMetrics()
    ask(make_facade(ScriptedProvider("a" * BIG), cache=cache, metrics=metrics))
    ask(make_facade(ScriptedProvider("z" * BIG), cache=cache, metrics=metrics))
    assert metrics.get(NS, "replay_divergence") == 1
    key = compute_cache_key("scripted", HELLO, [], {}, ENTITY, 1)
    entry = cache.get(key)
    assert entry is not None and entry.digest_only
    original = ModelResponse(text="a" * BIG, model_id="scripted", finish_reason="stop")
    assert entry.digest == hashlib.sha256(original.to_bytes()).digest()


def test_retriable_failures_open_the_breaker_and_stage_nothing() -> None:
    cache = ReplayCache(now_ms=1)
    metrics = RecordingMetrics()
    breaker = CircuitBreaker(BreakerConfig(failure_threshold=2), clock=FakeClock())
    provider = ScriptedProvider(ProviderUnavailable("503"), ProviderUnavailable("503"))
    facade = make_facade(provider, cache=cache, breaker=breaker, metrics=metrics)
    for _ in range(3):
        with pytest.raises(ProviderUnavailable):
            ask(facade)
    assert breaker.state is BreakerState.OPEN
    assert len(provider.requests) == 2
    assert (metrics.get(NS, "provider_errors"), metrics.get(NS, "breaker_rejections")) == (2, 1)
    assert not cache.dirty


def test_a_rejection_does_not_count_against_the_breaker() -> None:
    breaker = CircuitBreaker(BreakerConfig(failure_threshold=1), clock=FakeClock())
    metrics = RecordingMetrics()
    facade = make_facade(ScriptedProvider(ProviderRejected("400")), breaker=breaker,
                         metrics=metrics)
    with pytest.raises(ProviderRejected):
        ask(facade)
    assert breaker.state is BreakerState.CLOSED
    assert metrics.get(NS, "provider_errors") == 1


def test_a_cancelled_trial_call_frees_the_half_open_slot() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(BreakerConfig(failure_threshold=1, cooldown_s=5), clock=clock)
    breaker.record_failure()
    clock.now += 5

    class Hanging(ScriptedProvider):
        async def complete(self, request: ModelRequest) -> ModelResponse:
            raise asyncio.CancelledError  # as an activation timeout would

    with pytest.raises(asyncio.CancelledError):
        ask(make_facade(Hanging(), breaker=breaker))
    breaker.before_call()  # the slot is free: this call becomes the trial


def test_an_undecodable_cached_response_is_corrupt_state_not_a_provider_call() -> None:
    cache = ReplayCache(now_ms=1)
    cache.put(compute_cache_key("scripted", HELLO, [], {}, ENTITY, 1), b"garbage")
    provider = ScriptedProvider("never")
    with pytest.raises(StateCorruptError) as info:
        ask(make_facade(provider, cache=cache))
    assert info.value.cell == "llm_cache"
    assert provider.requests == []


def test_bad_requests_fail_before_the_cache_is_consulted() -> None:
    log: list[str] = []
    provider = ScriptedProvider(log=log)
    facade = make_facade(provider, cache=LoggingCache(ReplayCache(now_ms=1), log))
    with pytest.raises(ValueError, match=r"messages\[0\]\.role"):
        ask(facade, [{"role": "robot", "content": "x"}])
    with pytest.raises(TypeError, match=r"messages\[1\]\.content"):
        ask(facade, [{"role": "user", "content": "x"}, {"role": "user", "content": b"x"}])
    with pytest.raises(ValueError, match="unknown sampling"):
        ask(facade, temprature=0.1)
    with pytest.raises(ValueError):
        ask(facade, temperature=float("nan"))
    assert log == []


def test_complete_runs_the_coroutine_when_no_loop_is_running() -> None:
    facade = make_facade(ScriptedProvider("sync"))
    assert facade.complete(HELLO).text == "sync"


def test_complete_uses_the_injected_run_sync() -> None:
    seen: list[Any] = []

    def run_sync(coro: Any) -> Any:
        seen.append(coro)
        return asyncio.run(coro)

    facade = make_facade(ScriptedProvider("injected"), run_sync=run_sync)
    assert facade.complete(HELLO, max_tokens=5).text == "injected"
    assert len(seen) == 1


def test_complete_inside_a_running_loop_tells_async_agents_to_await() -> None:
    provider = ScriptedProvider("never")
    facade = make_facade(provider)

    async def agent() -> None:
        facade.complete(HELLO)

    with pytest.raises(RuntimeError, match=r"await ctx\.model\.acomplete"):
        asyncio.run(agent())
    assert provider.requests == []


def test_one_client_serves_every_activation_with_its_breaker_and_metrics() -> None:
    """The worker's client is shared; each activation's facade brings only its own values."""
    metrics = RecordingMetrics()
    breaker = CircuitBreaker(BreakerConfig(failure_threshold=1), clock=FakeClock())
    client = ModelClient(provider=ScriptedProvider("one", "two"), breaker=breaker,
                         metrics=metrics)
    first = ModelFacade(client=client, cache=ReplayCache(now_ms=1), entity_key=ENTITY, seq=1)
    second = ModelFacade(client=client, cache=ReplayCache(now_ms=1), entity_key=ENTITY, seq=2)
    assert (ask(first).text, ask(second).text) == ("one", "two")
    assert metrics.get(NS, "provider_calls") == 2
    breaker.record_failure()
    with pytest.raises(ProviderUnavailable):
        ask(ModelFacade(client=client, cache=ReplayCache(now_ms=1), entity_key=ENTITY, seq=3))


def test_the_older_keyword_form_warns_and_answers_the_same() -> None:
    """``ModelFacade(provider=..., breaker=..., metrics=...)`` still builds, with its client."""
    breaker = CircuitBreaker(BreakerConfig(), clock=FakeClock())
    with pytest.warns(DeprecationWarning, match=r"pass client=ModelClient\(\.\.\.\)"):
        old = ModelFacade(cache=ReplayCache(now_ms=1), provider=ScriptedProvider("same"),
                          breaker=breaker, metrics=RecordingMetrics(), entity_key=ENTITY,
                          seq=1, journal_ttl_ms=5)
    new = make_facade(ScriptedProvider("same"), breaker=breaker)
    assert ask(old).to_bytes() == ask(new).to_bytes()


def test_a_client_and_its_parts_passed_one_by_one_are_refused() -> None:
    client = ModelClient(provider=ScriptedProvider(), metrics=RecordingMetrics(),
                         breaker=CircuitBreaker(BreakerConfig(), clock=FakeClock()))
    with pytest.raises(TypeError, match="also journal_ttl_ms"):
        ModelFacade(client=client, cache=ReplayCache(now_ms=1), entity_key=ENTITY, seq=1,
                    journal_ttl_ms=5)
    with pytest.raises(TypeError, match="missing: breaker, metrics"):
        ModelFacade(cache=ReplayCache(now_ms=1), entity_key=ENTITY, seq=1,
                    provider=ScriptedProvider())


def test_responses_round_trip_through_canonical_bytes() -> None:
    response = ModelResponse(
        text="héllo", model_id="m", finish_reason="tool_calls", usage={"b": 2, "a": 1},
        tool_calls=(ToolCall(id="c1", name="lookup", arguments={"z": [1, 2], "a": None}),),
    )
    data = response.to_bytes()
    assert data == ModelResponse.from_bytes(data).to_bytes()
    assert ModelResponse.from_bytes(data, cached=True) == ModelResponse(
        text="héllo", model_id="m", finish_reason="tool_calls", usage={"a": 1, "b": 2},
        tool_calls=response.tool_calls, cached=True)
    assert b'"usage":{"a":1,"b":2}' in data and "héllo".encode() in data
    assert response.to_bytes() == ModelResponse(
        text="héllo", model_id="m", finish_reason="tool_calls", usage={"a": 1, "b": 2},
        tool_calls=response.tool_calls, cached=True).to_bytes()


def test_garbage_bytes_are_not_a_response() -> None:
    for data in (b"not json", b'{"v": 99}', b'{"v": 1}'):
        with pytest.raises(ValueError):
            ModelResponse.from_bytes(data)


def test_requests_accept_openai_and_bare_tools_and_an_assistant_tool_turn() -> None:
    request = ModelRequest(
        model_id="m",
        messages=[{"role": "system", "content": "be brief"},
                  {"role": "user", "content": "weather?"},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": "c1", "type": "function",
                       "function": {"name": "wx", "arguments": "{}"}}]},
                  {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
        tools=[{"type": "function", "function": {"name": "wx", "parameters": {}}},
               {"name": "bare"}],
        sampling={"stop": ["\n"], "max_tokens": 10},
    )
    assert len(request.messages) == 4 and len(request.tools) == 2
    with pytest.raises(ValueError, match="tool_call_id"):
        ModelRequest(model_id="m", messages=[{"role": "tool", "content": "x"}])
    with pytest.raises(ValueError, match="max_tokens"):
        ModelRequest(model_id="m", messages=HELLO, sampling={"max_tokens": 0})
