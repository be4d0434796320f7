"""The native Flink job: read -> decode -> key by entity -> activate -> write intents and errors.

The same graph as the Beam pipeline, on PyFlink's DataStream API, with the
same flags for the agent, model and long-term store. Files are the offline
source and sinks, Kafka topics the streaming ones (`beam_agents.flink._kafka`);
nothing is dropped (invariant 8): undecodable lines become DECODE records on
the errors output, beside the activations' own.

Exactly-once comes from Flink: checkpoints snapshot keyed state (each key's
queue of events not yet applied among it) with its timers and the source
position, the file sinks and Kafka transactions commit on checkpoints, and a
restart strategy replays from the last checkpoint after a failure.

Savepoints carry the same state from one deployment to the next: every
operator has a fixed uid (`UIDS`), so a savepoint restores into a job whose
graph around them changed, and the key groups (``--max_parallelism``) are
fixed, so it restores at any parallelism up to that.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from pyflink.common import Configuration, Encoder, Types, WatermarkStrategy
from pyflink.datastream import (
    DataStream,
    ProcessFunction,
    RuntimeContext,
    StreamExecutionEnvironment,
)
from pyflink.datastream.connectors.file_system import (
    BucketAssigner,
    FileSink,
    FileSource,
    OutputFileConfig,
    RollingPolicy,
    StreamFormat,
)

from beam_agents._checks import require_int
from beam_agents.errors import ConfigError
from beam_agents.flink._function import (
    ERRORS,
    HOLD_INPUT_AT,
    AgentKeyedProcessFunction,
    EventOrder,
    ExecutionMode,
)
from beam_agents.flink._kafka import (
    KAFKA_UIDS,
    KafkaJobOptions,
    event_time_watermarks,
    kafka_lines,
    sink_to_kafka,
)
from beam_agents.flink._metrics import FlinkMetrics
from beam_agents.flink._operator import keyed_process
from beam_agents.flink._shutdown import quiet_worker_shutdown
from beam_agents.flink._snapshot import FlinkSnapshot, job_snapshot, snapshot_records
from beam_agents.hosting import (
    EventOrdering,
    InputDecoder,
    SnapshotPlan,
    error_to_json,
    plan_snapshot,
)
from beam_agents.runtime import MAX_EVENT_BYTES, AgentConfig, ErrorRecord

__all__ = ["MAX_PARALLELISM_LIMIT", "UIDS", "DecodeEvents", "FlinkJobOptions", "agent_stream",
           "build_job", "environment", "flink_settings", "plan_job_snapshot"]

_KEYED_EVENT = Types.TUPLE([Types.STRING(), Types.PRIMITIVE_ARRAY(Types.BYTE())])

#: The uid of each operator, by its role. A savepoint maps its state to
#: operators by uid, and an operator without one gets an id derived from its
#: place in the graph, which any change around it (an added step, other
#: chaining) alters; so each is set here once and never changed. The sinks'
#: committers derive theirs from the sink's.
UIDS = {
    "source": "read-jsonl",
    "decode": "decode",
    "key_by": "key-by-entity",
    "activate": "activate",
    "decode_errors": "decode-errors",
    "activate_errors": "activate-errors",
    "intents_sink": "write-intents",
    "errors_sink": "write-errors",
}

#: Flink's upper bound on the maximum parallelism (the number of key groups).
MAX_PARALLELISM_LIMIT = 32_768


@dataclass(frozen=True, slots=True, kw_only=True)
class FlinkJobOptions:
    """Where the job reads and writes, and how Flink keeps it exactly-once.

    Attributes:
        input_files: Files or directories of JSONL events (the flag's globs are
            matched before, by `expand_input_files`); empty with a Kafka
            input topic.
        output_path: Directory for intents (``intents-*.jsonl`` part files);
            None with a Kafka output topic.
        errors_path: Directory for error records (``errors-*.jsonl``); None
            with a Kafka errors topic.
        checkpointing_interval_ms: Checkpoint period; 0 disables checkpoints
            (and with them exactly-once after a failure).
        unaligned_checkpoints: Let barriers overtake buffered events. Agent
            operators are slow, so the stream is usually backpressured, and an
            aligned barrier would wait behind every buffered event; unaligned
            checkpoints complete in bounded time and keep recovery points fresh.
        checkpoint_dir: Durable checkpoint storage (``file://``, ``gs://``,
            ``s3://``); None keeps Flink's configured default.
        restart_attempts: Fixed-delay restarts before the job fails.
        restart_delay_ms: Delay between restarts.
        bundle_size: Elements handed to the Python worker per bundle; None
            picks by `event_order` (`bundle_size_in_use`). In arrival order
            a checkpoint barrier waits for the bundle in flight, which holds
            slow activations, so small bundles keep recovery points frequent.
            In event-time order an element only queues, and the end of the
            input runs in rounds no checkpoint can interrupt; there each
            bundle's end writes every keyed state it touched with one
            blocking request each, stalling every key, so bundles are large;
            a checkpoint still ends the one in flight.
        bundle_time_ms: Longest a bundle stays open before it is processed;
            None picks as `bundle_size` does (`bundle_time_in_use`). A timer
            that calls a key back (its activation has ended, its next event
            may start) waits in the bundle until it is sent, so this is also
            the longest a key can wait between two activations.
        python_managed_memory: Share one Python worker per slot, budgeted from
            managed memory (Flink's default). Off by default: in PyFlink 2.3,
            when a failover cancels the tasks that share that worker together,
            releasing it can throw "Reference count must not be negative",
            which Flink treats as fatal and which takes the whole task manager
            down. Off, each Python operator owns its worker, sized from task
            off-heap memory.
        hold_input_at: In arrival order, the events a key may hold queued, its
            running one included, before its next arrival holds the input
            (`HOLD_INPUT_AT`); at most the agent's ``max_queued_per_key``.
            Holding blocks the task, so no other key's activation ends or
            starts meanwhile; higher holds more events in keyed state instead.
        event_order: ``"event_time"`` (default): each key's events run in
            ``(event_time_ms, event_id)`` order over the whole input, so any
            line order gives the same intents; ``"arrival"``: as they arrive,
            for the lowest latency (see `AgentKeyedProcessFunction`).
        parallelism: Operator parallelism; None keeps Flink's default.
        max_parallelism: The number of key groups keyed state is split into,
            and so the highest parallelism the job, or a savepoint of it, can
            be rescaled to; in [1, 32768] and at least `parallelism`. It is
            fixed for the life of the job's state: a savepoint restores only
            with the value it was taken with. Left to Flink, it would follow
            the parallelism of the first start (128 up to parallelism 85, then
            the next power of two above 1.5 times it) and cap every later
            rescale. 128 is the value Flink gave any job first started at
            parallelism 85 or less, so their savepoints restore unchanged, and
            it leaves room to rescale between 1 and 128 subtasks; a job that
            may need more sets it higher before its first start.
        python_executable: Interpreter for the Python workers; None keeps
            ``python.executable`` from the Flink configuration.
        python_execution_mode: ``"process"`` (default): Python in worker
            processes; ``"thread"``: embedded in the task manager's JVM, at
            about half the CPU, with the limits docs/design.md gives
            ("Flink's Python execution modes").
        job_name: Name shown in the Flink UI.
        kafka: Kafka topics in place of files, and event time on them; None
            reads and writes files only.
        flink_conf: More Flink configuration (``--flink_conf KEY=VALUE``), set
            last: what a local run's MiniCluster takes from no config.yaml
            (a metrics reporter, ...); on a cluster, its own config.yaml.
        state_snapshot: ``--state_snapshot``: a folder or ``firestore://COLLECTION``
            each key's keyed state is read from at the start and written to at
            the end (files in event-time order only; see
            `beam_agents.flink._snapshot`). None: keys start empty, unless the
            job restores a savepoint.
        firestore_project: The project of a ``firestore://`` snapshot
            (``--firestore_project``).
        firestore_database: Its database (``--firestore_database``).
    """

    input_files: tuple[str, ...]
    output_path: str | None
    errors_path: str | None
    checkpointing_interval_ms: int = 10_000
    unaligned_checkpoints: bool = True
    checkpoint_dir: str | None = None
    restart_attempts: int = 3
    restart_delay_ms: int = 10_000
    bundle_size: int | None = None
    bundle_time_ms: int | None = None
    python_managed_memory: bool = False
    hold_input_at: int = HOLD_INPUT_AT
    event_order: EventOrder = "event_time"
    parallelism: int | None = None
    max_parallelism: int = 128
    python_executable: str | None = None
    python_execution_mode: ExecutionMode = "process"
    job_name: str = "beam-agents"
    kafka: KafkaJobOptions | None = None
    flink_conf: Mapping[str, str] = field(default_factory=dict)
    state_snapshot: str | None = None
    firestore_project: str | None = None
    firestore_database: str | None = None

    def __post_init__(self) -> None:
        kafka = self.kafka or KafkaJobOptions(bootstrap_servers="-")
        if bool(self.input_files) == bool(kafka.input_topic):
            raise ConfigError("set one of --input_files and --input_kafka_topic",
                              field="input_files")
        for name, flag, topic in (("output_path", "output_kafka_topic", kafka.output_topic),
                                  ("errors_path", "errors_kafka_topic", kafka.errors_topic)):
            if bool(getattr(self, name)) == bool(topic):
                raise ConfigError(f"set one of --{name} and --{flag} so nothing is dropped",
                                  field=name)
        for name, low in (("checkpointing_interval_ms", 0), ("restart_attempts", 0),
                          ("restart_delay_ms", 0), ("hold_input_at", 1)):
            require_int(getattr(self, name), name=f"--{name}", low=low, field=name, noun="")
        for name in ("bundle_size", "bundle_time_ms"):
            if getattr(self, name) is not None:
                require_int(getattr(self, name), name=f"--{name}", low=1, field=name, noun="")
        if self.event_order not in ("event_time", "arrival"):
            raise ConfigError(f"--event_order must be event_time or arrival, got "
                              f"{self.event_order!r}", field="event_order")
        if self.python_execution_mode not in get_args(ExecutionMode):
            raise ConfigError(f"--python_execution_mode must be process or thread, got "
                              f"{self.python_execution_mode!r}", field="python_execution_mode")
        if self.parallelism is not None:
            require_int(self.parallelism, name="--parallelism", low=1, field="parallelism",
                        noun="")
        require_int(self.max_parallelism, name="--max_parallelism", low=1,
                    high=MAX_PARALLELISM_LIMIT, field="max_parallelism", noun="")
        if self.parallelism is not None and self.max_parallelism < self.parallelism:
            raise ConfigError(f"--max_parallelism must be >= --parallelism "
                              f"({self.parallelism}), got {self.max_parallelism}",
                              field="max_parallelism")
        if self.state_snapshot is not None:
            if not self.input_files or not self.state_snapshot.strip():
                raise ConfigError("--state_snapshot needs --input_files and a folder or "
                                  "firestore://COLLECTION: a streaming job keeps its state in "
                                  "Flink's checkpoints and savepoints", field="state_snapshot")
            if self.event_order != "event_time":
                raise ConfigError("--state_snapshot needs --event_order event_time: in arrival "
                                  "order a key's events could run before its record is read",
                                  field="state_snapshot")


#: The file source decodes lines as ISO-8859-1, which maps each byte to one
#: char, so ``str.encode(FILE_CHARSET)`` gives back the file's exact bytes: a line
#: that is not UTF-8 reaches the decoder as it is and becomes a DECODE record
#: (invariant 8) instead of being mangled by a UTF-8 reader's replacement chars.
FILE_CHARSET = "ISO-8859-1"


class DecodeEvents(ProcessFunction):
    """A JSON line -> ``(key, AgentEvent bytes)``; an undecodable one -> a DECODE record.

    The same decode step, size limit and counters as the Beam pipeline's
    (`InputDecoder`). `charset` says how the source turned bytes into the
    line: `FILE_CHARSET` for this job's file source (lossless), ``"utf-8"`` for
    a source that already decoded UTF-8 text.
    """

    def __init__(self, input_format: str = "json", *, max_event_bytes: int = MAX_EVENT_BYTES,
                 charset: str = "utf-8") -> None:
        self._format = input_format
        self._max_event_bytes = max_event_bytes
        self._charset = charset
        self._metrics: FlinkMetrics | None = None
        self._decode: InputDecoder | None = None

    def open(self, runtime_context: RuntimeContext) -> None:
        """Bind the counters to the operator's metric group."""
        quiet_worker_shutdown()  # each Python operator may have a worker of its own
        self._metrics = FlinkMetrics(runtime_context.get_metrics_group())
        self._decode = InputDecoder(self._format, self._metrics,
                                    max_event_bytes=self._max_event_bytes, charset=self._charset)

    def process_element(self, value: str | tuple[str, str], ctx: Any) -> Iterator[Any]:
        """Decode one line, or one ``(line, traceparent)`` from a source that carries it."""
        assert self._decode is not None and self._metrics is not None, "open() was not called"
        if isinstance(value, str):
            decoded = self._decode(value)
        else:
            line, parent = value
            decoded = self._decode(line, traceparent=parent or None)
        self._metrics.flush()
        if isinstance(decoded, ErrorRecord):
            yield ERRORS, error_to_json(decoded).decode()
            return
        # Keyed state needs a key with value equality; hex keeps any bytes.
        yield decoded.entity_key.hex(), decoded.SerializeToString(deterministic=True)


def _entity_of(value: tuple[str, bytes]) -> str:
    return value[0]


def _file_sink(path: str, prefix: str) -> FileSink:
    """Part files that roll and commit on every completed checkpoint.

    Flink's default rolling (128 MB or 60 s) would hold committed output back
    for a minute; rolling on checkpoints makes what a checkpoint covers
    visible downstream as soon as it completes, and nothing else.
    """
    names = OutputFileConfig.builder().with_part_prefix(prefix).with_part_suffix(".jsonl").build()
    return (FileSink.for_row_format(path, Encoder.simple_string_encoder())
            .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
            .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
            .with_output_file_config(names).build())


#: Bundle sizes `FlinkJobOptions.bundle_size` = None picks, by event order; in
#: event time PyFlink's own (docs/decisions/0015-flink-python-execution-modes.md).
AUTO_BUNDLE_SIZE = {"event_time": 100_000, "arrival": 16}


#: Bundle times `FlinkJobOptions.bundle_time_ms` = None picks, by event order.
AUTO_BUNDLE_TIME_MS = {"event_time": 1_000, "arrival": 50}


def _bundle_kind(options: FlinkJobOptions) -> str:
    """Which of the automatic bundle bounds the job takes: its event order's, or arrival's.

    On a topic, events run as the watermark passes them, while the input
    arrives, as in arrival order: small, short bundles, so outcomes, timers
    and checkpoints do not wait out a bundle's time.
    """
    streaming = options.kafka is not None and options.kafka.input_topic is not None
    return "arrival" if streaming else options.event_order


def bundle_size_in_use(options: FlinkJobOptions) -> int:
    """The bundle size the job runs with: the flag's, else `AUTO_BUNDLE_SIZE`'s."""
    return options.bundle_size or AUTO_BUNDLE_SIZE[_bundle_kind(options)]


def bundle_time_in_use(options: FlinkJobOptions) -> int:
    """The bundle time the job runs with: the flag's, else `AUTO_BUNDLE_TIME_MS`'s.

    A processing-time timer that calls a key back waits in the open bundle
    until the bundle is sent to the Python worker. Once the input is quiet
    no bundle fills, so a hot key's queued events ran one a bundle time
    apart: at 1,000 ms, the last 16 outcomes of `make demo-flink` came out
    about one a second, p99 13.6 s; at 50 ms, p99 3.5 s (docs/benchmarks.md).
    """
    return options.bundle_time_ms or AUTO_BUNDLE_TIME_MS[_bundle_kind(options)]


def flink_settings(options: FlinkJobOptions) -> dict[str, str]:
    """The Flink configuration keys the options set: recovery, bundles and Python workers."""
    settings = {
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": str(options.restart_attempts),
        "restart-strategy.fixed-delay.delay": f"{options.restart_delay_ms} ms",
        "python.fn-execution.bundle.size": str(bundle_size_in_use(options)),
        "python.fn-execution.bundle.time": str(bundle_time_in_use(options)),
        "python.fn-execution.memory.managed": str(options.python_managed_memory).lower(),
        # In event-time order a bounded input runs in the final watermark's
        # timers, which hold the task's mailbox: a checkpoint started then
        # cannot complete before they end. Failing the job for it would
        # restart the run it waits on, so expired checkpoints are tolerated.
        **({"execution.checkpointing.tolerable-failed-checkpoints": "2147483647"}
           if options.event_order == "event_time" else {}),
        "execution.checkpointing.unaligned.enabled": str(options.unaligned_checkpoints).lower(),
    }
    if options.checkpoint_dir:
        settings["execution.checkpointing.dir"] = options.checkpoint_dir
    settings["python.execution-mode"] = options.python_execution_mode
    if options.python_execution_mode == "thread":  # embedded, it sees its base path only
        settings["python.pythonpath"] = os.pathsep.join(path for path in sys.path if path)
    return {**settings, **options.flink_conf}


def environment(options: FlinkJobOptions) -> StreamExecutionEnvironment:
    """A stream environment with the options' checkpointing and restart strategy."""
    conf = Configuration()
    for key, value in flink_settings(options).items():
        conf.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    if options.checkpointing_interval_ms:
        env.enable_checkpointing(options.checkpointing_interval_ms)
    if options.parallelism is not None:
        env.set_parallelism(options.parallelism)
    env.set_max_parallelism(options.max_parallelism)
    if options.python_executable:
        env.set_python_executable(options.python_executable)
    if options.kafka is not None and options.kafka.connector_jar:
        env.add_jars(Path(options.kafka.connector_jar).resolve().as_uri())
    return env


def agent_stream(lines: DataStream, config: AgentConfig, *, charset: str = "utf-8",
                 event_order: EventOrder = "event_time",
                 execution_mode: ExecutionMode = "process",
                 watermarks: WatermarkStrategy | None = None,
                 ordering: EventOrdering | None = None,
                 state: tuple[DataStream, FlinkSnapshot] | None = None,
                 hold_input_at: int = HOLD_INPUT_AT,
                 ) -> tuple[DataStream, DataStream]:
    """JSON event lines -> (intents, error records), both as JSON-line strings.

    The job's core, apart from sources and sinks: put a Kafka or Pub/Sub
    source in front and sinks behind (their connector jars go on
    ``pipeline.jars``), and the agent runs exactly as in `build_job`.
    `charset` is how the source decoded the lines' bytes (see `DecodeEvents`);
    `execution_mode` must be the job's ``python.execution-mode``. On an
    unbounded source, `watermarks` stamps each decoded event with its event
    time, and `ordering` runs it once the watermark has passed it (late
    events as it says); see `beam_agents.flink._kafka`. `state` is a state
    snapshot's records (`beam_agents.flink._snapshot.snapshot_records`, or
    None when it holds none yet) and where the next generation goes.
    `hold_input_at` is `FlinkJobOptions.hold_input_at`.
    Its operators carry the uids of `UIDS`, so one job holds one agent stream.
    """
    decoded = lines.process(DecodeEvents(max_event_bytes=config.max_event_bytes,
                                         charset=charset),
                            output_type=_KEYED_EVENT).name("Decode").uid(UIDS["decode"])
    events = decoded
    if watermarks is not None:
        events = decoded.assign_timestamps_and_watermarks(watermarks).name("EventTime").uid(
            KAFKA_UIDS["timestamps"])
    if state is not None and state[0] is not None:
        # Each key's record joins its events before the key-by: no step sees every key.
        events = events.union(state[0])
    keyed = events.key_by(_entity_of, key_type=Types.STRING())
    # PyFlink keys a stream with a Python operator of its own ahead of the
    # partitioning, which its API does not expose: set its uid on the transformation.
    keyed._j_data_stream.getTransformation().getInputs().get(0).setUid(UIDS["key_by"])
    activate = AgentKeyedProcessFunction(config, event_order=event_order,
                                         execution_mode=execution_mode, ordering=ordering,
                                         snapshot=None if state is None else state[1],
                                         hold_input_at=hold_input_at)
    activated = (keyed_process(keyed, activate, Types.STRING(), "Activate")
                 .name("Activate").uid(UIDS["activate"]))
    # A side output is read through an operator of its own too (PyFlink maps it
    # to the tag's type); each gets a uid like every other operator.
    return activated, decoded.get_side_output(ERRORS).uid(UIDS["decode_errors"]).union(
        activated.get_side_output(ERRORS).uid(UIDS["activate_errors"]))


def build_job(env: StreamExecutionEnvironment, options: FlinkJobOptions,
              config: AgentConfig, *,
              snapshot: SnapshotPlan | None = None) -> tuple[DataStream, DataStream]:
    """Add the agent job to `env`, from files or a topic to files or topics; returns its streams.

    With ``options.state_snapshot``, pass the run's `snapshot` plan
    (`plan_job_snapshot`), and commit it once the job has ended
    (`beam_agents.flink._snapshot.commit_job_snapshot`); `run` does both.
    """
    if (options.state_snapshot is None) != (snapshot is None):
        raise ConfigError("--state_snapshot and build_job's snapshot plan go together: plan it "
                          "with plan_job_snapshot", field="state_snapshot")
    check_against_agent(options, config)
    kafka = options.kafka
    ordering: EventOrdering | None = None
    watermarks: WatermarkStrategy | None = None
    if kafka is not None and kafka.input_topic is not None:
        lines = kafka_lines(env, kafka, FILE_CHARSET)
        # The watermark already waits out the disorder, so the operator adds none.
        ordering = EventOrdering(mode=options.event_order, late_events=kafka.late_events)
        watermarks = event_time_watermarks(kafka) if options.event_order == "event_time" else None
    else:
        source = FileSource.for_record_stream_format(
            StreamFormat.text_line_format(FILE_CHARSET), *options.input_files).build()
        # No watermarks while reading; the finished file still emits the final
        # one, which fires the end-of-input rounds (see AgentKeyedProcessFunction).
        # The source's state is the input's splits and the position in each: with
        # its uid, a restored job reads on from where the savepoint stopped.
        lines = env.from_source(source, WatermarkStrategy.no_watermarks(),
                                "ReadJsonl").uid(UIDS["source"])
    state = None
    if snapshot is not None:
        state = (snapshot_records(env, snapshot), job_snapshot(snapshot, options.input_files))
    intents, errors = agent_stream(lines, config, charset=FILE_CHARSET,
                                   event_order=options.event_order,
                                   execution_mode=options.python_execution_mode,
                                   watermarks=watermarks, ordering=ordering, state=state,
                                   hold_input_at=options.hold_input_at)
    if options.output_path:
        intents.sink_to(_file_sink(options.output_path, "intents")).name("WriteIntents").uid(
            UIDS["intents_sink"])
    if options.errors_path:
        errors.sink_to(_file_sink(options.errors_path, "errors")).name("WriteErrors").uid(
            UIDS["errors_sink"])
    if kafka is not None:
        sink_to_kafka(env, kafka, None if options.output_path else intents,
                      None if options.errors_path else errors)
    return intents, errors


def check_against_agent(options: FlinkJobOptions, config: AgentConfig) -> None:
    """Refuse options that contradict the agent's config; `parse_args` and `build_job` call it.

    Raises:
        ConfigError: ``--hold_input_at`` is above ``--max_queued_per_key``, where
            a key's arrivals would become BACKLOG dead letters before any held
            the input; names the flag.
    """
    if options.hold_input_at > config.max_queued_per_key:
        raise ConfigError(f"--hold_input_at must be <= --max_queued_per_key "
                          f"({config.max_queued_per_key}): past it a key's arrivals are "
                          f"BACKLOG dead letters, not held, got {options.hold_input_at}",
                          field="hold_input_at")


def plan_job_snapshot(options: FlinkJobOptions) -> SnapshotPlan | None:
    """``--state_snapshot``: its store, the generation it holds now, and the one this run writes.

    Raises:
        ConfigError: the URI is unusable; names the flag.
        StateCorruptError: its manifest cannot be read by this version.
        SnapshotUnavailable: its store failed.
    """
    if options.state_snapshot is None:
        return None
    return plan_snapshot(options.state_snapshot, project=options.firestore_project,
                         database=options.firestore_database)
