"""DESIGN's chaos faults (2)-(5) at the activation level, on SQLite and on the Firestore server.

Fault (1), a flush that succeeded under a lost bundle commit, is in
`test_longterm_chaos` and `test_seq_guard`. Here:

2. the flush fails (a store outage, not a mock: a held SQLite write lock, a
   closed port in front of Firestore);
3. the provider fails or stalls past the activation timeout, transiently or
   for good, through the engine's suspension and retry;
4. the agent raises after staging long-term saves;
5. the state blob is corrupt.

Every test checks the three properties the harness exists for: nothing is
lost (each event ends as committed intents or exactly one error record),
nothing diverges (the intents and rows equal a fault-free run's, and a retry's
upserts equal the failed attempt's byte for byte), and nothing is overwritten
(committed rows and corrupt state stay as they were).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from beam_agents.errors import ProviderRejected, ProviderUnavailable
from beam_agents.hosting import KeyedState, intent_to_json, start_runtime
from beam_agents.memory import LongtermStoreConfig
from beam_agents.metrics import RecordingMetrics
from beam_agents.model import BreakerConfig, ModelConfig
from beam_agents.runtime import AgentConfig, AgentEvent, Committed, ErrorRecord, Failed, RetryPolicy
from beam_agents.stores import SqliteCallJournalConfig
from beam_agents.testing import make_event, make_events
from tests.chaos._faults import (
    GARBAGE,
    Answers,
    FlushLogConfig,
    Outage,
    Plan,
    StallError,
    advance,
    blob_of_version,
    blob_with_corrupt_ring,
    committed_rows,
    drive,
    event_ids,
    fresh_cells,
    reference_run,
)

pytestmark = pytest.mark.timeout(120)

ENTITY = b"customer-7"
OTHER = b"customer-8"
#: Retries are due at once on the engine's fake clock; the breaker never opens, so
#: every attempt reaches the provider and is counted.
RETRY = RetryPolicy(retry_initial_ms=1, retry_max_ms=1, max_attempts=4)
STEADY = ModelConfig(breaker=BreakerConfig(failure_threshold=1000))


def config_for(agent: str, store: LongtermStoreConfig, **overrides: object) -> AgentConfig:
    settings: dict[str, object] = {"model": STEADY, "retry": RETRY, **overrides}
    return AgentConfig(agent=agent, longterm_memory=store, **settings)  # type: ignore[arg-type]


def once_each(events: list[AgentEvent]) -> Counter[str]:
    return Counter({event.event_id: 1 for event in events})


# -- fault 2: the flush fails ---------------------------------------------------------


@pytest.mark.spec("M22")
def test_a_flush_that_fails_on_a_real_store_leaves_its_committed_rows_as_they_were(
        outage: Outage) -> None:
    """THEN it fails closed (a retriable FLUSH record), rows stay, the retry re-stages the bytes."""
    logged = FlushLogConfig(inner=outage.config)
    config = config_for("tests.agents:journal", logged)
    events = list(make_events(ENTITY, ["first", "second", "third"]))
    with start_runtime(config) as runtime:
        state = KeyedState()
        for item in events[:2]:
            state = advance(state, runtime.activate(state, item))
        before = committed_rows(outage.config, ENTITY)
        outage.take_away()
        try:
            failed = runtime.activate(state, events[2])
            assert runtime.store is not None
            pending = runtime.store.pending_upserts.snapshot(ENTITY)
        finally:
            outage.heal()
        store = runtime.store
        outage.wait_reachable(lambda: runtime.run(store.load(ENTITY, "profile")))
        after_failure = committed_rows(outage.config, ENTITY)
        retry = runtime.activate(state, events[2])

    assert isinstance(failed, Failed), failed
    assert failed.error.stage == ErrorRecord.STAGE_LONGTERM_FLUSH
    assert failed.error.retriable and failed.error.seq == 3
    assert failed.error.event == events[2].SerializeToString(deterministic=True)
    assert pending == {}  # abandoned: no later flush can publish it
    assert after_failure == before and len(before) == 3  # the profile and two notes
    assert isinstance(retry, Committed)
    attempt, redo = logged.flushes[-2:]
    assert (attempt.error, redo.error) == ("MemoryUnavailable", None)
    assert redo.upserts == attempt.upserts
    intents, rows = reference_run(config, events)
    assert [intent_to_json(i) for i in retry.intents] == intents[2:]
    assert committed_rows(outage.config, ENTITY) == rows[ENTITY]


def test_a_flush_outage_suspends_the_key_and_the_retry_commits_the_same_upserts(
        outage: Outage) -> None:
    """A failed flush is retriable: the key waits, nothing is dead-lettered, rows converge."""
    logged = FlushLogConfig(inner=outage.config)
    config = config_for("tests.agents:journal", logged,
                        retry=RetryPolicy(retry_initial_ms=1, retry_max_ms=1, max_attempts=50))
    events = list(make_events(ENTITY, ["first", "second", "third"]))
    metrics = RecordingMetrics()
    outage.take_away()
    logged.heal_after_next_failed_flush(outage.heal)
    with start_runtime(config, metrics=metrics) as runtime:
        driven = drive(runtime, events)

    assert driven.errors == []
    assert event_ids(driven.lines) == once_each(events)
    assert metrics.get("beam_agents.runtime", "suspended") >= 1
    intents, rows = reference_run(config, events)
    assert driven.intents == intents
    assert committed_rows(outage.config, ENTITY) == rows[ENTITY]
    first = [flush for flush in logged.flushes if flush.seqs == {1}]
    assert first[0].error is not None and first[-1].error is None
    assert {flush.upserts for flush in first} == {first[0].upserts}
    assert driven.cells[ENTITY].state.seq.read() == 3


# -- fault 3: the provider fails or stalls --------------------------------------------


def failing_second_classify(failure: Callable[[], BaseException], times: int) -> Plan:
    """Fail the first `times` asks of the second event's second call."""
    return lambda content, asked: (
        failure() if content == "classify: second" and asked <= times else None)


