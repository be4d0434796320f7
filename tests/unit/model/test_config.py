"""Model and breaker configs: validated on creation, picklable, named errors."""

from __future__ import annotations

import pickle

import pytest

from beam_agents.errors import ConfigError
from beam_agents.model._config import BreakerConfig, ModelConfig


def test_the_default_is_the_local_model() -> None:
    config = ModelConfig()
    assert (config.provider, config.model_id, config.latency_ms) == ("local", "local", 0)
    assert config.breaker == BreakerConfig()


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"failure_threshold": 0}, "breaker.failure_threshold"),
    ({"failure_threshold": 1001}, "breaker.failure_threshold"),
    ({"failure_threshold": True}, "breaker.failure_threshold"),
    ({"failure_threshold": 2.0}, "breaker.failure_threshold"),
    ({"cooldown_s": 0}, "breaker.cooldown_s"),
    ({"cooldown_s": float("inf")}, "breaker.cooldown_s"),
    ({"cooldown_s": "30"}, "breaker.cooldown_s"),
])
def test_breaker_values_out_of_range_name_the_field_and_range(kwargs, field) -> None:
    with pytest.raises(ConfigError) as info:
        BreakerConfig(**kwargs)
    assert info.value.field == field
    message = str(info.value)
    assert field in message
    assert "in [1, 1000]" in message or "in (0, 3600]" in message


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"provider": "anthropic"}, "provider"),
    ({"provider": "openai"}, "model_id"),
    ({"timeout_s": 0}, "timeout_s"),
    ({"provider": "openai", "model_id": "m", "timeout_s": 601}, "timeout_s"),
    ({"latency_ms": -1}, "latency_ms"),
    ({"latency_ms": 60_001}, "latency_ms"),
    ({"script_path": ""}, "script_path"),
    ({"provider": "gemini", "model_id": "g"}, "project"),
    ({"provider": "gemini", "model_id": "g", "project": "p"}, "location"),
    ({"provider": "gemini", "model_id": "g", "project": "p", "location": "l",
      "api_key": "k"}, "api_key"),
    ({"provider": "gemini", "model_id": "g", "api_key": "k", "location": "l"}, "location"),
    ({"provider": "openai", "model_id": "m", "base_url": "localhost:8000"}, "base_url"),
    ({"provider": "openai", "model_id": "m", "script_path": "x.jsonl"}, "script_path"),
    ({"provider": "local", "project": "p"}, "project"),
    ({"provider": "local", "api_key": "k"}, "api_key"),
    ({"breaker": {"failure_threshold": 3}}, "breaker"),
])
def test_invalid_model_configs_name_the_field(kwargs, field) -> None:
    with pytest.raises(ConfigError) as info:
        ModelConfig(**kwargs)
    assert info.value.field == field


def test_openai_base_url_defaults_and_is_normalised() -> None:
    assert ModelConfig(provider="openai", model_id="m").base_url == "https://api.openai.com"
    config = ModelConfig(provider="openai", model_id="m", base_url="http://127.0.0.1:8000/v1/")
    assert config.base_url == "http://127.0.0.1:8000"


def test_gemini_accepts_vertex_or_an_api_key() -> None:
    vertex = ModelConfig(provider="gemini", model_id="gemini-2.0-flash", project="p",
                         location="us-central1")
    keyed = ModelConfig(provider="gemini", model_id="gemini-2.0-flash", api_key="secret")
    assert vertex.api_key is None and keyed.project is None


def test_the_api_key_never_appears_in_repr() -> None:
    config = ModelConfig(provider="openai", model_id="m", api_key="sk-very-secret")
    assert "sk-very-secret" not in repr(config)


def test_from_mapping_builds_nested_breaker_config() -> None:
    config = ModelConfig.from_mapping({"provider": "local", "latency_ms": 5,
                                       "breaker": {"failure_threshold": 2, "cooldown_s": 1.5}})
    assert config.breaker == BreakerConfig(failure_threshold=2, cooldown_s=1.5)
    assert config.latency_ms == 5


def test_from_mapping_names_every_unknown_key() -> None:
    with pytest.raises(ConfigError) as info:
        ModelConfig.from_mapping({"provider": "local", "modle_id": "x", "temprature": 1})
    assert "modle_id" in str(info.value) and "temprature" in str(info.value)
    assert info.value.field == "modle_id"
    with pytest.raises(ConfigError, match=r"breaker\.threshold"):
        ModelConfig.from_mapping({"breaker": {"threshold": 2}})


def test_configs_are_frozen_and_picklable() -> None:
    config = ModelConfig(provider="openai", model_id="m", api_key="k", timeout_s=5,
                         breaker=BreakerConfig(failure_threshold=2))
    assert pickle.loads(pickle.dumps(config)) == config
    with pytest.raises(AttributeError):
        config.model_id = "other"  # type: ignore[misc]
