"""The native Flink job's flags: parsed once, validated with errors that name the flag."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import pytest

from beam_agents.errors import ConfigError
from beam_agents.flink import (
    FlinkJobOptions,
    FlinkMetrics,
    expand_input_files,
    flink_settings,
    job_parser,
    parse_args,
)
from beam_agents.flink._job import AUTO_BUNDLE_SIZE, AUTO_BUNDLE_TIME_MS

IO = ["--input_files", "a.jsonl", "--input_files", "dir/", "--output_path", "out/intents",
      "--errors_path", "out/errors"]


def test_flags_map_onto_job_options_and_the_shared_agent_config() -> None:
    options, config = parse_args([*IO, "--agent", "tests.agents:counter",
                                  "--checkpointing_interval_ms", "500", "--parallelism", "3",
                                  "--no-unaligned_checkpoints", "--bundle_size", "4",
                                  "--python_managed_memory",
                                  "--longterm_store", "sqlite", "--sqlite_path", "x.db"])
    assert options == FlinkJobOptions(
        input_files=("a.jsonl", "dir/"), output_path="out/intents", errors_path="out/errors",
        checkpointing_interval_ms=500, parallelism=3, unaligned_checkpoints=False,
        bundle_size=4, python_managed_memory=True)
    assert config.agent == "tests.agents:counter"
    assert config.longterm_memory is not None


def test_every_flag_default_and_its_help_come_from_the_options_dataclass() -> None:
    """A default is written once, on `FlinkJobOptions`: the flags and their help read it."""
    parser = job_parser()
    defaults = {f.name: f.default for f in dataclasses.fields(FlinkJobOptions)
                if f.default is not dataclasses.MISSING}
    assert {name: parser.get_default(name) for name in defaults} == defaults
    helps = {action.dest: action.help or "" for action in parser._actions}
    for name in ("checkpointing_interval_ms", "restart_attempts", "restart_delay_ms"):
        assert f"(default {defaults[name]})" in helps[name], name
    assert all(f"{size} in {order} order" in helps["bundle_size"]
               for order, size in AUTO_BUNDLE_SIZE.items())
    assert all(f"{ms} in {order} order" in helps["bundle_time_ms"]
               for order, ms in AUTO_BUNDLE_TIME_MS.items())
    assert "(default 128, " in helps["max_parallelism"]
    assert "(default on)" in helps["unaligned_checkpoints"]
    assert "(default off" in helps["python_managed_memory"]
    assert helps["event_order"].startswith("event_time (default): ")
    assert "(default process)" in helps["python_execution_mode"]


def test_python_workers_are_not_shared_through_managed_memory_by_default() -> None:
    """A failover must not be able to take the task manager down (see FlinkJobOptions)."""
    options, _ = parse_args([*IO, "--agent", "tests.agents:counter"])
    assert options.python_managed_memory is False
    assert flink_settings(options)["python.fn-execution.memory.managed"] == "false"


@pytest.mark.parametrize(("flag", "value"), [
    ("--parallelism", "0"), ("--restart_attempts", "-1"), ("--bundle_size", "0"),
    ("--checkpointing_interval_ms", "-5"), ("--max_parallelism", "0"), ("--bundle_time_ms", "0"),
    ("--max_parallelism", "32769"), ("--hold_input_at", "0")])
def test_out_of_range_values_name_the_flag(flag: str, value: str) -> None:
    with pytest.raises(ConfigError, match=flag) as raised:
        parse_args([*IO, "--agent", "tests.agents:counter", flag, value])
    assert raised.value.field == flag.removeprefix("--")


def test_a_key_holds_the_input_at_32_queued_events_unless_told() -> None:
    """The hold bound is a flag, 32 by default; above the queue cap it would never hold."""
    options, _ = parse_args([*IO, "--agent", "tests.agents:counter"])
    assert options.hold_input_at == 32
    too_high = [*IO, "--agent", "tests.agents:counter", "--event_order", "arrival",
                "--hold_input_at", "50", "--max_queued_per_key", "40"]
    # Through the flags, as build_job also checks. (Not build_job here: a Flink
    # environment in this process replaces Beam's ParDo for the Beam runs after it.)
    with pytest.raises(ConfigError, match="--hold_input_at must be <= --max_queued_per_key "
                                          r"\(40\)") as raised:
        parse_args(too_high)
    assert raised.value.field == "hold_input_at"


def test_max_parallelism_is_fixed_by_default_so_a_savepoint_can_be_rescaled() -> None:
    """128 key groups unless set: what Flink gave a job first started at parallelism <= 85."""
    options, _ = parse_args([*IO, "--agent", "tests.agents:counter"])
    assert options.max_parallelism == 128
    options, _ = parse_args([*IO, "--agent", "tests.agents:counter", "--parallelism", "4",
                             "--max_parallelism", "720"])
    assert (options.parallelism, options.max_parallelism) == (4, 720)


@pytest.mark.parametrize(("low", "high"), [(1, 1), (32_768, 32_768), (1, 32_768)])
def test_max_parallelism_takes_its_whole_range(low: int, high: int) -> None:
    options, _ = parse_args([*IO, "--agent", "tests.agents:counter", "--parallelism", str(low),
                             "--max_parallelism", str(high)])
    assert options.max_parallelism == high


@pytest.mark.parametrize(("parallelism", "max_parallelism"), [("3", "2"), ("129", None)])
def test_max_parallelism_below_the_parallelism_names_the_flag(
        parallelism: str, max_parallelism: str | None) -> None:
    """The parallelism must fit in the key groups, the default ones included."""
    argv = [*IO, "--agent", "tests.agents:counter", "--parallelism", parallelism]
    if max_parallelism is not None:
        argv += ["--max_parallelism", max_parallelism]
    with pytest.raises(ConfigError, match="--max_parallelism must be >= --parallelism") as raised:
        parse_args(argv)
    assert raised.value.field == "max_parallelism"


@pytest.mark.parametrize("missing", ["--input_files", "--output_path", "--errors_path"])
def test_a_missing_input_or_output_names_the_flag(missing: str) -> None:
    argv = [*IO, "--agent", "tests.agents:counter"]
    while missing in argv:
        index = argv.index(missing)
        del argv[index:index + 2]
    with pytest.raises(ConfigError, match=missing):
        parse_args(argv)


def test_an_agent_that_does_not_import_fails_before_submission() -> None:
    with pytest.raises(ConfigError, match="no_such_module") as raised:
        parse_args([*IO, "--agent", "no_such_module:agent"])
    assert raised.value.field == "AgentConfig.agent"


class _Group:
    """A stand-in for PyFlink's MetricGroup that records increments."""

    def __init__(self, path: tuple[str, ...] = ()) -> None:
        self.path = path
        self.counts: dict[tuple[str, ...], int] = {}

    def add_group(self, name: str) -> _Group:
        child = _Group((*self.path, name))
        child.counts = self.counts
        return child

    def counter(self, name: str) -> _Counter:
        return _Counter(self.counts, (*self.path, name))