@pytest.mark.parametrize("failure", [
    lambda: ProviderUnavailable("503 from the provider"),
    lambda: StallError("the provider never answers"),
], ids=["unavailable", "stalls_past_the_timeout"])
def test_a_transient_provider_failure_suspends_and_commits_without_paying_twice(
        store_config: LongtermStoreConfig, failure: Callable[[], BaseException]) -> None:
    """Invariants 1 and 9: the failed attempt flushes nothing, its paid call replays."""
    answers = Answers(failing_second_classify(failure, times=1))
    logged = FlushLogConfig(inner=store_config)
    config = config_for("tests.chaos._agents:consult", logged, timeout_ms=500)
    events = list(make_events(ENTITY, ["first", "second", "third"]))
    metrics = RecordingMetrics()
    with start_runtime(config, provider=answers.model(), metrics=metrics) as runtime:
        driven = drive(runtime, events)

    assert driven.errors == []
    assert event_ids(driven.lines) == once_each(events)
    assert metrics.get("beam_agents.runtime", "suspended") == 1
    # The summary of the second event was paid by the failed attempt and replayed.
    assert answers.asked == Counter({f"{call}: {note}": 1 for note in ("first", "second", "third")
                                     for call in ("summarise", "classify")}
                                    | {"classify: second": 2})
    assert [flush.seqs for flush in logged.flushes] == [{1}, {2}, {3}]
    intents, rows = reference_run(config, events, provider=lambda: Answers().model())
    assert driven.intents == intents
    assert committed_rows(store_config, ENTITY) == rows[ENTITY]


