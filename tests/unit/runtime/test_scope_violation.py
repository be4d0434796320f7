"""A tenant boundary crossed at the activation level is a SCOPE_VIOLATION dead letter (invariant 7).

Wherever the long-term store reports a record of another entity, on a read
or in the commit-tail flush, the dead letter must say so: never a degraded
or failing store, which would be retried and redriven as if it were one.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from beam_agents.errors import MemoryUnavailable, ScopeViolation
from beam_agents.runtime import AgentConfig, ErrorRecord, Failed
from beam_agents.runtime._errors import stage_of
from beam_agents.stores import InMemoryLongtermConfig
from beam_agents.testing import make_event, run_activation


@pytest.fixture
def store_config() -> Iterator[InMemoryLongtermConfig]:
    config = InMemoryLongtermConfig(name=f"scope-{uuid.uuid4().hex}")
    yield config
    config.reset()


def violation() -> ScopeViolation:
    return ScopeViolation("customer-1/profile holds a record of another entity",
                          expected=b"customer-1", actual=b"customer-2")


@pytest.mark.parametrize(("operation", "agent"), [("load", "probe_longterm"),
                                                  ("search", "remember"),
                                                  ("flush", "remember")])
def test_a_foreign_record_dead_letters_with_stage_scope_violation(
        store_config: InMemoryLongtermConfig, operation: str, agent: str) -> None:
    config = AgentConfig(agent=f"tests.agents:{agent}", longterm_memory=store_config)
    store = store_config.open()
    try:
        store.fail_next(operation, violation())
        outcome = run_activation(config, make_event("customer-1", b"hello"))
    finally:
        store_config.reset()
    assert isinstance(outcome, Failed)
    assert outcome.error.stage == ErrorRecord.STAGE_SCOPE_VIOLATION
    assert not outcome.error.retriable
    assert "another entity" in outcome.error.message


def test_scope_violation_outranks_the_flush_and_read_stages() -> None:
    assert stage_of(violation()) == ErrorRecord.STAGE_SCOPE_VIOLATION
    assert stage_of(violation(), flushing=True) == ErrorRecord.STAGE_SCOPE_VIOLATION
    # The stages it must never be mistaken for keep their meaning.
    assert stage_of(MemoryUnavailable("down")) == ErrorRecord.STAGE_LONGTERM_READ
    assert stage_of(MemoryUnavailable("down"), flushing=True) == (
        ErrorRecord.STAGE_LONGTERM_FLUSH)
