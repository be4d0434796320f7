"""Flow control and the token budget through the runtime and the engine (invariants 11, 12).

A scripted provider stands in for the API: it rate-limits, runs out of quota
and reports usage exactly as the real providers' adapters do (their HTTP
shapes are tested against the quota server in tests/unit/model/providers).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter

import pytest

from beam_agents._proto.budget_pb2 import TokenBudgetBlob
from beam_agents.errors import QuotaExhaustedError, RateLimitedError
from beam_agents.hosting import KeyedEngine, KeyedState, error_from_json, start_runtime
from beam_agents.metrics import RecordingMetrics
from beam_agents.model import BreakerConfig, ModelConfig, ModelRequest, ModelResponse
from beam_agents.runtime import AgentConfig, AgentEvent, Committed, ErrorRecord, Failed, RetryPolicy
from beam_agents.runtime._batch import KeyRuns
from beam_agents.runtime._scheduler import Scheduler
from beam_agents.testing import ScriptedModel

pytestmark = pytest.mark.timeout(60)

RUNTIME = "beam_agents.runtime"
MODEL = "beam_agents.model"
#: Every scripted answer costs this: 15 prompt tokens and 10 completion tokens.
USAGE = {"prompt_tokens": 15, "completion_tokens": 10, "total_tokens": 25}


def answer(text: str) -> ModelResponse:
    return ModelResponse(text=text, model_id="scripted", finish_reason="stop", usage=USAGE)


def paying(calls: Counter[str], lock: threading.Lock,
           fail: dict[int, BaseException] | None = None) -> ScriptedModel:
    """A provider that answers every call with `USAGE`, counting the calls per key.

    `fail` maps a call's number (from 1, over all keys) to what it raises instead.
    """
    failures = dict(fail or {})
    number = [0]

    def reply(request: ModelRequest) -> ModelResponse | BaseException:
        who = str(request.messages[-1]["content"]).split(" ", 1)[0]
        with lock:
            number[0] += 1
            failure = failures.get(number[0])
            if failure is None:
                calls[who] += 1
        return failure if failure is not None else answer(f"ok {who}")

    return ScriptedModel(reply)


def event(key: str, payload: str, *, n: int = 1, time_ms: int = 1_000) -> AgentEvent:
    return AgentEvent(entity_key=key.encode(), event_id=f"{key}-{n}", event_time_ms=time_ms,
                      payload=payload.encode())


def config(**fields: object) -> AgentConfig:
    return AgentConfig(agent="tests.agents:spender", **fields)  # type: ignore[arg-type]


def test_admission_waits_are_left_out_of_the_activation_timeout() -> None:
    """Four calls at 4 requests/s wait 0.75 s for admission; a 300 ms timeout still holds."""
    metrics = RecordingMetrics()
    calls: Counter[str] = Counter()
    provider = paying(calls, threading.Lock())
    with start_runtime(config(timeout_ms=300, model=ModelConfig(max_rps=4)),
                       metrics=metrics, provider=provider) as runtime:
        outcome = runtime.activate(KeyedState(), event("k", "4"))

    assert isinstance(outcome, Committed), outcome
    assert calls["k"] == 4
    assert metrics.get(RUNTIME, "throttled") == 1
    assert metrics.get(RUNTIME, "throttled_ms") >= 700


def test_the_timeout_still_bounds_the_agents_own_time_when_calls_wait() -> None:
    """Waits are excluded, not the agent's own work: a sleepy agent still times out."""
    with start_runtime(AgentConfig(agent="tests.agents:sleepy", timeout_ms=100),
                       provider=ScriptedModel([])) as runtime:
        outcome = runtime.activate(KeyedState(), event("k", "0.5"))
    assert isinstance(outcome, Failed)
    assert outcome.error.stage == ErrorRecord.STAGE_TIMEOUT


