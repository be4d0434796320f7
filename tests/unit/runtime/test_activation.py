"""The activation core: state bytes + event -> Committed or Failed (invariants 1-3, 6, 8)."""

from __future__ import annotations

import json
import time

import pytest

from beam_agents._proto.llm_cache_pb2 import LlmCacheBlob
from beam_agents.backend import PendingUpserts
from beam_agents.errors import StoreLimitError
from beam_agents.hosting import ActivationRuntime, KeyedState, load_agent, start_runtime
from beam_agents.memory import Memory
from beam_agents.metrics import RecordingMetrics
from beam_agents.model import ModelConfig
from beam_agents.model.providers import LocalModel
from beam_agents.runtime import AgentConfig, AgentEvent, Committed, ErrorRecord, Failed
from beam_agents.stores import InMemoryLongtermStore
from tests import agents

pytestmark = pytest.mark.timeout(60)


def event(payload: bytes = b"hello", *, key: bytes = b"user-1", event_id: str = "e1",
          time_ms: int = 1_000) -> AgentEvent:
    return AgentEvent(entity_key=key, event_id=event_id, event_time_ms=time_ms, payload=payload)


def runtime(agent: str, metrics: RecordingMetrics | None = None, **config: object
            ) -> ActivationRuntime:
    reference = f"tests.agents:{agent}"
    return ActivationRuntime(AgentConfig(agent=reference, **config),  # type: ignore[arg-type]
                             agent=load_agent(reference), provider=LocalModel(),
                             clock=time.monotonic, metrics=metrics)


def test_a_committed_activation_returns_dirty_blobs_the_next_seq_and_intents() -> None:
    with runtime("counter") as rt:
        outcome = rt.activate(KeyedState(seq=4), event())

    assert isinstance(outcome, Committed)
    assert outcome.seq == 5
    assert outcome.memory is not None
    assert Memory(outcome.memory, now_ms=0).get("count") == b"1"
    assert outcome.llm_cache is None  # no model call: the cache stayed clean
    [intent] = outcome.intents
    assert (intent.entity_key, intent.seq, intent.index, intent.kind, intent.event_id) == (
        b"user-1", 5, 0, "count", "e1")
    assert json.loads(intent.payload) == {"count": 1, "seq": 5, "seen": 1}


def test_state_carries_over_between_activations() -> None:
    with runtime("counter") as rt:
        first = rt.activate(KeyedState(), event(event_id="e1"))
        assert isinstance(first, Committed)
        second = rt.activate(KeyedState(memory=first.memory, seq=first.seq), event(event_id="e2"))
    assert isinstance(second, Committed)
    assert second.seq == 2
    assert json.loads(second.intents[0].payload)["count"] == 2


def test_a_failing_agent_yields_one_error_record_and_nothing_else() -> None:
    metrics = RecordingMetrics()
    with runtime("counter", metrics) as rt:
        outcome = rt.activate(KeyedState(seq=2), event(b"fail", event_id="e9"))

    assert isinstance(outcome, Failed)
    record = outcome.error
    assert record.stage == ErrorRecord.STAGE_AGENT
    assert record.error_type == "builtins.RuntimeError"
    assert "asked to fail at e9" in record.message
    assert "RuntimeError" in record.traceback
    assert (record.entity_key, record.seq, record.event_id) == (b"user-1", 3, "e9")
    assert AgentEvent.FromString(record.event) == event(b"fail", event_id="e9")
    assert record.retriable is False
    assert metrics.get("beam_agents.runtime", "errors_agent") == 1
    assert metrics.get("beam_agents.runtime", "committed") == 0


def test_the_same_state_and_event_give_byte_identical_outcomes() -> None:
    with runtime("chatty") as rt:
        one = rt.activate(KeyedState(), event())
    with runtime("chatty") as rt:
        two = rt.activate(KeyedState(), event())
    assert isinstance(one, Committed) and isinstance(two, Committed)
    assert one.memory == two.memory
    assert one.llm_cache == two.llm_cache
    assert [i.SerializeToString() for i in one.intents] == [
        i.SerializeToString() for i in two.intents]