class _Counter:
    def __init__(self, counts: dict[tuple[str, ...], int], key: tuple[str, ...]) -> None:
        self._counts, self._key = counts, key

    def inc(self, value: int = 1) -> None:
        self._counts[self._key] = self._counts.get(self._key, 0) + value


def test_metrics_reach_the_group_only_when_flushed() -> None:
    group = _Group()
    metrics = FlinkMetrics(group)
    metrics.inc("beam_agents.memory", "soft_cap_warnings")
    metrics.inc("beam_agents.memory", "soft_cap_warnings", 2)
    assert group.counts == {}
    metrics.flush()
    metrics.flush()
    assert group.counts == {("beam_agents.memory", "soft_cap_warnings"): 3}


@pytest.mark.parametrize(("order", "flag", "size"), [
    ("event_time", None, 100_000), ("arrival", None, 16), ("event_time", 4, 4), ("arrival", 4, 4)])
def test_the_bundle_size_follows_the_event_order_unless_given(
        order: str, flag: int | None, size: int) -> None:
    """Event time queues elements and runs rounds no checkpoint interrupts: large bundles."""
    options = FlinkJobOptions(input_files=("a",), output_path="o", errors_path="e",
                              event_order=order, bundle_size=flag)  # type: ignore[arg-type]
    assert flink_settings(options)["python.fn-execution.bundle.size"] == str(size)


@pytest.mark.parametrize(("order", "flag", "ms"), [
    ("event_time", None, 1_000), ("arrival", None, 50), ("event_time", 7, 7), ("arrival", 7, 7)])
def test_the_bundle_time_follows_the_event_order_unless_given(
        order: str, flag: int | None, ms: int) -> None:
    """A timer that calls a key back waits out the open bundle: short ones while events arrive."""
    options = FlinkJobOptions(input_files=("a",), output_path="o", errors_path="e",
                              event_order=order, bundle_time_ms=flag)  # type: ignore[arg-type]
    assert flink_settings(options)["python.fn-execution.bundle.time"] == str(ms)


