"""RateMemory: the learned share of a quota, kept in the journal for the next run."""

from __future__ import annotations

import asyncio

from beam_agents.model import InMemoryCallJournal, RateMemory


def _memory(journal: InMemoryCallJournal, worker: str = "w1") -> RateMemory:
    return RateMemory(journal, account="acct", worker=worker, wall_ms=lambda: 1_000)


def test_a_rate_learned_after_the_first_commit_is_kept_at_the_next_commit() -> None:
    """The first commit had no rate yet; the next one, with a rate, writes it at once."""
    journal = InMemoryCallJournal()
    rates = _memory(journal)

    async def commits() -> None:
        assert rates.due(0.0)
        await rates.keep(None, 0.0)  # still sending unpaced: nothing learned
        assert rates.due(0.5)
        await rates.keep(18.5, 0.5)

    asyncio.run(commits())
    assert [(row.worker, row.rate_rps) for row in asyncio.run(journal.read_rates("acct"))] == [
        ("w1", 18.5)]
    assert not rates.due(0.6)  # written: the next write waits


def test_the_next_run_starts_from_the_mean_of_the_workers_rates() -> None:
    journal = InMemoryCallJournal()

    async def run() -> float | None:
        await _memory(journal, "w1").keep(8.0, 0.0)
        await _memory(journal, "w2").keep(12.0, 0.0)
        return await _memory(journal, "w3").recall()

    assert asyncio.run(run()) == 10.0
