"""The agent pipeline: read -> decode -> key by entity -> activate -> write intents and errors.

The activation step depends on the path (DESIGN's "Durable, concurrent
activations"), chosen by ``StandardOptions.streaming``:

* streaming (Pub/Sub, Kafka): `AgentDoFn`, the per-key queue in keyed state,
  pumped by a processing-time timer;
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
import time
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.gcp.pubsub import PubsubMessage
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.pipeline import Pipeline
from apache_beam.pvalue import PCollection

from beam_agents.beam._batch import AgentBatchDoFn
from beam_agents.beam._dofn import ERRORS, AgentDoFn
from beam_agents.beam._host import ProviderFactory
from beam_agents.beam._kafka import KafkaConfig, ReadKafka, TracedValue, WriteKafka
from beam_agents.beam._metrics import BeamMetrics, local_tally
from beam_agents.beam._options import (
    AgentPipelineOptions,
    agent_config_from_options,
    check_io,
    event_ordering_from_options,
    kafka_config_from_options,
    output_shards_from_options,
    snapshot_plan_from_options,
    unbounded_input,
)
from beam_agents.beam._pubsub import LocalSubscriptionReads, to_message
from beam_agents.beam._read import ReadLines
from beam_agents.beam._runner import runner_report, watch_runner, with_runner_safeguards
from beam_agents.beam._snapshot import SNAPSHOT_PARTS, ReadSnapshot, SnapshotPlan, commit_after
from beam_agents.errors import ConfigError
from beam_agents.hosting import EventOrdering, InputDecoder, Oversize, error_to_json
from beam_agents.metrics import RecordingMetrics
from beam_agents.runtime import MAX_EVENT_BYTES, AgentConfig, AgentEvent, ErrorRecord

__all__ = ["DecodeEvents", "WriteShardedLines", "build_pipeline", "check_runner_flags",
           "clear_outputs", "output_files", "run", "shard_of", "shard_paths"]


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

    def process(self, element: bytes | str | Oversize | Any) -> Iterator[Any]:
        """Decode one element: bytes from every source (files are read undecoded).

        A Pub/Sub message comes with its attributes and a Kafka record with
        its headers, for the ``traceparent`` among them.
        """
        self._report_progress()
        traceparent: str | bytes | None = None
        if isinstance(element, PubsubMessage):
            attributes = element.attributes or {}
            traceparent = attributes.get("traceparent")
            element = element.data
        elif isinstance(element, TracedValue):
            element, traceparent = element
        decoded = self._decode(element, traceparent=traceparent)
        self._metrics.flush()
        if isinstance(decoded, ErrorRecord):
            yield beam.pvalue.TaggedOutput(ERRORS, error_to_json(decoded))
            return
        yield decoded.entity_key, decoded.SerializeToString(deterministic=True)

    def _report_progress(self) -> None:
        self._seen += 1
        if self._progress_every and self._seen % self._progress_every == 0:
            print(f"\r  read {self._seen} events", end="", file=sys.stderr, flush=True)


def _read(pipeline: Pipeline, opts: AgentPipelineOptions, max_event_bytes: int,
          kafka: KafkaConfig | None) -> Any:
    if opts.input_kafka_topic:
        assert kafka is not None  # a Kafka topic always has one (kafka_config_from_options)
        return pipeline | "ReadKafka" >> ReadKafka(opts.input_kafka_topic, kafka)
    if opts.input_subscription:
        # With attributes: a producer's `traceparent` rides on its message.
        return pipeline | "ReadPubSub" >> beam.io.ReadFromPubSub(
            subscription=opts.input_subscription, with_attributes=True,
            timestamp_attribute=opts.input_timestamp_attribute)
    if opts.input_format == "proto":
        return pipeline | "ReadTFRecord" >> beam.io.ReadFromTFRecord(opts.input_files)
    # Lines stay bytes, bounded by the size limit: a line that is not UTF-8,
    # or is huge, reaches the decoder and becomes a DECODE record (invariant 8).
    return pipeline | "ReadJsonl" >> ReadLines(opts.input_files, max_event_bytes)


def _write(lines: PCollection[bytes], *, topic: str | None, path: str | None,
           label: str, shards: int, kafka_topic: str | None = None,
           kafka: KafkaConfig | None = None) -> PCollection[Any] | None:
    """Write to the topics and/or the files; returns the files' last step, when there are files."""
    if kafka_topic:
        assert kafka is not None  # a Kafka topic always has one (kafka_config_from_options)
        _ = lines | f"Produce{label}" >> WriteKafka(kafka_topic, kafka)
    if topic:
        # Attributes name the key, the event and (dead letters) the stage, so a
        # subscriber can filter without parsing the body.
        _ = (lines
             | f"Attributes{label}" >> beam.Map(to_message(label.lower()))
             | f"Publish{label}" >> beam.io.WriteToPubSub(topic=topic, with_attributes=True))
    if path:
        # A file sink needs a bounded input (`check_io`).
        return lines | f"Write{label}" >> WriteShardedLines(path, shards)  # type: ignore[no-any-return]
    return None


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
        paths = shard_paths(self._path, shards)
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
        # One temporary path per shard, gathered under one key. Not
        # CombineGlobally (ToList): in streaming it injects its default through
        # a side input, and the FlinkRunner cannot checkpoint the side input's
        # buffered elements (a ClassCastException in the buffer's serializer).
        # Every shard is seeded, so the group is never empty.
        keyed_path = beam.typehints.Tuple[int, beam.typehints.Tuple[int, str]]
        return (written
                | "Written" >> beam.Map(lambda shard: (0, shard)).with_output_types(keyed_path)
                | "AllWritten" >> beam.GroupByKey()
                | "Rename" >> beam.MapTuple(
                    lambda _, done: _rename_into_place(list(done), paths, temp_dir)))


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
              ordering: EventOrdering | None, provider: ProviderFactory | None,
              snapshot: SnapshotPlan | None = None) -> Any:
    keyed = beam.typehints.Tuple[bytes, bytes]
    if ordering is not None:
        # The key type hint gives the stateful DoFn a deterministic key coder.
        return events | "Activate" >> beam.ParDo(
            AgentDoFn(config, provider=provider, ordering=ordering)).with_input_types(
            keyed).with_outputs(ERRORS, main="intents")
    side: dict[str, Any] = {}
    if snapshot is not None:
        # The input's latest event time, combined per worker then merged (one
        # number, no step that sees every event): a wait due past it is pending.
        side["latest_ms"] = beam.pvalue.AsSingleton(
            events | "EventTimes" >> beam.Map(_event_time)
            | "LatestEventTime" >> beam.CombineGlobally(_latest))
        # Each key's record joins its events in the same grouping: no step sees every key.
        state = events.pipeline | "ReadState" >> ReadSnapshot(snapshot)
        events = (events, state) | "EventsAndState" >> beam.Flatten().with_output_types(keyed)
    grouped = events | "GroupByEntity" >> beam.GroupByKey().with_input_types(keyed)
    return grouped | "Activate" >> beam.ParDo(
        AgentBatchDoFn(config, provider=provider, snapshot=snapshot), **side).with_outputs(
        ERRORS, SNAPSHOT_PARTS, main="intents")


