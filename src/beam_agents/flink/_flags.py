"""The native Flink job's command line: flags -> `FlinkJobOptions` and `AgentConfig`, and `run`.

Every default is written once, on the options dataclasses (`FlinkJobOptions`,
`KafkaJobOptions`); the flags and their help text read it from there. Flags
that fail validation raise `ConfigError` naming the flag, before anything
reaches a cluster.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any, get_args

from beam_agents.errors import BeamAgentsError, ConfigError
from beam_agents.flink._function import ExecutionMode
from beam_agents.flink._job import (
    AUTO_BUNDLE_SIZE,
    AUTO_BUNDLE_TIME_MS,
    FlinkJobOptions,
    build_job,
    check_against_agent,
    environment,
    plan_job_snapshot,
)
from beam_agents.flink._kafka import KafkaJobOptions, StartingOffsets, parse_properties
from beam_agents.flink._snapshot import commit_job_snapshot
from beam_agents.flink._summary import detached, execute_with_summary
from beam_agents.hosting import add_agent_flags, agent_config_from_flags, load_agent, state_line
from beam_agents.runtime import AgentConfig

__all__ = ["expand_input_files", "job_parser", "main", "parse_args", "run"]

#: What makes an ``--input_files`` value a glob (Beam's and fnmatch's metacharacters).
_GLOB_CHARS = frozenset("*?[")

#: Each option's default, read from `FlinkJobOptions`: the flags and their help
#: text take it from there, so a default is written once.
_DEFAULTS: dict[str, Any] = {field.name: field.default for field in fields(FlinkJobOptions)
                             if field.default is not MISSING}

#: Each Kafka flag, by the `KafkaJobOptions` field it sets.
KAFKA_FLAGS = {
    "bootstrap_servers": "kafka_bootstrap_servers", "input_topic": "input_kafka_topic",
    "output_topic": "output_kafka_topic", "errors_topic": "errors_kafka_topic",
    "group_id": "kafka_group_id", "starting_offsets": "kafka_starting_offsets",
    "properties": "kafka_property", "transactional_id_prefix": "kafka_transactional_id_prefix",
    "transaction_timeout_ms": "kafka_transaction_timeout_ms",
    "max_out_of_orderness_ms": "max_out_of_orderness_ms", "idle_timeout_ms": "idle_timeout_ms",
    "late_events": "late_events", "connector_jar": "kafka_connector_jar",
}
_KAFKA_DEFAULTS: dict[str, Any] = {
    KAFKA_FLAGS[field.name]: field.default for field in fields(KafkaJobOptions)
    if field.default is not MISSING}

#: The event orders the job runs, and what each means; `_DEFAULTS` marks the default.
_EVENT_ORDERS = {
    "event_time": "each key's events run in event-time order over the whole input, so any "
                  "line order gives the same intents",
    "arrival": "as they arrive, for the lowest latency",
}


def _shown(name: str) -> str:
    """How the help text shows an option's default: on or off for a switch, else the value."""
    value = _DEFAULTS[name]
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _add(group: Any, name: str, text: str, **kwargs: Any) -> None:
    """Declare ``--name`` with the `FlinkJobOptions` default; ``{default}`` in `text` shows it."""
    group.add_argument(f"--{name}", default=_DEFAULTS[name],
                       help=text.format(default=_shown(name)), **kwargs)


