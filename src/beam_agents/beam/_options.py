"""AgentPipelineOptions: the pipeline's flags, and their one mapping onto AgentConfig.

Names are snake_case and mirrored one-to-one by ``flex_template.json``
parameters (a test checks both directions). Exactly one input (a Pub/Sub
subscription, a Kafka topic or files) is required; each output goes to a
Pub/Sub topic, a Kafka topic or a file path, written as one file or as
``--output_shards`` files. The Kafka flags are the native Flink job's
(``beam_agents.flink``), with the same names and meanings, so a user moves
between the two with one vocabulary.
"""

from __future__ import annotations

import argparse

from apache_beam.options.pipeline_options import PipelineOptions

from beam_agents._kafka_flags import DEFAULT_GROUP_ID, STARTING_OFFSETS, parse_properties
from beam_agents.beam._kafka import KafkaConfig
from beam_agents.beam._snapshot import SnapshotPlan, plan_snapshot
from beam_agents.errors import ConfigError
from beam_agents.hosting import EventOrdering, add_agent_flags, agent_config_from_flags
from beam_agents.runtime import AgentConfig

__all__ = ["AgentPipelineOptions", "agent_config_from_options", "check_io",
           "event_ordering_from_options", "kafka_config_from_options",
           "output_shards_from_options", "snapshot_plan_from_options", "unbounded_input"]

#: The inputs, in the order an error names them.
_INPUTS = ("input_subscription", "input_files", "input_kafka_topic")

#: The most files one output is cut into: past it, a file holds so little
#: that opening it costs more than reading it.
MAX_OUTPUT_SHARDS = 10_000

#: Input bytes per output shard when ``--output_shards`` is 0 (auto): a shard
#: of intents, sorted in one step, then stays well inside one worker's memory.
AUTO_SHARD_INPUT_BYTES = 256 << 20


class AgentPipelineOptions(PipelineOptions):
    """Flags of the agent pipeline; see ``beam-agents run --help``."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        io = parser.add_argument_group("inputs and outputs")
        io.add_argument("--input_subscription", help="Pub/Sub subscription to read events from "
                        "(projects/P/subscriptions/S); makes the pipeline streaming.")
        io.add_argument("--input_files", help="Glob of event files: JSONL, or TFRecord of "
                        "AgentEvent protos with --input_format=proto.")
        io.add_argument("--input_format", choices=("json", "proto"), default="json",
                        help="Encoding of input elements (default json).")
        io.add_argument("--output_topic", help="Pub/Sub topic for intents (projects/P/topics/T).")
        io.add_argument("--output_path", help="File for intents as JSON lines.")
        io.add_argument("--errors_topic", help="Pub/Sub dead-letter topic for error records.")
        io.add_argument("--errors_path", help="File for error records as JSON lines.")
        io.add_argument("--output_shards", type=int, default=0,
                        help="Files each of --output_path and --errors_path is cut into, "
                        f"0 to {MAX_OUTPUT_SHARDS}: 1 writes the path itself, N > 1 writes "
                        "PATH-SSSSS-of-NNNNN, a key's lines all in one of them. 0 (default): "
                        "one per 256 MiB of input files, so a small input is one file.")
        io.add_argument("--state_snapshot", metavar="URI", help="Where each key's keyed state "
                        "(working memory, replay cache, seq, budget, queue) carries from one "
                        "batch run to the next: a folder (a path or gs://...) or "
                        "firestore://COLLECTION (with --firestore_project). Read at the start, "
                        "written at the end, replaced atomically; a failed run keeps the last "
                        "good one. Unset: every key starts empty. Batch (--input_files) only.")
        io.add_argument("--input_timestamp_attribute", help="Pub/Sub attribute holding each "
                        "message's event time (ms since the epoch, or RFC 3339); the "
                        "watermark follows it. Unset: publish time.")
        _add_kafka_flags(parser.add_argument_group(
            "kafka (streaming; see docs/streaming.md, \"Beam on Kafka\")"))
        order = parser.add_argument_group("event order (streaming)")
        order.add_argument("--event_order", choices=("event_time", "arrival"),
                           default="event_time", help="event_time (default): each key's "
                           "events run in event-time order once the watermark has passed "
                           "them; arrival: as soon as the key is free, for the lowest latency. "
                           "Files always run in full event-time order.")
        order.add_argument("--max_out_of_orderness_ms", type=int, default=0,
                           help="Disorder the event-time order still corrects: an event waits "
                           "this long past the watermark (default 0: the source's watermark).")
        order.add_argument("--late_events", choices=("run", "dead_letter"), default="run",
                           help="An event behind what its key already ran: run it on arrival "
                           "and count it (default), or make it a LATE dead letter.")
        add_agent_flags(parser)


def _add_kafka_flags(kafka: argparse._ArgumentGroup) -> None:
    """The native Flink job's Kafka flags that mean the same here, and the expansion service."""
    kafka.add_argument("--input_kafka_topic", help="Kafka topic of events, in place of "
                       "--input_subscription or --input_files; makes the pipeline streaming.")
    kafka.add_argument("--output_kafka_topic", help="Kafka topic for intents, keyed by "
                       "entity key.")
    kafka.add_argument("--errors_kafka_topic", help="Kafka topic for dead letters, keyed by "
                       "entity key when the event named one.")
    kafka.add_argument("--kafka_bootstrap_servers", help="host:port,... of the Kafka cluster.")
    kafka.add_argument("--kafka_group_id", default=DEFAULT_GROUP_ID, help="Consumer group of "
                       "the input; it gets the offsets of each finalized checkpoint "
                       f"(default {DEFAULT_GROUP_ID}).")
    kafka.add_argument("--kafka_starting_offsets", choices=STARTING_OFFSETS,
                       default="committed", help="Where a group with no committed offsets "
                       "starts: committed (default) or earliest at the earliest record, "
                       "latest at the end. A group's committed offsets always come first.")
    kafka.add_argument("--kafka_property", action="append", default=None, metavar="KEY=VALUE",
                       help="A Kafka client property for the consumer and the producers, "
                       "e.g. security.protocol=SASL_SSL or sasl.jaas.config=...; repeat for "
                       "more.")
    kafka.add_argument("--kafka_expansion_service", metavar="HOST:PORT", help="The Java "
                       "expansion service of Beam's Kafka transforms. Unset: Beam's own, which "
                       "downloads beam-sdks-java-io-expansion-service and runs it with Java.")


