"""The engine around the core: a per-key queue in keyed state, suspension, and outcome application.

Every host runs it; only where its cells live and how it is called back
differ (docs/design.md, "Concurrency, ordering and outages"). Events are
queued durably before they run (invariant 8), one per key at a time in
``(event_time_ms, event_id)`` order (invariant 10); a transient failure
retries the same seq after a backoff (invariants 1 and 9). `KeyedEngine.next`
answers "what can this key do now" for hosts, rounds and backpressure.
Pure: hosts pass their processing time.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import warnings
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Literal

from beam_agents._proto.error_record_pb2 import ErrorRecord
from beam_agents._proto.event_pb2 import AgentEvent
from beam_agents.errors import BacklogFullError, LateEventError
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
from beam_agents.runtime._errors import error_record
from beam_agents.runtime._keyed import (
    BagCell,
    Channel,
    QueueCell,
    StateCell,
    StateCells,
    ValueCell,
)
from beam_agents.runtime._ordering import EventOrdering
from beam_agents.runtime._queue import EventQueue, QueueCells
from beam_agents.runtime._retry import RetryPolicy
from beam_agents.runtime._scheduler import Running, Scheduler

__all__ = ["POLL_MS", "QUEUE_CELLS", "KeyCells", "KeyedEngine", "Next", "Step"]

#: The soonest a host looks again at a running key; it is woken when the activation
#: can be expected to have finished (`Scheduler.expected_remaining_ms`).
POLL_MS = 20

#: An empty replay cache: what a dead letter leaves of its suspended attempts' paid calls.
_EMPTY_CACHE = ReplayCache(None, now_ms=0).to_bytes()

#: The keyed-state cells of a key's queue, by name, besides the five of `CELLS`:
#: the queued event bytes, the tombstones of those that left, the queue's
#: fingerprint (see `EventQueue`), the attempts made on the head, and when it
#: may retry. Bags: ``queue`` and ``dequeued``; the rest hold one value.
QUEUE_CELLS = ("queue", "dequeued", "queue_meta", "attempt", "retry_at_ms")


@dataclass(frozen=True, slots=True)
class KeyCells:
    """One key's keyed state: the five activation cells and the queue's five (`QUEUE_CELLS`)."""

    state: StateCells
    queue: QueueCell
    dequeued: QueueCell
    queue_meta: StateCell
    attempt: StateCell
    retry_at_ms: StateCell

    @classmethod
    def in_process(cls) -> KeyCells:
        """Fresh cells held in this process: the batch path's keyed state, and the tests'."""
        return cls(state=StateCells(ValueCell(), ValueCell(), ValueCell(), ValueCell(),
                                    ValueCell()),
                   queue=BagCell(), dequeued=BagCell(), queue_meta=ValueCell(),
                   attempt=ValueCell(), retry_at_ms=ValueCell())

    @property
    def queued(self) -> QueueCells:
        """The queue's own three cells."""
        return QueueCells(self.queue, self.dequeued, self.queue_meta)


@dataclass(frozen=True, slots=True)
class Next:
    """What a key can do next, the one answer every host acts on (`KeyedEngine.next`).

    ``action`` is one of:

    * ``"idle"``: nothing queued; no call back is needed;
    * ``"running"``: its activation is in flight; call back when it can have finished;
    * ``"start"``: its head may start now;
    * ``"retry"``: its head is suspended until ``at_ms`` (processing time);
    * ``"slots_full"``: its head could start, but every slot of the runtime is taken;
    * ``"breaker_open"``: its head could start, but the provider's circuit
      breaker holds starts (invariant 11); `KeyedEngine.on_wake` counts that as
      a failed attempt the activation never ran for;
    * ``"awaiting_watermark"``: its head waits for the watermark to pass
      ``at_ms`` (its event time).
    """

    action: Literal["idle", "running", "start", "retry", "slots_full", "breaker_open",
                    "awaiting_watermark"]
    at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Step:
    """What one call of the engine produced, and when to call it again for this key.

    Attributes:
        lines: Output lines in order, each to the intents or the errors output.
        wake_at_ms: Processing time at which the host must call `KeyedEngine.on_wake`
            for this key again; None when the key has nothing queued or running.
        held_until_ms: The event time the watermark must pass before the key's
            next event may run (its own); None unless the key is held.
    """

    lines: tuple[tuple[Channel, bytes], ...]
    wake_at_ms: int | None
    held_until_ms: int | None = None


