"""The native Flink job on Kafka: a `KafkaSource` in, transactional Kafka sinks out.

Source. A ``KafkaSource`` reads the topic's values as ISO-8859-1 text, one
char per byte (as the file source does, `FILE_CHARSET`), so the decoder sees
each record's exact bytes: a record that is not UTF-8, not JSON or over
``--max_event_bytes`` becomes a DECODE dead letter, never a crash (invariant
8). Beside each value it reads the record's ``traceparent`` header (W3C trace
context; PyFlink's own reader keeps values only, hence our small Java reader,
`kafka_jar`), so the activation is a child of the producer's span. Its
position (the partitions' offsets) is in every checkpoint; the group's
committed offsets are only for monitoring and ``committed`` starts.

Event time. Timestamps come from each event's ``event_time_ms`` and
watermarks from ``for_bounded_out_of_orderness(--max_out_of_orderness_ms)``,
assigned right after the decoder, on each source subtask's events, with
``--idle_timeout_ms`` marking a subtask whose partitions are quiet as idle so
it does not hold time back. The keyed operator runs an event once the
watermark has passed it (invariant 10); an event behind the watermark is late,
counted, or dead-lettered with ``--late_events dead_letter``.

Sinks. Intents and dead letters go to their topics through Flink's Kafka
table sink with ``sink.delivery-guarantee = exactly-once``: each checkpoint's
records are one Kafka transaction (ids ``<prefix>-...``), committed when the
checkpoint completes, so a ``read_committed`` consumer sees each once across
failovers. Intents are keyed by entity key, so one entity's intents share a
partition and keep their order; a dead letter carries its stage and the event
bytes as the headers ``stage`` and ``event`` (and its entity as key, when
known). Both carry the activation's ``traceparent`` as a header of that name
when tracing is on, so a consumer's span continues the producer's trace. The
table sink, not the DataStream one, because only it writes headers without
Java code of ours.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pyflink.common import Duration, Row, Types, WatermarkStrategy
from pyflink.common.watermark_strategy import TimestampAssigner
from pyflink.datastream import DataStream, StreamExecutionEnvironment
from pyflink.datastream.connectors.kafka import KafkaOffsetResetStrategy as _Reset
from pyflink.datastream.connectors.kafka import KafkaOffsetsInitializer, KafkaSource
from pyflink.java_gateway import get_gateway

from beam_agents._checks import require_int
from beam_agents._kafka_flags import DEFAULT_GROUP_ID, StartingOffsets, parse_properties
from beam_agents.errors import ConfigError
from beam_agents.hosting import error_from_json
from beam_agents.runtime import AgentEvent, ErrorRecord
from beam_agents.tracing import TRACEPARENT

if TYPE_CHECKING:  # the table planner loads only for a job that writes topics
    from pyflink.table import StatementSet, TableDescriptor

__all__ = ["KAFKA_UIDS", "KafkaJobOptions", "StartingOffsets", "event_time_watermarks",
           "kafka_jar", "kafka_lines", "parse_properties", "sink_to_kafka"]

#: The uids of the Kafka job's own operators (see `UIDS` for the rest).
KAFKA_UIDS = {"source": "read-kafka", "timestamps": "event-time"}

_BYTES = Types.PRIMITIVE_ARRAY(Types.BYTE())
_INTENT_ROW = Types.ROW_NAMED(["k", "v", "headers"], [_BYTES, _BYTES, Types.MAP(Types.STRING(),
                                                                                  _BYTES)])

#: The reader of records with their trace context, in the jar `kafka_jar` names.
_READER_CLASS = "beam_agents.flink.TraceparentRecords"
_ERROR_ROW = Types.ROW_NAMED(["k", "v", "headers"], [_BYTES, _BYTES, Types.MAP(Types.STRING(),
                                                                                 _BYTES)])


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaJobOptions:
    """Where the job reads and writes on Kafka, and how event time runs there.

    Attributes:
        bootstrap_servers: ``host:port,...`` of the cluster.
        input_topic: Topic of JSON events; None reads ``--input_files``.
        output_topic: Topic for intents; None writes ``--output_path``.
        errors_topic: Topic for dead letters; None writes ``--errors_path``.
        group_id: Consumer group of the source (offsets committed on checkpoints).
        starting_offsets: Where a job without a checkpoint starts: ``committed``
            (the group's offsets, else the earliest), ``earliest`` or ``latest``.
        properties: Kafka client properties for the source and sinks alike
            (``security.protocol``, ``sasl.*``, ``ssl.*``, ...).
        transactional_id_prefix: Prefix of the sinks' transactional ids; unique
            per job on a cluster, or jobs fence each other's transactions.
        transaction_timeout_ms: The sinks' ``transaction.timeout.ms``: at most the
            broker's ``transaction.max.timeout.ms`` (15 min by default), and well
            over a checkpoint interval plus a restart, or an open transaction
            expires and its records are lost.
        max_out_of_orderness_ms: Disorder the watermark waits for, in event time.
        idle_timeout_ms: A source subtask with no record for this long stops
            holding the watermark back; 0 never.
        late_events: An event behind the watermark runs and is counted
            (``run``), or becomes a LATE dead letter (``dead_letter``).
        connector_jar: The ``flink-sql-connector-kafka`` jar to add to
            ``pipeline.jars``; None when the cluster already has it in lib/.
    """

    bootstrap_servers: str
    input_topic: str | None = None
    output_topic: str | None = None
    errors_topic: str | None = None
    group_id: str = DEFAULT_GROUP_ID
    starting_offsets: StartingOffsets = "committed"
    properties: Mapping[str, str] = field(default_factory=dict)
    transactional_id_prefix: str = "beam-agents"
    transaction_timeout_ms: int = 900_000
    max_out_of_orderness_ms: int = 0
    idle_timeout_ms: int = 30_000
    late_events: Literal["run", "dead_letter"] = "run"
    connector_jar: str | None = None

    def __post_init__(self) -> None:
        if not self.bootstrap_servers:
            raise ConfigError("set --kafka_bootstrap_servers to read or write Kafka topics",
                              field="kafka_bootstrap_servers")
        if self.starting_offsets not in ("committed", "earliest", "latest"):
            raise ConfigError("--kafka_starting_offsets must be committed, earliest or latest, "
                              f"got {self.starting_offsets!r}", field="kafka_starting_offsets")
        if self.late_events not in ("run", "dead_letter"):
            raise ConfigError(f"--late_events must be run or dead_letter, got "
                              f"{self.late_events!r}", field="late_events")
        if not self.transactional_id_prefix:
            raise ConfigError("--kafka_transactional_id_prefix must not be empty",
                              field="kafka_transactional_id_prefix")
        require_int(self.transaction_timeout_ms, name="--kafka_transaction_timeout_ms",
                    low=1_000, field="kafka_transaction_timeout_ms", noun="")
        require_int(self.max_out_of_orderness_ms, name="--max_out_of_orderness_ms", low=0,
                    high=86_400_000, field="max_out_of_orderness_ms", noun="")
        require_int(self.idle_timeout_ms, name="--idle_timeout_ms", low=0,
                    field="idle_timeout_ms", noun="")
        for name in ("bootstrap.servers", "group.id", "transactional.id",
                     "isolation.level", "key.serializer", "value.serializer"):
            if name in self.properties:
                raise ConfigError(f"--kafka_property {name} is set by the job itself; use its "
                                  "own flag", field="kafka_property")


def kafka_jar() -> Path:
    """Where the Kafka toolchain (``make kafka-toolchain``) puts our record reader's jar."""
    return Path(str(resources.files("beam_agents.flink").joinpath(
        "_jars", "beam-agents-flink-kafka.jar")))


def kafka_lines(env: StreamExecutionEnvironment, options: KafkaJobOptions,
                charset: str) -> DataStream:
    """The input topic's records as ``(value as text in `charset`, traceparent header or "")``.

    Raises:
        ConfigError: the reader's jar was not built; names how to build it.
    """
    assert options.input_topic is not None
    jar = kafka_jar()
    if not jar.is_file():
        raise ConfigError(f"the Kafka job's record reader is missing ({jar}): build it with "
                          "`make kafka-toolchain` (javac, against the Kafka connector)",
                          field="input_kafka_topic")
    env.add_jars(jar.resolve().as_uri())
    reader: Any = get_gateway().jvm
    for part in _READER_CLASS.split("."):
        reader = getattr(reader, part)
    reset = {"committed": KafkaOffsetsInitializer.committed_offsets(_Reset.EARLIEST),
             "earliest": KafkaOffsetsInitializer.earliest(),
             "latest": KafkaOffsetsInitializer.latest()}[options.starting_offsets]
    builder = (KafkaSource.builder().set_bootstrap_servers(options.bootstrap_servers)
               .set_topics(options.input_topic).set_group_id(options.group_id)
               .set_starting_offsets(reset))
    builder._j_builder.setDeserializer(reader(charset))  # PyFlink wraps value-only readers only
    for name, value in {"commit.offsets.on.checkpoint": "true", **options.properties}.items():
        builder = builder.set_property(name, value)
    # No watermarks here: event time is in the JSON, read once it is decoded.
    return env.from_source(builder.build(), WatermarkStrategy.no_watermarks(),
                           "ReadKafka").uid(KAFKA_UIDS["source"])


class _EventTime(TimestampAssigner):
    """An event's timestamp is its ``event_time_ms`` (the decoder already parsed it)."""

    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return int(AgentEvent.FromString(bytes(value[1])).event_time_ms)


def event_time_watermarks(options: KafkaJobOptions) -> WatermarkStrategy:
    """Bounded out-of-orderness on ``event_time_ms``, with the idleness timeout."""
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(
        Duration.of_millis(options.max_out_of_orderness_ms))
    if options.idle_timeout_ms:
        strategy = strategy.with_idleness(Duration.of_millis(options.idle_timeout_ms))
    return strategy.with_timestamp_assigner(_EventTime())


def _intent_row(line: str) -> Row:
    """An intent line -> (entity key, the line, its traceparent as a header, if any).

    Keyed by entity, so one entity's intents share a partition.
    """
    doc = json.loads(line)
    entity = doc["entity_key"]
    parent = doc.get(TRACEPARENT)
    return Row(k=entity.encode() if isinstance(entity, str) else bytes(entity),
               v=line.encode(), headers={TRACEPARENT: parent.encode()} if parent else {})


def _error_row(line: str) -> Row:
    """A dead letter -> (entity key or null, the line, headers stage, event and traceparent)."""
    record: ErrorRecord = error_from_json(line)
    stage = ErrorRecord.Stage.Name(record.stage)
    headers = {"stage": stage.encode(), "event": bytes(record.event)}
    if record.traceparent:
        headers[TRACEPARENT] = record.traceparent.encode()
    return Row(k=record.entity_key or None, v=line.encode(), headers=headers)


def _sink(options: KafkaJobOptions, topic: str, part: str) -> TableDescriptor:
    from pyflink.table import DataTypes, Schema, TableDescriptor  # noqa: PLC0415

    schema = (Schema.new_builder().column("k", DataTypes.BYTES()).column("v", DataTypes.BYTES())
              .column_by_metadata("headers", DataTypes.MAP(DataTypes.STRING(),
                                                           DataTypes.BYTES())))
    descriptor = (TableDescriptor.for_connector("kafka").schema(schema.build())
                  .option("topic", topic)
                  .option("properties.bootstrap.servers", options.bootstrap_servers)
                  .option("key.format", "raw").option("key.fields", "k")
                  .option("value.format", "raw").option("value.fields-include", "EXCEPT_KEY")
                  .option("sink.delivery-guarantee", "exactly-once")
                  .option("sink.transactional-id-prefix",
                          f"{options.transactional_id_prefix}-{part}")
                  .option("sink.transaction-naming-strategy", "POOLING")
                  .option("properties.transaction.timeout.ms",
                          str(options.transaction_timeout_ms)))
    for name, value in options.properties.items():
        descriptor = descriptor.option(f"properties.{name}", value)
    return descriptor.build()


def sink_to_kafka(env: StreamExecutionEnvironment, options: KafkaJobOptions,
                  intents: DataStream | None, errors: DataStream | None) -> StatementSet | None:
    """Add the exactly-once Kafka sinks for the streams given; attached to `env`'s job."""
    if intents is None and errors is None:
        return None
    from pyflink.table import StreamTableEnvironment  # noqa: PLC0415

    tables = StreamTableEnvironment.create(env)
    statements = tables.create_statement_set()
    if intents is not None:
        assert options.output_topic is not None
        rows = intents.map(_intent_row, output_type=_INTENT_ROW).name("KeyIntents").uid(
            "key-intents")
        statements.add_insert(_sink(options, options.output_topic, "intents"),
                              tables.from_data_stream(rows))
    if errors is not None:
        assert options.errors_topic is not None
        rows = errors.map(_error_row, output_type=_ERROR_ROW).name("HeadErrors").uid(
            "head-errors")
        statements.add_insert(_sink(options, options.errors_topic, "errors"),
                              tables.from_data_stream(rows))
    statements.attach_as_datastream()
    return statements
