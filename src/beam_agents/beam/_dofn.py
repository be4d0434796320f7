"""AgentDoFn: the streaming host, a stateful DoFn over the shared `KeyedEngine`.

It only translates between Beam and the engine (docs/decisions/0003-one-engine-per-key.md):

* keyed state holds the activation cells (`CELLS`), the queue's (`QUEUE_CELLS`)
  and the watermark the key has seen pass; `process` queues the event before
  anything runs it, so a crash loses nothing (invariant 8);
* a processing-time timer (``wake``) calls the engine back when the key's
  activation can have finished or its retry is due, while other keys'
  activations keep running (invariant 10);
* in event-time order an event-time timer (``release``) fires once the
  watermark has passed the key's next event, plus the allowed disorder;
* an event-time timer (``end_of_input``) runs the queues when a bounded stream
  ends (a finished TestStream, a drained job), in rounds: every key's next
  event at once, then every key's next, then a drain of what is left.

Committed lines go to the main output and dead letters to ``errors``; what
commits is the engine's decision (invariants 1, 8, 9).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Hashable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.coders import BytesCoder, VarIntCoder
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import (
    BagStateSpec,
    ReadModifyWriteStateSpec,
    TimerSpec,
    on_timer,
)
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import Timestamp

from beam_agents.beam._host import ERRORS, ProviderFactory, SharedEngine, route, wall_ms
from beam_agents.hosting import (
    CELLS,
    EARLIEST_MS,
    QUEUE_CELLS,
    EventOrdering,
    KeyCells,
    ReadOnceCell,
    StateCells,
    Step,
)
from beam_agents.runtime import AgentConfig

__all__ = ["ERRORS", "AgentDoFn"]

_MEMORY, _LLM_CACHE, _SEQ, _BUDGET, _WAITS = CELLS
_QUEUE, _DEQUEUED, _QUEUE_META, _ATTEMPT, _RETRY_AT = QUEUE_CELLS
_WAKE = TimerSpec("wake", TimeDomain.REAL_TIME)
_RELEASE = TimerSpec("release", TimeDomain.WATERMARK)
_END_OF_INPUT = TimerSpec("end_of_input", TimeDomain.WATERMARK)
# Beam finds timers by these parameter defaults, so they are built once, here.
_WAKE_TIMER = beam.DoFn.TimerParam(_WAKE)
_RELEASE_TIMER = beam.DoFn.TimerParam(_RELEASE)
_END_OF_INPUT_TIMER = beam.DoFn.TimerParam(_END_OF_INPUT)

#: The drain at the end of the input: the global window's last moment.
_DRAIN = GlobalWindow().max_timestamp()
#: The first end-of-input round; round *r* fires 1 µs after round *r - 1*.
#: A key never holds more than ``max_queued_per_key`` (at most 10 000 000) events.
_FIRST_ROUND = Timestamp(micros=_DRAIN.micros - 10_000_001)
#: The longest a wake fired early waits for the key's activation, in ms.
_MAX_EARLY_WAKE_MS = 1_000
#: Release times are kept below the rounds.
_LAST_RELEASE_MS = _FIRST_ROUND.micros // 1000 - 1


class AgentDoFn(beam.DoFn):
    """Queues each ``(entity_key, AgentEvent bytes)`` in keyed state and runs it on the engine.

    The streaming host: up to ``config.max_in_flight`` keys' activations run
    at once, one per key, in ``(event_time_ms, event_id)`` order under the
    watermark (invariant 10); a transient failure suspends the key and
    retries it by timer with the same seq (invariants 1, 9). Outputs canonical
    JSON lines: intents on the main output, error records on the ``errors``
    tagged output. Expects the global window, as `build_pipeline` gives it.

    Streaming only: its lines can come from timers after the input ended, and
    a runner that holds no watermark for user timers (the DirectRunner's
    bundle-based one) then hands them to a downstream GroupByKey that has
    already closed. Bounded input goes through `AgentBatchDoFn`.

    Args:
        config: What to run.
        provider: Builds the model provider in ``setup()`` in place of the one
            ``config.model`` names; the runtime closes what it builds.
        ordering: How each key's events are ordered (event time by default).
    """

    MEMORY = ReadModifyWriteStateSpec(_MEMORY, BytesCoder())
    LLM_CACHE = ReadModifyWriteStateSpec(_LLM_CACHE, BytesCoder())
    SEQ = ReadModifyWriteStateSpec(_SEQ, VarIntCoder())
    BUDGET = ReadModifyWriteStateSpec(_BUDGET, BytesCoder())
    WAITS = ReadModifyWriteStateSpec(_WAITS, BytesCoder())
    QUEUE = BagStateSpec(_QUEUE, BytesCoder())
    DEQUEUED = BagStateSpec(_DEQUEUED, BytesCoder())
    QUEUE_META = ReadModifyWriteStateSpec(_QUEUE_META, BytesCoder())
    ATTEMPT = ReadModifyWriteStateSpec(_ATTEMPT, VarIntCoder())
    RETRY_AT = ReadModifyWriteStateSpec(_RETRY_AT, VarIntCoder())
    WATERMARK = ReadModifyWriteStateSpec("watermark_ms", VarIntCoder())

    def __init__(self, config: AgentConfig, *, provider: ProviderFactory | None = None,
                 ordering: EventOrdering | None = None) -> None:
        super().__init__()
        self._config = config
        self._provider = provider
        self._ordering = ordering if ordering is not None else EventOrdering()
        self._dofn_id = uuid.uuid4().hex  # pickled along: every copy finds the same engine
        self._shared: SharedEngine | None = None

    def setup(self) -> None:
        """Join (or build) this process's runtime and engine."""
        self._shared = SharedEngine.acquire(self._dofn_id, self._config, self._provider)

    def process(  # noqa: PLR0917 - Beam binds state and timers positionally
        self,
        element: tuple[bytes, bytes],
        memory: Any = beam.DoFn.StateParam(MEMORY),
        llm_cache: Any = beam.DoFn.StateParam(LLM_CACHE),
        seq: Any = beam.DoFn.StateParam(SEQ),
        budget: Any = beam.DoFn.StateParam(BUDGET),
        waits: Any = beam.DoFn.StateParam(WAITS),
        queue: Any = beam.DoFn.StateParam(QUEUE),
        dequeued: Any = beam.DoFn.StateParam(DEQUEUED),
        queue_meta: Any = beam.DoFn.StateParam(QUEUE_META),
        attempt: Any = beam.DoFn.StateParam(ATTEMPT),
        retry_at: Any = beam.DoFn.StateParam(RETRY_AT),
        watermark: Any = beam.DoFn.StateParam(WATERMARK),
        wake: Any = _WAKE_TIMER,
        release: Any = _RELEASE_TIMER,
        end_of_input: Any = _END_OF_INPUT_TIMER,
    ) -> Iterator[Any]:
        """Queue the event durably (late ones as the ordering says), then wake the key."""
        shared = self._require_shared()
        key, event = element
        end_of_input.set(_FIRST_ROUND)
        cells = _cells(memory, llm_cache, seq, budget, waits, queue, dequeued, queue_meta,
                       attempt, retry_at)
        seen = watermark.read()
        refused = shared.engine.enqueue_unbounded(key, cells, event, ordering=self._ordering,
                                      watermark_ms=seen)
        step = self._pump(shared, key, cells, seen)
        if refused is not None:
            step = dataclasses.replace(step, lines=(refused, *step.lines))
        return self._emit(shared, key, step, wake, release)

    @on_timer(_WAKE)
    def on_wake(  # noqa: PLR0917 - Beam binds state and timers positionally
        self,
        key: Any = beam.DoFn.KeyParam,
        fired: Any = beam.DoFn.TimestampParam,
        memory: Any = beam.DoFn.StateParam(MEMORY),
        llm_cache: Any = beam.DoFn.StateParam(LLM_CACHE),
        seq: Any = beam.DoFn.StateParam(SEQ),
        budget: Any = beam.DoFn.StateParam(BUDGET),
        waits: Any = beam.DoFn.StateParam(WAITS),
        queue: Any = beam.DoFn.StateParam(QUEUE),
        dequeued: Any = beam.DoFn.StateParam(DEQUEUED),
        queue_meta: Any = beam.DoFn.StateParam(QUEUE_META),
        attempt: Any = beam.DoFn.StateParam(ATTEMPT),
        retry_at: Any = beam.DoFn.StateParam(RETRY_AT),
        watermark: Any = beam.DoFn.StateParam(WATERMARK),
        wake: Any = _WAKE_TIMER,
        release: Any = _RELEASE_TIMER,
    ) -> Iterator[Any]:
        """Apply the key's finished activation, if any, and start its next one.

        A wake can fire before the wall-clock time it was set for: a runner
        whose processing time runs ahead of the wall clock (a test stream's
        on the DirectRunner) stamps it in the future, and one whose clock is
        synthetic (Prism's under a TestStream, and Prism 2.61's always) fires
        it as soon as nothing else is due. Either way the key waits, up to
        `_MAX_EARLY_WAKE_MS`, for its activation or its retry time, instead of
        being called back on every pass of the runner (docs/decisions/0013-waking-a-key.md).
        """
        shared = self._require_shared()
        _wait_out_early_wake(shared, key, fired.micros // 1000)
        shared.note_wake(key, None)  # it fired, so it is set no more
        cells = _cells(memory, llm_cache, seq, budget, waits, queue, dequeued, queue_meta,
                       attempt, retry_at)
        step = self._pump(shared, key, cells, watermark.read())
        return self._emit(shared, key, step, wake, release)

    @on_timer(_RELEASE)
    def on_release(  # noqa: PLR0917 - Beam binds state and timers positionally
        self,
        key: Any = beam.DoFn.KeyParam,
        fired: Any = beam.DoFn.TimestampParam,
        memory: Any = beam.DoFn.StateParam(MEMORY),
        llm_cache: Any = beam.DoFn.StateParam(LLM_CACHE),
        seq: Any = beam.DoFn.StateParam(SEQ),
        budget: Any = beam.DoFn.StateParam(BUDGET),
        waits: Any = beam.DoFn.StateParam(WAITS),
        queue: Any = beam.DoFn.StateParam(QUEUE),
        dequeued: Any = beam.DoFn.StateParam(DEQUEUED),
        queue_meta: Any = beam.DoFn.StateParam(QUEUE_META),
        attempt: Any = beam.DoFn.StateParam(ATTEMPT),
        retry_at: Any = beam.DoFn.StateParam(RETRY_AT),
        watermark: Any = beam.DoFn.StateParam(WATERMARK),
        wake: Any = _WAKE_TIMER,
        release: Any = _RELEASE_TIMER,
    ) -> Iterator[Any]:
        """The watermark passed the key's next event: note it, and run what it let through."""
        shared = self._require_shared()
        seen = max(watermark.read() or EARLIEST_MS, fired.micros // 1000)
        watermark.write(seen)
        cells = _cells(memory, llm_cache, seq, budget, waits, queue, dequeued, queue_meta,
                       attempt, retry_at)
        return self._emit(shared, key, self._pump(shared, key, cells, seen), wake, release)

    @on_timer(_END_OF_INPUT)
    def on_end_of_input(  # noqa: PLR0917 - Beam binds state and timers positionally
        self,
        key: Any = beam.DoFn.KeyParam,
        fired: Any = beam.DoFn.TimestampParam,
        memory: Any = beam.DoFn.StateParam(MEMORY),
        llm_cache: Any = beam.DoFn.StateParam(LLM_CACHE),
        seq: Any = beam.DoFn.StateParam(SEQ),
        budget: Any = beam.DoFn.StateParam(BUDGET),
        waits: Any = beam.DoFn.StateParam(WAITS),
        queue: Any = beam.DoFn.StateParam(QUEUE),
        dequeued: Any = beam.DoFn.StateParam(DEQUEUED),
        queue_meta: Any = beam.DoFn.StateParam(QUEUE_META),
        attempt: Any = beam.DoFn.StateParam(ATTEMPT),
        retry_at: Any = beam.DoFn.StateParam(RETRY_AT),
        wake: Any = _WAKE_TIMER,
        release: Any = _RELEASE_TIMER,
        end_of_input: Any = _END_OF_INPUT_TIMER,
    ) -> Iterator[Any]:
        """The input ended: one round (finish the running activation, start the next), or the drain.

        Every key's round *r* fires before its round *r + 1*, which this
        round sets, so the keys' remaining events run side by side; the drain
        at the window's end runs what a round left (a retry's backoff).
        """
        shared = self._require_shared()
        cells = _cells(memory, llm_cache, seq, budget, waits, queue, dequeued, queue_meta,
                       attempt, retry_at)
        engine = shared.engine
        if fired < _DRAIN:
            step = engine.on_end_of_input_round(key, cells, clock_ms=wall_ms)
            if step.wake_at_ms is not None:
                end_of_input.set(Timestamp(micros=fired.micros + 1))
        else:
            step = engine.on_end_of_input(key, cells, clock_ms=wall_ms)
        release.clear()
        # The next round calls back for the activation this one started; a
        # wake timer as well would be one more callback per activation.
        return self._emit(shared, key, Step(step.lines, None), wake, release)

    def teardown(self) -> None:
        """Leave the shared engine; the last copy out closes the clients."""
        if self._shared is not None:
            self._shared.release(self._dofn_id)
            self._shared = None

    def _require_shared(self) -> SharedEngine:
        assert self._shared is not None, "setup() was not called"
        return self._shared

    def _pump(self, shared: SharedEngine, key: Hashable, cells: KeyCells,
              watermark_ms: int | None) -> Step:
        ordering = self._ordering
        return shared.engine.on_wake(
            key, cells, wall_ms(), ready_through_ms=ordering.ready_through(watermark_ms),
            waits_through_ms=None if ordering.by_event_time else watermark_ms or EARLIEST_MS)

    def _emit(self, shared: SharedEngine, key: Hashable, step: Step, wake: Any,
              release: Any) -> Iterator[Any]:
        if step.wake_at_ms is not None:
            wake.set(Timestamp(micros=step.wake_at_ms * 1000))
        elif shared.wake_due(key) is not None:
            # Only a wake this process set is cleared: Prism fires a cleared
            # processing-time timer at once, so clearing one that was never
            # set (or has just fired) would call the key back for nothing,
            # and that callback's clear again, without end.
            wake.clear()
        shared.note_wake(key, step.wake_at_ms)
        if step.held_until_ms is not None:
            at = min(self._ordering.release_at(step.held_until_ms), _LAST_RELEASE_MS)
            release.set(Timestamp(micros=at * 1000))
        shared.track(key)
        shared.metrics.flush()  # on the bundle thread, which Beam attributes counters to
        return route(step.lines)


def _cells(memory: Any, llm_cache: Any, seq: Any, budget: Any, waits: Any,  # noqa: PLR0917
           queue: Any, dequeued: Any, queue_meta: Any, attempt: Any, retry_at: Any) -> KeyCells:
    """One callback's view of the key's cells, each value cell read at most once.

    Beam's Python SDK caches user state across reads only with the runner's
    cache tokens, and Prism gives none: without `ReadOnceCell` the queue's
    fingerprint alone was 8.4 state requests an event of B12's streaming path.
    """
    return KeyCells(StateCells(ReadOnceCell(memory), ReadOnceCell(llm_cache), ReadOnceCell(seq),
                               ReadOnceCell(budget), ReadOnceCell(waits)),
                    queue, dequeued, ReadOnceCell(queue_meta), ReadOnceCell(attempt),
                    ReadOnceCell(retry_at))


def _wait_out_early_wake(shared: SharedEngine, key: Hashable, fired_ms: int) -> None:
    """Hold a wake that fired before its wall-clock time until it is due or the key changes.

    A running activation is awaited (it ends the wait as soon as it
    finishes); a key with nothing running (a suspended key's retry) sleeps
    towards the time its wake was set for. Both are bounded by
    `_MAX_EARLY_WAKE_MS`, so a bundle is never held for long.
    """
    now_ms = wall_ms()
    due_ms = shared.wake_due(key)
    if fired_ms <= now_ms and (due_ms is None or due_ms <= now_ms):
        return
    if shared.engine.scheduler.running(key) is not None:
        shared.engine.await_running(key, timeout_s=_MAX_EARLY_WAKE_MS / 1000)
    elif due_ms is not None and due_ms > now_ms:
        time.sleep(min(due_ms - now_ms, _MAX_EARLY_WAKE_MS) / 1000)