def _renamed(old: str, new: str) -> Callable[..., Step | tuple[Channel, bytes] | None]:
    """A `KeyedEngine` method under its old name: calls the new one, with a DeprecationWarning."""

    def call(self: KeyedEngine, *args: object, **kwargs: object) -> Any:
        warnings.warn(f"KeyedEngine.{old} is renamed KeyedEngine.{new}; the old name goes "
                      "in the next release", DeprecationWarning, stacklevel=2)
        return getattr(self, new)(*args, **kwargs)

    call.__name__ = old
    call.__doc__ = f"Deprecated: use `{new}`."
    return call


class KeyedEngine:
    """Runs each key's queue through a `Scheduler`, applying outcomes to the key's cells.

    A host calls it from its runner's callbacks, each method named after the
    callback that calls it, and does what the returned `Step` says (emit its
    lines, set a timer at `wake_at_ms`):

    - `on_element`: an event arrived (`enqueue` or `enqueue_unbounded` to
      queue without starting);
    - `on_wake`: a timer fired, or any other callback for the key;
    - `wait_for_room`: after an element in arrival order, backpressure;
    - `on_end_of_input_round` and `on_end_of_input`: a bounded input ended.

    Args:
        scheduler: Where activations run.
        retry: When suspended activations retry, and when they give up.
        metrics: Receives ``queued`` (+1 per offered event, -1 per event that
            left the queue), ``suspended`` and ``retries_exhausted``.
    """

    def __init__(self, scheduler: Scheduler, *, retry: RetryPolicy, metrics: MetricsSink,
                 max_queued_per_key: int = 10_000, traceback_bytes: int = 4096) -> None:
        self._scheduler = scheduler
        self._retry = retry
        self._metrics = metrics
        self._max_queued = max_queued_per_key
        self._traceback_bytes = traceback_bytes
        self._queue = EventQueue()

    @classmethod
    def over(cls, runtime: ActivationRuntime) -> KeyedEngine:
        """The engine a host runs on `runtime`, with its config's bounds and retry policy."""
        config = runtime.config
        scheduler = Scheduler(runtime, max_in_flight=config.max_in_flight,
                              metrics=runtime.metrics)
        return cls(scheduler, retry=config.retry, metrics=runtime.metrics,
                   max_queued_per_key=config.max_queued_per_key,
                   traceback_bytes=config.traceback_bytes)

    @property
    def scheduler(self) -> Scheduler:
        """The scheduler activations run on."""
        return self._scheduler

    def enqueue(self, key: Hashable, cells: KeyCells, event: bytes, *,
                capped: bool = True) -> tuple[Channel, bytes] | None:
        """Queue `event` durably in the key's cells, before anything runs it.

        Args:
            key: The key in scope.
            cells: That key's cells.
            event: AgentEvent bytes.
            capped: Whether ``max_queued_per_key`` bounds the queue; False on
                the batch path, whose queue is the group the runner holds.

        Returns:
            None, or the BACKLOG dead letter of an event the key had no room
            for: it already held ``max_queued_per_key`` events (invariant 4).
        """
        queued = self._queue.length(key, cells.queued)
        if capped and queued >= self._max_queued:
            parsed = AgentEvent.FromString(event)
            return self._refuse(cells, event, parsed, BacklogFullError(
                entity_key=parsed.entity_key, queued=queued, max_queued=self._max_queued),
                ErrorRecord.STAGE_BACKLOG)
        length = self._queue.add(key, cells.queued, event)
        self._metrics.inc(NAMESPACE, "queued")
        self._metrics.peak(NAMESPACE, "queued_per_key_peak", length)
        self._metrics.observe(NAMESPACE, "queue_length", length)
        return None

    def on_element(self, key: Hashable, cells: KeyCells, event: bytes, now_ms: int) -> Step:
        """An event arrived: queue it durably for `key`, then do what `on_wake` does."""
        refused = self.enqueue(key, cells, event)
        step = self.on_wake(key, cells, now_ms)
        return step if refused is None else dataclasses.replace(
            step, lines=(refused, *step.lines))

    def enqueue_unbounded(self, key: Hashable, cells: KeyCells, event: bytes, *,
                          ordering: EventOrdering,
                          watermark_ms: int | None) -> tuple[Channel, bytes] | None:
        """`enqueue` on an unbounded input: a late event is counted, or dead-lettered.

        Args:
            key: The key in scope.
            cells: That key's cells.
            event: AgentEvent bytes.
            ordering: How the host orders the key's events.
            watermark_ms: What the host knows the watermark has passed, for this key.

        Returns:
            None, or the dead letter of an event that was not queued: LATE
            under ``late_events="dead_letter"``, or BACKLOG (see `enqueue`).
        """
        parsed = AgentEvent.FromString(event)
        if ordering.is_late(parsed.event_time_ms, watermark_ms):
            self._metrics.inc(NAMESPACE, "late_events")
            if ordering.late_events == "dead_letter":
                return self._refuse(cells, event, parsed, LateEventError(
                    entity_key=parsed.entity_key, event_time_ms=parsed.event_time_ms,
                    watermark_ms=watermark_ms or 0), ErrorRecord.STAGE_LATE)
        return self.enqueue(key, cells, event)

    def queued(self, key: Hashable, cells: KeyCells) -> list[bytes]:
        """The key's queued events, in the order they will run."""
        return self._queue.events(key, cells.queued)

    def queue_length(self, key: Hashable, cells: KeyCells) -> int:
        """How many events the key has queued, its running one included."""
        return self._queue.length(key, cells.queued)

    def next(self, key: Hashable, cells: KeyCells, now_ms: int, *,
             ready_through_ms: int | None = None, waits_through_ms: int | None = None) -> Next:
        """What `key` can do next: the one decision hosts, rounds and backpressure act on.

        Args:
            key: The key in scope.
            cells: That key's cells.
            now_ms: The host's processing time.
            ready_through_ms: In event-time order on an unbounded input, the
                latest event time that may run (the watermark, less the
                allowed disorder); None: every queued event may.
            waits_through_ms: In arrival order on an unbounded input, the
                watermark: a wait's timeout still runs only once it has passed
                the deadline (invariant 14). None: a bounded input.
        """
        if self._scheduler.running(key) is not None:
            return Next("running")
        head_time = self._queue.head_time(key, cells.queued)
        if head_time is None:
            return Next("idle")
        if ready_through_ms is not None and head_time > ready_through_ms:
            return Next("awaiting_watermark", head_time)
        if ready_through_ms is None and waits_through_ms is not None and \
                head_time > waits_through_ms and self._is_timeout(key, cells):
            return Next("awaiting_watermark", head_time)
        retry_at: int = cells.retry_at_ms.read() or 0
        if now_ms < retry_at:
            return Next("retry", retry_at)
        if not self._scheduler.has_slot():
            return Next("slots_full")
        if self._scheduler.start_wait_s() is not None:
            return Next("breaker_open")
        return Next("start")

    def _is_timeout(self, key: Hashable, cells: KeyCells) -> bool:
        """Whether the key's head is a wait's timeout, which runs by event time in any order."""
        head = self._queue.head(key, cells.queued)
        return head is not None and bool(AgentEvent.FromString(head).wait_timed_out)

    def _refuse(self, cells: KeyCells, event: bytes, parsed: AgentEvent,
                exc: BacklogFullError | LateEventError, stage: int) -> tuple[Channel, bytes]:
        """The dead letter of an event that was never queued; it carries the event for redrive."""
        record = error_record(exc, stage=stage, entity_key=parsed.entity_key,
                              seq=cells.state.seq.read() or 0, event=event,
                              event_id=parsed.event_id, traceback_bytes=0)
        count_dead_letter(self._metrics, record)
        return "errors", error_to_json(record)

    def on_wake(self, key: Hashable, cells: KeyCells, now_ms: int, *, wait_s: float = 0.0,
             ready_through_ms: int | None = None, waits_through_ms: int | None = None) -> Step:
        """Apply the key's finished activation, if any, and start its next one, if it may.

        Args:
            key: The key in scope.
            cells: That key's cells.
            now_ms: The host's processing time, for the retry schedule.
            wait_s: How long to wait for a running activation to finish.
            ready_through_ms: The latest event time that may start (see `next`).
            waits_through_ms: The watermark, in arrival order (see `next`).
        """
        lines: list[tuple[Channel, bytes]] = []
        finished = self._scheduler.take(key, wait_s=wait_s)
        if finished is not None:
            running, outcome = finished
            if self._still_current(key, cells, running):
                lines.extend(self._apply(key, cells, running, outcome, now_ms))
            else:
                self._metrics.inc(NAMESPACE, "stale_outcomes")
        after = self.next(key, cells, now_ms, ready_through_ms=ready_through_ms,
                          waits_through_ms=waits_through_ms)
        while after.action == "breaker_open":
            lines.extend(self._hold(key, cells, now_ms))
            after = self.next(key, cells, now_ms, ready_through_ms=ready_through_ms,
                              waits_through_ms=waits_through_ms)
        if after.action == "start":
            head = self._queue.head(key, cells.queued)
            assert head is not None
            attempt = (cells.attempt.read() or 0) + 1
            if self._scheduler.try_start(key, cells.state.read(), head, attempt=attempt):
                after = Next("running")
                if attempt == 1:
                    self._observe_head_age(key, cells, now_ms)
        if after.action == "awaiting_watermark":
            return Step(tuple(lines), None, after.at_ms)
        held_until = None
        if after.action == "running" and ready_through_ms is not None:
            # Ask for the watermark to pass the key's next event now, so it is
            # ready when the running one ends, not a timer later.
            upcoming = self._queue.time_after_head(key, cells.queued)
            if upcoming is not None and upcoming > ready_through_ms:
                held_until = upcoming
        return Step(tuple(lines), self._wake_at(key, after, now_ms), held_until)

    def await_running(self, key: Hashable, *, timeout_s: float) -> None:
        """Wait up to `timeout_s` for the key's activation to end.

        Why a host waits: docs/decisions/0013-waking-a-key.md.
        """
        self._scheduler.wait_for(key, timeout_s)

    def _observe_head_age(self, key: Hashable, cells: KeyCells, now_ms: int) -> None:
        """Sample the age of the head, the key's oldest queued event, as it first starts."""
        head_time = self._queue.head_time(key, cells.queued)
        if head_time is not None:
            self._metrics.observe(NAMESPACE, "oldest_queued_age_ms", max(0, now_ms - head_time))

    def _wake_at(self, key: Hashable, after: Next, now_ms: int) -> int | None:
        """When a host should call back for a key that will do `after` next."""
        if after.action == "idle":
            return None
        if after.action == "retry":
            return after.at_ms
        if after.action == "running":
            return now_ms + max(POLL_MS, self._scheduler.expected_remaining_ms(key))
        return now_ms + POLL_MS

    def _still_current(self, key: Hashable, cells: KeyCells, running: Running) -> bool:
        """Whether the key's cells are still the ones `running` started from.

        Not after a restore or a move that committed elsewhere meanwhile;
        applying it would commit a seq twice or dequeue an event that is gone
        (invariants 1 and 6), so it is dropped, and the queue still holds it.
        """
        return ((cells.state.seq.read() or 0) == running.base_seq
                and self._queue.holds(key, cells.queued, running.event))

    def on_end_of_input_round(self, key: Hashable, cells: KeyCells, *,
                              clock_ms: Callable[[], int],
                              waits_through_ms: int | None = None) -> Step:
        """One round of a bounded input's end: finish the key's running activation, start its next.

        Hosts call it for every key, round after round
        (docs/decisions/0011-event-order.md). A round waits for a free slot rather than
        skipping the key, and drains only a key whose head waits out a retry.
        Returns with the next activation running (`Step.wake_at_ms` set), or
        with the queue empty, or with only a wait's timeout past
        `waits_through_ms` left (see `on_end_of_input`).
        """
        running = self._scheduler.running(key)
        if running is not None:
            concurrent.futures.wait([running.future])  # then `now` is when it finished
        lines: list[tuple[Channel, bytes]] = []
        while True:
            step = self.on_wake(key, cells, clock_ms(), waits_through_ms=waits_through_ms)
            lines.extend(step.lines)
            after = self.next(key, cells, clock_ms(), waits_through_ms=waits_through_ms)
            if after.action == "slots_full":
                self._scheduler.wait_for_slot(POLL_MS / 1000)
                continue
            if after.action in ("retry", "breaker_open"):
                rest = self.on_end_of_input(key, cells, clock_ms=clock_ms,
                                            waits_through_ms=waits_through_ms)
                return Step((*lines, *rest.lines), rest.wake_at_ms)
            return Step(tuple(lines), step.wake_at_ms)

    def wait_for_room(self, key: Hashable, cells: KeyCells, step: Step, *,
                      clock_ms: Callable[[], int], max_ahead: int) -> Step:
        """Backpressure for a host that runs events on arrival: return once `key` may take more.

        The caller (and with it the input) waits while the key has more than
        `max_ahead` events queued, its running one included, or while its next
        event waits for a slot; never for a suspended key's backoff, so the
        other keys go on (invariant 10; docs/decisions/0012-bounded-backlogs.md), nor
        for an open breaker, which a timer waits out as it does a backoff.
        """
        lines = list(step.lines)
        while step.wake_at_ms is not None:
            after = self.next(key, cells, clock_ms())
            if after.action in ("idle", "retry", "breaker_open") or (
                    after.action == "running" and self.queue_length(key, cells) <= max_ahead):
                break
            if after.action == "slots_full":
                self._scheduler.wait_for_slot(POLL_MS / 1000)
            step = self.on_wake(key, cells, clock_ms(), wait_s=POLL_MS / 1000)
            lines.extend(step.lines)
        return Step(tuple(lines), step.wake_at_ms)

    def on_end_of_input(self, key: Hashable, cells: KeyCells, *,
                        clock_ms: Callable[[], int],
                        waits_through_ms: int | None = None) -> Step:
        """Run the key's queue to the end, blocking: the end of a bounded input.

        Called from an end-of-input callback, as a finished input moves no
        processing time on; retries still wait out their backoff. With a
        state snapshot the input is not the end of time: `waits_through_ms`
        is its latest event time, and a wait's timeout past it stays queued
        for the next run (invariant 14).
        """
        now = clock_ms
        lines: list[tuple[Channel, bytes]] = []
        while True:
            step = self.on_wake(key, cells, now(), wait_s=0.05, waits_through_ms=waits_through_ms)
            lines.extend(step.lines)
            if step.wake_at_ms is None:
                return Step(tuple(lines), None)
            if self._scheduler.running(key) is None:
                # Waiting for a retry's backoff or for a free slot.
                self._scheduler.wait_for_change(max(0.001, (step.wake_at_ms - now()) / 1000))


    # The names before the rename, kept through 0.1.0 (CHANGELOG, "Renamed").
    pump = _renamed("pump", "on_wake")
    offer = _renamed("offer", "on_element")
    admit = _renamed("admit", "enqueue_unbounded")
    settle = _renamed("settle", "on_end_of_input_round")
    drain = _renamed("drain", "on_end_of_input")
    hold = _renamed("hold", "wait_for_room")

    def _hold(self, key: Hashable, cells: KeyCells, now_ms: int) -> list[tuple[Channel, bytes]]:
        """The breaker holds the key's head: an attempt it never ran for (invariant 11).

        The head waits out the backoff of a failed attempt, as it would had
        it started and met the open breaker at its model call, so the retry
        policy still bounds how long an event waits on an outage; but the
        agent does not run, and nothing is suspended. After the last attempt
        it is a dead letter like any other.
        """
        head = self._queue.head(key, cells.queued)
        assert head is not None
        attempt = (cells.attempt.read() or 0) + 1
        self._metrics.inc(NAMESPACE, "breaker_held")
        parsed = AgentEvent.FromString(head)
        seq = (cells.state.seq.read() or 0) + 1
        if self._retry.gives_up_after(attempt):
            record = error_record(self._scheduler.breaker_refusal(), stage=ErrorRecord.STAGE_MODEL,
                                  entity_key=parsed.entity_key, seq=seq, event=head,
                                  event_id=parsed.event_id, traceback_bytes=0)
            record.attempts = attempt
            return self._give_up(key, cells, head, record, attempt)
        cells.attempt.write(attempt)
        cells.retry_at_ms.write(now_ms + self._retry.delay_ms(parsed.entity_key, seq, attempt))
        return []

    def _apply(self, key: Hashable, cells: KeyCells, running: Running,
               outcome: Committed | Failed, now_ms: int) -> list[tuple[Channel, bytes]]:
        if outcome.budget is not None:
            # Tokens paid stay paid, whatever became of the activation (invariant 12).
            cells.state.budget.write(outcome.budget)
        if isinstance(outcome, Committed):
            if outcome.memory is not None:
                cells.state.memory.write(outcome.memory)
            if outcome.waits is not None:
                cells.state.waits.write(outcome.waits)
            cells.state.seq.write(outcome.seq)
            _empty_cache(cells)
            self._dequeue(key, cells, running.event)
            for timeout in outcome.timeouts:
                # Queued now, at the wait's deadline in event time: it runs once the
                # watermark passes it, in the key's order (invariant 14). Bounded by
                # --max_pending_waits, not by the backlog cap, so it is never refused.
                self.enqueue(key, cells, timeout, capped=False)
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
        if not error.retriable:
            return self._dead_letter(key, cells, running.event, error, running.attempt)
        return self._give_up(key, cells, running.event, error, running.attempt)

    def _give_up(self, key: Hashable, cells: KeyCells, event: bytes, error: ErrorRecord,
                 attempt: int) -> list[tuple[Channel, bytes]]:
        """The last attempt at a retriable failure: the event becomes a dead letter."""
        self._metrics.inc(NAMESPACE, "retries_exhausted")
        count_dead_letter(self._metrics, error)
        return self._dead_letter(key, cells, event, error, attempt)

    def _dead_letter(self, key: Hashable, cells: KeyCells, event: bytes, error: ErrorRecord,
                     attempt: int) -> list[tuple[Channel, bytes]]:
        if attempt > 1:
            # Its suspensions kept this seq's paid calls, and the key's next
            # event runs with the same seq (invariant 1). A first attempt's dead
            # letter leaves the cell alone: it may be the corrupt blob reported.
            _empty_cache(cells)
        self._dequeue(key, cells, event)
        return [("errors", error_to_json(error))]

    def _dequeue(self, key: Hashable, cells: KeyCells, event: bytes) -> None:
        """Drop one copy of `event` from the queue and reset the head's retry state."""
        self._queue.remove(key, cells.queued, event)
        if cells.attempt.read():  # only what a retry set: on Flink a write is a state request
            cells.attempt.write(0)
        if cells.retry_at_ms.read():
            cells.retry_at_ms.write(0)
        self._metrics.inc(NAMESPACE, "queued", -1)


def _empty_cache(cells: KeyCells) -> None:
    """Drop the head's paid calls once it has run: they serve its seq only (invariant 3).

    Kept, every activation would parse and every commit write calls that no
    later seq looks up (docs/decisions/0014-replay-cache-between-activations.md).
    """
    held = cells.state.llm_cache.read()
    if held and bytes(held) != _EMPTY_CACHE:
        cells.state.llm_cache.write(_EMPTY_CACHE)
