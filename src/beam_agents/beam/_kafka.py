"""Kafka at the pipeline's edges: Beam's Kafka transforms (KafkaIO, Java) from Python.

``ReadFromKafka`` and ``WriteToKafka`` are Beam's cross-language transforms:
a Java expansion service (``--kafka_expansion_service``) expands them when
the pipeline is built, and the runner runs them in a Java environment. On
the FlinkRunner that is the job server itself (the EMBEDDED environment), so
the job server and the expansion service both need KafkaIO on their
classpath; docs/streaming.md ("Beam on Kafka") says how, and `make kafkaio`
fetches it.

**In.** A record's value is one event, decoded as files and Pub/Sub messages
are (`DecodeEvents`): a value that is not UTF-8, not JSON or over
``--max_event_bytes`` is a DECODE dead letter (invariant 8). A record's
``traceparent`` header is the event's trace context, as a Pub/Sub attribute
of that name is. Element timestamps, and so the watermark, are the records'
own (KafkaIO's ``CreateTime``): a producer that stamps each record with its
event's time gives event-time watermarks, one that does not gives its send
times, as Pub/Sub's publish times do. The consumer group (``group.id``)
gets the offsets of each finalized checkpoint; a new job starts from them.

**Out.** Intents are keyed by entity key, so one entity's intents share a
partition and keep their order; a dead letter is keyed by its entity when it
has one (a record that never decoded has none). Beam's Python ``WriteToKafka``
writes values and keys only: no headers (the native Flink job's dead letters
carry ``stage`` and ``event`` headers; here both are in the JSON body), and
no Kafka transactions, so a restored job can write a line it wrote before
the failure again (at least once; a consumer deduplicates by ``entity_key``
and ``seq``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import apache_beam as beam

from beam_agents._kafka_flags import DEFAULT_GROUP_ID, STARTING_OFFSETS, StartingOffsets
from beam_agents.errors import ConfigError
from beam_agents.tracing import TRACEPARENT

__all__ = ["KafkaConfig", "ReadKafka", "TracedValue", "WriteKafka", "record_key"]

_LOG = logging.getLogger(__name__)

#: Client properties the pipeline sets itself, and the flag that sets each (None: no flag).
_OWN_PROPERTIES: dict[str, str | None] = {
    "bootstrap.servers": "kafka_bootstrap_servers", "group.id": "kafka_group_id",
    "auto.offset.reset": "kafka_starting_offsets",
    # KafkaIO commits the offsets of finalized checkpoints; auto-commit would commit
    # offsets of records that no checkpoint holds yet.
    "enable.auto.commit": None,
    "key.deserializer": None, "value.deserializer": None,
    "key.serializer": None, "value.serializer": None,
}

#: The part of a KafkaIO read's expansion that marks it a splittable DoFn.
_SDF_READ = "ReadFromKafkaViaSDF"


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaConfig:
    """Where the pipeline's Kafka topics live and how its clients reach them.

    Attributes:
        bootstrap_servers: ``host:port,...`` of the cluster.
        group_id: The input's consumer group; offsets are committed to it as
            the runner finalizes checkpoints.
        starting_offsets: Where a group with no committed offsets starts:
            ``committed`` and ``earliest`` at the earliest record, ``latest``
            at the end. KafkaIO resumes a group from its committed offsets
            whenever it has them (the native Flink job's ``earliest`` and
            ``latest`` ignore them; a new group id does that here).
        properties: Client properties for the consumer and the producers
            alike (``security.protocol``, ``sasl.*``, ``ssl.*``, ...).
        expansion_service: ``host:port`` of the Java expansion service that
            expands Beam's Kafka transforms; None uses Beam's default, which
            downloads Beam's IO expansion jar and runs it with Java.
    """

    bootstrap_servers: str
    group_id: str = DEFAULT_GROUP_ID
    starting_offsets: StartingOffsets = "committed"
    properties: Mapping[str, str] = field(default_factory=dict)
    expansion_service: str | None = None

    def __post_init__(self) -> None:
        if not self.bootstrap_servers.strip():
            raise ConfigError("set --kafka_bootstrap_servers to read or write Kafka topics",
                              field="kafka_bootstrap_servers")
        if not self.group_id.strip():
            raise ConfigError("--kafka_group_id must not be empty", field="kafka_group_id")
        if self.starting_offsets not in STARTING_OFFSETS:
            raise ConfigError(f"--kafka_starting_offsets must be one of "
                              f"{', '.join(STARTING_OFFSETS)}, got {self.starting_offsets!r}",
                              field="kafka_starting_offsets")
        for name, flag in _OWN_PROPERTIES.items():
            if name in self.properties:
                fix = f"use --{flag}" if flag else "the pipeline needs its own value"
                raise ConfigError(f"--kafka_property {name} is set by the pipeline itself; "
                                  f"{fix}", field="kafka_property")
        if self.expansion_service is not None:
            _check_address(self.expansion_service)

    def consumer_config(self) -> dict[str, str]:
        """The input's consumer properties: the cluster, the group, and the user's own."""
        reset = "latest" if self.starting_offsets == "latest" else "earliest"
        return {**self.properties, "bootstrap.servers": self.bootstrap_servers,
                "group.id": self.group_id, "auto.offset.reset": reset}

    def producer_config(self) -> dict[str, str]:
        """The outputs' producer properties: the cluster and the user's own."""
        return {**self.properties, "bootstrap.servers": self.bootstrap_servers}


def _check_address(address: str) -> None:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--kafka_expansion_service takes HOST:PORT of a running expansion "
                          f"service, got {address!r}", field="kafka_expansion_service")


class TracedValue(NamedTuple):
    """A record's value and the ``traceparent`` header its producer sent, if any."""

    data: bytes
    traceparent: bytes | None