def _event_time(element: tuple[bytes, bytes]) -> int:
    return int(AgentEvent.FromString(element[1]).event_time_ms)


def _latest(times: Iterable[int]) -> int | None:
    return max(times, default=None)


def build_pipeline(pipeline: Pipeline, options: PipelineOptions,
                   config: AgentConfig | None = None, *, progress_every: int = 0,
                   provider: ProviderFactory | None = None,
                   snapshot: SnapshotPlan | None = None) -> None:
    """Add the agent pipeline's transforms to `pipeline`, streaming or batch as `options` say.

    Args:
        pipeline: Where the transforms go.
        options: The pipeline's flags; ``StandardOptions.streaming`` (or a
            subscription input) picks the streaming path, else the batch one.
        config: What to run; by default mapped from `options`.
        progress_every: Report every this many events read on stderr (0: never).
        provider: Builds the model provider on each worker in place of the one
            the config names (a test's scripted model); must be importable.
        snapshot: The state snapshot to start from and write (batch only); by
            default planned from ``--state_snapshot``.

    Raises:
        ConfigError: the options name no input or drop an output.
    """
    opts = options.view_as(AgentPipelineOptions)
    check_io(opts)
    if config is None:
        config = agent_config_from_options(options)
    kafka = kafka_config_from_options(options)
    decoded = _read(pipeline, opts, config.max_event_bytes, kafka) | "Decode" >> beam.ParDo(
        DecodeEvents(opts.input_format, max_event_bytes=config.max_event_bytes,
                     progress_every=progress_every)).with_output_types(
        beam.typehints.Tuple[bytes, bytes]).with_outputs(ERRORS, main="events")
    # A subscription or a topic never ends, so it takes the streaming path even
    # before `run` marks the options streaming: a GroupByKey would never fire on it.
    streaming = bool(options.view_as(StandardOptions).streaming or unbounded_input(opts))
    ordering = event_ordering_from_options(options) if streaming else None
    if snapshot is None and opts.state_snapshot:
        snapshot = snapshot_plan_from_options(options)
    activated = _activate(decoded.events, config, ordering=ordering, provider=provider,
                          snapshot=snapshot)
    errors = (decoded[ERRORS], activated[ERRORS]) | "AllErrors" >> beam.Flatten()
    # One count for both outputs, so a key's intents and dead letters share a shard number.
    shards = output_shards_from_options(options) if opts.output_path or opts.errors_path else 1
    written = [_write(activated.intents, topic=opts.output_topic, path=opts.output_path,
                      label="Intents", shards=shards, kafka_topic=opts.output_kafka_topic,
                      kafka=kafka),
               _write(errors, topic=opts.errors_topic, path=opts.errors_path, label="Errors",
                      shards=shards, kafka_topic=opts.errors_kafka_topic, kafka=kafka)]
    if snapshot is not None:
        # Last, once both outputs are written: a run that fails keeps the last good one.
        commit_after(activated[SNAPSHOT_PARTS], snapshot,
                     *[done for done in written if done is not None])