def test_a_call_that_would_pass_the_cap_is_a_budget_dead_letter_and_is_not_paid() -> None:
    """Cap 100, 25 tokens a call: four calls are paid, the fifth's estimate is refused."""
    metrics = RecordingMetrics()
    calls: Counter[str] = Counter()
    with start_runtime(config(max_tokens_per_entity=100), metrics=metrics,
                       provider=paying(calls, threading.Lock())) as runtime:
        outcome = runtime.activate(KeyedState(), event("k", "9"))

    assert isinstance(outcome, Failed)
    record = outcome.error
    assert record.stage == ErrorRecord.STAGE_BUDGET
    assert not record.retriable
    assert record.tokens_used == 100
    assert "max_tokens_per_entity" in record.message
    assert calls["k"] == 4
    assert metrics.get(MODEL, "tokens_in") == 4 * 15
    # Tokens paid stay paid: the cell is written even though the activation failed.
    assert outcome.budget is not None
    assert TokenBudgetBlob.FromString(outcome.budget).tokens_used == 100


def test_usage_that_passes_the_cap_fails_the_activation_after_the_call() -> None:
    """A call whose estimate fit but whose usage did not is paid once, charged, then stops."""
    calls: Counter[str] = Counter()
    with start_runtime(config(max_tokens_per_entity=45),
                       provider=paying(calls, threading.Lock())) as runtime:
        outcome = runtime.activate(KeyedState(), event("k", "3"))

    assert isinstance(outcome, Failed)
    assert outcome.error.stage == ErrorRecord.STAGE_BUDGET
    assert outcome.error.tokens_used == 50  # within one call of the cap
    assert calls["k"] == 2


def test_a_new_window_resets_the_budget_and_the_old_one_still_refuses() -> None:
    day = 86_400_000
    spent = TokenBudgetBlob(state_schema_version=1, window_start_ms=0,
                            tokens_used=100).SerializeToString()
    calls: Counter[str] = Counter()
    with start_runtime(config(max_tokens_per_entity=100),
                       provider=paying(calls, threading.Lock())) as runtime:
        same_day = runtime.activate(KeyedState(budget=spent), event("k", "1", time_ms=day - 1))
        next_day = runtime.activate(KeyedState(budget=spent), event("k", "1", time_ms=day + 5))

    assert isinstance(same_day, Failed) and same_day.error.stage == ErrorRecord.STAGE_BUDGET
    assert same_day.budget is None  # nothing charged: the cell stays as it was
    assert isinstance(next_day, Committed)
    assert next_day.budget is not None
    reset = TokenBudgetBlob.FromString(next_day.budget)
    assert (reset.window_start_ms, reset.tokens_used) == (day, 25)
    assert calls["k"] == 1


def test_a_corrupt_budget_cell_is_a_state_corrupt_dead_letter_that_leaves_the_cell() -> None:
    with start_runtime(config(max_tokens_per_entity=100),
                       provider=ScriptedModel([])) as runtime:
        outcome = runtime.activate(KeyedState(budget=b"\xff\xff\xff"), event("k", "1"))

    assert isinstance(outcome, Failed)
    assert outcome.error.stage == ErrorRecord.STAGE_STATE_CORRUPT
    assert "budget" in outcome.error.message
    assert (outcome.budget, outcome.llm_cache) == (None, None)


def test_quota_exhaustion_is_flow_control_and_a_429_never_fails_the_activation() -> None:
    metrics = RecordingMetrics()
    calls: Counter[str] = Counter()
    lock = threading.Lock()
    limited = RateLimitedError("429", model_id="scripted", status=429, retry_after_s=0.05)
    provider = paying(calls, lock, fail={1: limited, 2: limited})
    with start_runtime(config(), metrics=metrics, provider=provider) as runtime:
        outcome = runtime.activate(KeyedState(), event("k", "1"))
    assert isinstance(outcome, Committed)
    assert metrics.get(MODEL, "rate_limited") == 2
    assert metrics.get(MODEL, "provider_errors") == 0

    dry = QuotaExhaustedError("insufficient_quota", model_id="scripted", status=429)
    with start_runtime(config(), provider=paying(calls, lock, fail={1: dry})) as runtime:
        failed = runtime.activate(KeyedState(), event("k", "1"))
    assert isinstance(failed, Failed)
    assert failed.flow_control and failed.error.retriable


# The engine ------------------------------------------------------------------


