"""AgentDoFn: the streaming host, a stateful DoFn over the shared `KeyedEngine`.

It only translates between Beam and the engine (DESIGN's "Durable, concurrent
activations"):

* keyed state holds the four activation cells (`CELLS`) and the queue's
  three (`QUEUE_CELLS`); `process` calls `KeyedEngine.offer`, so an event is
  in the key's bag before anything runs it and a crash loses nothing
  (invariant 8);
* a processing-time timer calls `KeyedEngine.pump` at `Step.wake_at_ms`: the
  outcome is applied in a callback that has the key's state in scope, while
  other keys' activations keep running (invariant 10);
* an event-time timer at the end of the global window calls
  `KeyedEngine.drain`, so a bounded stream (a finished TestStream, a drained
  Dataflow job) leaves nothing queued.

Committed lines go to the main output and dead letters to ``errors``; what
commits is the engine's decision (invariants 1, 8, 9).
"""

from __future__ import annotations

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
from beam_agents.runtime import CELLS, QUEUE_CELLS, AgentConfig, KeyCells, StateCells, Step

__all__ = ["ERRORS", "AgentDoFn"]

_MEMORY, _LLM_CACHE, _SEQ, _BUDGET = CELLS
_QUEUE, _ATTEMPT, _RETRY_AT = QUEUE_CELLS
_WAKE = TimerSpec("wake", TimeDomain.REAL_TIME)
_END_OF_INPUT = TimerSpec("end_of_input", TimeDomain.WATERMARK)
# Beam finds timers by these parameter defaults, so they are built once, here.
_WAKE_TIMER = beam.DoFn.TimerParam(_WAKE)
_END_OF_INPUT_TIMER = beam.DoFn.TimerParam(_END_OF_INPUT)


class AgentDoFn(beam.DoFn):
    """Queues each ``(entity_key, AgentEvent bytes)`` in keyed state and runs it on the engine.

    The streaming host: up to ``config.max_in_flight`` keys' activations run
    at once, one per key, in ``(event_time_ms, event_id)`` order (invariant
    10); a transient failure suspends the key and retries it by timer with
    the same seq (invariants 1, 9). Outputs canonical JSON lines: intents on
    the main output, error records on the ``errors`` tagged output. Expects
    the global window, as `build_pipeline` gives it.

    Streaming only: its lines can come from timers after the input ended, and
    a runner that holds no watermark for user timers (the DirectRunner's
    bundle-based one, where a processing-time timer sends any pipeline) then
    hands them to a downstream GroupByKey that has already closed. Bounded
    input goes through `AgentBatchDoFn`, as `build_pipeline` does.

    Args:
        config: What to run.
        provider: Builds the model provider in ``setup()`` in place of the one
            ``config.model`` names; the runtime closes what it builds.
    """

    MEMORY = ReadModifyWriteStateSpec(_MEMORY, BytesCoder())
    LLM_CACHE = ReadModifyWriteStateSpec(_LLM_CACHE, BytesCoder())
    SEQ = ReadModifyWriteStateSpec(_SEQ, VarIntCoder())
    BUDGET = ReadModifyWriteStateSpec(_BUDGET, BytesCoder())
    QUEUE = BagStateSpec(_QUEUE, BytesCoder())
    ATTEMPT = ReadModifyWriteStateSpec(_ATTEMPT, VarIntCoder())
    RETRY_AT = ReadModifyWriteStateSpec(_RETRY_AT, VarIntCoder())

    def __init__(self, config: AgentConfig, *, provider: ProviderFactory | None = None) -> None:
        super().__init__()
        self._config = config
        self._provider = provider
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
        queue: Any = beam.DoFn.StateParam(QUEUE),
        attempt: Any = beam.DoFn.StateParam(ATTEMPT),
        retry_at: Any = beam.DoFn.StateParam(RETRY_AT),
        wake: Any = _WAKE_TIMER,
        end_of_input: Any = _END_OF_INPUT_TIMER,
    ) -> Iterator[Any]:
        """Queue the event durably, then start the key's next activation if it may."""
        shared = self._require_shared()
        key, event = element
        end_of_input.set(GlobalWindow().max_timestamp())
        cells = KeyCells(StateCells(memory, llm_cache, seq, budget), queue, attempt, retry_at)
        step = shared.engine.offer(key, cells, event, wall_ms())
        return self._emit(shared, key, step, wake)

    @on_timer(_WAKE)
    def on_wake(  # noqa: PLR0917 - Beam binds state and timers positionally
        self,
        key: Any = beam.DoFn.KeyParam,
        memory: Any = beam.DoFn.StateParam(MEMORY),
        llm_cache: Any = beam.DoFn.StateParam(LLM_CACHE),
        seq: Any = beam.DoFn.StateParam(SEQ),
        budget: Any = beam.DoFn.StateParam(BUDGET),
        queue: Any = beam.DoFn.StateParam(QUEUE),
        attempt: Any = beam.DoFn.StateParam(ATTEMPT),
        retry_at: Any = beam.DoFn.StateParam(RETRY_AT),
        wake: Any = _WAKE_TIMER,
    ) -> Iterator[Any]:
        """Apply the key's finished activation, if any, and start its next one."""
        shared = self._require_shared()
        cells = KeyCells(StateCells(memory, llm_cache, seq, budget), queue, attempt, retry_at)
        return self._emit(shared, key, shared.engine.pump(key, cells, wall_ms()), wake)

    @on_timer(_END_OF_INPUT)
    def on_end_of_input(  # noqa: PLR0917 - Beam binds state and timers positionally
        self,
        key: Any = beam.DoFn.KeyParam,
        memory: Any = beam.DoFn.StateParam(MEMORY),
        llm_cache: Any = beam.DoFn.StateParam(LLM_CACHE),
        seq: Any = beam.DoFn.StateParam(SEQ),
        budget: Any = beam.DoFn.StateParam(BUDGET),
        queue: Any = beam.DoFn.StateParam(QUEUE),
        attempt: Any = beam.DoFn.StateParam(ATTEMPT),
        retry_at: Any = beam.DoFn.StateParam(RETRY_AT),
        wake: Any = _WAKE_TIMER,
    ) -> Iterator[Any]:
        """The input ended: run the key's queue to the end, waiting out any backoff."""
        shared = self._require_shared()
        cells = KeyCells(StateCells(memory, llm_cache, seq, budget), queue, attempt, retry_at)
        return self._emit(shared, key, shared.engine.drain(key, cells, clock_ms=wall_ms), wake)

    def teardown(self) -> None:
        """Leave the shared engine; the last copy out closes the clients."""
        if self._shared is not None:
            self._shared.release(self._dofn_id)
            self._shared = None

    def _require_shared(self) -> SharedEngine:
        assert self._shared is not None, "setup() was not called"
        return self._shared

    @staticmethod
    def _emit(shared: SharedEngine, key: Hashable, step: Step, wake: Any) -> Iterator[Any]:
        if step.wake_at_ms is None:
            wake.clear()
        else:
            wake.set(Timestamp(micros=step.wake_at_ms * 1000))
        shared.track(key)
        shared.metrics.flush()  # on the bundle thread, which Beam attributes counters to
        return route(step.lines)

