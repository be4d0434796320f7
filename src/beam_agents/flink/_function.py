"""AgentKeyedProcessFunction: the shared engine hosted by a PyFlink keyed operator.

The Flink twin of `AgentDoFn`, and just as thin: it binds a key's nine
keyed-state cells (`CELLS` and `QUEUE_CELLS`), hands them to `KeyedEngine` in
a callback that has the key in scope, and routes the lines that come back;
the activations run on the runtime's loop while the operator goes on with
other keys (docs/design.md, "How each engine runs it").

``--event_order event_time`` (the default) only queues each event as it
arrives, so a bounded input runs in full ``(event_time_ms, event_id)`` order
and any line order gives the same intents (invariant 10); ``arrival`` starts
an event as soon as its key is free, holding the input while a key runs
ahead (`KeyedEngine.hold`). A processing-time timer at `Step.wake_at_ms`
calls the engine back for a finished activation or a retry; the final
watermark fires the end-of-input rounds (`KeyedEngine.settle`), one per
queued position, then a drain at `END_OF_INPUT_MS`. Checkpoints snapshot the
queue with the key's state and timers, so a restore runs every unapplied
event again with the same seq (invariants 8 and 9). A savepoint holds the
same cells, all keyed state, so they move with their key to whichever
subtask owns it after a restore at another parallelism; with a call journal,
the calls that activations still in flight at the stop had paid replay.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Literal

from pyflink.common import Types
from pyflink.datastream import KeyedProcessFunction, OutputTag, RuntimeContext, TimeDomain
from pyflink.datastream.state import ListStateDescriptor, ValueStateDescriptor

from beam_agents.flink._metrics import FlinkMetrics
from beam_agents.hosting import start_runtime, wall_ms
from beam_agents.runtime import (
    CELLS,
    QUEUE_CELLS,
    ActivationRuntime,
    AgentConfig,
    KeyCells,
    KeyedEngine,
    StateCells,
    Step,
)

__all__ = [
    "END_OF_INPUT_MS",
    "ERRORS",
    "FIRST_ROUND_MS",
    "MAX_AHEAD",
    "AgentKeyedProcessFunction",
    "EventOrder",
]

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
#: before its next arrival holds the input.
MAX_AHEAD = 2

#: How a key's events are ordered (see the module docstring).
EventOrder = Literal["event_time", "arrival"]

_BYTES = Types.PRIMITIVE_ARRAY(Types.BYTE())


class AgentKeyedProcessFunction(KeyedProcessFunction):
    """Runs each key's ``(key, AgentEvent bytes)`` elements through the engine, many keys at once.

    Emits intents as canonical JSON lines (the same bytes the Beam pipeline
    writes) and error records on `ERRORS`. Up to ``config.max_in_flight``
    keys of one parallel instance run at once. The provider and store
    clients open in `open` and close in `close`, once per parallel instance.
    """

    def __init__(self, config: AgentConfig, *, event_order: EventOrder = "event_time") -> None:
        self._config = config
        self._event_order = event_order
        self._runtime: ActivationRuntime | None = None
        self._engine: KeyedEngine | None = None

    def open(self, runtime_context: RuntimeContext) -> None:
        """Bind the key's cells and the metric group, and build the clients."""
        def value(name: str, kind: Any) -> _Cell:
            return _Cell(runtime_context.get_state(ValueStateDescriptor(name, kind)))

        def bag(name: str) -> _Bag:
            return _Bag(runtime_context.get_list_state(ListStateDescriptor(name, _BYTES)))

        memory, llm_cache, seq, budget = CELLS
        queue, dequeued, queue_meta, attempt, retry_at_ms = QUEUE_CELLS
        self._cells = KeyCells(
            state=StateCells(value(memory, _BYTES), value(llm_cache, _BYTES),
                             value(seq, Types.LONG()), value(budget, _BYTES)),
            queue=bag(queue), dequeued=bag(dequeued), queue_meta=value(queue_meta, _BYTES),
            attempt=value(attempt, Types.LONG()), retry_at_ms=value(retry_at_ms, Types.LONG()))
        self._metrics = FlinkMetrics(runtime_context.get_metrics_group())
        self._runtime = start_runtime(self._config, metrics=self._metrics)
        self._engine = KeyedEngine.over(self._runtime)

    def process_element(self, value: tuple[str, bytes], ctx: Any) -> Iterator[Any]:
        """Queue the event in keyed state (durable first, invariant 8); run it if order allows."""
        engine = self._started()
        key, timers = ctx.get_current_key(), ctx.timer_service()
        refused = engine.enqueue(key, self._cells, bytes(value[1]))
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
            step = engine.hold(key, self._cells, engine.pump(key, self._cells, now),
                               clock_ms=wall_ms, max_ahead=MAX_AHEAD)
            step = Step((*lines, *step.lines), step.wake_at_ms)
        yield from self._emit(step, timers)

    def on_timer(self, timestamp: int, ctx: Any) -> Iterator[Any]:
        """Pump the key (processing time), or run a round of the end of the input (event time).

        Retries at the end wait out their backoff on the wall clock, which
        processing time reads.
        """
        engine, key = self._started(), ctx.get_current_key()
        timers = ctx.timer_service()
        if ctx.time_domain() != TimeDomain.EVENT_TIME:
            step = engine.pump(key, self._cells, timers.current_processing_time())
        elif timestamp >= END_OF_INPUT_MS:
            step = engine.drain(key, self._cells, clock_ms=wall_ms)
        else:  # the next round's timer, set with the event, settles what this one starts
            step = Step(engine.settle(key, self._cells, clock_ms=wall_ms).lines, None)
        yield from self._emit(step, timers)

    def close(self) -> None:
        """Close the clients; activations still running are abandoned, their events still queued."""
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None
            self._engine = None

    def _started(self) -> KeyedEngine:
        assert self._engine is not None, "open() was not called"
        return self._engine

    def _emit(self, step: Step, timers: Any) -> Iterator[Any]:
        """Ask to be called back at `Step.wake_at_ms`, report the counters, and route the lines.

        Counters are flushed here, on the callback's thread, which PyFlink
        attributes them to (see `FlinkMetrics`).
        """
        if step.wake_at_ms is not None:
            timers.register_processing_time_timer(step.wake_at_ms)
        self._metrics.flush()
        for channel, line in step.lines:
            yield line.decode() if channel == "intents" else (ERRORS, line.decode())


class _Cell:
    """A Flink ``ValueState`` as the core's `StateCell`."""

    __slots__ = ("_state",)

    def __init__(self, state: Any) -> None:
        self._state = state

    def read(self) -> Any:
        return self._state.value()

    def write(self, value: Any) -> None:
        self._state.update(value)


class _Bag:
    """A Flink ``ListState`` of bytes as the engine's `QueueCell`."""

    __slots__ = ("_state",)

    def __init__(self, state: Any) -> None:
        self._state = state

    def read(self) -> Iterable[Any]:
        return self._state.get() or ()

    def add(self, value: bytes) -> None:
        self._state.add(value)

    def clear(self) -> None:
        self._state.clear()
