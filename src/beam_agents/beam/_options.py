"""AgentPipelineOptions: the pipeline's flags, and their one mapping onto AgentConfig.

Names are snake_case and mirrored one-to-one by ``flex_template.json``
parameters (a test checks both directions). Exactly one input (a Pub/Sub
subscription or files) is required; each output goes to a Pub/Sub topic or
to a file path, written as one file or as ``--output_shards`` files.
"""

from __future__ import annotations

import argparse

from apache_beam.options.pipeline_options import PipelineOptions

from beam_agents.beam._snapshot import SnapshotPlan, plan_snapshot
from beam_agents.errors import ConfigError
from beam_agents.hosting import EventOrdering, add_agent_flags, agent_config_from_flags
from beam_agents.runtime import AgentConfig

__all__ = ["AgentPipelineOptions", "agent_config_from_options", "check_io",
           "event_ordering_from_options", "output_shards_from_options",
           "snapshot_plan_from_options"]

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


def check_io(options: AgentPipelineOptions) -> None:
    """Exactly one input, and at least one sink for each output.

    Raises:
        ConfigError: naming the flag to set.
    """
    inputs = [name for name in ("input_subscription", "input_files") if getattr(options, name)]
    if len(inputs) != 1:
        raise ConfigError("set exactly one of --input_subscription or --input_files",
                          field="input_subscription")
    for output in ("output", "errors"):
        if not (getattr(options, f"{output}_topic") or getattr(options, f"{output}_path")):
            raise ConfigError(f"set --{output}_topic or --{output}_path so nothing is dropped",
                              field=f"{output}_topic")
        if options.input_timestamp_attribute and not options.input_subscription:
            raise ConfigError("--input_timestamp_attribute needs --input_subscription; events "
                              "from files carry event_time_ms", field="input_timestamp_attribute")
        if options.input_subscription and getattr(options, f"{output}_path"):
            # A file sink needs a bounded input; streaming output goes to Pub/Sub.
            raise ConfigError(f"--{output}_path needs --input_files; with --input_subscription "
                              f"write to --{output}_topic", field=f"{output}_path")
    if options.state_snapshot is not None and (options.input_subscription
                                                or not str(options.state_snapshot).strip()):
        raise ConfigError("--state_snapshot needs --input_files and a folder or "
                          "firestore://COLLECTION: a streaming job keeps its keyed state in the "
                          "runner (update or drain it; docs/operations.md)",
                          field="state_snapshot")
    _check_output_shards(options.output_shards)


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
