"""What a worker learned of its provider's quota outlives the run (invariant 11).

A worker that starts from nothing sends an unpaced burst, meets 429s and a
Retry-After, and climbs back to its share: seconds to half a minute in which
the quota is not used well. A batch job of a few minutes pays that on every
run. So a runtime with a call journal keeps its learned rate there, one row
per worker of each provider account, and the next run starts from the mean
of the rows the last run left: workers that shared the quota start from an
equal share of it, paced, with no burst.

A learned rate only saves time. Reading or writing it never fails or holds
up an activation: a journal that cannot be reached is logged once and the
worker learns the quota as it would have.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from beam_agents.errors import BeamAgentsError
from beam_agents.model._journal import CallJournal, LearnedRateRecord

__all__ = ["RateMemory"]

_log = logging.getLogger(__name__)

#: Rows older than this, before the newest, belong to an earlier run and are left out.
RECENT_MS = 10 * 60_000
#: How often a running worker writes its rate, at most (and once more when it closes).
KEEP_EVERY_S = 30.0


class RateMemory:
    """One worker's learned rate for one provider account, kept in the call journal.

    Args:
        journal: Where the rates are kept.
        account: The provider account and model (a digest, never a key).
        worker: This worker's name, unique among the account's workers.
        wall_ms: The worker's wall clock, which stamps the rows.
    """

    def __init__(self, journal: CallJournal, *, account: str, worker: str,
                 wall_ms: Callable[[], int]) -> None:
        self._journal = journal
        self._account = account
        self._worker = worker
        self._wall_ms = wall_ms
        self._kept: float | None = None
        self._kept_at = float("-inf")
        self._warned = False

    async def recall(self) -> float | None:
        """The rate to start from: the mean of the last run's workers, or None."""
        try:
            rows = await self._journal.read_rates(self._account)
        except BeamAgentsError as exc:
            self._warn(f"cannot read the learned rates of {self._account}: {exc}")
            return None
        if not rows:
            return None
        newest = max(row.updated_ms for row in rows)
        recent = [row.rate_rps for row in rows if row.updated_ms >= newest - RECENT_MS]
        return sum(recent) / len(recent)

    def due(self, now_s: float) -> bool:
        """Whether `keep` should write now: `KEEP_EVERY_S` after the last write."""
        return now_s - self._kept_at >= KEEP_EVERY_S

    async def keep(self, rate: float | None, now_s: float) -> None:
        """Write `rate` as this worker's, unless it is None or unchanged.

        Only a write starts the wait for the next one: a worker that had
        learned nothing at its first commit keeps its rate at the first commit
        after it learns one, not `KEEP_EVERY_S` later (a batch run can end
        before then, and its runner need not close the worker).
        """
        if rate is None or rate == self._kept:
            return
        self._kept_at = now_s
        record = LearnedRateRecord(account=self._account, worker=self._worker,
                                   rate_rps=rate, updated_ms=self._wall_ms())
        try:
            await self._journal.write_rate(record)
        except BeamAgentsError as exc:
            self._warn(f"cannot keep the learned rate of {self._account}: {exc}")
            return
        self._kept = rate

    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            _log.warning("%s; this worker learns the quota from its 429s instead", message)
