"""AgentKeyedProcessFunction: the shared engine hosted by a PyFlink keyed operator.

The Flink twin of `AgentDoFn`, and just as thin: it binds a key's keyed-state
cells (`CELLS` and `QUEUE_CELLS`), hands them to `KeyedEngine` in a callback
that has the key in scope, and routes the lines that come back; activations
run on the runtime's loop while the operator goes on with other keys. How the
event orders, the end-of-input rounds, checkpoints, savepoints and the two
Python execution modes play out is in docs/decisions/0003-one-engine-per-key.md
and docs/decisions/0015-flink-python-execution-modes.md (invariants 8, 9 and 10).
"""

from __future__ import annotations

import faulthandler
from collections.abc import Iterator
from typing import Any, Literal

from pyflink.common import Types
from pyflink.datastream import KeyedProcessFunction, OutputTag, RuntimeContext, TimeDomain
from pyflink.datastream.state import ListStateDescriptor, ValueStateDescriptor

from beam_agents.errors import StateCorruptError, StateError
from beam_agents.flink._cells import FlinkBagCell, FlinkValueCell
from beam_agents.flink._metrics import COUNTERS_DIR_PARAMETER, RECEIVED, FlinkMetrics
from beam_agents.flink._shutdown import quiet_worker_shutdown
from beam_agents.flink._snapshot import FlinkSnapshot, part_prefix
from beam_agents.hosting import (
    CELLS,
    EARLIEST_MS,
    QUEUE_CELLS,
    SNAPSHOT_MARK,
    ActivationRuntime,
    EventOrdering,
    KeyCells,
    KeyedEngine,
    SnapshotStore,
    SnapshotWriter,
    StateCells,
    Step,
    cells_by_name,
    refuse_events,
    restore_key,
    snapshot_record,
    start_runtime,
    wall_ms,
)
from beam_agents.runtime import AgentConfig

__all__ = ["END_OF_INPUT_MS", "ERRORS", "FIRST_ROUND_MS", "HOLD_INPUT_AT", "METRICS_EVERY_MS",
           "AgentKeyedProcessFunction", "EventOrder", "ExecutionMode"]

#: The errors (dead-letter) side output: error records as canonical JSON lines.
ERRORS = OutputTag("errors", Types.STRING())

#: Event time of the end-of-input drain: one below the final watermark
#: (``Long.MAX_VALUE``), which a bounded source emits when it ends and an
#: unbounded one never reaches.
END_OF_INPUT_MS = 2**63 - 2

#: Event time of the first end-of-input round; round *r* is at ``FIRST_ROUND_MS + r``.
#: A key never holds more than ``max_queued_per_key`` (at most 10 000 000) events.
FIRST_ROUND_MS = END_OF_INPUT_MS - 10_000_001

#: In arrival order, events a key may hold queued, its running one included,
#: before its next arrival holds the input (``--hold_input_at``). Holding it
#: blocks the callback, and with it the task: no other key's timer fires, so
#: no other key's finished activation is applied or its next one started until
#: the held key has room. At 2, a burst of 24 events on each of 64 keys ran at
#: 0.45 of the ideal on B15 (0.51 in thread mode); at 32 such bursts never
#: hold, and ran at 0.72 (0.96), for up to 32 events a key in keyed state
#: (docs/benchmarks.md, B15).
HOLD_INPUT_AT = 32

#: The longest counters wait in the buffer before they are reported; the
#: drain at the end of the input and `close` report at once. Reporting after
#: every callback cost about seven calls into the JVM per activation in
#: thread mode, a fifth of the task thread's time.
METRICS_EVERY_MS = 100

#: How a key's events are ordered: over the whole input, or as they arrive.
EventOrder = Literal["event_time", "arrival"]

#: Where PyFlink runs the function: a Python worker process, or the task
#: manager's JVM through an embedded interpreter (``python.execution-mode``).
ExecutionMode = Literal["process", "thread"]

#: The bytes cells' type per mode. The embedded interpreter converts a
#: primitive byte array item by item (and fails on an empty cell), so there
#: the cells hold pickled bytes; the two layouts do not restore into each other.
_BYTES = {"process": Types.PRIMITIVE_ARRAY(Types.BYTE()), "thread": Types.PICKLED_BYTE_ARRAY()}