def test_identical_requests_in_one_activation_replay_and_the_cache_is_committed() -> None:
    metrics = RecordingMetrics()
    with runtime("chatty", metrics) as rt:
        outcome = rt.activate(KeyedState(), event(b"where is my order"))
    assert isinstance(outcome, Committed)
    reply = json.loads(outcome.intents[0].payload)
    assert reply["a"] == reply["b"]
    assert reply["cached"] == [False, True, False]
    assert metrics.get("beam_agents.model", "provider_calls") == 2
    assert len(LlmCacheBlob.FromString(outcome.llm_cache or b"").entries) == 2


def test_a_retried_activation_replays_cached_responses_without_calling_the_provider() -> None:
    with runtime("chatty") as rt:
        first = rt.activate(KeyedState(), event())
    assert isinstance(first, Committed)
    metrics = RecordingMetrics()
    # The bundle failed after the first attempt staged its cache; a retry of the same
    # seq that sees that cache (e.g. a restored checkpoint) must not pay again.
    with runtime("chatty", metrics) as rt:
        replay = rt.activate(KeyedState(llm_cache=first.llm_cache), event())
    assert isinstance(replay, Committed)
    assert metrics.get("beam_agents.model", "provider_calls") == 0
    assert replay.intents[0].payload != b""
    assert json.loads(replay.intents[0].payload)["a"] == json.loads(first.intents[0].payload)["a"]


def test_an_async_agent_runs_and_awaits_the_model() -> None:
    with runtime("async_counter") as rt:
        outcome = rt.activate(KeyedState(), event())
    assert isinstance(outcome, Committed)
    assert json.loads(outcome.intents[0].payload)["count"] == 1


def test_a_timeout_yields_a_timeout_error_record() -> None:
    with runtime("sleepy", timeout_ms=50) as rt:
        outcome = rt.activate(KeyedState(), event())
    assert isinstance(outcome, Failed)
    assert outcome.error.stage == ErrorRecord.STAGE_TIMEOUT
    assert outcome.error.retriable is True
    assert "50 ms" in outcome.error.message


def test_an_async_agent_past_its_timeout_is_cancelled_and_unwinds() -> None:
    agents.UNWOUND.clear()
    started = time.monotonic()
    with runtime("unwinding", timeout_ms=50) as rt:
        outcome = rt.activate(KeyedState(), event(event_id="e-late"))
    assert isinstance(outcome, Failed)
    assert outcome.error.stage == ErrorRecord.STAGE_TIMEOUT
    assert agents.UNWOUND == ["e-late"]  # its finally ran before the outcome
    assert time.monotonic() - started < 10  # not the agent's 30 s


def test_an_agent_that_swallows_the_cancel_still_times_out() -> None:
    with runtime("stubborn", timeout_ms=50) as rt:
        outcome = rt.activate(KeyedState(), event())
    assert isinstance(outcome, Failed)
    assert outcome.error.stage == ErrorRecord.STAGE_TIMEOUT


def test_an_agents_own_timeout_error_is_its_failure_not_the_activation_timeout() -> None:
    with runtime("own_timeout", timeout_ms=60_000) as rt:
        outcome = rt.activate(KeyedState(), event())
    assert isinstance(outcome, Failed)
    assert outcome.error.stage != ErrorRecord.STAGE_TIMEOUT
    assert "the agent's own deadline" in outcome.error.message


@pytest.mark.parametrize("cell", ["memory", "llm_cache"])
def test_a_corrupt_state_blob_fails_with_state_corrupt(cell: str) -> None:
    state = KeyedState(**{cell: b"\xff\xff\xff"}, seq=7)  # type: ignore[arg-type]
    with runtime("counter") as rt:
        outcome = rt.activate(state, event())
    assert isinstance(outcome, Failed)
    assert outcome.error.stage == ErrorRecord.STAGE_STATE_CORRUPT
    assert outcome.error.seq == 8
    assert cell.replace("_", "") in outcome.error.message.replace("_", "").lower()


