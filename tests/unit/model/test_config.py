"""Model and breaker configs: validated on creation, picklable, named errors."""

from __future__ import annotations

import pickle

import pytest

from beam_agents.errors import ConfigError
from beam_agents.model._config import BreakerConfig, LocalModelConfig, ModelConfig


def test_the_default_is_the_local_model() -> None:
    config = ModelConfig()
    assert (config.provider, config.model_id) == ("local", "local")
    assert config.breaker == BreakerConfig()
    assert config.local == LocalModelConfig() and config.local.latency_ms == 0


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
    ({"provider": "gemini", "model_id": "g"}, "project"),
    ({"provider": "gemini", "model_id": "g", "project": "p"}, "location"),
    ({"provider": "gemini", "model_id": "g", "project": "p", "location": "l",
      "api_key": "k"}, "api_key"),
    ({"provider": "gemini", "model_id": "g", "api_key": "k", "location": "l"}, "location"),
    ({"provider": "openai", "model_id": "m", "base_url": "localhost:8000"}, "base_url"),
    ({"provider": "openai", "model_id": "m", "local": LocalModelConfig(script_path="x.jsonl")},
     "local.script_path"),
    ({"provider": "gemini", "model_id": "g", "api_key": "k",
      "local": LocalModelConfig(quota_rps=5)}, "local.quota_rps"),
    ({"provider": "local", "project": "p"}, "project"),
    ({"provider": "local", "api_key": "k"}, "api_key"),
    ({"breaker": {"failure_threshold": 3}}, "breaker"),
    ({"local": {"latency_ms": 3}}, "local"),
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


@pytest.mark.parametrize(("kwargs", "field", "range_"), [
    ({"latency_ms": -1}, "local.latency_ms", "[0, 60000]"),
    ({"latency_ms": 60_001}, "local.latency_ms", "[0, 60000]"),
    ({"latency_ms": 1.5}, "local.latency_ms", "[0, 60000]"),
    ({"outage_first_call": -1}, "local.outage_first_call", "[0, 1000000]"),
    ({"outage_calls": 1_000_001}, "local.outage_calls", "[0, 1000000]"),
    ({"outage_ms": 3_600_001}, "local.outage_ms", "[0, 3600000]"),
    ({"quota_rps": 0}, "local.quota_rps", "(0, 1e+06]"),
])
def test_a_bad_local_model_value_names_the_field_and_range(kwargs, field, range_) -> None:
    with pytest.raises(ConfigError) as info:
        LocalModelConfig(**kwargs)
    assert info.value.field == field
    assert field in str(info.value) and range_ in str(info.value)


def test_a_bad_local_quota_names_its_flag() -> None:
    with pytest.raises(ConfigError, match=r"local\.quota_rps \(--model_quota\)"):
        LocalModelConfig(quota_rps=-1)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"script_path": ""}, "local.script_path"),
    ({"outage_calls": 2, "outage_ms": 100}, "local.outage_ms"),
])
def test_invalid_local_model_configs_name_the_field(kwargs, field) -> None:
    with pytest.raises(ConfigError) as info:
        LocalModelConfig(**kwargs)
    assert info.value.field == field


def test_a_local_knob_with_provider_openai_is_refused() -> None:
    with pytest.raises(ConfigError,
                       match=r"local\.latency_ms is not used by provider 'openai'") as info:
        ModelConfig.from_mapping({"provider": "openai", "model_id": "m",
                                  "local": {"latency_ms": 5}})
    assert info.value.field == "local.latency_ms"


def test_from_mapping_builds_nested_breaker_and_local_configs() -> None:
    config = ModelConfig.from_mapping({"provider": "local", "local": {"latency_ms": 5},
                                       "breaker": {"failure_threshold": 2, "cooldown_s": 1.5}})
    assert config.breaker == BreakerConfig(failure_threshold=2, cooldown_s=1.5)
    assert config.local == LocalModelConfig(latency_ms=5)


def test_the_deprecated_flat_local_keys_warn_and_still_work() -> None:
    with pytest.warns(DeprecationWarning) as caught:
        config = ModelConfig.from_mapping({"latency_ms": 5, "outage_first_call": 3,
                                           "outage_calls": 2, "local": {"quota_rps": 9}})
    assert config.local == LocalModelConfig(latency_ms=5, outage_first_call=3, outage_calls=2,
                                            quota_rps=9)
    assert [str(warning.message).split(";")[0] for warning in caught] == [
        f"model.{name} is deprecated: set model.local.{name} instead"
        for name in ("latency_ms", "outage_first_call", "outage_calls")]


def test_a_local_knob_set_flat_and_nested_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"keep model\.local\.latency_ms") as info:
        ModelConfig.from_mapping({"latency_ms": 5, "local": {"latency_ms": 6}})
    assert info.value.field == "local.latency_ms"


def test_from_mapping_names_every_unknown_key() -> None:
    with pytest.raises(ConfigError) as info:
        ModelConfig.from_mapping({"provider": "local", "modle_id": "x", "temprature": 1})
    assert "modle_id" in str(info.value) and "temprature" in str(info.value)
    assert info.value.field == "modle_id"
    with pytest.raises(ConfigError, match=r"breaker\.threshold"):
        ModelConfig.from_mapping({"breaker": {"threshold": 2}})
    with pytest.raises(ConfigError, match=r"local\.latency"):
        ModelConfig.from_mapping({"local": {"latency": 2}})


def test_configs_are_frozen_and_picklable() -> None:
    config = ModelConfig(provider="openai", model_id="m", api_key="k", timeout_s=5,
                         breaker=BreakerConfig(failure_threshold=2))
    assert pickle.loads(pickle.dumps(config)) == config
    local = ModelConfig(local=LocalModelConfig(latency_ms=5, quota_rps=2.5))
    assert pickle.loads(pickle.dumps(local)) == local
    with pytest.raises(AttributeError):
        config.model_id = "other"  # type: ignore[misc]


#: ModelConfig(latency_ms=5, outage_first_call=2, outage_calls=3, quota_rps=7.5, max_rps=4.0,
#: breaker=BreakerConfig(failure_threshold=2)), pickled before the local settings had a
#: config of their own.
_FLAT_PICKLE = bytes.fromhex(
    "80049595000000000000008c196265616d5f6167656e74732e6d6f64656c2e5f636f6e666967948c0b4d6f"
    "64656c436f6e6669679493942981945d94288c056c6f63616c9468054e4e4e4e4e4e4e47404e0000000000"
    "004e4b054b024b034b0047401e0000000000004740100000000000004e4e4e68008c0d427265616b657243"
    "6f6e6669679493942981945d94284b02473ff00000000000004e656265622e")


def test_a_config_pickled_with_flat_local_settings_still_loads() -> None:
    """A job graph pickled before `ModelConfig.local` loads with its settings under `local`."""
    config = pickle.loads(_FLAT_PICKLE)
    assert config == ModelConfig(local=LocalModelConfig(latency_ms=5, outage_first_call=2,
                                                        outage_calls=3, quota_rps=7.5),
                                 max_rps=4.0, breaker=BreakerConfig(failure_threshold=2))
