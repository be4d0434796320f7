"""The Beam pipeline shapes the benchmarks run, each on the DirectRunner in this process.

* `run_bare`: ``Create -> ParDo(dofn) -> Count``, for a hand-written stateful
  DoFn that handles one element at a time (B2's baseline);
* `run_batch`: ``Create -> GroupByKey -> ParDo(AgentBatchDoFn(config)) -> Count``,
  the library's batch path (what `beam_agents.beam.build_pipeline` runs over
  files, without the file source and sinks);
* `run_streaming`: ``TestStream -> ParDo(AgentDoFn(config)) -> tally`` on the
  streaming DirectRunner, the library's streaming path. The stream first
  advances processing time a day past the wall clock: the runner's test
  clock starts at epoch 0 and the engine sets its wake timers from the wall
  clock, so from then on every wake is due when the runner next looks, and
  waits there for the key's activation (tests/beam/test_streaming.py drives
  it the same way).

Each takes a ``runner``: the DirectRunner's flags by default, or another
runner's (`benchmarks.b12_portable` gives Prism's), whose SDK harness must run
in this process (LOOPBACK) for the lines to be counted here.

Every shape counts the lines that reach its end in this process and checks
that each event produced one, so a benchmark cannot time a pipeline that
silently did less work. Beam's Python API is untyped, so this module is the
only benchmark code that calls it directly (and the only one that relaxes
mypy for it).
"""

# mypy: disable-error-code="no-untyped-call,attr-defined"

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.coders import BytesCoder, TupleCoder
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import TimerSpec, on_timer
from apache_beam.transforms.window import GlobalWindow, TimestampedValue
from apache_beam.utils.timestamp import Timestamp

from beam_agents.beam import ERRORS, AgentBatchDoFn, AgentDoFn
from beam_agents.runtime import AgentConfig, AgentEvent

__all__ = ["StreamingFloorDoFn", "run_bare", "run_batch", "run_streaming",
           "run_streaming_floor"]

_KEYED = beam.typehints.Tuple[bytes, bytes]
_BATCH_FLAGS = ["--runner=DirectRunner", "--direct_num_workers=1",
                "--direct_running_mode=in_memory"]

#: Lines that reached the end of the pipeline running now; the runner works in
#: this process, and the DoFns reach these by module reference.
_SEEN = [0]
_SEEN_LOCK = threading.Lock()


def _tally(count: int) -> None:
    with _SEEN_LOCK:
        _SEEN[0] += count


def _run(pipeline: Any, expected: int) -> float:
    """Wall seconds to run `pipeline`; fails unless `expected` lines reached its end."""
    _SEEN[0] = 0
    start = time.perf_counter()
    pipeline.run().wait_until_finish()
    seconds = time.perf_counter() - start
    if _SEEN[0] != expected:
        raise RuntimeError(f"the pipeline emitted {_SEEN[0]} lines for {expected} events")
    return seconds


def _tally_one(_: bytes) -> None:
    _tally(1)


def _count(lines: Any) -> None:
    _ = (lines
         | "Count" >> beam.combiners.Count.Globally()
         | "Tally" >> beam.Map(_tally))


def run_bare(dofn_type: type[Any], elements: list[tuple[bytes, bytes]], *,
             runner: list[str] | None = None) -> float:
    """Wall seconds of ``Create -> ParDo(dofn_type()) -> Count``: one element per call.

    One worker, in memory: the per-worker figure the benchmarks report. The
    key type hint gives the stateful DoFn a deterministic key coder, as the
    library's own pipeline does.
    """
    pipeline = beam.Pipeline(options=PipelineOptions(runner or _BATCH_FLAGS))
    lines = (pipeline
             | "Create" >> beam.Create(elements).with_output_types(_KEYED)
             | "Activate" >> beam.ParDo(dofn_type()).with_input_types(_KEYED))
    _count(lines)
    return _run(pipeline, len(elements))