class ReadKafka(beam.PTransform):  # type: ignore[type-arg]
    """A topic -> its records' values as `TracedValue`, timestamped by the records."""

    def __init__(self, topic: str, config: KafkaConfig) -> None:
        super().__init__()
        self._topic = topic
        self._config = config

    def expand(self, pbegin: Any) -> Any:
        """Read with metadata (for the headers), then keep the value and the trace context."""
        from apache_beam.io.kafka import ReadFromKafka  # noqa: PLC0415 - built with the pipeline

        read = ReadFromKafka(consumer_config=self._config.consumer_config(),
                             topics=[self._topic], with_metadata=True,
                             commit_offset_in_finalize=True,
                             timestamp_policy=ReadFromKafka.create_time_policy,
                             expansion_service=self._config.expansion_service)
        records = pbegin | "ReadFromKafka" >> read
        _warn_if_splittable(read, self._config.expansion_service)
        return records | "Values" >> beam.Map(_traced_value)


def _traced_value(record: Any) -> TracedValue:
    parent = next((bytes(header.value) for header in record.headers or ()
                   if header.key == TRACEPARENT and header.value), None)
    return TracedValue(bytes(record.value or b""), parent)


def _warn_if_splittable(read: Any, address: str | None) -> None:
    """Say so when KafkaIO's read expanded as a splittable DoFn.

    Beam 2.62's FlinkRunner ran that form for minutes, checkpointing, and
    emitted no record; the unbounded-source form (the expansion service's
    ``--experiments=use_deprecated_read``) reads at once. The job would run
    and do nothing, so it is said before it starts. The expansion is Java's,
    so all Python can do is look at its transforms' names.
    """
    with contextlib.suppress(AttributeError):
        names = [item.unique_name for item in read._expanded_components.transforms.values()]
        if any(_SDF_READ in name for name in names):
            _LOG.warning("the Kafka expansion service%s expanded the read as a splittable "
                         "DoFn, which Beam 2.62's FlinkRunner ran without emitting a record; "
                         "start the service with --experiments=use_deprecated_read "
                         "(docs/streaming.md, \"Beam on Kafka\")",
                         f" at {address}" if address else "")


def record_key(line: bytes) -> bytes | None:
    """The Kafka key of an output line: its entity key's bytes, or None without one.

    Intents and error records name the key as ``entity_key``, or
    ``entity_key_b64`` when it is not UTF-8 (as `shard_of` reads them).
    """
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        doc = json.loads(line)
        if doc.get("entity_key"):
            return str(doc["entity_key"]).encode()
        if doc.get("entity_key_b64"):
            return base64.b64decode(doc["entity_key_b64"], validate=True)
    return None


class WriteKafka(beam.PTransform):  # type: ignore[type-arg]
    """Output lines -> records of `topic`, each keyed by `record_key`."""

    def __init__(self, topic: str, config: KafkaConfig) -> None:
        super().__init__()
        self._topic = topic
        self._config = config

    def expand(self, lines: Any) -> Any:
        """Key each line, then hand the pairs to KafkaIO's writer."""
        from apache_beam.io.kafka import WriteToKafka  # noqa: PLC0415 - built with the pipeline

        # A nullable key coder, so a line without an entity is a record with a null key.
        keyed = beam.typehints.Tuple[beam.typehints.Optional[bytes], bytes]
        return (lines
                | "Key" >> beam.Map(lambda line: (record_key(line), line)).with_output_types(keyed)
                | "WriteToKafka" >> WriteToKafka(
                    producer_config=self._config.producer_config(), topic=self._topic,
                    expansion_service=self._config.expansion_service))