def job_parser() -> argparse.ArgumentParser:
    """The job's flags: files or topics, Flink's recovery settings, and the shared agent flags."""
    parser = argparse.ArgumentParser(prog="agent_job.py", description=__doc__.splitlines()[0])
    io = parser.add_argument_group("inputs and outputs")
    io.add_argument("--input_files", action="append", default=[],
                    help="A glob of JSONL files, as beam-agents run reads it (matched "
                    "with Beam's file systems: * within a folder, ** across folders, gs:// "
                    "too; a glob that matches nothing is an error), or a folder, read "
                    "whole; repeat for more.")
    io.add_argument("--output_path", help="Directory for intents (JSONL part files).")
    io.add_argument("--errors_path", help="Directory for error records (JSONL part files).")
    io.add_argument("--state_snapshot", metavar="URI", help="Where each key's keyed state "
                    "(working memory, replay cache, seq, budget, pending waits, queue) is read "
                    "at the start and written at the end of a run over --input_files: a "
                    "folder, or firestore://COLLECTION with --firestore_project. The same "
                    "snapshot beam-agents run reads and writes (docs/operations.md, \"State "
                    "between batch runs\").")
    flink = parser.add_argument_group("flink")
    switch = argparse.BooleanOptionalAction
    _add(flink, "checkpointing_interval_ms", "Checkpoint period in ms; 0 disables "
         "(default {default}).", type=int)
    _add(flink, "unaligned_checkpoints", "Let checkpoint barriers overtake buffered events, "
         "so checkpoints complete under backpressure (default {default}).", action=switch)
    _add(flink, "checkpoint_dir", "Durable checkpoint storage URI.")
    _add(flink, "restart_attempts", "Fixed-delay restart attempts (default {default}).",
         type=int)
    _add(flink, "restart_delay_ms", "Delay between restarts in ms (default {default}).",
         type=int)
    _add(flink, "bundle_size", "Elements per Python bundle (default: "
         f"{AUTO_BUNDLE_SIZE['event_time']} in event_time order, where elements only queue "
         f"and each bundle end writes the state it touched; {AUTO_BUNDLE_SIZE['arrival']} "
         "in arrival order, where checkpoints wait for the bundle in flight).", type=int)
    _add(flink, "bundle_time_ms", "Longest a Python bundle stays open, in ms, and so the "
         f"longest a key waits between two activations (default: "
         f"{AUTO_BUNDLE_TIME_MS['event_time']} in event_time order; "
         f"{AUTO_BUNDLE_TIME_MS['arrival']} in arrival order and on a topic).", type=int)
    _add(flink, "hold_input_at", "In arrival order, the events a key may hold queued, its "
         "running one included, before its next arrival holds the input (default {default}). "
         "Holding blocks the task: no other key's activation ends or starts until the key "
         "has room, so lower bounds keyed state at the cost of throughput under bursts; at "
         "most --max_queued_per_key.", type=int)
    _add(flink, "python_managed_memory", "Share one Python worker per slot from managed "
         "memory (default {default}: PyFlink 2.3 can fail the task manager when a failover "
         "cancels the tasks sharing it).", action=switch)
    orders = "; ".join(f"{order}{' (default)' if order == _DEFAULTS['event_order'] else ''}: "
                       f"{meaning}" for order, meaning in _EVENT_ORDERS.items())
    _add(flink, "event_order", f"{orders}.", choices=tuple(_EVENT_ORDERS))
    _add(flink, "parallelism", "Operator parallelism.", type=int)
    _add(flink, "max_parallelism", "Key groups of keyed state: the highest parallelism the "
         "job, or a savepoint of it, can be rescaled to. A savepoint restores only with the "
         "value it was taken with (default {default}, what Flink gives a job first started at "
         "parallelism 85 or less; left to Flink, it would follow the first parallelism and "
         "cap every later rescale; at most 32768).", type=int)
    _add(flink, "python_executable", "Python for the workers (default: Flink's "
         "python.executable, or flink run -pyexec).")
    _add(flink, "python_execution_mode", "Where the Python functions run: process, in "
         "worker processes (default {default}), or thread, embedded in the task manager's "
         "JVM at about half the CPU; thread needs this interpreter's packages at the same "
         "paths on every task manager, and a savepoint restores only into its own mode.",
         choices=get_args(ExecutionMode))
    _add(flink, "job_name", "Name in the Flink UI.")
    flink.add_argument("--flink_conf", action="append", default=[], metavar="KEY=VALUE",
                       help="More Flink configuration, set last (e.g. a metrics reporter for "
                       "a local run, whose MiniCluster reads no config.yaml); repeat for more.")
    _add_kafka_flags(parser.add_argument_group(
        "kafka (streaming; see docs/streaming.md, \"Streaming on Flink\")"))
    add_agent_flags(parser)
    return parser


