"""The call journal in the activation: consulted after the cache, written before the agent.

Invariants 3 and 9: a replay whose cache was lost with its bundle or
checkpoint reads the journal and pays nothing, byte-identically, even when
the provider answers differently every time.
"""

from __future__ import annotations

import hashlib
import itertools
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from beam_agents.backend import JournalEntry, JournalWrite
from beam_agents.errors import JournalUnavailable
from beam_agents.hosting import ActivationRuntime, KeyedState, load_agent, start_runtime
from beam_agents.metrics import RecordingMetrics
from beam_agents.model import InMemoryCallJournal, ModelRequest
from beam_agents.runtime import AgentConfig, AgentEvent, Committed, ErrorRecord, Failed
from beam_agents.stores import SqliteCallJournalConfig
from beam_agents.testing import ScriptedModel

pytestmark = pytest.mark.timeout(60)

EVENT = AgentEvent(entity_key=b"k", event_id="e1", event_time_ms=1_000, payload=b"x")


def nondeterministic(start: int = 1) -> ScriptedModel:
    """A provider that never answers the same request twice the same way."""
    counter = itertools.count(start)
    lock = threading.Lock()

    def answer(request: ModelRequest) -> str:
        with lock:
            return f"answer #{next(counter)} to {request.messages[-1]['content']}"

    return ScriptedModel(answer)


def runtime(provider: ScriptedModel, journal: object, metrics: RecordingMetrics,
            agent: str = "two_calls") -> ActivationRuntime:
    return ActivationRuntime(AgentConfig(agent=f"tests.agents:{agent}"),
                             agent=load_agent(f"tests.agents:{agent}"), provider=provider,
                             clock=time.monotonic, journal=journal,  # type: ignore[arg-type]
                             metrics=metrics)


def test_a_replay_after_a_lost_commit_pays_nothing_and_answers_byte_identically() -> None:
    """A dropped outcome (a bundle retry, a crash) replays from the journal: zero calls."""
    journal, metrics = InMemoryCallJournal(), RecordingMetrics()
    model = nondeterministic()
    with runtime(model, journal, metrics) as rt:
        first = rt.activate(KeyedState(), EVENT)
        paid = model.calls
        replay = rt.activate(KeyedState(), EVENT)  # the first outcome was never committed
    assert isinstance(first, Committed) and isinstance(replay, Committed)
    assert paid == 2 and model.calls == 2
    assert replay.intents == first.intents and replay.llm_cache == first.llm_cache
    assert metrics.get("beam_agents.model", "journal_hits") == 2
    assert metrics.get("beam_agents.model", "replay_divergence") == 0


def test_the_journal_is_read_once_per_activation_and_written_once_per_paid_call() -> None:
    journal, metrics = InMemoryCallJournal(), RecordingMetrics()
    with runtime(nondeterministic(), journal, metrics) as rt:
        assert isinstance(rt.activate(KeyedState(), EVENT), Committed)
    assert (journal.reads, journal.writes) == (1, 2)
    entries = journal.entries()
    assert {(e.entity_key, e.seq, e.created_at_ms) for e in entries} == {(b"k", 1, 1_000)}
    assert all(e.expire_at_ms == 1_000 + 7 * 24 * 3_600_000 for e in entries)


def test_a_journal_that_cannot_be_read_fails_the_activation_as_retriable() -> None:
    """The engine suspends on it: the event is not dead-lettered for a journal blip."""

    class Unreachable(InMemoryCallJournal):
        async def read(self, entity_key: bytes, seq: int) -> dict[str, JournalEntry]:
            raise JournalUnavailable("journal server refused the connection")

    model = nondeterministic()
    with runtime(model, Unreachable(), RecordingMetrics()) as rt:
        outcome = rt.activate(KeyedState(), EVENT)
    assert isinstance(outcome, Failed)
    assert outcome.error.retriable and outcome.error.stage == ErrorRecord.STAGE_JOURNAL
    assert model.calls == 0


def test_a_journal_write_that_fails_keeps_the_response_from_the_agent() -> None:
    """The write is awaited before the agent sees the answer; failing it suspends."""

    class Unwritable(InMemoryCallJournal):
        async def write(self, entry: JournalEntry) -> JournalWrite:
            raise JournalUnavailable("journal write timed out")

    with runtime(nondeterministic(), Unwritable(), RecordingMetrics()) as rt:
        outcome = rt.activate(KeyedState(), EVENT)
    assert isinstance(outcome, Failed) and outcome.error.retriable
    assert outcome.error.stage == ErrorRecord.STAGE_JOURNAL


def test_when_another_attempt_journaled_first_its_answer_is_the_one_used() -> None:
    """Two attempts race (a zombie worker): the first write wins and both see its bytes."""
    journal, metrics = InMemoryCallJournal(), RecordingMetrics()
    with runtime(nondeterministic(), journal, metrics) as rt:
        first = rt.activate(KeyedState(), EVENT)
    with runtime(nondeterministic(start=100), _ForgetfulReads(journal), metrics) as rt:
        second = rt.activate(KeyedState(), EVENT)  # its prefetch missed the first's entries
    assert isinstance(first, Committed) and isinstance(second, Committed)
    assert second.intents == first.intents
    assert metrics.get("beam_agents.model", "replay_divergence") == 2


class _ForgetfulReads(InMemoryCallJournal):
    """Shares another journal's writes but reads nothing: a prefetch that raced a write."""

    def __init__(self, inner: InMemoryCallJournal) -> None:
        super().__init__()
        self._inner = inner

    async def read(self, entity_key: bytes, seq: int) -> dict[str, JournalEntry]:
        return {}

    async def write(self, entry: JournalEntry) -> JournalWrite:
        return await self._inner.write(entry)


def test_an_oversized_response_is_journaled_digest_only_and_a_replay_counts_divergence() -> None:
    journal, metrics = InMemoryCallJournal(), RecordingMetrics()
    big = ScriptedModel(lambda request: "y" * 1_100_000 + str(time.monotonic_ns()))
    with runtime(big, journal, metrics, agent="ask_size") as rt:
        assert isinstance(rt.activate(KeyedState(), EVENT), Committed)
        assert [e.digest_only for e in journal.entries()] == [True]
        assert isinstance(rt.activate(KeyedState(), EVENT), Committed)
    assert big.calls == 2  # a digest cannot be replayed, only compared
    assert metrics.get("beam_agents.model", "replay_divergence") == 1


def test_a_corrupt_journal_row_dead_letters_the_activation_naming_the_store(
        tmp_path: Path) -> None:
    """A typed error, stage JOURNAL, not retriable; nothing commits and nothing crashes."""
    path = tmp_path / "calls.sqlite"
    config = AgentConfig(agent="tests.agents:ask",
                         call_journal=SqliteCallJournalConfig(path=str(path)))
    with start_runtime(config) as rt:
        assert isinstance(rt.activate(KeyedState(), EVENT), Committed)  # creates the table
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE call_journal SET response = ?", (b"tampered",))
        assert connection.execute("SELECT count(*) FROM call_journal").fetchone() == (1,)
        stored = connection.execute("SELECT sha256 FROM call_journal").fetchone()[0]
    connection.close()
    assert stored != hashlib.sha256(b"tampered").digest()
    with start_runtime(config) as rt:
        outcome = rt.activate(KeyedState(), EVENT)
    assert isinstance(outcome, Failed)
    assert outcome.error.stage == ErrorRecord.STAGE_JOURNAL and not outcome.error.retriable
    assert str(path) in outcome.error.message and outcome.llm_cache is None