def test_a_memory_overflow_is_its_own_stage() -> None:
    with runtime("overflow", compactor=None) as rt:
        outcome = rt.activate(KeyedState(), event())
    assert isinstance(outcome, Failed)
    assert outcome.error.stage == ErrorRecord.STAGE_MEMORY_OVERFLOW
    assert "'huge'" in outcome.error.message


def test_an_oversized_intent_fails_with_stage_output() -> None:
    with runtime("big_intent") as rt:
        outcome = rt.activate(KeyedState(), event())
    assert isinstance(outcome, Failed)
    assert outcome.error.stage == ErrorRecord.STAGE_OUTPUT
    assert "max_intent_bytes" in outcome.error.message


def test_payloads_are_encoded_deterministically() -> None:
    with runtime("emit_kinds") as rt:
        outcome = rt.activate(KeyedState(), event())
    assert isinstance(outcome, Committed)
    assert [i.payload for i in outcome.intents] == [
        b"\x00\x01", "héllo".encode(), b'{"a":null,"b":[1,2.5]}']
    assert [i.index for i in outcome.intents] == [0, 1, 2]


def test_traceback_is_bounded() -> None:
    with runtime("counter", traceback_bytes=64) as rt:
        outcome = rt.activate(KeyedState(), event(b"fail"))
    assert isinstance(outcome, Failed)
    assert len(outcome.error.traceback) <= 64
    assert outcome.error.traceback.endswith("asked to fail at e1\n")


def test_start_runtime_builds_the_configured_provider() -> None:
    config = AgentConfig(agent="tests.agents:chatty", model=ModelConfig(provider="local"))
    with start_runtime(config) as rt:
        assert isinstance(rt.activate(KeyedState(), event()), Committed)


def test_a_save_over_the_stores_limits_fails_the_activation_at_the_flush_stage() -> None:
    class LimitedStore(InMemoryLongtermStore):
        def __init__(self) -> None:
            super().__init__()
            self._pending = PendingUpserts(self._refuse)

        def _refuse(self, entity_key: bytes, pending: object) -> None:
            raise StoreLimitError("record over the 1 MiB document limit", limit=1, attempted=2)

    store = LimitedStore()
    rt = ActivationRuntime(AgentConfig(agent="tests.agents:remember"),
                           agent=load_agent("tests.agents:remember"), provider=LocalModel(),
                           clock=time.monotonic, store=store)
    with rt:
        outcome = rt.activate(KeyedState(), event())
    assert isinstance(outcome, Failed)
    assert outcome.error.stage == ErrorRecord.STAGE_LONGTERM_FLUSH
    assert outcome.error.error_type == "beam_agents.errors.StoreLimitError"
    assert store.rows() == {} and "flush" not in store.operation_names()


def test_the_state_after_a_commit_keeps_each_blob_the_activation_left_unchanged() -> None:
    """KeyedState.after: the outcome's seq and blobs; a None blob keeps the one before.

    The replay cache alone starts empty: its entries served the committed seq.
    """
    before = KeyedState(memory=b"memory", llm_cache=b"cache", seq=3, budget=b"budget")
    unchanged = Committed(seq=4, memory=None, llm_cache=None, intents=())
    assert before.after(unchanged) == KeyedState(memory=b"memory", seq=4, budget=b"budget")
    rewritten = Committed(seq=4, memory=b"m2", llm_cache=b"c2", intents=(), budget=b"b2")
    assert before.after(rewritten) == KeyedState(memory=b"m2", seq=4, budget=b"b2")
    assert KeyedState().after(unchanged) == KeyedState(seq=4)
