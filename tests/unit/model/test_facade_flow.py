"""The model facade under a quota and a budget: invariants 11 and 12.

A 429 is flow control (the breaker never hears of it, the call waits and asks
again), tokens are counted once (paid, or replayed from the cache or the
journal), and a budget stops an entity before it pays past its cap.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from beam_agents.errors import (
    BudgetExceededError,
    ProviderUnavailable,
    QuotaExhaustedError,
    RateLimitedError,
)
from beam_agents.metrics import RecordingMetrics
from beam_agents.model import (
    BreakerConfig,
    BreakerState,
    CircuitBreaker,
    InMemoryCallJournal,
    ModelClient,
    ModelFacade,
    ModelRequest,
    ModelResponse,
    ProviderAdmission,
    ReplayCache,
    TokenBudget,
)
from beam_agents.model._send_gate import check_before_send

NS = "beam_agents.model"
ENTITY = b"user-7"
HELLO = [{"role": "user", "content": "hello"}]
USAGE = {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}


class Provider:
    """Answers with `USAGE`, or raises the next scripted exception first."""

    model_id = "scripted"

    def __init__(self, *failures: Exception, usage: dict[str, int] | None = None) -> None:
        self.failures = list(failures)
        self.calls = 0
        self.usage = USAGE if usage is None else usage

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return ModelResponse(text=f"answer {self.calls}", model_id=self.model_id,
                             usage=self.usage)

    async def aclose(self) -> None:
        pass


def facade(provider: Provider, *, metrics: RecordingMetrics, cache: ReplayCache | None = None,
           breaker: CircuitBreaker | None = None, budget: TokenBudget | None = None,
           journal: InMemoryCallJournal | None = None, journaled: Any = None,
           admission: ProviderAdmission | None = None) -> ModelFacade:
    client = ModelClient(
        provider=provider, metrics=metrics, journal=journal, admission=admission,
        breaker=breaker or CircuitBreaker(BreakerConfig(failure_threshold=1), clock=lambda: 0.0))
    return ModelFacade(
        client=client, cache=cache if cache is not None else ReplayCache(now_ms=1_000),
        entity_key=ENTITY, seq=1, journaled=journaled, now_ms=1_000,
        event_digest=b"\x01" * 32 if journal is not None else b"", budget=budget)


def run(make: Callable[[], Any]) -> Any:
    return asyncio.run(make())


def test_a_429_never_counts_toward_the_breaker_and_the_call_asks_again() -> None:
    """Invariant 11: six 429s in a row, a breaker that opens on one failure, still closed."""
    metrics = RecordingMetrics()
    breaker = CircuitBreaker(BreakerConfig(failure_threshold=1), clock=lambda: 0.0)
    provider = Provider(*(RateLimitedError("429", retry_after_s=0.01) for _ in range(6)))
    answer = run(lambda: facade(provider, metrics=metrics, breaker=breaker).acomplete(HELLO))
    assert answer.text == "answer 7"
    assert breaker.state is BreakerState.CLOSED
    assert breaker.consecutive_failures == 0
    assert (metrics.get(NS, "rate_limited"), metrics.get(NS, "provider_calls"),
            metrics.get(NS, "paid_calls"), metrics.get(NS, "provider_errors")) == (6, 7, 1, 0)


def test_a_503_still_opens_the_breaker() -> None:
    breaker = CircuitBreaker(BreakerConfig(failure_threshold=1), clock=lambda: 0.0)
    provider = Provider(ProviderUnavailable("503", status=503))
    with pytest.raises(ProviderUnavailable):
        run(lambda: facade(provider, metrics=RecordingMetrics(), breaker=breaker)
            .acomplete(HELLO))
    assert breaker.state is BreakerState.OPEN


def test_an_exhausted_quota_is_raised_and_the_next_call_is_held_without_calling() -> None:
    metrics = RecordingMetrics()
    admission = ProviderAdmission.unpaced()
    provider = Provider(QuotaExhaustedError("insufficient_quota"))

    async def scenario() -> None:
        with pytest.raises(QuotaExhaustedError):
            await facade(provider, metrics=metrics, admission=admission).acomplete(HELLO)
        with pytest.raises(QuotaExhaustedError, match="was not sent"):
            await facade(provider, metrics=metrics, admission=admission).acomplete(HELLO)

    asyncio.run(scenario())
    assert provider.calls == 1
    assert (metrics.get(NS, "quota_exhausted"), metrics.get(NS, "quota_held")) == (1, 1)


def test_tokens_of_a_paid_call_are_counted_as_paid() -> None:
    """Invariant 12: ``tokens_in`` and ``tokens_out`` are the usage of calls paid."""
    metrics = RecordingMetrics()
    run(lambda: facade(Provider(), metrics=metrics).acomplete(HELLO))
    assert (metrics.get(NS, "tokens_in"), metrics.get(NS, "tokens_out"),
            metrics.get(NS, "tokens_replayed")) == (30, 12, 0)


def test_a_cache_hit_counts_its_tokens_as_replayed_never_as_paid() -> None:
    metrics = RecordingMetrics()
    cache = ReplayCache(now_ms=1_000)

    async def scenario() -> None:
        model = facade(Provider(), metrics=metrics, cache=cache)
        await model.acomplete(HELLO)
        await model.acomplete(HELLO)  # the same request: replayed

    asyncio.run(scenario())
    assert (metrics.get(NS, "tokens_in"), metrics.get(NS, "tokens_out"),
            metrics.get(NS, "tokens_replayed")) == (30, 12, 42)


def test_a_journal_hit_counts_its_tokens_as_replayed_and_charges_the_budget() -> None:
    """The journal outlived a lost commit: the call is not paid again, its charge is redone."""
    journal = InMemoryCallJournal()
    run(lambda: facade(Provider(), metrics=RecordingMetrics(), journal=journal)
        .acomplete(HELLO))
    [entry] = journal.entries()
    metrics = RecordingMetrics()
    provider = Provider()
    budget = TokenBudget(None, entity_key=ENTITY, now_ms=1_000, max_tokens=1_000)
    run(lambda: facade(provider, metrics=metrics, journal=journal,
                       journaled={entry.cache_key: entry}, budget=budget).acomplete(HELLO))
    assert provider.calls == 0
    assert (metrics.get(NS, "tokens_in"), metrics.get(NS, "tokens_replayed")) == (0, 42)
    assert budget.tokens_used == 42


def test_a_budget_refuses_a_call_whose_estimate_would_pass_it_before_paying() -> None:
    provider = Provider()
    budget = TokenBudget(None, entity_key=ENTITY, now_ms=1_000, max_tokens=100)
    with pytest.raises(BudgetExceededError) as caught:
        run(lambda: facade(provider, metrics=RecordingMetrics(), budget=budget)
            .acomplete(HELLO, max_tokens=200))
    assert provider.calls == 0
    assert caught.value.tokens_used == 0
    assert caught.value.tokens_wanted > 100


def test_a_budget_is_charged_the_usage_and_a_call_that_passes_it_fails_after_paying() -> None:
    provider = Provider(usage={"prompt_tokens": 60, "completion_tokens": 30})
    budget = TokenBudget(None, entity_key=ENTITY, now_ms=1_000, max_tokens=150)

    async def scenario() -> None:
        model = facade(provider, metrics=RecordingMetrics(), budget=budget)
        await model.acomplete([{"role": "user", "content": "one"}], max_tokens=10)
        with pytest.raises(BudgetExceededError):
            await model.acomplete([{"role": "user", "content": "two"}], max_tokens=10)
        with pytest.raises(BudgetExceededError):  # over: nothing more is paid
            await model.acomplete([{"role": "user", "content": "three"}], max_tokens=1)

    asyncio.run(scenario())
    assert provider.calls == 2
    assert budget.tokens_used == 180  # within one call of the 150 cap


class WaitsForAConnection:
    """A provider whose requests wait for a pooled connection, then look at the send gate.

    The first call is answered 429 while the second waits for its connection:
    the second was admitted before the 429 was read, and must not be sent.
    """

    model_id = "pooled"

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.connection = asyncio.Event()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        text = str(request.messages[-1]["content"])
        if text == "second" and not self.sent.count("second"):
            await self.connection.wait()
        check_before_send()  # what the gated HTTP transport does at the first write
        self.sent.append(text)
        if text == "first" and self.sent.count("first") == 1:
            await asyncio.sleep(0.01)  # on the wire, while the second is admitted
            self.connection.set()  # the 429's connection frees up for the second
            raise RateLimitedError("429", retry_after_s=0.2)
        return ModelResponse(text=f"re {text}", model_id=self.model_id, usage=USAGE)

    async def aclose(self) -> None:
        pass


def test_a_call_admitted_before_a_429_is_held_back_until_its_retry_after_passed() -> None:
    """Invariant 11: nothing is sent after a 429 was read and before its Retry-After."""
    metrics = RecordingMetrics()
    admission = ProviderAdmission.unpaced()
    provider = WaitsForAConnection()

    async def scenario() -> list[float]:
        loop = asyncio.get_running_loop()
        sent_at: list[float] = []

        async def ask(text: str) -> None:
            await facade(provider, metrics=metrics, admission=admission).acomplete(
                [{"role": "user", "content": text}])
            sent_at.append(loop.time())

        limited_at = loop.time()
        await asyncio.gather(ask("first"), ask("second"))
        return [t - limited_at for t in sent_at]

    answered_after = run(scenario)
    assert provider.sent == ["first", "first", "second"]  # the held call went after the pause
    assert min(answered_after) >= 0.2
    assert metrics.get(NS, "held_back") == 1
    assert metrics.get(NS, "provider_calls") == 3  # a held-back request was never a call
    assert admission.held_back_calls == 1