def unbounded_input(options: AgentPipelineOptions) -> str | None:
    """The flag of the input that never ends (a subscription, a Kafka topic), or None."""
    for name in ("input_subscription", "input_kafka_topic"):
        if getattr(options, name):
            return name
    return None


def check_io(options: AgentPipelineOptions) -> None:
    """Exactly one input, at least one sink for each output, and Kafka flags that hold.

    Raises:
        ConfigError: naming the flag to set or to drop.
    """
    inputs = [name for name in _INPUTS if getattr(options, name)]
    if len(inputs) != 1:
        given = f"; got {' and '.join(f'--{name}' for name in inputs)}" if inputs else ""
        raise ConfigError("set exactly one of --input_subscription, --input_kafka_topic or "
                          f"--input_files{given}", field=inputs[-1] if inputs else _INPUTS[0])
    stream = unbounded_input(options)
    if options.input_timestamp_attribute and not options.input_subscription:
        raise ConfigError("--input_timestamp_attribute needs --input_subscription; events "
                          "from files carry event_time_ms, and Kafka records their timestamp",
                          field="input_timestamp_attribute")
    for output in ("output", "errors"):
        sinks = [f"{output}_topic", f"{output}_kafka_topic", f"{output}_path"]
        if not any(getattr(options, name) for name in sinks):
            raise ConfigError(f"set --{sinks[0]}, --{sinks[1]} or --{sinks[2]} so nothing is "
                              "dropped", field=sinks[0])
        if stream and getattr(options, f"{output}_path"):
            # A file sink needs a bounded input; streaming output goes to topics.
            raise ConfigError(f"--{output}_path needs --input_files; with --{stream} write to "
                              f"--{output}_topic or --{output}_kafka_topic",
                              field=f"{output}_path")
    if options.state_snapshot is not None and (stream
                                                or not str(options.state_snapshot).strip()):
        raise ConfigError("--state_snapshot needs --input_files and a folder or "
                          "firestore://COLLECTION: a streaming job keeps its keyed state in the "
                          "runner (update or drain it; docs/operations.md)",
                          field="state_snapshot")
    kafka_config_from_options(options)
    _check_output_shards(options.output_shards)


