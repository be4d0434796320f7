"""The Beam pipeline's Kafka flags: what they refuse, naming the flag, and what they build.

Offline and fast: parses flags and checks them, as `beam-agents run` does
before anything reaches a runner. The run itself is
tests/portable/test_beam_kafka.py.
"""

from __future__ import annotations

import argparse
import json

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_agents.beam import AgentPipelineOptions, check_io, check_runner_flags
from beam_agents.beam._kafka import KafkaConfig, record_key
from beam_agents.beam._options import kafka_config_from_options
from beam_agents.errors import ConfigError

KAFKA_IN = ["--input_kafka_topic=events", "--kafka_bootstrap_servers=broker:9092"]
KAFKA_OUT = ["--output_kafka_topic=intents", "--errors_kafka_topic=errors"]
AGENT = ["--agent=examples.support_agent:agent"]


def options(*flags: str) -> AgentPipelineOptions:
    return PipelineOptions([*flags, *AGENT]).view_as(AgentPipelineOptions)


def refused(*flags: str) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        check_io(options(*flags))
    return caught.value


def test_a_kafka_topic_to_kafka_topics_is_a_whole_pipeline() -> None:
    check_io(options(*KAFKA_IN, *KAFKA_OUT))
    config = kafka_config_from_options(options(*KAFKA_IN, *KAFKA_OUT))
    assert config == KafkaConfig(bootstrap_servers="broker:9092")


@pytest.mark.parametrize("topic", ["--input_kafka_topic=events", "--output_kafka_topic=intents",
                                   "--errors_kafka_topic=errors"])
def test_a_kafka_topic_without_bootstrap_servers_names_both_flags(topic: str) -> None:
    files = ["--input_files=in.jsonl", "--output_path=out", "--errors_path=err"]
    error = refused(topic, *(KAFKA_OUT if topic.startswith("--input") else files))
    assert error.field == "kafka_bootstrap_servers"
    assert topic.partition("=")[0] in str(error)
    assert "--kafka_bootstrap_servers" in str(error)


@pytest.mark.parametrize("other", ["--input_subscription=projects/p/subscriptions/s",
                                   "--input_files=in.jsonl"])
def test_a_kafka_input_beside_another_input_is_refused_naming_both(other: str) -> None:
    error = refused(*KAFKA_IN, *KAFKA_OUT, other)
    assert error.field == "input_kafka_topic"
    assert "--input_kafka_topic" in str(error) and other.partition("=")[0] in str(error)


@pytest.mark.parametrize("output", ["output", "errors"])
def test_a_kafka_input_cannot_write_files(output: str) -> None:
    flags = [*KAFKA_IN, *KAFKA_OUT, f"--{output}_path=out.jsonl"]
    error = refused(*flags)
    assert error.field == f"{output}_path"
    assert f"--{output}_kafka_topic" in str(error)


@pytest.mark.parametrize("output", ["output", "errors"])
def test_each_output_needs_a_sink_and_a_kafka_topic_is_one(output: str) -> None:
    kept = [flag for flag in KAFKA_OUT if not flag.startswith(f"--{output}_")]
    error = refused(*KAFKA_IN, *kept)
    assert error.field == f"{output}_topic"
    assert f"--{output}_kafka_topic" in str(error)


@pytest.mark.parametrize(("flag", "field"), [
    ("--input_timestamp_attribute=ts", "input_timestamp_attribute"),
    ("--state_snapshot=/tmp/state", "state_snapshot"),
])
def test_flags_of_other_inputs_are_refused_on_a_kafka_input(flag: str, field: str) -> None:
    assert refused(*KAFKA_IN, *KAFKA_OUT, flag).field == field


@pytest.mark.parametrize(("pair", "names"), [
    ("no-equals-sign", "KEY=VALUE"),
    ("=value", "KEY=VALUE"),
    ("group.id=mine", "--kafka_group_id"),
    ("bootstrap.servers=elsewhere:9092", "--kafka_bootstrap_servers"),
    ("auto.offset.reset=none", "--kafka_starting_offsets"),
    ("enable.auto.commit=true", "enable.auto.commit"),
])
def test_a_bad_or_owned_kafka_property_is_refused(pair: str, names: str) -> None:
    error = refused(*KAFKA_IN, *KAFKA_OUT, f"--kafka_property={pair}")
    assert error.field == "kafka_property"
    assert names in str(error)


