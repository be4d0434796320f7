"""The activation core under injected faults, with long-term memory (seed 000, M18-M24).

Each test drives the same `ActivationRuntime` the Beam DoFn and the Flink
function use. "The bundle commit fails" is modelled the way a runner sees it:
the outcome is computed (so the flush happened) and then dropped, and the
element is redelivered against the state as it was before. A retry is compared
with the attempt it replaces as well as with a fault-free run.

A retry of the same activation writes the same bytes, so these tests pass with
or without the store's seq guard; `test_seq_guard` covers the late retry that
only the guard stops. The other faults on real stores are in
`test_activation_faults`.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from dataclasses import dataclass

import pytest

from beam_agents.errors import MemoryUnavailable
from beam_agents.hosting import ActivationRuntime, KeyedState, load_agent, start_runtime
from beam_agents.memory import LongtermStoreConfig
from beam_agents.model.providers import LocalModel
from beam_agents.runtime import AgentConfig, AgentEvent, Committed, ErrorRecord, Failed, Intent
from beam_agents.stores import (
    FirestoreLongtermConfig,
    InMemoryLongtermConfig,
    SqliteLongtermConfig,
)

pytestmark = pytest.mark.timeout(120)

ENTITY = b"customer-7"


def event(n: int, payload: str | None = None) -> AgentEvent:
    return AgentEvent(entity_key=ENTITY, event_id=f"e{n}", event_time_ms=1_000 * n,
                      payload=(payload or f"note {n}").encode())


def runtime(agent: str, store_config: LongtermStoreConfig | None) -> ActivationRuntime:
    return ActivationRuntime(
        AgentConfig(agent=f"tests.agents:{agent}", longterm_memory=store_config),
        agent=load_agent(f"tests.agents:{agent}"), provider=LocalModel(), clock=time.monotonic,
        store=store_config.open() if store_config is not None else None)


def rows(rt: ActivationRuntime) -> list[bytes]:
    assert rt.store is not None
    found = rt.run(rt.store.search(ENTITY, "", 1000))
    return [r.SerializeToString(deterministic=True) for r in found]


def apply(state: KeyedState, outcome: Committed) -> KeyedState:
    return state.after(outcome)


@dataclass(frozen=True, slots=True)
class Redelivery:
    """One element whose flush succeeded and whose commit was lost, and its retry."""

    dropped_intents: list[bytes]
    dropped_rows: list[bytes]
    retry_intents: list[bytes]
    retry_rows: list[bytes]


def run_events(rt: ActivationRuntime, events: list[AgentEvent], *,
               drop_commit_of: frozenset[int] = frozenset(),
               ) -> tuple[list[bytes], list[Redelivery]]:
    """Run events in order; at indices in `drop_commit_of`, drop the outcome and redeliver."""
    state, intents, redeliveries = KeyedState(), [], []
    for index, item in enumerate(events):
        if index in drop_commit_of:
            dropped = rt.activate(state, item)
            assert isinstance(dropped, Committed)  # the flush succeeded; the commit is lost
            dropped_rows = rows(rt)
        outcome = rt.activate(state, item)
        assert isinstance(outcome, Committed), outcome
        if index in drop_commit_of:
            redeliveries.append(Redelivery(wire(dropped.intents), dropped_rows,
                                           wire(outcome.intents), rows(rt)))
        state = apply(state, outcome)
        intents += wire(outcome.intents)
    return intents, redeliveries


def wire(intents: tuple[Intent, ...]) -> list[bytes]:
    return [i.SerializeToString(deterministic=True) for i in intents]


@pytest.mark.spec("M18")
def test_unconfigured_pipelines_behave_exactly_as_today() -> None:
    """THEN no store is constructed, no external I/O, and ctx.memory.longterm names the field."""
    config = AgentConfig(agent="tests.agents:counter")
    with start_runtime(config) as rt:
        assert rt.store is None
        assert isinstance(rt.activate(KeyedState(), event(1)), Committed)
    probe = AgentConfig(agent="tests.agents:probe_longterm")
    with start_runtime(probe) as rt:
        outcome = rt.activate(KeyedState(), event(1))
    assert isinstance(outcome, Failed)
    assert outcome.error.stage == ErrorRecord.STAGE_CONFIG
    assert "AgentConfig.longterm_memory" in outcome.error.message


@pytest.mark.spec("M19")
def test_working_tier_operations_never_reach_the_store(
        memory_store_config: InMemoryLongtermConfig) -> None:
    """THEN the store records no operation; only explicit longterm calls reach it."""
    with runtime("working_only", memory_store_config) as rt:
        outcome = rt.activate(KeyedState(), event(1))
        operations = list(memory_store_config.store().operations)  # before teardown's close
    assert isinstance(outcome, Committed)
    assert outcome.memory is not None  # the compaction-triggering writes committed
    assert operations == []


@pytest.mark.spec("M20")
def test_a_failed_activation_flushes_nothing(memory_store_config: InMemoryLongtermConfig) -> None:
    """THEN the element goes to errors, the store records no write, keyed state is unchanged."""
    with runtime("remember", memory_store_config) as rt:
        outcome = rt.activate(KeyedState(seq=3), event(4, "fail after saving"))
    assert isinstance(outcome, Failed)
    assert outcome.error.stage == ErrorRecord.STAGE_AGENT
    store = memory_store_config.store()
    assert not {"stage", "flush"} & set(store.operation_names())
    assert store.rows() == {}


@pytest.mark.spec("M21")
def test_a_bundle_retry_across_a_completed_flush_converges(
        store_config: LongtermStoreConfig) -> None:
    """THEN the retry re-flushes byte-identical rows and emits byte-identical intents."""
    events = [event(n) for n in range(1, 6)]
    with runtime("remember", store_config) as rt:
        clean_intents, _ = run_events(rt, events)
        clean_rows = rows(rt)

    chaos_config = _fresh(store_config)
    with runtime("remember", chaos_config) as rt:
        chaos_intents, redeliveries = run_events(rt, events, drop_commit_of=frozenset({1, 3}))
        chaos_rows = rows(rt)

    assert len(redeliveries) == 2
    for redelivery in redeliveries:  # the retry against what the dropped attempt left
        assert redelivery.retry_rows == redelivery.dropped_rows
        assert redelivery.retry_intents == redelivery.dropped_intents
    assert chaos_rows == clean_rows
    assert chaos_intents == clean_intents
    assert len(clean_rows) == 6  # the profile and five notes


@pytest.mark.spec("M22")
def test_a_flush_failure_fails_the_activation_closed(
        memory_store_config: InMemoryLongtermConfig) -> None:
    """THEN the activation fails with a typed error record and nothing commits."""
    store = memory_store_config.store()
    store.fail_next("flush", MemoryUnavailable("store went away"))
    with runtime("remember", memory_store_config) as rt:
        outcome = rt.activate(KeyedState(), event(1))
    assert isinstance(outcome, Failed)
    assert outcome.error.stage == ErrorRecord.STAGE_LONGTERM_FLUSH
    assert outcome.error.retriable is True
    assert outcome.error.error_type == "beam_agents.errors.MemoryUnavailable"
    assert "long-term flush" in outcome.error.message
    assert store.rows() == {}
    assert store.pending(ENTITY) == ()  # abandoned, so a later flush cannot publish it


@pytest.mark.spec("M24")
def test_replayed_activation_with_longterm_reads_stays_byte_identical(
        store_config: LongtermStoreConfig) -> None:
    """THEN the replay emits identical intents and stages identical upserts either way."""
    events = [event(n) for n in range(1, 4)]
    with runtime("remember", store_config) as rt:
        state = KeyedState()
        for item in events[:2]:
            first = rt.activate(state, item)
            assert isinstance(first, Committed)
            state = apply(state, first)
        attempt = rt.activate(state, events[2])  # flushed; its commit will be lost
        rows_after_attempt = rows(rt)
        replay = rt.activate(state, events[2])  # its reads now observe the flushed rows
        rows_after_replay = rows(rt)

    assert isinstance(attempt, Committed) and isinstance(replay, Committed)
    assert [i.SerializeToString() for i in replay.intents] == [
        i.SerializeToString() for i in attempt.intents]
    assert rows_after_replay == rows_after_attempt
    saved = json.loads(replay.intents[0].payload)
    assert saved == {"n": 3, "notes": 3, "profile": {"last": "note 3", "n": 3}}


def _fresh(config: LongtermStoreConfig) -> LongtermStoreConfig:
    """The same backend, empty: another file or another Firestore project."""
    if isinstance(config, SqliteLongtermConfig):
        return dataclasses.replace(config, path=config.path + ".chaos")
    assert isinstance(config, FirestoreLongtermConfig), config
    return dataclasses.replace(config, project=f"chaos-{uuid.uuid4().hex[:12]}")
