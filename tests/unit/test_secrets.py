"""API keys read on the worker: from Secret Manager, or from the worker's environment.

The config names where the key lives and `start_runtime` reads it when it
builds the provider (``DoFn.setup()`` / Flink ``open()``). These tests run the
real Secret Manager client (REST transport) against a local peer, and a real
OpenAI-compatible provider against a local server that records the
``Authorization`` header it receives.
"""

from __future__ import annotations

import argparse
import json
import logging
import secrets
from collections.abc import Iterator
from pathlib import Path

import google_crc32c
import pytest

from beam_agents._secrets import crc32c, read_secret_version
from beam_agents.errors import ConfigError, ProviderUnavailable
from beam_agents.hosting import (
    add_agent_flags,
    agent_config_from_flags,
    error_to_json,
    start_runtime,
)
from beam_agents.model import ModelConfig
from beam_agents.runtime import AgentConfig, Committed, Failed
from beam_agents.testing import make_event, run_activation
from tests._key_servers import ChatServer, GeminiServer, SecretManagerPeer, new_key

pytestmark = pytest.mark.timeout(60)

SECRET = "projects/my-project/secrets/model-api-key/versions/3"
VAR = "BEAM_AGENTS_TEST_MODEL_KEY"


@pytest.fixture
def key() -> str:
    return new_key()


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    with ChatServer() as server:
        yield server


def _flags(*argv: str) -> dict[str, object]:
    parser = argparse.ArgumentParser()
    add_agent_flags(parser)
    return vars(parser.parse_args(argv))


def _config_file_with_key(directory: Path, key: str) -> Path:
    """An --agent_config file that writes the API key itself into the model's config."""
    path = directory / "agent.json"
    path.write_text(json.dumps({"agent": "tests.agents:ask",
                                "model": {"provider": "openai", "model_id": "m",
                                          "api_key": key}}))
    return path


def _openai(url: str, **model: str) -> AgentConfig:
    return AgentConfig(agent="tests.agents:ask", model=ModelConfig(
        provider="openai", model_id="m", base_url=url, **model))


# ---------------------------------------------------------------------------
# Secret Manager access
# ---------------------------------------------------------------------------


def test_crc32c_is_the_castagnoli_checksum_secret_manager_sends() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the standard check value
    for size in (0, 1, 7, 64, 1000):
        data = secrets.token_bytes(size)
        assert crc32c(data) == google_crc32c.value(data)


def test_a_secret_version_is_read_trimmed_and_without_credentials_over_http(key: str) -> None:
    """The payload comes back without echo's newline; an http:// peer is sent no token."""
    with SecretManagerPeer({SECRET: f"{key}\n".encode()}) as peer:
        assert read_secret_version(SECRET, endpoint=peer.url) == key
    (request,) = peer.requests
    assert request.method == "GET"
    assert request.path.split("?")[0] == f"/v1/{SECRET}:access"
    assert request.authorization is None


def test_the_checksum_is_optional(key: str) -> None:
    with SecretManagerPeer({SECRET: key.encode()}, crc="none") as peer:
        assert read_secret_version(SECRET, endpoint=peer.url) == key


def test_a_payload_whose_checksum_does_not_match_is_retriable_and_not_shown(key: str) -> None:
    with SecretManagerPeer({SECRET: key.encode()}, crc="wrong") as peer, \
            pytest.raises(ProviderUnavailable, match="CRC32C") as info:
        read_secret_version(SECRET, endpoint=peer.url)
    assert key not in str(info.value)


@pytest.mark.parametrize(("status", "error", "hint"), [
    (404, ConfigError, "gcloud secrets versions add"),
    (403, ConfigError, "roles/secretmanager.secretAccessor"),
    # A 401 makes the session refresh its credentials once; anonymous ones cannot be.
    (401, ConfigError, "credentials"),
    (400, ConfigError, "disabled or destroyed"),
    (500, ProviderUnavailable, "retriable"),
])
def test_a_refused_access_names_the_version_and_the_fix(
        status: int, error: type[Exception], hint: str) -> None:
    with SecretManagerPeer({}, status=status) as peer, pytest.raises(error) as info:
        read_secret_version(SECRET, endpoint=peer.url)
    assert SECRET in str(info.value) and hint in str(info.value)
    if isinstance(info.value, ConfigError):
        assert info.value.field == "api_key_secret"