def run(argv: list[str] | None = None, *, progress_every: int = 0,
        snapshot: SnapshotPlan | None = None) -> Any:
    """Build and run the pipeline from command-line flags; returns the PipelineResult.

    The result's ``beam_agents_runner`` is a `RunnerReport`: the runner that
    ran it, which under ``--runner=DirectRunner`` is the DirectRunner's own
    choice, and the reason if it fell back from Prism. A runner that needs
    a flag to lose nothing gets it (`with_runner_safeguards`).

    A streaming run on the local runner stops cleanly: the first SIGINT or
    SIGTERM stops its pulls, and the run ends once every message it pulled
    has ended as an intent or a dead letter (see `LocalSubscriptionReads`);
    a second one abandons them. With `progress_every`, it reports a
    ``progress`` line on stderr each second instead of a count of events read.
    A batch run first removes the files an earlier run wrote at its output
    paths (`clear_outputs`), so a run that fails leaves none that look current.

    A job on a Kafka topic never ends by itself. Cancelled through its
    runner (a job service's Cancel, ``flink cancel``), or with Ctrl-C here,
    which cancels it so, it returns as a run that was stopped, not one that
    failed, with ``beam_agents_cancelled`` set.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    options = PipelineOptions(argv)
    opts = options.view_as(AgentPipelineOptions)
    streaming = bool(options.view_as(StandardOptions).streaming or unbounded_input(opts))
    options = PipelineOptions(with_runner_safeguards(argv, streaming=streaming))
    opts = options.view_as(AgentPipelineOptions)
    check_runner_flags(options)
    if unbounded_input(opts):
        options.view_as(StandardOptions).streaming = True
    local_stream = bool(opts.input_subscription) and _runs_locally(options)
    pipeline = Pipeline(options=options)
    build_pipeline(pipeline, options, progress_every=0 if local_stream else progress_every,
                   snapshot=snapshot)
    clear_outputs(options)
    if not local_stream:
        with watch_runner() as notes:
            result = pipeline.run()
        report = runner_report(pipeline.runner, options, result, notes)
        setattr(result, "beam_agents_runner", report)  # noqa: B010
        try:
            result.wait_until_finish()
        except KeyboardInterrupt:
            if not opts.input_kafka_topic:
                raise
            _cancel(result)
            setattr(result, "beam_agents_cancelled", True)  # noqa: B010
        except RuntimeError:
            # Beam reports every end but DONE as a failure; a topic's job ends no other way.
            if not (opts.input_kafka_topic and _cancelled(result)):
                raise
            setattr(result, "beam_agents_cancelled", True)  # noqa: B010
        return result
    reads = LocalSubscriptionReads()
    reads.install()
    try:
        with _stopping_on_signals(reads), local_tally() as tally:
            with watch_runner() as notes:
                result = pipeline.run()
            setattr(result, "beam_agents_runner",  # noqa: B010
                    runner_report(pipeline.runner, options, result, notes))
            with _reporting(tally, reads, every_s=1.0 if progress_every else 0.0):
                result.wait_until_finish()
    finally:
        reads.uninstall()
    # What the summary reads in place of result.metrics() (see `local_tally`).
    setattr(result, "beam_agents_tally", tally)  # noqa: B010
    return result


def output_files(options: PipelineOptions) -> list[str]:
    """The files at the run's output paths now: the path itself and its shards, any count."""
    opts = options.view_as(AgentPipelineOptions)
    found: list[str] = []
    for path in (opts.output_path, opts.errors_path):
        if path:
            for pattern in (path, f"{path}-*-of-*"):
                found.extend(item.path for item in
                             FileSystems.match([pattern])[0].metadata_list)
    return sorted(set(found))


