"""AgentKeyedProcessFunction: the shared engine hosted by a PyFlink keyed operator.

The Flink twin of `AgentDoFn`, and just as thin: it binds a key's seven
keyed-state cells (`CELLS` and `QUEUE_CELLS`), hands them to `KeyedEngine`
in a callback that has the key in scope, and routes the lines that come back.
PyFlink's async functions cannot reach keyed state, so the concurrency comes
from the engine: `process_element` queues the event and starts it if the key
is idle, and the activation runs on the runtime's loop while the operator
goes on with other keys (DESIGN's "Durable, concurrent activations"). Only a
key that runs too far ahead, or a full runtime, holds the input (`_hold`).

Two timers call the engine back for a key:

* a **processing-time** timer at `Step.wake_at_ms` applies the key's
  finished activation and starts its next event, or retries a suspended one
  after its backoff;
* **event-time** timers run the key's queue to its end when a bounded input
  ends. A finished source emits the final watermark (``Long.MAX_VALUE``) even
  under ``WatermarkStrategy.no_watermarks()``, which fires these timers;
  processing-time timers still pending then never fire, so without them a
  bounded job could end with events still queued (invariant 8). On an
  unbounded input they never fire.

  They run in rounds (`KeyedEngine.settle`): `END_OF_INPUT_ROUNDS` timers a
  millisecond apart, then the drain at `END_OF_INPUT_MS`. Flink fires timers
  in timestamp order, so every key's round *r* runs before any key's round
  *r + 1*: a round finishes the key's running activation and starts its next,
  and the keys' last events run at once, where draining them key after key
  paid one model latency per event left in the worker. The drain then runs
  whatever is left (a retry's backoff, say). Every key's timers are set with
  its events, not from a round: PyFlink re-advances the final watermark for
  timers set while it fires only while a bundle is still open, and a pass
  that ends on a bundle-size boundary leaves none open, so a timer set there
  never fires.

Checkpoints snapshot the queue with the rest of the key's state and its
timers. An event is in the queue before its activation starts and leaves it
only when the outcome is applied, so after a failover the restored queue and
timers run every unapplied event again with the same seq (invariants 8 and
9); the long-term store's seq guard makes re-run flushes converge
(invariant 5).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from pyflink.common import Types
from pyflink.datastream import KeyedProcessFunction, OutputTag, RuntimeContext, TimeDomain
from pyflink.datastream.state import ListStateDescriptor, ValueStateDescriptor

from beam_agents.flink._metrics import FlinkMetrics
from beam_agents.hosting import start_runtime, wall_ms
from beam_agents.runtime import (
    CELLS,
    POLL_MS,
    QUEUE_CELLS,
    ActivationRuntime,
    AgentConfig,
    KeyCells,
    KeyedEngine,
    StateCells,
    Step,
)

__all__ = ["END_OF_INPUT_MS", "END_OF_INPUT_ROUNDS", "ERRORS", "MAX_QUEUED_PER_KEY",
           "AgentKeyedProcessFunction"]

#: The errors (dead-letter) side output: error records as canonical JSON lines.
ERRORS = OutputTag("errors", Types.STRING())

#: Event time of the end-of-input drain: one below the final watermark
#: (``Long.MAX_VALUE``), which a bounded source emits when it ends and an
#: unbounded one never reaches.
END_OF_INPUT_MS = 2**63 - 2

#: Events a key may hold queued, its running one included, before its next
#: arrival holds the input (`AgentKeyedProcessFunction._hold`).
MAX_QUEUED_PER_KEY = 2

#: End-of-input rounds before the drain. Unless it is suspended, a key holds at
#: most `MAX_QUEUED_PER_KEY` events when its input ends, and each round
#: finishes one of them.
END_OF_INPUT_ROUNDS = MAX_QUEUED_PER_KEY

#: The event times of a key's end-of-input timers: the rounds, then the drain.
_END_TIMERS = tuple(range(END_OF_INPUT_MS - END_OF_INPUT_ROUNDS, END_OF_INPUT_MS + 1))

_HOLD_S = POLL_MS / 1000
_BYTES = Types.PRIMITIVE_ARRAY(Types.BYTE())


class AgentKeyedProcessFunction(KeyedProcessFunction):
    """Runs each key's ``(key, AgentEvent bytes)`` elements through the engine, many keys at once.

    Emits intents as canonical JSON lines (the same bytes the Beam pipeline
    writes) and error records on `ERRORS`. A key's events commit one at a
    time in ``(event_time_ms, event_id)`` order (invariant 10); up to
    ``config.max_in_flight`` keys of one parallel instance run at once. The
    provider and store clients open in `open` and close in `close`, once per
    parallel instance.
    """

    def __init__(self, config: AgentConfig) -> None:
        self._config = config
        self._runtime: ActivationRuntime | None = None
        self._engine: KeyedEngine | None = None

    def open(self, runtime_context: RuntimeContext) -> None:
        """Bind the key's cells and the metric group, and build the clients."""
        def value(name: str, kind: Any) -> _Cell:
            return _Cell(runtime_context.get_state(ValueStateDescriptor(name, kind)))

        memory, llm_cache, seq, budget = CELLS
        queue, attempt, retry_at_ms = QUEUE_CELLS
        self._cells = KeyCells(
            state=StateCells(value(memory, _BYTES), value(llm_cache, _BYTES),
                             value(seq, Types.LONG()), value(budget, _BYTES)),
            queue=_Queue(runtime_context.get_list_state(ListStateDescriptor(queue, _BYTES))),
            attempt=value(attempt, Types.LONG()),
            retry_at_ms=value(retry_at_ms, Types.LONG()))
        self._metrics = FlinkMetrics(runtime_context.get_metrics_group())
        self._runtime = start_runtime(self._config, metrics=self._metrics)
        self._engine = KeyedEngine.over(self._runtime)

    def process_element(self, value: tuple[str, bytes], ctx: Any) -> Iterator[Any]:
        """Queue the event in the key's state (durable first, invariant 8) and pump the key."""
        engine = self._started()
        key, timers = ctx.get_current_key(), ctx.timer_service()
        for at in _END_TIMERS:  # one per key and time: Flink keeps a timer once
            timers.register_event_time_timer(at)
        step = engine.offer(key, self._cells, bytes(value[1]), timers.current_processing_time())
        yield from self._emit(self._hold(key, step, timers), timers)

    def on_timer(self, timestamp: int, ctx: Any) -> Iterator[Any]:
        """Pump the key (processing time), or run a round of the end of the input (event time).

        A round blocks until the key's running activation finishes, then
        starts its next; the drain, after the rounds, empties the queue.
        Retries at the end wait out their backoff on the wall clock, the
        clock processing time reads.
        """
        engine = self._started()
        timers = ctx.timer_service()
        if ctx.time_domain() == TimeDomain.EVENT_TIME:
            key = ctx.get_current_key()
            if timestamp >= END_OF_INPUT_MS:
                step = engine.drain(key, self._cells, clock_ms=wall_ms)
            else:
                step = engine.settle(key, self._cells, clock_ms=wall_ms)
        else:
            step = engine.pump(ctx.get_current_key(), self._cells,
                               timers.current_processing_time())
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

    def _hold(self, key: str, step: Step, timers: Any) -> Step:
        """Backpressure: hold the element until `key` is at most `MAX_QUEUED_PER_KEY` ahead.

        Returning at once would let a bounded source be read to its end with
        nearly every activation still queued, to run in the end-of-input
        rounds with no checkpoint and no sink commit until they end. An
        unbounded source would pile events into state as fast as it is read.
        So the element waits on the runtime while the key has more events
        queued than the bound (its running one included), or while its next
        event cannot start for want of a free slot. It never waits out a
        suspended key's backoff: that key's later events wait, the other keys
        go on (invariant 10).
        """
        engine, cells = self._started(), self._cells
        lines = list(step.lines)
        while step.wake_at_ms is not None:
            now_ms = timers.current_processing_time()
            if engine.scheduler.running(key) is not None:
                if sum(1 for _ in cells.queue.read()) <= MAX_QUEUED_PER_KEY:
                    break
            elif now_ms < (cells.retry_at_ms.read() or 0):
                break
            elif not engine.scheduler.has_slot():
                engine.scheduler.wait_for_change(_HOLD_S)
            step = engine.pump(key, cells, timers.current_processing_time(), wait_s=_HOLD_S)
            lines.extend(step.lines)
        return Step(tuple(lines), step.wake_at_ms)

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


class _Queue:
    """A Flink ``ListState`` of event bytes as the engine's `QueueCell`."""

    __slots__ = ("_state",)

    def __init__(self, state: Any) -> None:
        self._state = state

    def read(self) -> Iterable[Any]:
        return self._state.get() or ()

    def add(self, value: bytes) -> None:
        self._state.add(value)

    def clear(self) -> None:
        self._state.clear()