@pytest.mark.parametrize(("payload", "why"), [(b" \n", "is empty"),
                                              (b"\xff\xfe", "not UTF-8")])
def test_a_version_that_holds_no_text_is_a_config_error(payload: bytes, why: str) -> None:
    with SecretManagerPeer({SECRET: payload}) as peer, pytest.raises(ConfigError, match=why):
        read_secret_version(SECRET, endpoint=peer.url)


# ---------------------------------------------------------------------------
# Config shape: names only, validated up front, never echoed
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", [
    "projects/my-project/secrets/model-api-key/versions/1",
    "projects/123456789012/secrets/k/versions/latest",
    "projects/my-project/secrets/K_2/versions/prod-alias",
])
def test_secret_version_names_of_every_shape_are_accepted(name: str) -> None:
    assert ModelConfig(provider="openai", model_id="m", api_key_secret=name).api_key_secret == name


@pytest.mark.parametrize("name", [
    "projects/my-project/secrets/model-api-key",            # no version
    "projects/my-project/secrets/model-api-key/versions/",  # empty version
    "projects/my-project/secrets/model-api-key/versions/0",
    "secrets/model-api-key/versions/1",
    "projects/p/secrets/s/versions/1",                      # not a project id
    "projects/my-project/secrets/a.b/versions/1",
    "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789",         # a key pasted into the flag
])
def test_a_malformed_secret_name_is_a_config_error_naming_the_flag(name: str) -> None:
    """Checked when the flags are parsed, on the launcher; the value is never repeated."""
    with pytest.raises(ConfigError) as info:
        agent_config_from_flags(_flags("--agent", "tests.agents:counter",
                                       "--model_provider", "openai", "--model_id", "m",
                                       "--model_api_key_secret", name))
    assert info.value.field == "api_key_secret"
    assert "--model_api_key_secret" in str(info.value)
    assert name not in str(info.value)