def _add_kafka_flags(kafka: Any) -> None:
    """Kafka topics in place of files, the clients' properties, and event time on the stream."""
    def add(name: str, text: str, **kwargs: Any) -> None:
        default = _KAFKA_DEFAULTS.get(name)
        kafka.add_argument(f"--{name}", default=default,
                           help=text.format(default=default), **kwargs)

    add("kafka_bootstrap_servers", "host:port,... of the Kafka cluster.")
    add("input_kafka_topic", "Topic of JSON events, in place of --input_files; the job then "
        "streams until stopped.")
    add("output_kafka_topic", "Topic for intents (keyed by entity key), in place of "
        "--output_path; written in Kafka transactions committed on checkpoints.")
    add("errors_kafka_topic", "Topic for dead letters (headers stage and event), in place of "
        "--errors_path; transactional too.")
    add("kafka_group_id", "Consumer group of the source (default {default}).")
    add("kafka_starting_offsets", "Where a job without a checkpoint starts: committed (the "
        "group's offsets, else the earliest; default), earliest or latest.",
        choices=get_args(StartingOffsets))
    kafka.add_argument("--kafka_property", action="append", default=[], metavar="KEY=VALUE",
                       help="A Kafka client property for the source and the sinks, e.g. "
                       "security.protocol=SASL_SSL or sasl.jaas.config=...; repeat for more.")
    add("kafka_transactional_id_prefix", "Prefix of the sinks' transactional ids, unique per "
        "job on the cluster (default {default}).")
    add("kafka_transaction_timeout_ms", "The sinks' transaction.timeout.ms: at most the "
        "broker's transaction.max.timeout.ms, and well over a checkpoint plus a restart "
        "(default {default}).", type=int)
    add("max_out_of_orderness_ms", "Disorder in event time the watermark waits for "
        "(default {default}).", type=int)
    add("idle_timeout_ms", "A source subtask with no record for this long stops holding "
        "the watermark back; 0 never (default {default}).", type=int)
    add("late_events", "An event behind the watermark: run it and count it (run, default) "
        "or make it a LATE dead letter (dead_letter).", choices=("run", "dead_letter"))
    add("kafka_connector_jar", "The flink-sql-connector-kafka jar to ship with the job "
        "(default: the cluster's lib/ has it).")


def _kafka_options(values: dict[str, Any]) -> KafkaJobOptions | None:
    """The Kafka flags -> `KafkaJobOptions`; None when no Kafka flag is set."""
    given = {name: values[flag] for name, flag in KAFKA_FLAGS.items()}
    topics = (given["input_topic"], given["output_topic"], given["errors_topic"])
    if not any(topics) and not given["bootstrap_servers"]:
        return None
    given["properties"] = parse_properties(given["properties"])
    return KafkaJobOptions(**{**given, "bootstrap_servers": given["bootstrap_servers"] or ""})


def parse_args(argv: Sequence[str] | None = None) -> tuple[FlinkJobOptions, AgentConfig]:
    """The job's flags -> options and agent config; the one mapping for the Flink entry.

    Raises:
        ConfigError: a value is missing, unknown or out of range; names the flag.
    """
    values = vars(job_parser().parse_args(argv))
    given: dict[str, Any] = {field.name: values[field.name] for field in fields(FlinkJobOptions)
                             if field.name not in ("kafka", "flink_conf")}
    given["input_files"] = expand_input_files(given["input_files"])
    options = FlinkJobOptions(**given, kafka=_kafka_options(values),
                              flink_conf=parse_properties(values["flink_conf"], "flink_conf"))
    config = agent_config_from_flags(values)
    check_against_agent(options, config)
    load_agent(config.agent)  # fail here, not in a restart loop on the cluster
    return options, config