def run_engine(groups: dict[str, list[AgentEvent]], provider: ScriptedModel,
               retry: RetryPolicy, **fields: object) -> tuple[list[tuple[str, bytes]],
                                                              RecordingMetrics]:
    metrics = RecordingMetrics()
    agent = config(retry=retry, model=ModelConfig(breaker=BreakerConfig(failure_threshold=3)),
                   **fields)
    with start_runtime(agent, metrics=metrics, provider=provider) as runtime:
        scheduler = Scheduler(runtime, max_in_flight=8, metrics=metrics)
        runs = KeyRuns(KeyedEngine(scheduler, retry=retry, metrics=metrics),
                       clock_ms=lambda: int(time.monotonic() * 1000))
        lines: list[tuple[str, bytes]] = []
        for key, events in groups.items():
            lines.extend(runs.add(key, [e.SerializeToString(deterministic=True) for e in events]))
        lines.extend(runs.finish())
    return lines, metrics


def test_quota_exhaustion_suspends_the_key_without_spending_its_attempts() -> None:
    """Six exhausted answers in a row against max_attempts=2: the key waits, nothing is lost.

    Each suspension waits the long backoff (retry_max_ms, jittered into its
    upper half) and sends one probe; the attempts it took do not count.
    """
    calls: Counter[str] = Counter()
    dry = QuotaExhaustedError("insufficient_quota", model_id="scripted", status=429)
    provider = paying(calls, threading.Lock(), fail={n: dry for n in range(1, 7)})
    retry = RetryPolicy(retry_initial_ms=1, retry_max_ms=40, max_attempts=2)
    groups = {"dry": [event("dry", "1", n=n, time_ms=n) for n in (1, 2)],
              "idle": [event("idle", "none", n=n, time_ms=n) for n in (1, 2, 3)]}
    started = time.monotonic()
    lines, metrics = run_engine(groups, provider, retry)
    elapsed = time.monotonic() - started

    assert [channel for channel, _ in lines].count("errors") == 0, lines
    spent = [json.loads(line) for channel, line in lines if channel == "intents"]
    assert [d["event_id"] for d in spent if d["entity_key"] == "dry"] == ["dry-1", "dry-2"]
    assert calls["dry"] == 2
    assert metrics.get(MODEL, "quota_exhausted") == 6
    # A retry that comes back before the worker's next probe is due is refused
    # here without calling the provider, and suspends again.
    assert metrics.get(RUNTIME, "quota_suspended") == 6 + metrics.get(MODEL, "quota_held")
    assert metrics.get(RUNTIME, "retries_exhausted") == 0
    assert elapsed >= 6 * 0.020  # each wait at least half of retry_max_ms
    # The key that needs no model went on: all of its work came out first.
    owners = [json.loads(line)["entity_key"] for _, line in lines]
    assert owners[:3] == ["idle"] * 3


def test_a_budget_dead_letter_is_not_retried_and_other_keys_are_unaffected() -> None:
    calls: Counter[str] = Counter()
    provider = paying(calls, threading.Lock())
    retry = RetryPolicy(retry_initial_ms=1, retry_max_ms=5, max_attempts=4)
    groups = {"loop": [event("loop", "9", n=1, time_ms=1), event("loop", "1", n=2, time_ms=2)],
              "calm": [event("calm", "1", n=n, time_ms=n) for n in (1, 2, 3)]}
    lines, metrics = run_engine(groups, provider, retry, max_tokens_per_entity=100)

    errors = [error_from_json(line) for channel, line in lines if channel == "errors"]
    assert [(e.entity_key, e.event_id, e.stage, e.attempts, e.tokens_used) for e in errors] == [
        (b"loop", "loop-1", ErrorRecord.STAGE_BUDGET, 1, 100),
        # The budget cell was written with the dead letter: the next event
        # of the same window pays nothing.
        (b"loop", "loop-2", ErrorRecord.STAGE_BUDGET, 1, 100)]
    assert calls == Counter({"loop": 4, "calm": 3})
    assert metrics.get(RUNTIME, "suspended") == 0
    assert metrics.get(RUNTIME, "errors_budget") == 2
