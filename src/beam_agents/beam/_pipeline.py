"""The agent pipeline: read -> decode -> key by entity -> activate -> write intents and errors.

The activation step depends on the path (DESIGN's "Durable, concurrent
activations"), chosen by ``StandardOptions.streaming``:

* streaming (Pub/Sub): `AgentDoFn`, the per-key queue in keyed state, pumped
  by a processing-time timer;
* batch (files): ``GroupByKey`` then `AgentBatchDoFn`, which runs many whole
  keys at once without timers, which the batch runner does not fire.

Nothing is dropped (invariant 8): an element that does not decode becomes an
error record with stage DECODE on the same errors output the activations
use, and the pipeline keeps going. File sinks write their lines sorted, so
the files do not depend on the input's order or the runner's (invariant 10).
A file output is cut into ``--output_shards`` files by a hash of each line's
entity key (`WriteShardedLines`), so no step holds more than one of them.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import signal
import sys
import threading
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.pipeline import Pipeline
from apache_beam.pvalue import PCollection
from apache_beam.transforms import combiners

from beam_agents.beam._batch import AgentBatchDoFn
from beam_agents.beam._dofn import ERRORS, AgentDoFn
from beam_agents.beam._host import ProviderFactory
from beam_agents.beam._metrics import BeamMetrics, local_tally
from beam_agents.beam._options import (
    AgentPipelineOptions,
    agent_config_from_options,
    check_io,
    event_ordering_from_options,
    output_shards_from_options,
)
from beam_agents.beam._pubsub import LocalSubscriptionReads, to_message
from beam_agents.beam._read import ReadLines
from beam_agents.metrics import RecordingMetrics
from beam_agents.runtime import (
    MAX_EVENT_BYTES,
    AgentConfig,
    ErrorRecord,
    EventOrdering,
    InputDecoder,
    Oversize,
    error_to_json,
)

__all__ = ["DecodeEvents", "WriteShardedLines", "build_pipeline", "run", "shard_of",
           "shard_paths"]


class DecodeEvents(beam.DoFn):
    """Bytes -> ``(entity_key, AgentEvent bytes)``; undecodable input -> a DECODE error record."""

    def __init__(self, input_format: str, *, max_event_bytes: int = MAX_EVENT_BYTES,
                 progress_every: int = 0) -> None:
        super().__init__()
        self._format = input_format
        self._max_event_bytes = max_event_bytes
        self._progress_every = progress_every
        self._seen = 0
        self._metrics = BeamMetrics()
        self._decode = self._decoder()

    def _decoder(self) -> InputDecoder:
        return InputDecoder(self._format, self._metrics, max_event_bytes=self._max_event_bytes)

    def setup(self) -> None:
        """Bind fresh counters on the worker."""
        self._metrics = BeamMetrics()
        self._decode = self._decoder()

    def process(self, element: bytes | str | Oversize) -> Iterator[Any]:
        """Decode one element: bytes from every source (files are read undecoded)."""
        self._report_progress()
        decoded = self._decode(element)
        self._metrics.flush()
        if isinstance(decoded, ErrorRecord):
            yield beam.pvalue.TaggedOutput(ERRORS, error_to_json(decoded))
            return
        yield decoded.entity_key, decoded.SerializeToString(deterministic=True)

    def _report_progress(self) -> None:
        self._seen += 1
        if self._progress_every and self._seen % self._progress_every == 0:
            print(f"\r  read {self._seen} events", end="", file=sys.stderr, flush=True)


def _read(pipeline: Pipeline, opts: AgentPipelineOptions, max_event_bytes: int) -> Any:
    if opts.input_subscription:
        return pipeline | "ReadPubSub" >> beam.io.ReadFromPubSub(
            subscription=opts.input_subscription,
            timestamp_attribute=opts.input_timestamp_attribute)
    if opts.input_format == "proto":
        return pipeline | "ReadTFRecord" >> beam.io.ReadFromTFRecord(opts.input_files)
    # Lines stay bytes, bounded by the size limit: a line that is not UTF-8,
    # or is huge, reaches the decoder and becomes a DECODE record (invariant 8).
    return pipeline | "ReadJsonl" >> ReadLines(opts.input_files, max_event_bytes)


def _write(lines: PCollection[bytes], *, topic: str | None, path: str | None,
           label: str, shards: int) -> None:
    if topic:
        # Attributes name the key, the event and (dead letters) the stage, so a
        # subscriber can filter without parsing the body.
        _ = (lines
             | f"Attributes{label}" >> beam.Map(to_message(label.lower()))
             | f"Publish{label}" >> beam.io.WriteToPubSub(topic=topic, with_attributes=True))
    if path:
        # A file sink needs a bounded input (`check_io`).
        _ = lines | f"Write{label}" >> WriteShardedLines(path, shards)


def shard_paths(path: str, shards: int) -> list[str]:
    """The files an output of `shards` shards is written to, in shard order.

    One shard is `path` itself, so a small run reads as it always has; more
    are ``PATH-SSSSS-of-NNNNN``, Beam's own default template, so ``PATH-*``
    globs them, they list in shard order, and the count in each name shows a
    reader whether the set is whole.
    """
    if shards == 1:
        return [path]
    return [f"{path}-{index:05d}-of-{shards:05d}" for index in range(shards)]


def shard_of(line: bytes, shards: int) -> int:
    """The shard of one output line: a stable hash of its entity key, else of the line.

    Intents and error records name the key as ``entity_key`` (or
    ``entity_key_b64`` when it is not UTF-8); both hash the key's bytes, so a
    key's intents and its dead letters land in the same shard number of
    their outputs. A line without a key (a DECODE record of input that never
    named one) hashes whole. blake2b, not `hash`, which is salted per process.
    """
    key = line
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        doc = json.loads(line)
        if doc.get("entity_key"):
            key = doc["entity_key"].encode()
        elif doc.get("entity_key_b64"):
            key = base64.b64decode(doc["entity_key_b64"], validate=True)
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") % shards


class WriteShardedLines(beam.PTransform):  # type: ignore[type-arg]
    """Lines -> `shard_paths` files, each line in the shard of its key, each file sorted.

    The file set is a function of the set of lines alone (invariant 10): the
    shard comes from the line, and a shard's lines are sorted. Lines are
    grouped by shard and each group sorted on its own, so a worker holds one
    shard, not the whole output. Every shard is seeded, so an empty one is
    an empty file and the set is always whole. Shards go to a temporary
    directory beside `path` and are renamed only once all are written: a
    failed run leaves no partial set under the final names, and a retried
    bundle rewrites the same bytes.
    """

    def __init__(self, path: str, shards: int) -> None:
        super().__init__()
        self._path = path
        self._shards = shards

    def expand(self, lines: Any) -> Any:
        """Key by shard, group, sort and write each, then rename them into place."""
        shards, keyed = self._shards, beam.typehints.Tuple[int, bytes | None]
        # Named once, here, so every worker and every retry writes into the same directory.
        temp_dir = f"{self._path}.temp-{uuid.uuid4().hex}"
        seeds = (lines.pipeline
                 | "Shards" >> beam.Create(range(shards))
                 | "Seed" >> beam.Map(lambda index: (index, None)).with_output_types(keyed))
        marked = lines | "Shard" >> beam.Map(
            lambda line: (shard_of(line, shards), line)).with_output_types(keyed)
        written = ((marked, seeds)
                   | "All" >> beam.Flatten()
                   | "GroupByShard" >> beam.GroupByKey()
                   | "SortAndWrite" >> beam.Map(_write_shard, temp_dir))
        return (written
                | "Written" >> combiners.ToList()  # one temporary path per shard
                | "Rename" >> beam.Map(_rename_into_place, shard_paths(self._path, shards),
                                       temp_dir))


def _write_shard(shard: tuple[int, Iterable[bytes | None]], temp_dir: str) -> tuple[int, str]:
    index, lines = shard
    temp = f"{temp_dir}/{index:05d}"
    with FileSystems.create(temp) as handle:
        for line in sorted(line for line in lines if line is not None):
            handle.write(line + b"\n")
    return index, temp


def _rename_into_place(written: list[tuple[int, str]], paths: list[str], temp_dir: str) -> None:
    # A retry of this step finds some temporaries already renamed: those are done.
    present = {item.path.rsplit("/", 1)[-1]
               for item in FileSystems.match([f"{temp_dir}/*"])[0].metadata_list}
    moves: list[tuple[str, str]] = []
    done: list[tuple[str, str]] = []
    for (_, temp), path in zip(sorted(written), paths, strict=True):
        (moves if temp.rsplit("/", 1)[-1] in present else done).append((temp, path))
    if missing := [path for _, path in done if not FileSystems.exists(path)]:
        raise OSError(f"shards written but neither renamed nor in {temp_dir}: {missing[:3]}")
    if moves:
        FileSystems.rename([temp for temp, _ in moves], [path for _, path in moves])
    # Every temporary has a shard's name, so none is left: this removes the local
    # directory, and is nothing on object stores. Beam's own sinks shrug at a failure too.
    with contextlib.suppress(OSError):
        FileSystems.delete([temp_dir])


def _activate(events: PCollection[tuple[bytes, bytes]], config: AgentConfig, *,
              ordering: EventOrdering | None, provider: ProviderFactory | None) -> Any:
    keyed = beam.typehints.Tuple[bytes, bytes]
    if ordering is not None:
        # The key type hint gives the stateful DoFn a deterministic key coder.
        return events | "Activate" >> beam.ParDo(
            AgentDoFn(config, provider=provider, ordering=ordering)).with_input_types(
            keyed).with_outputs(ERRORS, main="intents")
    grouped = events | "GroupByEntity" >> beam.GroupByKey().with_input_types(keyed)
    return grouped | "Activate" >> beam.ParDo(
        AgentBatchDoFn(config, provider=provider)).with_outputs(ERRORS, main="intents")


def build_pipeline(pipeline: Pipeline, options: PipelineOptions,
                   config: AgentConfig | None = None, *, progress_every: int = 0,
                   provider: ProviderFactory | None = None) -> None:
    """Add the agent pipeline's transforms to `pipeline`, streaming or batch as `options` say.

    Args:
        pipeline: Where the transforms go.
        options: The pipeline's flags; ``StandardOptions.streaming`` (or a
            subscription input) picks the streaming path, else the batch one.
        config: What to run; by default mapped from `options`.
        progress_every: Report every this many events read on stderr (0: never).
        provider: Builds the model provider on each worker in place of the one
            the config names (a test's scripted model); must be importable.

    Raises:
        ConfigError: the options name no input or drop an output.
    """
    opts = options.view_as(AgentPipelineOptions)
    check_io(opts)
    if config is None:
        config = agent_config_from_options(options)
    decoded = _read(pipeline, opts, config.max_event_bytes) | "Decode" >> beam.ParDo(
        DecodeEvents(opts.input_format, max_event_bytes=config.max_event_bytes,
                     progress_every=progress_every)).with_output_types(
        beam.typehints.Tuple[bytes, bytes]).with_outputs(ERRORS, main="events")
    # A subscription never ends, so it takes the streaming path even before
    # `run` marks the options streaming: a GroupByKey would never fire on it.
    streaming = bool(options.view_as(StandardOptions).streaming or opts.input_subscription)
    ordering = event_ordering_from_options(options) if streaming else None
    activated = _activate(decoded.events, config, ordering=ordering, provider=provider)
    errors = (decoded[ERRORS], activated[ERRORS]) | "AllErrors" >> beam.Flatten()
    # One count for both outputs, so a key's intents and dead letters share a shard number.
    shards = output_shards_from_options(options) if opts.output_path or opts.errors_path else 1
    _write(activated.intents, topic=opts.output_topic, path=opts.output_path, label="Intents",
           shards=shards)
    _write(errors, topic=opts.errors_topic, path=opts.errors_path, label="Errors", shards=shards)


def run(argv: list[str] | None = None, *, progress_every: int = 0) -> Any:
    """Build and run the pipeline from command-line flags; returns the PipelineResult.

    A streaming run on the local runner stops cleanly: the first SIGINT or
    SIGTERM stops its pulls, and the run ends once every message it pulled
    has ended as an intent or a dead letter (see `LocalSubscriptionReads`);
    a second one abandons them. With `progress_every`, it reports a
    ``progress`` line on stderr each second instead of a count of events read.
    """
    options = PipelineOptions(argv)
    opts = options.view_as(AgentPipelineOptions)
    if opts.input_subscription:
        options.view_as(StandardOptions).streaming = True
    local_stream = bool(opts.input_subscription) and _runs_locally(options)
    pipeline = Pipeline(options=options)
    build_pipeline(pipeline, options, progress_every=0 if local_stream else progress_every)
    if not local_stream:
        result = pipeline.run()
        result.wait_until_finish()
        return result
    reads = LocalSubscriptionReads()
    reads.install()
    try:
        with _stopping_on_signals(reads), local_tally() as tally:
            result = pipeline.run()
            with _reporting(tally, reads, every_s=1.0 if progress_every else 0.0):
                result.wait_until_finish()
    finally:
        reads.uninstall()
    # What the summary reads in place of result.metrics() (see `local_tally`).
    setattr(result, "beam_agents_tally", tally)  # noqa: B010
    return result


@contextlib.contextmanager
def _reporting(tally: RecordingMetrics, reads: LocalSubscriptionReads, *,
               every_s: float) -> Iterator[None]:
    """Print ``progress pulled=… events=… ended=… in_flight=… queued=…`` every `every_s`.

    One whole line each time, so a person can watch it and a driver can
    parse it: messages pulled, events decoded, events ended (committed or
    dead-lettered), activations running, and events queued in keyed state.
    A line also follows each pull, before its messages are acknowledged, so
    the last line of a frozen run counts every message it took.
    """
    if not every_s:
        yield
        return
    done = threading.Event()
    reads.on_pull = lambda: print(_progress_line(tally, reads.pulled), file=sys.stderr,
                                  flush=True)

    def report() -> None:
        while not done.wait(every_s):
            print(_progress_line(tally, reads.pulled), file=sys.stderr, flush=True)

    thread = threading.Thread(target=report, name="beam-agents-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        reads.on_pull = None
        print(_progress_line(tally, reads.pulled), file=sys.stderr, flush=True)


def _progress_line(tally: RecordingMetrics, pulled: int) -> str:
    def count(name: str) -> int:
        return tally.get("beam_agents.runtime", name)

    ended = count("committed") + sum(
        value for key, value in list(tally.counters.items())
        if key.startswith("beam_agents.runtime:errors_"))
    return (f"progress pulled={pulled} events={count('events')} ended={ended} "
            f"in_flight={count('in_flight')} queued={count('queued')}")


def _runs_locally(options: PipelineOptions) -> bool:
    runner = options.view_as(StandardOptions).runner
    return runner is None or str(runner).removesuffix("Runner").removesuffix("Direct") in (
        "", "BundleBased", "Switching")


@contextlib.contextmanager
def _stopping_on_signals(reads: LocalSubscriptionReads) -> Iterator[None]:
    """SIGINT/SIGTERM stop `reads` once; the next one interrupts as usual."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}

    def stop(number: int, _frame: Any) -> None:
        for restored, handler in saved.items():
            signal.signal(restored, handler)
        reads.stop()
        print(f"\n  {signal.Signals(number).name}: no more pulls; finishing the messages "
              "already pulled (again to abandon them)", file=sys.stderr, flush=True)

    for number in saved:
        signal.signal(number, stop)
    try:
        yield
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)