@pytest.mark.parametrize("name", ["1KEY", "MY-KEY", "", "sk-proj-abcdefghijklmnopqrstuvwxyz"])
def test_a_malformed_variable_name_is_a_config_error_naming_the_flag(name: str) -> None:
    with pytest.raises(ConfigError) as info:
        ModelConfig(provider="openai", model_id="m", api_key_env=name)
    assert info.value.field == "api_key_env"
    if name:
        assert "--model_api_key_env" in str(info.value) and name not in str(info.value)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"api_key": "k", "api_key_env": "K"}, "api_key"),
    ({"api_key_secret": SECRET, "api_key_env": "K"}, "api_key_env"),
    ({"secret_manager_endpoint": "http://127.0.0.1:1"}, "secret_manager_endpoint"),
    ({"api_key_secret": SECRET, "secret_manager_endpoint": "127.0.0.1:1"},
     "secret_manager_endpoint"),
])
def test_one_key_source_and_an_endpoint_only_with_a_secret(
        kwargs: dict[str, str], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        ModelConfig(provider="openai", model_id="m", **kwargs)
    assert info.value.field == field


def test_gemini_takes_its_key_from_a_secret_or_the_environment_but_not_with_vertex() -> None:
    assert ModelConfig(provider="gemini", model_id="g", api_key_env="GEMINI_KEY").project is None
    assert ModelConfig(provider="gemini", model_id="g", api_key_secret=SECRET).project is None
    with pytest.raises(ConfigError) as info:
        ModelConfig(provider="gemini", model_id="g", project="p", location="us-central1",
                    api_key_secret=SECRET)
    assert info.value.field == "api_key_secret"
    with pytest.raises(ConfigError, match="--model_api_key_secret or --model_api_key_env"):
        ModelConfig(provider="gemini", model_id="g")


def test_the_key_flags_hold_names_and_replace_a_key_in_the_config_file(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, key: str) -> None:
    path = _config_file_with_key(tmp_path, key)
    with caplog.at_level(logging.DEBUG):
        by_secret = agent_config_from_flags(_flags(
            "--agent_config", str(path), "--model_api_key_secret", SECRET,
            "--secret_manager_endpoint", "http://127.0.0.1:8085/"))
        by_env = agent_config_from_flags(_flags("--agent_config", str(path),
                                                "--model_api_key_env", VAR))
    assert (by_secret.model.api_key_secret, by_secret.model.api_key) == (SECRET, None)
    assert by_secret.model.secret_manager_endpoint == "http://127.0.0.1:8085"
    assert (by_env.model.api_key_env, by_env.model.api_key) == (VAR, None)
    assert key not in repr(by_secret) + repr(by_env)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_key_in_the_config_file_works_but_warns_once_naming_the_safe_flags(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, key: str) -> None:
    path = _config_file_with_key(tmp_path, key)
    with caplog.at_level(logging.DEBUG):
        config = agent_config_from_flags(_flags("--agent_config", str(path)))
    assert config.model.api_key == key
    (warning,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert warning.name.startswith("beam_agents")
    text = warning.getMessage()
    assert "job graph" in text
    assert "--model_api_key_secret" in text and "--model_api_key_env" in text
    assert key not in caplog.text


# ---------------------------------------------------------------------------
# Read on the worker, sent to the model, shown nowhere
# ---------------------------------------------------------------------------


def test_the_environment_way_sends_the_workers_variable_as_the_bearer_token(
        chat: ChatServer, key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VAR, key)
    outcome = run_activation(_openai(chat.url, api_key_env=VAR), make_event("c1", "hi"))
    assert isinstance(outcome, Committed)
    assert chat.authorizations == [f"Bearer {key}"]


def test_the_secret_way_sends_the_secret_version_as_the_bearer_token(
        chat: ChatServer, key: str) -> None:
    with SecretManagerPeer({SECRET: key.encode()}) as peer:
        config = _openai(chat.url, api_key_secret=SECRET, secret_manager_endpoint=peer.url)
        outcome = run_activation(config, make_event("c1", "hi"))
    assert isinstance(outcome, Committed)
    assert len(peer.requests) == 1
    assert chat.authorizations == [f"Bearer {key}"]


def test_gemini_gets_the_key_from_the_environment_in_its_api_key_header(
        key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VAR, key)
    with GeminiServer() as server:
        config = AgentConfig(agent="tests.agents:ask", model=ModelConfig(
            provider="gemini", model_id="gemini-2.5-flash", api_key_env=VAR, base_url=server.url))
        outcome = run_activation(config, make_event("c1", "hi"))
    assert isinstance(outcome, Committed)
    (request,) = server.requests
    assert request.path.endswith("/models/gemini-2.5-flash:generateContent")
    assert request.api_key_header == key


@pytest.mark.parametrize("value", [None, "", "   "])
def test_an_unset_or_empty_variable_fails_setup_naming_the_variable(
        value: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    if value is None:
        monkeypatch.delenv(VAR, raising=False)
    else:
        monkeypatch.setenv(VAR, value)
    with pytest.raises(ConfigError) as info:
        start_runtime(_openai("http://127.0.0.1:1", api_key_env=VAR))
    assert info.value.field == "api_key_env"
    assert VAR in str(info.value)


def test_a_key_an_http_header_cannot_carry_fails_setup_without_showing_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VAR, "sk-half one\tand-another-half")
    with pytest.raises(ConfigError) as info:
        start_runtime(_openai("http://127.0.0.1:1", api_key_env=VAR))
    assert VAR in str(info.value) and "sk-half" not in str(info.value)


@pytest.mark.parametrize("way", ["env", "secret"])
def test_a_rejected_key_stays_out_of_the_dead_letter_and_the_logs(
        way: str, key: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """The server answers 401 and echoes the Authorization header; nothing repeats the key."""
    monkeypatch.setenv(VAR, key)
    with ChatServer(status=401) as chat, SecretManagerPeer({SECRET: key.encode()}) as peer, \
            caplog.at_level(logging.DEBUG):
        source = ({"api_key_env": VAR} if way == "env" else
                  {"api_key_secret": SECRET, "secret_manager_endpoint": peer.url})
        outcome = run_activation(_openai(chat.url, **source), make_event("c1", "hi"))
    assert chat.authorizations == [f"Bearer {key}"]
    assert isinstance(outcome, Failed)
    record = outcome.error
    assert "401" in record.message and "[redacted]" in record.message  # the echo was cut out
    assert key.encode() not in error_to_json(record) and key not in record.traceback
    assert key not in caplog.text