def expand_input_files(values: Sequence[str]) -> tuple[str, ...]:
    """``--input_files`` values -> the files and folders the source reads.

    A glob means what it means to ``beam-agents run``: it is matched by Beam's
    file systems (so ``gs://`` globs too), in name order, and one that matches
    nothing is an error, as it is there. A value without glob characters is
    handed to Flink as it is: a file, or a folder read whole, on any file
    system Flink has.

    Raises:
        ConfigError: a glob matches nothing; names it.
    """
    found: list[str] = []
    for value in values:
        if not _GLOB_CHARS & set(value):
            found.append(value)
            continue
        from apache_beam.io.filesystems import FileSystems  # noqa: PLC0415 - globs only

        (matched,) = FileSystems.match([value])
        paths = sorted(str(item.path) for item in matched.metadata_list)
        if not paths:
            raise ConfigError(f"--input_files {value!r} matches no file", field="input_files")
        found.extend(paths)
    return tuple(found)


def run(argv: Sequence[str] | None = None, *, summary: bool = False) -> Any:
    """Parse flags, build the job and execute it; returns Flink's JobExecutionResult.

    The working directory comes first on ``sys.path``, as for ``beam-agents
    run`` and ``python -m``, so an agent module beside the user is found; when
    it is found there, it is shipped with the job (``python.files``), since
    the Python workers, on this machine or a cluster, start elsewhere. With
    `summary`, a bounded run ends with the summary ``beam-agents run``
    prints (`beam_agents.flink._summary`).
    """
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    options, config = parse_args(argv)
    env = environment(options)
    shipped = agent_source(config.agent, Path.cwd())
    if shipped is not None:
        env.add_python_file(str(shipped))
    snapshot = plan_job_snapshot(options)
    if snapshot is not None:
        print(state_line(snapshot), file=sys.stderr)
    build_job(env, options, config, snapshot=snapshot)
    if not summary or (options.kafka is not None and options.kafka.input_topic is not None):
        result = env.execute(options.job_name)
    else:
        result = execute_with_summary(env, options, config)
    if snapshot is not None:
        if detached(result):
            print(f"state snapshot: not committed, as the job was submitted detached; "
                  f"{snapshot.where} still holds the generation it read", file=sys.stderr)
        else:
            manifest = commit_job_snapshot(snapshot)
            print(f"state snapshot: {manifest.keys} key(s) written to {snapshot.where}, "
                  f"generation {manifest.generation}", file=sys.stderr)
    return result


def agent_source(reference: str | Callable[..., Any], cwd: Path) -> Path | None:
    """The file or package in `cwd` the agent's module was imported from; None if elsewhere.

    Call after the agent was loaded (`parse_args` loads it). A callable agent
    names its module itself.
    """
    name = reference if isinstance(reference, str) else getattr(reference, "__module__", "")
    top = str(name).partition(":")[0].split(".")[0]
    module = sys.modules.get(top)
    where = getattr(module, "__file__", None)
    if where is None:
        return None
    source = Path(where).resolve()
    if source.name == "__init__.py":
        source = source.parent
    return source if source.parent == cwd.resolve() else None


def main(argv: Sequence[str] | None = None) -> int:
    """The job's entry point: `run` with its summary; returns the exit status.

    A configuration error (a bad flag, an agent module that does not import)
    is one line on stderr and status 2, before anything reaches a cluster.
    """
    try:
        run(argv, summary=True)
    except BeamAgentsError as exc:
        lines = [line for line in str(exc).splitlines() if line.strip()]
        print(f"agent_job.py: {type(exc).__name__}: {lines[0] if lines else ''}",
              file=sys.stderr)
        return 2
    return 0