@pytest.mark.parametrize(("failure", "attempts"), [
    (lambda: ProviderUnavailable("503, and it stays down"), RETRY.max_attempts),
    (lambda: ProviderRejected("400: the request is refused"), 1),
], ids=["unavailable_for_good", "rejected"])
def test_a_provider_that_never_answers_dead_letters_the_event_after_its_attempts(
        store_config: LongtermStoreConfig, failure: Callable[[], BaseException],
        attempts: int) -> None:
    """One error record carrying the event and its attempt count; the key goes on after it."""
    answers = Answers(failing_second_classify(failure, times=10**6))
    logged = FlushLogConfig(inner=store_config)
    config = config_for("tests.chaos._agents:consult", logged)
    events = list(make_events(ENTITY, ["first", "second", "third"]))
    with start_runtime(config, provider=answers.model()) as runtime:
        driven = drive(runtime, events)

    assert event_ids(driven.lines) == once_each(events)
    (error,) = driven.errors
    assert (error.event_id, error.stage, error.seq, error.attempts) == (
        "e-2", ErrorRecord.STAGE_MODEL, 2, attempts)
    assert error.event == events[1].SerializeToString(deterministic=True)
    assert answers.asked["classify: second"] == attempts
    assert answers.asked["summarise: second"] == 1  # paid once, replayed by every retry
    assert [flush.seqs for flush in logged.flushes] == [{1}, {2}]  # e-3 takes seq 2
    survivors = [events[0], events[2]]
    intents, rows = reference_run(config, survivors, provider=lambda: Answers().model())
    assert driven.intents == intents
    assert committed_rows(store_config, ENTITY) == rows[ENTITY]


@pytest.mark.parametrize("journal", [False, True], ids=["cache", "cache_and_journal"])
def test_the_calls_a_dead_lettered_activation_paid_for_do_not_answer_the_next_event(
        journal: bool, tmp_path: Path) -> None:
    """Invariant 1: a dead letter commits nothing, not even the calls its suspensions kept.

    A dead letter does not advance seq, so the next event of the key runs with
    the same seq; had the suspended attempts' paid calls stayed in the cell,
    or in the call journal under a key of seq and request alone, an identical
    request of that other event would be answered from them.
    """
    answers = Answers(lambda content, asked: ProviderUnavailable("503")
                      if content == "second x" and asked <= RETRY.max_attempts else None)
    config = AgentConfig(agent="tests.agents:two_calls", model=STEADY, retry=RETRY,
                         call_journal=SqliteCallJournalConfig(path=str(tmp_path / "calls.db"))
                         if journal else None)
    events = list(make_events(ENTITY, ["x", "x"]))
    with start_runtime(config, provider=answers.model()) as runtime:
        driven = drive(runtime, events)

    assert [(e.event_id, e.seq, e.attempts) for e in driven.errors] == [
        ("e-1", 1, RETRY.max_attempts)]
    (intent,) = driven.intents
    assert json.loads(intent)["seq"] == 1
    assert json.loads(json.loads(intent)["payload"]) == ["first x #2", "second x #1"]
    assert answers.asked["first x"] == 2  # e-2 paid for its own call


# -- fault 4: the agent raises after staging -------------------------------------------


@pytest.mark.spec("M20")
def test_an_agent_that_raises_after_staging_flushes_nothing_to_a_real_store(
        store_config: LongtermStoreConfig) -> None:
    """THEN the element goes to errors, the store records no write, keyed state is unchanged."""
    logged = FlushLogConfig(inner=store_config)
    config = config_for("tests.agents:remember", logged)
    events = list(make_events(ENTITY, ["first", "fail after saving", "third"]))
    with start_runtime(config) as runtime:
        failing = drive(runtime, events[:2])
        assert runtime.store is not None
        pending = runtime.store.pending_upserts.snapshot(ENTITY)  # before anything re-stages
        rows_after_failure = committed_rows(store_config, ENTITY)
        after = drive(runtime, events[2:], cells=failing.cells)

    assert event_ids(failing.lines + after.lines) == once_each(events)
    (error,) = failing.errors
    assert (error.event_id, error.stage, error.seq, error.attempts, error.retriable) == (
        "e-2", ErrorRecord.STAGE_AGENT, 2, 1, False)
    assert error.event == events[1].SerializeToString(deterministic=True)
    assert pending == {}
    assert [flush.seqs for flush in logged.flushes] == [{1}, {2}]  # e-1's, then e-3's
    assert not any(b"fail after saving" in data for flush in logged.flushes
                   for data in flush.upserts)
    _, rows_of_first = reference_run(config, events[:1])
    assert rows_after_failure == rows_of_first[ENTITY]
    intents, rows = reference_run(config, [events[0], events[2]])
    assert failing.intents + after.intents == intents  # e-3 saw e-1's state, not e-2's
    assert committed_rows(store_config, ENTITY) == rows[ENTITY]


