"""The one mapping from flags to AgentConfig, shared by the Beam and Flink entry points."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from beam_agents.errors import ConfigError
from beam_agents.hosting import add_agent_flags, agent_config_from_flags
from beam_agents.model import LocalModelConfig
from beam_agents.stores import SqliteLongtermConfig


def _flags(*argv: str) -> dict[str, object]:
    parser = argparse.ArgumentParser()
    add_agent_flags(parser)
    return vars(parser.parse_args(argv))


def test_flags_map_onto_the_config_fields() -> None:
    config = agent_config_from_flags(_flags(
        "--agent", "tests.agents:counter", "--activation_timeout_ms", "1500",
        "--model_provider", "local", "--model_id", "echo-1",
        "--longterm_store", "sqlite", "--sqlite_path", "x.db"))
    assert config.agent == "tests.agents:counter"
    assert config.timeout_ms == 1500
    assert config.model.model_id == "echo-1"
    assert config.longterm_memory == SqliteLongtermConfig(path="x.db")


def test_explicit_flags_override_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "agent.json"
    path.write_text(json.dumps({"agent": "tests.agents:counter", "timeout_ms": 900,
                                "max_intent_bytes": 1234}))
    config = agent_config_from_flags(_flags("--agent_config", str(path),
                                            "--activation_timeout_ms", "700"))
    assert (config.agent, config.timeout_ms, config.max_intent_bytes) == (
        "tests.agents:counter", 700, 1234)


def test_the_local_model_flags_map_onto_its_own_config(tmp_path: Path) -> None:
    script = tmp_path / "script.jsonl"
    config = agent_config_from_flags(_flags(
        "--agent", "tests.agents:counter", "--model_script", str(script),
        "--model_latency_ms", "20", "--model_outage", "40:3s", "--model_quota", "60"))
    assert config.model.local == LocalModelConfig(
        script_path=str(script), latency_ms=20, outage_first_call=40, outage_ms=3000,
        quota_rps=60.0)


def test_a_local_model_flag_overrides_the_file_in_either_spelling(tmp_path: Path) -> None:
    path = tmp_path / "agent.json"
    path.write_text(json.dumps({"agent": "tests.agents:counter",
                                "model": {"latency_ms": 5, "local": {"outage_first_call": 2,
                                                                     "outage_calls": 1}}}))
    config = agent_config_from_flags(_flags("--agent_config", str(path),
                                            "--model_latency_ms", "7"))
    assert config.model.local == LocalModelConfig(latency_ms=7, outage_first_call=2,
                                                  outage_calls=1)


def test_longterm_store_none_disables_long_term_memory(tmp_path: Path) -> None:
    path = tmp_path / "agent.json"
    path.write_text(json.dumps({"agent": "tests.agents:counter",
                                "longterm_memory": {"backend": "sqlite", "path": "x.db"}}))
    config = agent_config_from_flags(_flags("--agent_config", str(path),
                                            "--longterm_store", "none"))
    assert config.longterm_memory is None


def test_a_missing_agent_names_the_flag() -> None:
    with pytest.raises(ConfigError, match="--agent") as raised:
        agent_config_from_flags(_flags())
    assert raised.value.field == "agent"


@pytest.mark.parametrize("content", ["{not json", "[1, 2]"])
def test_a_config_file_that_is_not_a_json_object_names_the_flag(
        tmp_path: Path, content: str) -> None:
    path = tmp_path / "agent.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match="agent_config") as raised:
        agent_config_from_flags(_flags("--agent_config", str(path)))
    assert raised.value.field == "agent_config"


def test_an_unreadable_config_file_names_the_flag(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="agent_config"):
        agent_config_from_flags(_flags("--agent_config", str(tmp_path / "absent.json")))


def test_an_unknown_field_in_the_config_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "agent.json"
    path.write_text(json.dumps({"agent": "tests.agents:counter", "timeout": 5}))
    with pytest.raises(ConfigError, match="timeout"):
        agent_config_from_flags(_flags("--agent_config", str(path)))


def test_the_journal_flags_map_onto_a_journal_config() -> None:
    from beam_agents.stores import FirestoreCallJournalConfig, SqliteCallJournalConfig  # noqa: PLC0415

    sqlite = agent_config_from_flags(_flags("--agent", "tests.agents:counter", "--call_journal",
                                            "sqlite", "--call_journal_path", "calls.db",
                                            "--call_journal_ttl_ms", "3600000"))
    assert sqlite.call_journal == SqliteCallJournalConfig(path="calls.db")
    assert sqlite.call_journal_ttl_ms == 3_600_000
    firestore = agent_config_from_flags(_flags(
        "--agent", "tests.agents:counter", "--call_journal", "firestore",
        "--firestore_project", "p", "--firestore_database", "d",
        "--call_journal_collection", "calls"))
    assert firestore.call_journal == FirestoreCallJournalConfig(project="p", database="d",
                                                                collection="calls")
    assert agent_config_from_flags(_flags("--agent", "tests.agents:counter")).call_journal is None


@pytest.mark.parametrize(("argv", "named"), [
    (["--call_journal", "sqlite"], "path"),
    (["--call_journal_ttl_ms", "5"], "call_journal_ttl_ms"),
])
def test_bad_journal_flags_raise_a_config_error_naming_the_field(
        argv: list[str], named: str) -> None:
    with pytest.raises(ConfigError) as raised:
        agent_config_from_flags(_flags("--agent", "tests.agents:counter", *argv))
    assert named in str(raised.value.field)


def test_the_flow_control_and_budget_flags_map_onto_the_config() -> None:
    config = agent_config_from_flags(_flags(
        "--agent", "tests.agents:counter", "--model_max_rps", "12.5", "--model_max_tpm", "90000",
        "--model_price_in_per_mtok", "0.15", "--model_price_out_per_mtok", "0.6",
        "--model_quota", "30", "--max_tokens_per_entity", "50000",
        "--budget_window_ms", "3600000"))
    model = config.model
    assert (model.max_rps, model.max_tpm, model.local.quota_rps) == (12.5, 90000, 30.0)
    assert (model.price_in_per_mtok, model.price_out_per_mtok) == (0.15, 0.6)
    assert (config.max_tokens_per_entity, config.budget_window_ms) == (50000, 3_600_000)


def test_without_the_flags_nothing_is_paced_capped_or_priced() -> None:
    config = agent_config_from_flags(_flags("--agent", "tests.agents:counter"))
    model = config.model
    assert (model.max_rps, model.max_tpm, model.local.quota_rps) == (None, None, None)
    assert (model.price_in_per_mtok, model.price_out_per_mtok) == (None, None)
    assert (config.max_tokens_per_entity, config.budget_window_ms) == (None, 86_400_000)
