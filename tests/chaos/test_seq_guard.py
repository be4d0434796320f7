"""The seq guard of invariant 5 under a zombie worker, and proof that the check can fail.

A replay of the *same* activation writes the same bytes, so a store without
the guard converges as well as one with it; that scenario cannot tell them
apart. The zombie can: activation N flushes on a worker whose bundle commit
is lost, the element is redelivered elsewhere, N and then N+1 commit there,
and only then does the stale worker's retry of N flush. N and N+1 write
different bytes under the same record id (``profile``), so a late N that
overwrote N+1 would show. Each scenario runs on the real stores, which must
keep N+1's rows, and on the same backends with the guard removed, where the
same check must report the overwrite.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from beam_agents.hosting import KeyedState, start_runtime
from beam_agents.memory import FlushReceipt, LongtermRecord, LongtermStoreConfig
from beam_agents.runtime import AgentConfig, Outcome
from beam_agents.testing import make_events
from tests.chaos._faults import (
    FlushAttempt,
    FlushLogConfig,
    GuardlessConfig,
    advance,
    committed_rows,
    overwritten,
)

pytestmark = pytest.mark.timeout(120)

ENTITY = b"customer-7"

AGENTS = [
    # Saves only: a retry's upserts cannot depend on what it reads.
    pytest.param("tests.agents:journal", id="saves_only", marks=pytest.mark.spec("M21")),
    # Saves and reads: the zombie's reads observe N+1's rows, its saves must not change.
    pytest.param("tests.agents:remember", id="saves_and_reads", marks=pytest.mark.spec("M24")),
]


@dataclass(frozen=True, slots=True)
class Zombie:
    """What the zombie scenario left: rows at each point, and the two flushes of N."""

    dropped: Outcome
    late: Outcome
    rows_after_dropped: dict[str, bytes]
    rows_after_newer: dict[str, bytes]
    rows_after_late: dict[str, bytes]
    dropped_flush: FlushAttempt
    late_flush: FlushAttempt


def zombie(store: LongtermStoreConfig, agent: str) -> Zombie:
    """Run N = 2 on a stale worker (commit lost), N and N+1 on a live one, then N again late."""
    stale_log, live_log = FlushLogConfig(inner=store), FlushLogConfig(inner=store)
    events = make_events(ENTITY, ["first", "second", "third"])
    with start_runtime(AgentConfig(agent=agent, longterm_memory=stale_log)) as stale, \
            start_runtime(AgentConfig(agent=agent, longterm_memory=live_log)) as live:
        state = advance(KeyedState(), live.activate(KeyedState(), events[0]))
        dropped = stale.activate(state, events[1])  # flushed; its bundle commit is lost
        rows_after_dropped = committed_rows(store, ENTITY)
        redelivered = advance(state, live.activate(state, events[1]))
        advance(redelivered, live.activate(redelivered, events[2]))  # N+1 commits
        rows_after_newer = committed_rows(store, ENTITY)
        late = stale.activate(state, events[1])  # the zombie's retry of N flushes now
        rows_after_late = committed_rows(store, ENTITY)
    dropped_flush, late_flush = stale_log.flushes
    return Zombie(dropped, late, rows_after_dropped, rows_after_newer, rows_after_late,
                  dropped_flush, late_flush)


def profile_seq(rows: dict[str, bytes]) -> int:
    return LongtermRecord.FromString(rows["profile"]).seq


@pytest.mark.parametrize("agent", AGENTS)
def test_a_zombie_retry_of_n_that_flushes_after_n_plus_1_keeps_n_plus_1s_rows(
        store_config: LongtermStoreConfig, agent: str) -> None:
    """THEN an older seq never overwrites a newer one, and the late retry re-stages N's bytes."""
    run = zombie(store_config, agent)

    # N and N+1 write different bytes under one id, so an overwrite would show.
    assert run.rows_after_newer["profile"] != run.rows_after_dropped["profile"]
    assert profile_seq(run.rows_after_newer) == 3
    assert overwritten(run.rows_after_newer, run.rows_after_late) == []
    assert run.rows_after_late == run.rows_after_newer
    assert run.late_flush.upserts == run.dropped_flush.upserts
    assert run.late_flush.receipt == FlushReceipt(
        entity_key=ENTITY, committed=("note/0002",), superseded=("profile",))


@pytest.mark.parametrize("agent", AGENTS)
def test_the_zombie_check_reports_the_overwrite_on_a_store_without_the_seq_guard(
        store_config: LongtermStoreConfig, agent: str) -> None:
    """The same scenario and check on a guardless store: N's late flush replaces N+1's row."""
    run = zombie(GuardlessConfig(inner=store_config), agent)

    assert overwritten(run.rows_after_newer, run.rows_after_late) == ["profile"]
    assert run.rows_after_late["profile"] == run.rows_after_dropped["profile"]
    assert profile_seq(run.rows_after_late) == 2