@pytest.mark.spec("M20")
def test_an_agent_that_raises_with_a_background_save_in_flight_flushes_nothing(
        store_config: LongtermStoreConfig) -> None:
    """THEN the background save is cancelled with the rest, and committed rows stay as they were."""
    seeding = AgentConfig(agent="tests.agents:journal", longterm_memory=store_config)
    with start_runtime(seeding) as runtime:
        kept = runtime.activate(KeyedState(), make_event(ENTITY, "kept", event_id="e-1"))
    assert isinstance(kept, Committed)
    before = committed_rows(store_config, ENTITY)
    logged = FlushLogConfig(inner=store_config)
    config = config_for("tests.chaos._agents:save_in_background_then_fail", logged)
    with start_runtime(config) as runtime:
        outcome = runtime.activate(KeyedState(seq=1), make_event(ENTITY, "dropped",
                                                                 event_id="e-2"))
        assert runtime.store is not None
        pending = runtime.store.pending_upserts.snapshot(ENTITY)

    assert isinstance(outcome, Failed)
    assert (outcome.error.stage, outcome.error.seq) == (ErrorRecord.STAGE_AGENT, 2)
    assert pending == {}
    assert logged.flushes == []
    assert committed_rows(store_config, ENTITY) == before


# -- fault 5: the state blob is corrupt -------------------------------------------------

CORRUPTIONS: dict[str, dict[str, bytes]] = {
    "memory_garbage": {"memory": GARBAGE},
    "llm_cache_garbage": {"llm_cache": GARBAGE},
    "unknown_schema_version": {"memory": blob_of_version(99)},
    # Found only when the agent reads the ring, after it staged a save.
    "ring_corrupt_after_staging": {"memory": blob_with_corrupt_ring("history")},
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_corrupt_state_blob_is_left_as_it_was_and_each_event_is_dead_lettered(
        store_config: LongtermStoreConfig, corruption: str) -> None:
    """Invariant 8: STATE_CORRUPT records, never a retry, never a write; other keys go on."""
    seeded = CORRUPTIONS[corruption]
    logged = FlushLogConfig(inner=store_config)
    config = config_for("tests.chaos._agents:recall", logged)
    rotten = list(make_events(ENTITY, ["one", "two", "three"]))
    healthy = list(make_events(OTHER, ["one", "two"]))
    cells = {ENTITY: fresh_cells(seq=5, **seeded)}
    with start_runtime(config) as runtime:
        driven = drive(runtime, [*rotten, *healthy], cells=cells)
        assert runtime.store is not None
        pending = runtime.store.pending_upserts.snapshot(ENTITY)

    assert len(driven.errors) == 3
    for error, item in zip(driven.errors, rotten, strict=True):
        assert (error.stage, error.retriable, error.attempts, error.seq) == (
            ErrorRecord.STAGE_STATE_CORRUPT, False, 1, 6)
        assert error.event == item.SerializeToString(deterministic=True)
    state = driven.cells[ENTITY].state
    assert (state.memory.read(), state.llm_cache.read(), state.seq.read()) == (
        seeded.get("memory"), seeded.get("llm_cache"), 5)
    assert tuple(driven.cells[ENTITY].queue.read()) == ()
    assert pending == {}
    assert {flush.entity_key for flush in logged.flushes} == {OTHER}
    assert committed_rows(store_config, ENTITY) == {}
    assert len(driven.intents) == 2 and driven.cells[OTHER].state.seq.read() == 2
