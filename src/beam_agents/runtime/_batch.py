"""The engine on a bounded input: whole keys at once, many keys in flight, no timers.

On the batch path every event of a key is known before the first one runs
(a GroupByKey hands them over together), and Beam's batch runner fires no
processing-time timers. So the host keeps each key's cells in process and
drives the same `KeyedEngine` itself: it offers a key's events, then pumps
every active key whenever an activation finishes or a retry falls due. Order
within a key is the engine's ``(event_time_ms, event_id)`` over the whole
input, so shuffling the input changes nothing (invariant 10). A key starts
from the cells its host hands over (restored from a state snapshot, or
fresh), and its host hears when it is done, to keep its cells for the next
run (docs/operations.md, "State between batch runs"); then a wait whose deadline
lies past the input's latest event time stays pending in those cells.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

from beam_agents.runtime._engine import KeyCells, KeyedEngine
from beam_agents.runtime._keyed import Channel

__all__ = ["KeyRuns"]


@dataclass(slots=True)
class _Active:
    cells: KeyCells
    wake_at_ms: int


class KeyRuns:
    """Runs whole keys through a `KeyedEngine` until each key's queue is empty.

    Args:
        engine: The engine (and through it the scheduler) to run on.
        clock_ms: The host's clock, for retry backoff.
        on_done: Called with a key and its cells once its queue is empty and
            nothing of it runs: what the key leaves for the next run.
    """

    def __init__(self, engine: KeyedEngine, *, clock_ms: Callable[[], int],
                 on_done: Callable[[Hashable, KeyCells], None] | None = None) -> None:
        self._engine = engine
        self._clock_ms = clock_ms
        self._on_done = on_done
        self._active: dict[Hashable, _Active] = {}
        #: The input's latest event time when the run carries state on (a state
        #: snapshot): a wait's timeout past it stays queued for the next run, as
        #: the input has not reached its deadline. None: the input is all there
        #: is, so every timeout runs (invariant 14).
        self.waits_through_ms: int | None = None

    @property
    def active(self) -> int:
        """Keys added and not yet finished."""
        return len(self._active)

    def add(self, key: Hashable, events: Iterable[bytes], *,
            cells: KeyCells | None = None) -> list[tuple[Channel, bytes]]:
        """Queue all of `key`'s events and start its first; returns lines produced so far.

        Args:
            key: The key.
            events: Its AgentEvent bytes, in any order.
            cells: Its state to start from; fresh cells by default.

        Raises:
            ValueError: `key` is still running from an earlier `add`.
        """
        if key in self._active:
            raise ValueError(f"key {key!r} was added twice; group its events first")
        if cells is None:
            cells = KeyCells.in_process()
        for event in events:
            self._engine.enqueue(key, cells, event, capped=False)
        step = self._engine.on_wake(key, cells, self._clock_ms(),
                                 waits_through_ms=self.waits_through_ms)
        if step.wake_at_ms is not None:
            self._active[key] = _Active(cells, step.wake_at_ms)
        elif self._on_done is not None:
            self._on_done(key, cells)
        return list(step.lines)

    def advance(self, *, block: bool) -> list[tuple[Channel, bytes]]:
        """Pump every key that is due; with `block`, wait until at least one line is out.

        Returns:
            The lines produced, each key's in its own order.
        """
        while True:
            lines: list[tuple[Channel, bytes]] = []
            now = self._clock_ms()
            for key, active in list(self._active.items()):
                if not self._due(key, active, now):
                    continue
                step = self._engine.on_wake(key, active.cells, now,
                                         waits_through_ms=self.waits_through_ms)
                lines.extend(step.lines)
                if step.wake_at_ms is None:
                    del self._active[key]
                    if self._on_done is not None:
                        self._on_done(key, active.cells)
                else:
                    active.wake_at_ms = step.wake_at_ms
            if lines or not block or not self._active:
                return lines
            soonest = min(active.wake_at_ms for active in self._active.values())
            self._engine.scheduler.wait_for_change(max(0.001, (soonest - now) / 1000))

    def _due(self, key: Hashable, active: _Active, now: int) -> bool:
        """Whether pumping `key` can do anything: a finished run, or a start it may make."""
        if active.wake_at_ms <= now:
            return True
        after = self._engine.next(key, active.cells, now, waits_through_ms=self.waits_through_ms)
        if after.action == "running":
            running = self._engine.scheduler.running(key)
            return running is not None and running.future.done()
        return after.action == "start"

    def finish(self) -> list[tuple[Channel, bytes]]:
        """Run every key to the end; returns the remaining lines."""
        lines: list[tuple[Channel, bytes]] = []
        while self._active:
            lines.extend(self.advance(block=True))
        return lines