def test_the_python_execution_mode_is_process_unless_thread_is_asked() -> None:
    """Thread mode runs embedded in the JVM, with this interpreter's path (see FlinkJobOptions)."""
    options, _ = parse_args([*IO, "--agent", "tests.agents:counter"])
    assert options.python_execution_mode == "process"
    settings = flink_settings(options)
    assert settings["python.execution-mode"] == "process"
    assert "python.pythonpath" not in settings
    options, _ = parse_args([*IO, "--agent", "tests.agents:counter",
                             "--python_execution_mode", "thread"])
    settings = flink_settings(options)
    assert settings["python.execution-mode"] == "thread"
    assert settings["python.pythonpath"].split(os.pathsep) == [p for p in sys.path if p]


def test_an_unknown_python_execution_mode_names_the_flag() -> None:
    with pytest.raises(ConfigError, match="--python_execution_mode") as raised:
        FlinkJobOptions(input_files=("a",), output_path="o", errors_path="e",
                        python_execution_mode="embedded")  # type: ignore[arg-type]
    assert raised.value.field == "python_execution_mode"


KAFKA = ["--input_kafka_topic", "events", "--output_kafka_topic", "intents",
         "--errors_kafka_topic", "errors", "--kafka_bootstrap_servers", "b:9092",
         "--agent", "tests.agents:counter"]


def test_kafka_flags_map_onto_kafka_options_with_client_properties() -> None:
    options, _ = parse_args([*KAFKA, "--kafka_property", "security.protocol=SASL_SSL",
                             "--kafka_property", "sasl.jaas.config=a=b c", "--late_events",
                             "dead_letter", "--max_out_of_orderness_ms", "5000"])
    assert options.input_files == () and options.output_path is None
    assert options.kafka is not None and options.kafka.input_topic == "events"
    assert dict(options.kafka.properties) == {"security.protocol": "SASL_SSL",
                                              "sasl.jaas.config": "a=b c"}
    assert options.kafka.late_events == "dead_letter"
    assert options.kafka.max_out_of_orderness_ms == 5000
    # On a topic events run while the input arrives: arrival order's small bundles.
    assert flink_settings(options)["python.fn-execution.bundle.size"] == "16"
    assert flink_settings(options)["python.fn-execution.bundle.time"] == "50"


@pytest.mark.parametrize(("extra", "field"), [
    (["--input_files", "a.jsonl"], "input_files"),
    (["--output_path", "out/"], "output_path"),
    (["--kafka_bootstrap_servers", ""], "kafka_bootstrap_servers"),
    (["--kafka_property", "no-equals-sign"], "kafka_property"),
    (["--kafka_property", "transactional.id=x"], "kafka_property"),
    (["--kafka_transaction_timeout_ms", "10"], "kafka_transaction_timeout_ms"),
    (["--idle_timeout_ms", "-1"], "idle_timeout_ms"),
])
def test_bad_kafka_flags_fail_naming_the_flag(extra: list[str], field: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_args([*KAFKA, *extra])
    assert raised.value.field == field


def test_flink_conf_is_set_last_over_the_jobs_own_settings() -> None:
    options, _ = parse_args([*IO, "--agent", "tests.agents:counter", "--flink_conf",
                             "python.fn-execution.bundle.size=7", "--flink_conf", "a.b=c"])
    settings = flink_settings(options)
    assert settings["python.fn-execution.bundle.size"] == "7" and settings["a.b"] == "c"


def test_input_files_take_a_glob_as_beam_agents_run_does(tmp_path: Path) -> None:
    """THEN a glob is matched by Beam's file systems, in name order; a folder passes as it is."""
    for name in ("b.jsonl", "a.jsonl", "c.txt"):
        (tmp_path / name).write_text("{}\n")
    (tmp_path / "day").mkdir()

    assert expand_input_files([f"{tmp_path}/*.jsonl", f"{tmp_path}/day"]) == (
        f"{tmp_path}/a.jsonl", f"{tmp_path}/b.jsonl", f"{tmp_path}/day")


def test_an_input_glob_that_matches_nothing_names_it(tmp_path: Path) -> None:
    """THEN, as with beam-agents run, an empty match is an error, before any job starts."""
    with pytest.raises(ConfigError, match=r"--input_files '.*/\*\.jsonl' matches no file"):
        parse_args(["--input_files", f"{tmp_path}/*.jsonl", "--output_path", "o",
                    "--errors_path", "e", "--agent", "tests.agents:counter"])
