"""Working-memory versions: an agent's memory_version and migrate hook (issue: day two).

Memory written by an older version is migrated once, in the activation that
first reads it, and atomically with it; memory from a newer version is a
typed dead letter, never reinterpreted.
"""

from __future__ import annotations

import json

import pytest

from beam_agents.errors import ConfigError
from beam_agents.hosting import KeyedState
from beam_agents.memory import Memory
from beam_agents.runtime import AgentConfig, Committed, ErrorRecord, Failed
from beam_agents.testing import make_event, run_activation
from tests import agents


def _run(agent: str, state: KeyedState, payload: bytes, n: int) -> Committed | Failed:
    event = make_event("customer-1", payload, event_id=f"e{n}", event_time_ms=1_000 * (n + 1))
    outcome = run_activation(AgentConfig(agent=f"tests.agents:{agent}"), event, state)
    assert isinstance(outcome, Committed | Failed)
    return outcome


def _next(state: KeyedState, outcome: Committed) -> KeyedState:
    return KeyedState(memory=outcome.memory if outcome.memory is not None else state.memory,
                      llm_cache=outcome.llm_cache or state.llm_cache, seq=outcome.seq)


def _v1_state() -> KeyedState:
    outcome = _run("profile_v1", KeyedState(), b"Ada", 0)
    assert isinstance(outcome, Committed) and outcome.memory is not None
    assert Memory(outcome.memory, now_ms=0).version == 0
    return _next(KeyedState(), outcome)


def test_memory_of_an_older_version_is_migrated_once_in_the_activation_that_reads_it() -> None:
    agents.MIGRATED.clear()
    state = _v1_state()

    first = _run("profile_v2", state, b"hi", 1)
    assert isinstance(first, Committed) and first.memory is not None
    memory = Memory(first.memory, now_ms=0)
    assert memory.version == 2
    assert (memory.get("name"), memory.get("profile.name")) == (None, b"Ada")
    assert json.loads(first.intents[0].payload) == {"name": "Ada", "visits": 1}

    second = _run("profile_v2", _next(state, first), b"hi", 2)
    assert isinstance(second, Committed)
    assert json.loads(second.intents[0].payload) == {"name": "Ada", "visits": 2}
    assert agents.MIGRATED == [0]  # once, in the first activation only


def test_a_failed_activation_leaves_nothing_migrated() -> None:
    agents.MIGRATED.clear()
    state = _v1_state()

    failed = _run("profile_v2", state, b"fail", 1)
    assert isinstance(failed, Failed)
    assert failed.error.stage == ErrorRecord.STAGE_AGENT
    # The state the host keeps is the v1 blob: the next activation migrates it again.
    retried = _run("profile_v2", state, b"hi", 1)
    assert isinstance(retried, Committed) and retried.memory is not None
    assert Memory(retried.memory, now_ms=0).version == 2
    assert json.loads(retried.intents[0].payload) == {"name": "Ada", "visits": 1}
    assert agents.MIGRATED == [0, 0]


@pytest.mark.parametrize("agent", ["profile_v1", "profile_v1_declared"])
def test_memory_from_a_newer_version_is_a_typed_dead_letter_and_stays_as_it_was(
        agent: str) -> None:
    state = _v1_state()
    upgraded = _run("profile_v2", state, b"hi", 1)
    assert isinstance(upgraded, Committed)
    newer = _next(state, upgraded)

    outcome = _run(agent, newer, b"Bob", 2)
    assert isinstance(outcome, Failed)
    record = outcome.error
    assert record.stage == ErrorRecord.STAGE_STATE_CORRUPT
    assert record.error_type == "beam_agents.errors.MemoryVersionError"
    assert "memory_version 2, newer than this agent's memory_version" in record.message
    assert not record.retriable and record.event  # redrivable once the newer agent runs


def test_an_agent_with_no_version_leaves_the_blob_bytes_as_before() -> None:
    """Version 0 writes no field: blobs of agents that declare none are unchanged."""
    memory = Memory(None, now_ms=5)
    memory.set("k", b"v")
    assert memory.to_bytes() == memory.to_blob().SerializeToString(deterministic=True)
    assert b"\x20" not in memory.to_bytes()[-2:]


def test_a_versioned_blob_round_trips_through_the_fast_path_and_the_parser() -> None:
    memory = Memory(None, now_ms=5)
    memory.set("k", b"v")
    memory.set_version(7)
    data = memory.to_bytes()
    assert data == memory.to_blob().SerializeToString(deterministic=True)
    assert memory.to_blob().memory_version == 7
    again = Memory(data, now_ms=6)
    assert (again.version, again.dirty, again.get("k")) == (7, False, b"v")
    empty = Memory(None, now_ms=5)
    empty.set_version(3)
    assert Memory(empty.to_bytes(), now_ms=6).version == 3


@pytest.mark.parametrize(("version", "migrate", "field"), [
    (2, None, "migrate"), (-1, print, "memory_version"), (True, print, "memory_version"),
    (1 << 32, print, "memory_version"), (1, "not callable", "migrate"),
])
def test_a_bad_version_declaration_is_a_config_error_naming_the_attribute(
        version: object, migrate: object, field: str) -> None:
    from beam_agents.runtime._versions import MemoryVersioning  # noqa: PLC0415

    def agent() -> None: ...

    agent.memory_version = version  # type: ignore[attr-defined]
    if migrate is not None:
        agent.migrate = migrate  # type: ignore[attr-defined]
    with pytest.raises(ConfigError) as caught:
        MemoryVersioning.of(agent, "m:agent")
    assert caught.value.field == field and "m:agent" in str(caught.value)