@pytest.mark.parametrize("address", ["localhost", "localhost:port", ":8097", "host:0",
                                     "host:70000"])
def test_an_expansion_service_is_host_and_port(address: str) -> None:
    error = refused(*KAFKA_IN, *KAFKA_OUT, f"--kafka_expansion_service={address}")
    assert error.field == "kafka_expansion_service"


def test_kafka_properties_reach_the_consumer_and_the_producers() -> None:
    config = kafka_config_from_options(options(
        *KAFKA_IN, *KAFKA_OUT, "--kafka_property=security.protocol=SASL_SSL",
        "--kafka_property=sasl.jaas.config=a=b c=d", "--kafka_group_id=g1",
        "--kafka_expansion_service=localhost:8097"))
    assert config is not None and config.expansion_service == "localhost:8097"
    secure = {"security.protocol": "SASL_SSL", "sasl.jaas.config": "a=b c=d"}
    assert config.consumer_config() == {**secure, "bootstrap.servers": "broker:9092",
                                        "group.id": "g1", "auto.offset.reset": "earliest"}
    assert config.producer_config() == {**secure, "bootstrap.servers": "broker:9092"}


@pytest.mark.parametrize(("start", "reset"), [("committed", "earliest"),
                                              ("earliest", "earliest"), ("latest", "latest")])
def test_starting_offsets_say_where_a_group_without_offsets_starts(start: str,
                                                                   reset: str) -> None:
    config = kafka_config_from_options(options(*KAFKA_IN, *KAFKA_OUT,
                                               f"--kafka_starting_offsets={start}"))
    assert config is not None
    assert config.consumer_config()["auto.offset.reset"] == reset


def test_without_a_kafka_topic_there_is_no_kafka_config() -> None:
    flags = ["--input_files=in.jsonl", "--output_path=o", "--errors_path=e",
             "--kafka_bootstrap_servers=broker:9092"]
    assert kafka_config_from_options(options(*flags)) is None


@pytest.mark.parametrize("runner", [None, "DirectRunner", "BundleBasedDirectRunner"])
def test_kafka_topics_on_the_local_runner_are_refused_before_the_run(runner: str | None) -> None:
    flags = [*KAFKA_IN, *KAFKA_OUT, *([f"--runner={runner}"] if runner else [])]
    with pytest.raises(ConfigError) as caught:
        check_runner_flags(PipelineOptions([*flags, *AGENT]))
    assert caught.value.field == "input_kafka_topic"
    assert "FlinkRunner" in str(caught.value)


def test_kafka_topics_on_the_flink_runner_pass() -> None:
    check_runner_flags(PipelineOptions([*KAFKA_IN, *KAFKA_OUT, *AGENT, "--runner=FlinkRunner"]))


@pytest.mark.parametrize(("line", "key"), [
    ({"entity_key": "customer-7", "seq": 1}, b"customer-7"),
    ({"entity_key_b64": "/w==", "seq": 1}, b"\xff"),
    ({"stage": "STAGE_DECODE", "event_id": ""}, None),
])
def test_records_are_keyed_by_their_entity_or_null(line: dict[str, object],
                                                  key: bytes | None) -> None:
    assert record_key(json.dumps(line).encode()) == key


def test_the_kafka_flags_are_the_native_flink_jobs() -> None:
    """The names the two hosts share mean the same: same defaults, same choices."""
    from beam_agents.flink._flags import job_parser  # noqa: PLC0415 - loads PyFlink

    def actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
        return {action.dest: action for action in parser._actions}

    beam = argparse.ArgumentParser()
    AgentPipelineOptions._add_argparse_args(beam)
    ours, flinks = actions(beam), actions(job_parser())
    shared = {name for name in ours if "kafka" in name}
    assert shared - {"kafka_expansion_service"} <= set(flinks)
    for name in shared - {"kafka_expansion_service"}:
        assert (ours[name].default or None) == (flinks[name].default or None), name
        assert ours[name].choices == flinks[name].choices, name
