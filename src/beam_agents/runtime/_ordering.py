"""How a streaming host orders each key's events: by event time under the watermark, or on arrival.

On a bounded input every host runs a key's events in full
``(event_time_ms, event_id)`` order (invariant 10). On an unbounded one the
host cannot wait for the end, so it waits for the watermark: an event runs
once the watermark has passed its event time plus `max_out_of_orderness_ms`,
and within that much disorder the order is exact. An event that arrives after
its key has already run past it is *late*: it runs on arrival and is counted,
or, with ``late_events="dead_letter"``, becomes a LATE dead letter. The
decision record docs/decisions/0011-event-order.md gives the defaults' reasons.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from beam_agents._checks import require_int
from beam_agents.errors import ConfigError

__all__ = ["EARLIEST_MS", "EventOrdering"]

#: The watermark before anything is known of it.
EARLIEST_MS = -(2**63)


@dataclass(frozen=True, slots=True)
class EventOrdering:
    """The order a streaming host runs each key's events in.

    Attributes:
        mode: ``"event_time"`` (by the watermark) or ``"arrival"`` (as events
            arrive, for the lowest latency; no event is ever late).
        max_out_of_orderness_ms: Disorder, in event time, that the order still
            corrects (``--max_out_of_orderness_ms``), in [0, 86 400 000]: an
            event waits this long past the watermark before it runs.
        late_events: ``"run"`` (on arrival, counted as ``late_events``) or
            ``"dead_letter"`` (a LATE dead letter, redrivable).
    """

    mode: Literal["event_time", "arrival"] = "event_time"
    max_out_of_orderness_ms: int = 0
    late_events: Literal["run", "dead_letter"] = "run"

    def __post_init__(self) -> None:
        if self.mode not in ("event_time", "arrival"):
            raise ConfigError(f"--event_order must be event_time or arrival, got {self.mode!r}",
                              field="event_order")
        if self.late_events not in ("run", "dead_letter"):
            raise ConfigError("--late_events must be run or dead_letter, got "
                              f"{self.late_events!r}", field="late_events")
        require_int(self.max_out_of_orderness_ms, name="--max_out_of_orderness_ms", low=0,
                    high=86_400_000, field="max_out_of_orderness_ms", noun="")

    @property
    def by_event_time(self) -> bool:
        """Whether events wait for the watermark."""
        return self.mode == "event_time"

    def ready_through(self, watermark_ms: int | None) -> int | None:
        """The latest event time that may run under `watermark_ms`; None: any (arrival order)."""
        if not self.by_event_time:
            return None
        if watermark_ms is None or watermark_ms == EARLIEST_MS:
            return EARLIEST_MS
        return watermark_ms - self.max_out_of_orderness_ms

    def release_at(self, event_time_ms: int) -> int:
        """The watermark at which an event of `event_time_ms` may run."""
        return event_time_ms + self.max_out_of_orderness_ms

    def is_late(self, event_time_ms: int, watermark_ms: int | None) -> bool:
        """Whether an event arrives behind what its key has already run past."""
        through = self.ready_through(watermark_ms)
        return through is not None and through != EARLIEST_MS and event_time_ms < through