class AgentKeyedProcessFunction(KeyedProcessFunction):
    """Runs each key's ``(key, AgentEvent bytes)`` elements through the engine, many keys at once.

    Emits intents as canonical JSON lines (the same bytes the Beam pipeline
    writes) and error records on `ERRORS`. Up to ``config.max_in_flight``
    keys of one parallel instance run at once. The provider and store
    clients open in `open` and close in `close`, once per parallel instance.

    On an unbounded input (`ordering` given, in event-time order) an event
    runs once the operator's watermark has passed it: a release timer at the
    key's next event time calls the engine back, and an event that arrives
    behind the watermark is late (counted, or a LATE dead letter). The
    end-of-input drain still runs what is queued if the watermark ever ends
    (``flink stop --drain``).

    In arrival order, an arrival that leaves its key with more than
    `hold_input_at` events queued, its running one included, holds the input
    until the key has room (`KeyedEngine.wait_for_room`).

    With `snapshot` (a bounded input in event-time order), a key's snapshot
    record arrives among its events, marked (`beam_agents.flink._snapshot`):
    the key starts from it, and its cells go into the next generation once
    its end-of-input drain is done.
    """

    def __init__(self, config: AgentConfig, *, event_order: EventOrder = "event_time",
                 execution_mode: ExecutionMode = "process",
                 ordering: EventOrdering | None = None,
                 snapshot: FlinkSnapshot | None = None,
                 hold_input_at: int = HOLD_INPUT_AT) -> None:
        self._config = config
        self._event_order = event_order
        self._hold_input_at = hold_input_at
        self._mode = execution_mode
        self._ordering = ordering if ordering is not None and ordering.by_event_time else None
        self._snapshot = snapshot
        self._runtime: ActivationRuntime | None = None
        self._engine: KeyedEngine | None = None
        self._store: SnapshotStore | None = None
        self._writer: SnapshotWriter | None = None

    def open(self, runtime_context: RuntimeContext) -> None:
        """Bind the key's cells and the metric group, and build the clients.

        Embedded in the JVM, Python's fault handler (``PYTHONFAULTHANDLER``)
        would take over the SIGSEGV the JVM raises on purpose (safepoint polls,
        null checks) and turn it into a crash; it is handed back to the JVM.
        """
        if self._mode == "thread":
            faulthandler.disable()
        raw = _BYTES[self._mode]

        def value(name: str, kind: Any) -> FlinkValueCell:
            cell = FlinkValueCell(runtime_context.get_state(ValueStateDescriptor(name, kind)))
            self._values.append(cell)
            return cell

        def bag(name: str) -> FlinkBagCell:
            return FlinkBagCell(runtime_context.get_list_state(ListStateDescriptor(name, raw)))

        self._values: list[FlinkValueCell] = []
        # Each key's earliest processing-time timer not yet fired (see `_emit`):
        # the worker's own, as a restore or a new worker starts with none.
        self._wakes: dict[Any, int] = {}
        memory, llm_cache, seq, budget, waits = CELLS
        queue, dequeued, queue_meta, attempt, retry_at_ms = QUEUE_CELLS
        self._cells = KeyCells(
            state=StateCells(value(memory, raw), value(llm_cache, raw),
                             value(seq, Types.LONG()), value(budget, raw), value(waits, raw)),
            queue=bag(queue), dequeued=bag(dequeued), queue_meta=value(queue_meta, raw),
            attempt=value(attempt, Types.LONG()), retry_at_ms=value(retry_at_ms, Types.LONG()))
        # The watermark the key has seen pass: Flink checkpoints no watermark, so
        # a restored job starts below every event; the key's own keeps what it
        # already let through runnable after a restore on a quiet stream.
        self._watermark = value("watermark_ms", Types.LONG()) if self._ordering else None
        # A snapshot record that did not restore, carried on as it was: its key's
        # events are dead letters, never run on other state (invariant 8).
        self._refused = value("snapshot_refused", raw) if self._snapshot else None
        self._metrics = FlinkMetrics(runtime_context.get_metrics_group())
        self._tally_dir = runtime_context.get_job_parameter(COUNTERS_DIR_PARAMETER, "") or None
        subtask, attempt_number = _subtask_and_attempt(runtime_context)
        self._tally_name = f"activate-{subtask}-{attempt_number}"
        if self._snapshot is not None:
            self._store = self._snapshot.config.open()
            self._writer = SnapshotWriter(self._store, self._snapshot.generation,
                                          prefix=part_prefix(subtask, attempt_number),
                                          record_infos=True)
        quiet_worker_shutdown()
        self._reported_ms = wall_ms()
        self._runtime = start_runtime(self._config, metrics=self._metrics)
        self._engine = KeyedEngine.over(self._runtime)

    def process_element(self, value: tuple[str, bytes], ctx: Any) -> Iterator[Any]:
        """Queue the event in keyed state (durable first, invariant 8); run it if order allows."""
        engine = self._started()
        key, timers = ctx.get_current_key(), ctx.timer_service()
        self._forget()
        event = bytes(value[1])
        if self._snapshot is not None and event[:1] == SNAPSHOT_MARK:
            yield from self._restore(key, event[1:], timers)
            return
        # With the DECODE dead letters, the events read (`beam_agents.flink._summary`).
        self._metrics.inc(RECEIVED[0], RECEIVED[1])
        if self._refused is not None and self._refused.read() is not None:
            yield from self._emit(key, Step(tuple(refuse_events(
                bytes.fromhex(key), [event], self._refused_error(key), self._metrics)), None),
                timers)
            return
        if self._ordering is not None:
            yield from self._admit(key, event, timers)
            return
        refused = engine.enqueue(key, self._cells, event)
        # One round per queued position, set with the event: PyFlink fires a
        # timer set while the final watermark fires only if a bundle is still open.
        position = engine.queue_length(key, self._cells) - 1
        timers.register_event_time_timer(FIRST_ROUND_MS + position)
        if position == 0:  # one drain per key; a timer outlives the queue that set it
            timers.register_event_time_timer(END_OF_INPUT_MS)
        lines = () if refused is None else (refused,)
        if self._event_order == "event_time":
            step = Step(lines, None)
        else:
            now = timers.current_processing_time()
            step = engine.wait_for_room(key, self._cells, engine.on_wake(key, self._cells, now),
                               clock_ms=wall_ms, max_ahead=self._hold_input_at)
            step = Step((*lines, *step.lines), step.wake_at_ms)
        yield from self._emit(key, step, timers)

    def on_timer(self, timestamp: int, ctx: Any) -> Iterator[Any]:
        """Pump the key (processing time, which retries wait on), or run an end-of-input round."""
        engine, key = self._started(), ctx.get_current_key()
        timers = ctx.timer_service()
        self._forget()
        event_time = ctx.time_domain() == TimeDomain.EVENT_TIME
        if not event_time and self._wakes.get(key, timestamp + 1) <= timestamp:
            del self._wakes[key]
        drain = event_time and timestamp >= END_OF_INPUT_MS
        if self._ordering is not None and not drain:
            # A wake or a release: either way, run what the watermark lets through.
            step = engine.on_wake(key, self._cells, timers.current_processing_time(),
                               ready_through_ms=self._ordering.ready_through(
                                   self._seen(timers, timestamp if event_time else None)))
        elif not event_time:
            step = engine.on_wake(key, self._cells, timers.current_processing_time())
        elif self._refused is not None and self._refused.read() is not None:
            step = Step((), None)  # its events were dead letters; its record goes on as it was
        elif drain:
            step = engine.on_end_of_input(key, self._cells, clock_ms=wall_ms,
                                          waits_through_ms=self._waits_through_ms)
        else:  # the next round's timer, set with the event, settles what this one starts
            round_ = engine.on_end_of_input_round(key, self._cells, clock_ms=wall_ms,
                                                  waits_through_ms=self._waits_through_ms)
            step = Step(round_.lines, None)
        if drain and self._writer is not None:
            self._keep(key)
        yield from self._emit(key, step, timers, report=drain)

    @property
    def _waits_through_ms(self) -> int | None:
        """With a snapshot, the input's latest event time; past it a wait stays pending."""
        return None if self._snapshot is None else self._snapshot.waits_through_ms

    def _restore(self, key: Any, record: bytes, timers: Any) -> Iterator[Any]:
        """Start the key from its snapshot record; events that came first are queued again on it.

        The record and the events reach the key by two paths, in either order;
        events only queue until the input ends, so none has run yet.
        """
        engine = self._started()
        assert self._refused is not None
        entity = bytes.fromhex(key)
        earlier = engine.queued(key, self._cells)
        lines: list[Any] = []
        try:
            if self._refused.read() is not None or self._cells.state.seq.read() is not None:
                raise StateCorruptError(f"the state snapshot holds more than one record for "
                                        f"entity {entity!r}; one is expected",
                                        cell="state_snapshot")
            restored = restore_key(entity, [record])
        except StateError as exc:
            if self._refused.read() is None:
                self._refused.write(record)
            lines.extend(refuse_events(entity, earlier, exc, self._metrics))
        else:
            for held_cell in cells_by_name(self._cells).values():
                held_cell.clear()  # type: ignore[union-attr]
            for name, cell in cells_by_name(restored).items():
                held = cell.read()
                target: Any = cells_by_name(self._cells)[name]
                if hasattr(cell, "clear"):
                    for item in held or ():
                        target.add(bytes(item))
                elif held is not None:
                    target.write(held)
            for event in earlier:
                if (refused := engine.enqueue(key, self._cells, event)) is not None:
                    lines.append(refused)
            for position in range(engine.queue_length(key, self._cells)):
                timers.register_event_time_timer(FIRST_ROUND_MS + position)
        # Every key with a record drains, with or without events: its cells go on.
        timers.register_event_time_timer(END_OF_INPUT_MS)
        yield from self._emit(key, Step(tuple(lines), None), timers)

    def _refused_error(self, key: Any) -> StateError:
        """Why the key's record was refused, for the dead letter of each later event."""
        assert self._refused is not None
        entity = bytes.fromhex(key)
        try:
            restore_key(entity, [bytes(self._refused.read())])
        except StateError as exc:
            return exc
        return StateCorruptError(f"the state snapshot holds more than one record for entity "
                                 f"{entity!r}; one is expected", cell="state_snapshot")

    def _keep(self, key: Any) -> None:
        """The key's drain is done: its cells (or refused record) go into the next generation."""
        assert self._writer is not None and self._refused is not None
        refused = self._refused.read()
        record = bytes(refused) if refused is not None else snapshot_record(
            bytes.fromhex(key), self._cells)
        self._writer.add(record)

    def _admit(self, key: Any, event: bytes, timers: Any) -> Iterator[Any]:
        """Queue an unbounded input's event (late ones as the ordering says), then wake the key."""
        assert self._engine is not None and self._ordering is not None
        watermark = self._seen(timers, None)
        refused = self._engine.enqueue_unbounded(key, self._cells, event, ordering=self._ordering,
                                     watermark_ms=watermark)
        if self._engine.queue_length(key, self._cells) == 1:  # one drain per key
            timers.register_event_time_timer(END_OF_INPUT_MS)
        step = self._engine.on_wake(key, self._cells, timers.current_processing_time(),
                                 ready_through_ms=self._ordering.ready_through(watermark))
        lines = () if refused is None else (refused,)
        yield from self._emit(key, Step((*lines, *step.lines), step.wake_at_ms,
                                   step.held_until_ms),
                              timers)

    def _seen(self, timers: Any, fired_ms: int | None) -> int:
        """The watermark the key has seen pass (kept in its state), updated with the current one.

        A release timer at `fired_ms` means the watermark has passed it.
        """
        assert self._watermark is not None
        kept = self._watermark.read()
        seen = max(timers.current_watermark(), fired_ms if fired_ms is not None else EARLIEST_MS,
                   EARLIEST_MS if kept is None else kept)
        if seen not in (kept, EARLIEST_MS):
            self._watermark.write(seen)
        return int(seen)

    def close(self) -> None:
        """Close the clients; activations still running are abandoned, their events still queued."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._store is not None:
            self._store.close()
            self._store = None
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None
            self._engine = None
            self._report()

    def _report(self) -> None:
        """Hand the counters to Flink, and to the run's tally where the client reads one.

        Written at every report, not only in `close`: the last drain of the
        input reports, and a worker may be stopped before `close` ends.
        """
        self._metrics.flush()
        if self._tally_dir is not None:
            self._metrics.write_tally(self._tally_dir, self._tally_name)

    def _forget(self) -> None:
        """A callback starts: the key in scope, and the state behind each cell, may differ."""
        for cell in self._values:
            cell.forget()

    def _started(self) -> KeyedEngine:
        assert self._engine is not None, "open() was not called"
        return self._engine

    def _emit(self, key: Any, step: Step, timers: Any, *, report: bool = False) -> Iterator[Any]:
        """Ask to be called back at `Step.wake_at_ms`, report the counters if due, route the lines.

        A key asks for a wake at every callback, its arrivals included, but one
        pending wake calls it back as well as any later one: only an earlier
        wake than the pending one is registered. With a timer for every
        arrival, bursts of 24 events a key made about 1.6 timer callbacks an
        event where one does (docs/benchmarks.md, B15).
        Counters are flushed here, on the callback's thread, which PyFlink
        attributes them to (see `FlinkMetrics`), at most `METRICS_EVERY_MS` apart.
        """
        if step.wake_at_ms is not None:
            pending = self._wakes.get(key)
            if pending is None or step.wake_at_ms < pending:
                timers.register_processing_time_timer(step.wake_at_ms)
                self._wakes[key] = step.wake_at_ms
        if step.held_until_ms is not None and self._ordering is not None:
            timers.register_event_time_timer(
                min(self._ordering.release_at(step.held_until_ms), FIRST_ROUND_MS - 1))
        now = wall_ms()
        if report or now - self._reported_ms >= METRICS_EVERY_MS:
            self._report()
            self._reported_ms = now
        for channel, line in step.lines:
            yield line.decode() if channel == "intents" else (ERRORS, line.decode())


def _subtask_and_attempt(context: Any) -> tuple[int, int]:
    """This subtask's index and attempt, in process mode and in thread mode.

    PyFlink 2.3's thread-mode context asks the Java context for
    ``getIndexOfThisSubtask``, which Flink 2 moved to ``getTaskInfo()``, so
    there it raises AttributeError; the task info answers both.
    """
    try:
        return int(context.get_index_of_this_subtask()), int(context.get_attempt_number())
    except AttributeError:
        info = context._runtime_context.getTaskInfo()  # PyFlink keeps the Java context here
        return int(info.getIndexOfThisSubtask()), int(info.getAttemptNumber())