def clear_outputs(options: PipelineOptions) -> list[str]:
    """Remove what an earlier run left at the output paths; returns what it removed.

    The outputs are renamed into place only at the end of a run that
    succeeds (`WriteShardedLines`), so once these are gone a failed run
    leaves no intents file that looks like its own.
    """
    found = output_files(options)
    if found:
        FileSystems.delete(found)
    return found


def check_runner_flags(options: PipelineOptions) -> None:
    """Refuse runner flags Beam would quietly read as unset, and runners that cannot run them.

    Raises:
        ConfigError: ``--flink_job_server_jar`` given empty; Beam would fall
            back to downloading the jar, which an offline machine cannot. A
            Kafka topic on the local runner, which runs no Java transforms.
    """
    from apache_beam.options.pipeline_options import FlinkRunnerOptions  # noqa: PLC0415

    jar = options.view_as(FlinkRunnerOptions).flink_job_server_jar
    if jar is not None and not str(jar).strip():
        raise ConfigError("--flink_job_server_jar is empty: give the path of the Flink job-server "
                          "jar (templates/flink/README.md says how to fetch it), or leave the flag "
                          "out to let Beam download it", field="flink_job_server_jar")
    opts = options.view_as(AgentPipelineOptions)
    kafka = [name for name in ("input_kafka_topic", "output_kafka_topic", "errors_kafka_topic")
             if getattr(opts, name)]
    if kafka and _runs_locally(options):
        raise ConfigError(f"--{kafka[0]} needs a runner of Beam's Java Kafka transforms: "
                          "--runner=FlinkRunner (docs/streaming.md, \"Beam on Kafka\") or "
                          "DataflowRunner; the local runner runs Python transforms only",
                          field=kafka[0])


def _cancel(result: Any, *, timeout_s: float = 120.0) -> None:
    """Cancel the job through its runner, and wait until the runner says it has ended.

    Without this, Ctrl-C would leave a job server's job running with no one
    to watch it. A second Ctrl-C stops the wait and leaves the job as it is.
    """
    from apache_beam.runners.runner import PipelineState  # noqa: PLC0415

    print("\n  SIGINT: cancelling the job through its runner (again to stop waiting)",
          file=sys.stderr, flush=True)
    result.cancel()
    deadline = time.monotonic() + timeout_s
    while not PipelineState.is_terminal(result.state):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the job was asked to cancel and had not ended after "
                               f"{timeout_s:.0f} s (state {result.state})")
        time.sleep(0.5)


def _cancelled(result: Any) -> bool:
    """Whether the runner reports the job cancelled (asked of it; False if it cannot say)."""
    from apache_beam.runners.runner import PipelineState  # noqa: PLC0415

    with contextlib.suppress(Exception):
        return bool(result.state == PipelineState.CANCELLED)
    return False


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