def run_batch(config: AgentConfig, elements: list[tuple[bytes, bytes]], *,
              runner: list[str] | None = None) -> float:
    """Wall seconds of the batch path: ``Create -> GroupByKey -> AgentBatchDoFn -> Count``.

    The DoFn gets each key with all its events and runs up to
    ``config.max_in_flight`` keys at once, one activation per key at a time.
    """
    pipeline = beam.Pipeline(options=PipelineOptions(runner or _BATCH_FLAGS))
    outputs = (pipeline
               | "Create" >> beam.Create(elements).with_output_types(_KEYED)
               | "GroupByEntity" >> beam.GroupByKey().with_input_types(_KEYED)
               | "Activate" >> beam.ParDo(AgentBatchDoFn(config)).with_outputs(
                   ERRORS, main="intents"))
    _count(outputs.intents)
    return _run(pipeline, len(elements))


def run_streaming(config: AgentConfig, elements: list[tuple[bytes, bytes]], *,
                  step: int, runner: list[str] | None = None) -> float:
    """Wall seconds of the streaming path: ``TestStream -> AgentDoFn`` on the streaming runner.

    The events arrive `step` at a time, in input order, each stamped with
    its event time, as the library's own source stamps them; each group is
    followed by a processing-time advance and a watermark advance past the
    group's latest event time, as a source's watermark follows what it has
    read. In event-time order, the default, an event runs once the
    watermark has passed it, so the events run while the input still
    arrives; the watermark then goes to infinity, and the end-of-input
    rounds run whatever is still queued. Lines are tallied by a plain Map:
    a GroupByKey after `AgentDoFn` could close before the DoFn's last timers
    fire on this runner (see `AgentDoFn`).
    """
    return _run_stream(AgentDoFn(config), elements, step, runner)


def run_streaming_floor(latency_ms: int, elements: list[tuple[bytes, bytes]], *,
                        step: int, runner: list[str] | None = None) -> float:
    """Wall seconds of `run_streaming`'s pipeline with `StreamingFloorDoFn` in the DoFn's place."""
    return _run_stream(StreamingFloorDoFn(latency_ms), elements, step, runner)


def _run_stream(dofn: Any, elements: list[tuple[bytes, bytes]], step: int,
                runner: list[str] | None) -> float:
    # A key-value coder, so a portable runner can key the stateful step (Prism
    # refuses the pickled tuples a TestStream sends by default: "zero length key").
    stream = TestStream(coder=TupleCoder((BytesCoder(), BytesCoder()))).advance_processing_time(
        int(time.time()) + 86_400)
    for start in range(0, len(elements), step):
        batch = [(element, AgentEvent.FromString(element[1]).event_time_ms)
                 for element in elements[start:start + step]]
        stream = (stream
                  .add_elements([TimestampedValue(element, at_ms / 1000)
                                 for element, at_ms in batch])
                  .advance_processing_time(1)
                  .advance_watermark_to((max(at_ms for _, at_ms in batch) + 1) / 1000))
    options = PipelineOptions(runner or ["--runner=DirectRunner"])
    options.view_as(StandardOptions).streaming = True
    pipeline = beam.Pipeline(options=options)
    outputs = (pipeline
               | "Events" >> stream.advance_watermark_to_infinity().with_output_types(_KEYED)
               | "Activate" >> beam.ParDo(dofn).with_input_types(_KEYED)
               .with_outputs(ERRORS, main="intents"))
    _ = outputs.intents | "Tally" >> beam.Map(_tally_one)
    return _run(pipeline, len(elements))


_FLOOR_WAKE = TimerSpec("wake", TimeDomain.REAL_TIME)
_FLOOR_RELEASE = TimerSpec("release", TimeDomain.WATERMARK)
_FLOOR_END = TimerSpec("end_of_input", TimeDomain.WATERMARK)
_FLOOR_WAKE_TIMER = beam.DoFn.TimerParam(_FLOOR_WAKE)
_FLOOR_RELEASE_TIMER = beam.DoFn.TimerParam(_FLOOR_RELEASE)
_FLOOR_END_TIMER = beam.DoFn.TimerParam(_FLOOR_END)
#: Per key, when each of its floor "activations" started (monotonic seconds).
_FLOOR_STARTED: dict[bytes, deque[float]] = {}
_FLOOR_LOCK = threading.Lock()