def kafka_config_from_options(options: PipelineOptions) -> KafkaConfig | None:
    """The Kafka flags -> `KafkaConfig`; None when no Kafka topic is named.

    Raises:
        ConfigError: a Kafka topic without ``--kafka_bootstrap_servers``, a
            bad ``--kafka_property`` or expansion service address; names the flag.
    """
    opts = options.view_as(AgentPipelineOptions)
    topics = [name for name in ("input_kafka_topic", "output_kafka_topic", "errors_kafka_topic")
              if getattr(opts, name)]
    if not topics:
        return None
    if not (opts.kafka_bootstrap_servers or "").strip():
        raise ConfigError(f"--{topics[0]} needs --kafka_bootstrap_servers (host:port,... of "
                          "the Kafka cluster)", field="kafka_bootstrap_servers")
    return KafkaConfig(bootstrap_servers=opts.kafka_bootstrap_servers,
                       group_id=opts.kafka_group_id, starting_offsets=opts.kafka_starting_offsets,
                       properties=parse_properties(opts.kafka_property or []),
                       expansion_service=opts.kafka_expansion_service)


def _check_output_shards(shards: object) -> int:
    if not isinstance(shards, int) or not 0 <= shards <= MAX_OUTPUT_SHARDS:
        raise ConfigError(f"--output_shards must be 0 (auto) to {MAX_OUTPUT_SHARDS}, got "
                          f"{shards!r}", field="output_shards")
    return shards


def output_shards_from_options(options: PipelineOptions) -> int:
    """How many files each file output is cut into; ``--output_shards 0`` resolves here.

    Auto is decided once, when the pipeline is built, from the input files'
    total size, so every worker cuts by the same count and the file set is a
    function of the input alone (invariant 10), never of the runner's bundles.

    Raises:
        ConfigError: the flag is out of range; names it.
    """
    opts = options.view_as(AgentPipelineOptions)
    shards = _check_output_shards(opts.output_shards)
    if shards or not opts.input_files:
        return shards or 1
    from apache_beam.io.filesystems import FileSystems  # noqa: PLC0415 - matches gs:// too

    # No match sizes as zero, one file: the read then fails, naming the glob.
    (found,) = FileSystems.match([opts.input_files])
    total_bytes = sum(int(item.size_in_bytes) for item in found.metadata_list)
    return min(MAX_OUTPUT_SHARDS, max(1, -(-total_bytes // AUTO_SHARD_INPUT_BYTES)))


def snapshot_plan_from_options(options: PipelineOptions) -> SnapshotPlan | None:
    """``--state_snapshot``: its store, the generation it holds now, and the one this run writes.

    Reads the manifest (a small file or document) when the pipeline is
    built; the parts are read by the workers.

    Raises:
        ConfigError: the URI is unusable; names the flag.
        StateCorruptError: the manifest is not one this version reads.
        SnapshotUnavailable: its store failed.
    """
    opts = options.view_as(AgentPipelineOptions)
    if not opts.state_snapshot:
        return None
    values = opts.get_all_options()
    return plan_snapshot(opts.state_snapshot, project=values.get("firestore_project"),
                         database=values.get("firestore_database"))


def event_ordering_from_options(options: PipelineOptions) -> EventOrdering:
    """The streaming host's event order from the flags (see `EventOrdering`).

    Raises:
        ConfigError: a value is out of range; names the flag.
    """
    opts = options.view_as(AgentPipelineOptions)
    return EventOrdering(mode=opts.event_order,
                         max_out_of_orderness_ms=opts.max_out_of_orderness_ms,
                         late_events=opts.late_events)


def _read_text(path: str) -> str:
    from apache_beam.io.filesystems import FileSystems  # noqa: PLC0415 - reads gs:// too

    with FileSystems.open(path) as handle:
        return handle.read().decode("utf-8")


def agent_config_from_options(options: PipelineOptions) -> AgentConfig:
    """Map the pipeline's flags onto AgentConfig (see `agent_config_from_flags`).

    Raises:
        ConfigError: a value is missing, unknown or out of range; names the field.
    """
    return agent_config_from_flags(options.view_as(AgentPipelineOptions).get_all_options(),
                                   read_text=_read_text)
