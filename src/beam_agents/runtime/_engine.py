"""The engine around the core: a per-key queue in keyed state, suspension, and outcome application.

Every host runs the same engine; only where its cells live and how it is
called back differ (DESIGN's "Durable, concurrent activations"):

* **Durable.** `KeyedEngine.offer` puts an event into the key's ``queue``
  cell before anything runs it, so a crash loses nothing: the restored queue
  and timers run it again.
* **Ordered.** A key has at most one activation in flight. The next starts
  only after the previous one committed or was dead-lettered, and among the
  queued events the one with the smallest ``(event_time_ms, event_id)`` goes
  first (invariant 10).
* **Concurrent.** Activations run on the `Scheduler`; `pump` returns at once,
  and the host calls it again, in a callback with the key's state in scope, at
  the `Step.wake_at_ms` it was given.
* **Suspended, not dead, on a transient failure.** A retriable failure commits
  only the replay-cache entries the attempt paid for, keeps the event at the
  head of the queue, and retries it with the same seq after the `RetryPolicy`
  backoff, so the paid calls replay (invariants 1 and 9). Later events of
  that key wait; other keys go on. After the last attempt the event becomes a
  dead letter carrying its attempt count.

Pure: no runner and no clock of its own; hosts pass their processing time.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from beam_agents._proto.event_pb2 import AgentEvent
from beam_agents.metrics import MetricsSink
from beam_agents.model import ReplayCache
from beam_agents.runtime._activation import (
    NAMESPACE,
    ActivationRuntime,
    Committed,
    Failed,
    count_dead_letter,
)
from beam_agents.runtime._codec import error_to_json, intent_to_json
from beam_agents.runtime._keyed import Channel, StateCell, StateCells
from beam_agents.runtime._retry import RetryPolicy
from beam_agents.runtime._scheduler import Running, Scheduler

__all__ = ["POLL_MS", "QUEUE_CELLS", "BagCell", "KeyCells", "KeyedEngine", "QueueCell", "Step",
           "ValueCell"]

#: How soon a host looks again at a key whose activation is still running.
POLL_MS = 20

#: An empty replay cache: what a dead letter leaves of its suspended attempts' paid calls.
_EMPTY_CACHE = ReplayCache(None, now_ms=0).to_bytes()

#: The keyed-state cells of a key's queue, by name, besides the three of `CELLS`:
#: the queued event bytes, the attempts made on the head, and when it may retry.
QUEUE_CELLS = ("queue", "attempt", "retry_at_ms")


class QueueCell(Protocol):
    """A bag of serialized events in keyed state (Beam ``BagState``, Flink ``ListState``)."""

    def read(self) -> Iterable[Any]:
        """The queued values, in any order."""
        ...

    def add(self, value: bytes) -> None:
        """Queue one more value."""
        ...

    def clear(self) -> None:
        """Empty the bag."""
        ...


@dataclass(frozen=True, slots=True)
class KeyCells:
    """All of one key's keyed state: the three activation cells and the queue's three.

    ``attempt`` counts the attempts made on the queue's head (unset: none),
    and ``retry_at_ms`` is the processing time before which it must not run.
    """

    state: StateCells
    queue: QueueCell
    attempt: StateCell
    retry_at_ms: StateCell

    @classmethod
    def in_process(cls) -> KeyCells:
        """Fresh cells held in this process: the batch path's keyed state, and the tests'."""
        return cls(state=StateCells(ValueCell(), ValueCell(), ValueCell(), ValueCell()),
                   queue=BagCell(), attempt=ValueCell(), retry_at_ms=ValueCell())


@dataclass(frozen=True, slots=True)
class Step:
    """What one call of the engine produced, and when to call it again for this key.

    Attributes:
        lines: Output lines in order, each to the intents or the errors output.
        wake_at_ms: Processing time at which the host must call `KeyedEngine.pump`
            for this key again; None when the key has nothing queued or running.
    """

    lines: tuple[tuple[Channel, bytes], ...]
    wake_at_ms: int | None


class KeyedEngine:
    """Runs each key's queue through a `Scheduler`, applying outcomes to the key's cells.

    Args:
        scheduler: Where activations run.
        retry: When suspended activations retry, and when they give up.
        metrics: Receives ``queued`` (+1 per offered event, -1 per event that
            left the queue), ``suspended`` and ``retries_exhausted``.
    """

    def __init__(self, scheduler: Scheduler, *, retry: RetryPolicy, metrics: MetricsSink) -> None:
        self._scheduler = scheduler
        self._retry = retry
        self._metrics = metrics

    @classmethod
    def over(cls, runtime: ActivationRuntime) -> KeyedEngine:
        """The engine a host runs on `runtime`, with its config's bounds and retry policy."""
        config = runtime.config
        scheduler = Scheduler(runtime, max_in_flight=config.max_in_flight,
                              metrics=runtime.metrics)
        return cls(scheduler, retry=config.retry, metrics=runtime.metrics)

    @property
    def scheduler(self) -> Scheduler:
        """The scheduler activations run on."""
        return self._scheduler

    def enqueue(self, cells: KeyCells, event: bytes) -> None:
        """Queue `event` durably in the key's cells, before anything runs it."""
        cells.queue.add(event)
        self._metrics.inc(NAMESPACE, "queued")

    def offer(self, key: Hashable, cells: KeyCells, event: bytes, now_ms: int) -> Step:
        """Queue `event` durably for `key`, then `pump`."""
        self.enqueue(cells, event)
        return self.pump(key, cells, now_ms)

    def pump(self, key: Hashable, cells: KeyCells, now_ms: int, *, wait_s: float = 0.0) -> Step:
        """Apply the key's finished activation, if any, and start its next one, if it may.

        Args:
            key: The key in scope.
            cells: That key's cells.
            now_ms: The host's processing time, for the retry schedule.
            wait_s: How long to wait for a running activation to finish.
        """
        lines: list[tuple[Channel, bytes]] = []
        finished = self._scheduler.take(key, wait_s=wait_s)
        queued = [bytes(value) for value in cells.queue.read()]
        if finished is not None:
            running, outcome = finished
            if self._still_current(cells, running, queued):
                lines.extend(self._apply(cells, running, outcome, now_ms))
                queued = [bytes(value) for value in cells.queue.read()]
            else:
                self._metrics.inc(NAMESPACE, "stale_outcomes")
        if self._scheduler.running(key) is not None:
            return Step(tuple(lines), now_ms + POLL_MS)
        if not queued:
            return Step(tuple(lines), None)
        retry_at = cells.retry_at_ms.read() or 0
        if now_ms < retry_at:
            return Step(tuple(lines), retry_at)
        self._scheduler.try_start(key, cells.state.read(), min(queued, key=_queue_order),
                                  attempt=(cells.attempt.read() or 0) + 1)
        return Step(tuple(lines), now_ms + POLL_MS)

    @staticmethod
    def _still_current(cells: KeyCells, running: Running, queued: list[bytes]) -> bool:
        """Whether the key's cells are still the ones `running` started from.

        They are not when the key's state was restored or moved to another
        worker and committed there while this activation ran (a rebalance, a
        restore from an older checkpoint). Applying it then would commit a
        seq twice or dequeue an event that is gone (invariants 1 and 6), so
        the outcome is dropped; the queue still holds what must run.
        """
        return (cells.state.seq.read() or 0) == running.base_seq and running.event in queued

    def settle(self, key: Hashable, cells: KeyCells, *, clock_ms: Callable[[], int]) -> Step:
        """One round of the end of a bounded input: finish the running activation, start the next.

        `drain`, run key after key, waits out each key's remaining events one
        model call at a time, while every other key's next event waits for its
        own turn. A host that calls this for every key, round after round,
        instead waits on one key only for as long as its running activation
        takes; by then the others have finished theirs too, and each round
        starts every key's next event at once. So the end of the input takes
        about one model latency per event left on the longest queue, not one
        per event left in the whole worker.

        Returns with the key's next activation running (`Step.wake_at_ms`
        set: settle it again in the next round), or with the queue empty
        (None). A key whose next event cannot start now (a retry's backoff,
        a full runtime) is drained where it stands, so every round makes
        progress.
        """
        running = self._scheduler.running(key)
        if running is not None:
            concurrent.futures.wait([running.future])  # then `now` is when it finished
        step = self.pump(key, cells, clock_ms())
        if step.wake_at_ms is None or self._scheduler.running(key) is not None:
            return step
        rest = self.drain(key, cells, clock_ms=clock_ms)
        return Step(step.lines + rest.lines, rest.wake_at_ms)

    def drain(self, key: Hashable, cells: KeyCells, *, clock_ms: Callable[[], int]) -> Step:
        """Run the key's queue to the end, blocking: the end of a bounded input.

        Bounded inputs end without processing time moving on (a finished
        file, a finished test stream), so hosts call this from an end-of-input
        callback (an event-time timer at the end of time) and nothing stays
        queued. Retries still wait out their backoff, on the host's clock.
        """
        now = clock_ms
        lines: list[tuple[Channel, bytes]] = []
        while True:
            step = self.pump(key, cells, now(), wait_s=0.05)
            lines.extend(step.lines)
            if step.wake_at_ms is None:
                return Step(tuple(lines), None)
            if self._scheduler.running(key) is None:
                # Waiting for a retry's backoff or for a free slot.
                self._scheduler.wait_for_change(max(0.001, (step.wake_at_ms - now()) / 1000))

    def _apply(self, cells: KeyCells, running: Running, outcome: Committed | Failed,
               now_ms: int) -> list[tuple[Channel, bytes]]:
        if outcome.budget is not None:
            # Tokens paid stay paid, whatever became of the activation (invariant 12).
            cells.state.budget.write(outcome.budget)
        if isinstance(outcome, Committed):
            if outcome.memory is not None:
                cells.state.memory.write(outcome.memory)
            if outcome.llm_cache is not None:
                cells.state.llm_cache.write(outcome.llm_cache)
            cells.state.seq.write(outcome.seq)
            self._dequeue(cells, running.event)
            return [("intents", intent_to_json(intent)) for intent in outcome.intents]
        error = outcome.error
        if outcome.flow_control:
            # The provider's quota is out: flow control, not failure (invariant
            # 11). The key waits the long backoff, as many times as it takes,
            # and the attempt does not count toward --max_attempts; the worker
            # meanwhile sends one probe per backoff, never a retry storm.
            if outcome.llm_cache is not None:
                cells.state.llm_cache.write(outcome.llm_cache)
            cells.retry_at_ms.write(
                now_ms + self._retry.long_delay_ms(error.entity_key, error.seq, running.attempt))
            self._metrics.inc(NAMESPACE, "suspended")
            self._metrics.inc(NAMESPACE, "quota_suspended")
            return []
        if error.retriable and not self._retry.gives_up_after(running.attempt):
            # Suspend: keep what the attempt paid for (invariant 1), and the event.
            if outcome.llm_cache is not None:
                cells.state.llm_cache.write(outcome.llm_cache)
            cells.attempt.write(running.attempt)
            cells.retry_at_ms.write(
                now_ms + self._retry.delay_ms(error.entity_key, error.seq, running.attempt))
            self._metrics.inc(NAMESPACE, "suspended")
            return []
        if error.retriable:
            self._metrics.inc(NAMESPACE, "retries_exhausted")
            count_dead_letter(self._metrics, error)
        if running.attempt > 1:
            # Its suspensions kept this seq's paid calls in the cell, and a dead
            # letter does not advance seq: left there, they would answer the
            # key's next event, which runs with the same seq (invariant 1).
            # Entries of older seqs can never be hit again, so the cell is emptied.
            cells.state.llm_cache.write(_EMPTY_CACHE)
        self._dequeue(cells, running.event)
        return [("errors", error_to_json(error))]

    def _dequeue(self, cells: KeyCells, event: bytes) -> None:
        """Drop one copy of `event` from the queue and reset the head's retry state."""
        queued = [bytes(value) for value in cells.queue.read()]
        queued.remove(event)
        cells.queue.clear()
        for value in queued:
            cells.queue.add(value)
        cells.attempt.write(0)
        cells.retry_at_ms.write(0)
        self._metrics.inc(NAMESPACE, "queued", -1)


def _queue_order(event: bytes) -> tuple[int, str, bytes]:
    """Queued events run by ``(event_time_ms, event_id)``; the bytes break exact ties."""
    parsed = AgentEvent.FromString(event)
    return parsed.event_time_ms, parsed.event_id, event


class ValueCell:
    """An in-process `StateCell`: the batch path's keyed state, and the tests'."""

    __slots__ = ("value",)

    def __init__(self, value: Any = None) -> None:
        self.value = value

    def read(self) -> Any:
        """Return the value, or None."""
        return self.value

    def write(self, value: Any) -> None:
        """Replace the value."""
        self.value = value


class BagCell:
    """An in-process `QueueCell`."""

    __slots__ = ("values",)

    def __init__(self) -> None:
        self.values: list[bytes] = []

    def read(self) -> Iterable[bytes]:
        """The values, in insertion order."""
        return tuple(self.values)

    def add(self, value: bytes) -> None:
        """Add one value."""
        self.values.append(value)

    def clear(self) -> None:
        """Remove every value."""
        self.values.clear()