class StreamingFloorDoFn(beam.DoFn):
    """The streaming runner's own cost of `AgentDoFn`'s protocol, with no library code in it.

    It declares `AgentDoFn`'s eleven state cells (the same specs) and its three
    timers, binds all of them in each callback as `AgentDoFn` does, and is
    called back as often: on arrival it queues the event and sets the
    release timer at the event's time (and the end-of-input timer); on
    release it starts an "activation", which is nothing but a clock reading,
    and sets the wake timer `latency_ms` later; on wake it waits for what is
    left of `latency_ms`, as `AgentDoFn` waits for a wake fired early, and
    emits one line. What the runner spends on this is what any DoFn of the
    same shape pays on it, so B6 subtracts it to give the library's own CPU
    per activation, measured in the same run.
    """

    def __init__(self, latency_ms: int) -> None:
        super().__init__()
        self._latency_s = latency_ms / 1000

    def process(
        self,
        element: tuple[bytes, bytes],
        at: Any = beam.DoFn.TimestampParam,
        memory: Any = beam.DoFn.StateParam(AgentDoFn.MEMORY),
        llm_cache: Any = beam.DoFn.StateParam(AgentDoFn.LLM_CACHE),
        seq: Any = beam.DoFn.StateParam(AgentDoFn.SEQ),
        budget: Any = beam.DoFn.StateParam(AgentDoFn.BUDGET),
        waits: Any = beam.DoFn.StateParam(AgentDoFn.WAITS),
        queue: Any = beam.DoFn.StateParam(AgentDoFn.QUEUE),
        dequeued: Any = beam.DoFn.StateParam(AgentDoFn.DEQUEUED),
        queue_meta: Any = beam.DoFn.StateParam(AgentDoFn.QUEUE_META),
        attempt: Any = beam.DoFn.StateParam(AgentDoFn.ATTEMPT),
        retry_at: Any = beam.DoFn.StateParam(AgentDoFn.RETRY_AT),
        watermark: Any = beam.DoFn.StateParam(AgentDoFn.WATERMARK),
        wake: Any = _FLOOR_WAKE_TIMER,
        release: Any = _FLOOR_RELEASE_TIMER,
        end_of_input: Any = _FLOOR_END_TIMER,
    ) -> Iterator[bytes]:
        """Queue the event and set its release at its event time."""
        queue.add(element[1])
        end_of_input.set(GlobalWindow().max_timestamp() - 1)
        release.set(at)
        return iter(())

    @on_timer(_FLOOR_RELEASE)
    def on_release(
        self,
        key: Any = beam.DoFn.KeyParam,
        fired: Any = beam.DoFn.TimestampParam,
        memory: Any = beam.DoFn.StateParam(AgentDoFn.MEMORY),
        llm_cache: Any = beam.DoFn.StateParam(AgentDoFn.LLM_CACHE),
        seq: Any = beam.DoFn.StateParam(AgentDoFn.SEQ),
        budget: Any = beam.DoFn.StateParam(AgentDoFn.BUDGET),
        waits: Any = beam.DoFn.StateParam(AgentDoFn.WAITS),
        queue: Any = beam.DoFn.StateParam(AgentDoFn.QUEUE),
        dequeued: Any = beam.DoFn.StateParam(AgentDoFn.DEQUEUED),
        queue_meta: Any = beam.DoFn.StateParam(AgentDoFn.QUEUE_META),
        attempt: Any = beam.DoFn.StateParam(AgentDoFn.ATTEMPT),
        retry_at: Any = beam.DoFn.StateParam(AgentDoFn.RETRY_AT),
        watermark: Any = beam.DoFn.StateParam(AgentDoFn.WATERMARK),
        wake: Any = _FLOOR_WAKE_TIMER,
        release: Any = _FLOOR_RELEASE_TIMER,
    ) -> Iterator[bytes]:
        """Note the watermark and start the key's "activation"."""
        watermark.write(fired.micros // 1000)
        with _FLOOR_LOCK:
            _FLOOR_STARTED.setdefault(key, deque()).append(time.monotonic())
        wake.set(Timestamp.of(time.time() + self._latency_s))
        return iter(())

    @on_timer(_FLOOR_WAKE)
    def on_wake(
        self,
        key: Any = beam.DoFn.KeyParam,
        fired: Any = beam.DoFn.TimestampParam,
        memory: Any = beam.DoFn.StateParam(AgentDoFn.MEMORY),
        llm_cache: Any = beam.DoFn.StateParam(AgentDoFn.LLM_CACHE),
        seq: Any = beam.DoFn.StateParam(AgentDoFn.SEQ),
        budget: Any = beam.DoFn.StateParam(AgentDoFn.BUDGET),
        waits: Any = beam.DoFn.StateParam(AgentDoFn.WAITS),
        queue: Any = beam.DoFn.StateParam(AgentDoFn.QUEUE),
        dequeued: Any = beam.DoFn.StateParam(AgentDoFn.DEQUEUED),
        queue_meta: Any = beam.DoFn.StateParam(AgentDoFn.QUEUE_META),
        attempt: Any = beam.DoFn.StateParam(AgentDoFn.ATTEMPT),
        retry_at: Any = beam.DoFn.StateParam(AgentDoFn.RETRY_AT),
        watermark: Any = beam.DoFn.StateParam(AgentDoFn.WATERMARK),
        wake: Any = _FLOOR_WAKE_TIMER,
        release: Any = _FLOOR_RELEASE_TIMER,
    ) -> Iterator[bytes]:
        """Finish the key's oldest "activation" and emit its line; wake again for the next."""
        with _FLOOR_LOCK:
            started = _FLOOR_STARTED[key]
            began = started.popleft()
            more = bool(started)
        time.sleep(max(0.0, began + self._latency_s - time.monotonic()))
        dequeued.add(b"done")
        if more:
            wake.set(Timestamp.of(time.time()))
        return iter((key,))

    @on_timer(_FLOOR_END)
    def on_end_of_input(
        self,
        key: Any = beam.DoFn.KeyParam,
        memory: Any = beam.DoFn.StateParam(AgentDoFn.MEMORY),
        llm_cache: Any = beam.DoFn.StateParam(AgentDoFn.LLM_CACHE),
        seq: Any = beam.DoFn.StateParam(AgentDoFn.SEQ),
        budget: Any = beam.DoFn.StateParam(AgentDoFn.BUDGET),
        waits: Any = beam.DoFn.StateParam(AgentDoFn.WAITS),
        queue: Any = beam.DoFn.StateParam(AgentDoFn.QUEUE),
        dequeued: Any = beam.DoFn.StateParam(AgentDoFn.DEQUEUED),
        queue_meta: Any = beam.DoFn.StateParam(AgentDoFn.QUEUE_META),
        attempt: Any = beam.DoFn.StateParam(AgentDoFn.ATTEMPT),
        retry_at: Any = beam.DoFn.StateParam(AgentDoFn.RETRY_AT),
        wake: Any = _FLOOR_WAKE_TIMER,
        release: Any = _FLOOR_RELEASE_TIMER,
        end_of_input: Any = _FLOOR_END_TIMER,
    ) -> Iterator[bytes]:
        """Every event was released live; the end of the input has nothing left to run."""
        return iter(())


#: `AgentDoFn`'s first end-of-input round: ten million microseconds before the window's end.
_FIRST_ROUND = Timestamp(micros=GlobalWindow().max_timestamp().micros - 10_000_001)
#: The bounded floor's own end-of-input timer: a spec takes one callback.
_BOUNDED_END = TimerSpec("end_of_input", TimeDomain.WATERMARK)
_BOUNDED_END_TIMER = beam.DoFn.TimerParam(_BOUNDED_END)
#: Per key, the bounded floor's events not yet "run", and when its running one started.
_BOUNDED_QUEUED: dict[bytes, int] = {}
_BOUNDED_STARTED: dict[bytes, float] = {}


class BoundedFloorDoFn(beam.DoFn):
    """The runner's own cost of `AgentDoFn`'s protocol on a bounded input, with no library code.

    `StreamingFloorDoFn` starts an "activation" per release timer; on a
    bounded input the FlinkRunner fires every release at the final
    watermark, so every event of a key would start at once. `AgentDoFn` runs
    a bounded input's end in rounds instead (``end_of_input`` timers one
    microsecond apart, each key's round *r* before its round *r + 1*), one
    activation per key per round, the keys side by side; this does the same
    with a clock reading for an activation: on arrival it counts the event
    and sets the first round; each round waits for what is left of
    `latency_ms` of the key's running "activation", emits its line and starts
    the next, binding `AgentDoFn`'s eleven cells as `AgentDoFn` does. B12
    subtracts it from the library's path on the same runner.
    """

    def __init__(self, latency_ms: int) -> None:
        super().__init__()
        self._latency_s = latency_ms / 1000

    def process(
        self,
        element: tuple[bytes, bytes],
        memory: Any = beam.DoFn.StateParam(AgentDoFn.MEMORY),
        llm_cache: Any = beam.DoFn.StateParam(AgentDoFn.LLM_CACHE),
        seq: Any = beam.DoFn.StateParam(AgentDoFn.SEQ),
        budget: Any = beam.DoFn.StateParam(AgentDoFn.BUDGET),
        waits: Any = beam.DoFn.StateParam(AgentDoFn.WAITS),
        queue: Any = beam.DoFn.StateParam(AgentDoFn.QUEUE),
        dequeued: Any = beam.DoFn.StateParam(AgentDoFn.DEQUEUED),
        queue_meta: Any = beam.DoFn.StateParam(AgentDoFn.QUEUE_META),
        attempt: Any = beam.DoFn.StateParam(AgentDoFn.ATTEMPT),
        retry_at: Any = beam.DoFn.StateParam(AgentDoFn.RETRY_AT),
        end_of_input: Any = _BOUNDED_END_TIMER,
    ) -> Iterator[bytes]:
        """Queue the event and set the first end-of-input round."""
        queue.add(element[1])
        end_of_input.set(_FIRST_ROUND)
        with _FLOOR_LOCK:
            _BOUNDED_QUEUED[element[0]] = _BOUNDED_QUEUED.get(element[0], 0) + 1
        return iter(())

    @on_timer(_BOUNDED_END)
    def on_end_of_input(
        self,
        key: Any = beam.DoFn.KeyParam,
        fired: Any = beam.DoFn.TimestampParam,
        memory: Any = beam.DoFn.StateParam(AgentDoFn.MEMORY),
        llm_cache: Any = beam.DoFn.StateParam(AgentDoFn.LLM_CACHE),
        seq: Any = beam.DoFn.StateParam(AgentDoFn.SEQ),
        budget: Any = beam.DoFn.StateParam(AgentDoFn.BUDGET),
        waits: Any = beam.DoFn.StateParam(AgentDoFn.WAITS),
        queue: Any = beam.DoFn.StateParam(AgentDoFn.QUEUE),
        dequeued: Any = beam.DoFn.StateParam(AgentDoFn.DEQUEUED),
        queue_meta: Any = beam.DoFn.StateParam(AgentDoFn.QUEUE_META),
        attempt: Any = beam.DoFn.StateParam(AgentDoFn.ATTEMPT),
        retry_at: Any = beam.DoFn.StateParam(AgentDoFn.RETRY_AT),
        end_of_input: Any = _BOUNDED_END_TIMER,
    ) -> Iterator[bytes]:
        """Finish the key's running "activation" (its line out), start its next, set the round."""
        lines = []
        with _FLOOR_LOCK:
            began = _BOUNDED_STARTED.pop(key, None)
        if began is not None:
            time.sleep(max(0.0, began + self._latency_s - time.monotonic()))
            dequeued.add(b"done")
            lines.append(key)
        with _FLOOR_LOCK:
            left = _BOUNDED_QUEUED.get(key, 0)
            if left:
                _BOUNDED_QUEUED[key] = left - 1
                _BOUNDED_STARTED[key] = time.monotonic()
        if left:
            end_of_input.set(Timestamp(micros=fired.micros + 1))
        return iter(lines)
