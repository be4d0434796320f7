"""A bundle retry with the call journal on real stores: the provider sees no second call.

The core-level "commit lost" fault of `test_longterm_chaos`, with a model
call in every activation and a journal beside the long-term store, on
SQLite and on the Firestore server. The outcome of activation N is computed
(its flush and its journal write happened) and dropped; the element is
redelivered to a fresh runtime, as a runner retries a bundle on another
worker, against the state as it was before N. The retry must replay N's call
from the journal (invariant 9) and commit what the dropped attempt would have.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from beam_agents.hosting import KeyedState, start_runtime
from beam_agents.memory import LongtermStoreConfig
from beam_agents.model import CallJournalConfig
from beam_agents.runtime import AgentConfig, Committed
from beam_agents.stores import (
    FirestoreCallJournalConfig,
    FirestoreLongtermConfig,
    SqliteCallJournalConfig,
)
from beam_agents.testing import ScriptedModel, make_events

pytestmark = pytest.mark.timeout(120)

ENTITY = "customer-7"


def journal_for(store_config: LongtermStoreConfig, tmp_path: Path) -> CallJournalConfig:
    """A journal of the store's own backend: Firestore beside Firestore, SQLite beside SQLite."""
    if isinstance(store_config, FirestoreLongtermConfig):
        return FirestoreCallJournalConfig(project=store_config.project,
                                          collection=f"calls-{uuid.uuid4().hex[:8]}",
                                          timeout_ms=10_000)
    return SqliteCallJournalConfig(path=str(tmp_path / "calls.db"))


def test_a_redelivered_bundle_replays_its_paid_call_from_the_journal(
        store_config: LongtermStoreConfig, tmp_path: Path) -> None:
    config = AgentConfig(agent="tests.agents:paced_journal", longterm_memory=store_config,
                         call_journal=journal_for(store_config, tmp_path))
    first, second = make_events(ENTITY, ["note one", "note two"])
    # Each answer differs from any other: a re-paid call could not go unnoticed.
    model = ScriptedModel(lambda request: f"answer #{uuid.uuid4().hex}")

    with start_runtime(config, provider=model) as worker:
        committed = worker.activate(KeyedState(), first)
        assert isinstance(committed, Committed)
        state = KeyedState().after(committed)
        dropped = worker.activate(state, second)  # flushed and journaled, then lost
        assert isinstance(dropped, Committed)
    assert model.calls == 2

    with start_runtime(config, provider=model) as other_worker:
        retry = other_worker.activate(state, second)

    assert model.calls == 2  # the retry paid nothing
    assert isinstance(retry, Committed)
    assert retry == dropped  # intents, memory, cache and seq byte for byte
