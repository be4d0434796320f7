"""Flags and plain data (a JSON config) become an `AgentConfig`, in one tested place.

STYLE: only entry points map options to configs; docs/decisions/0008-edge-wiring.md.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from beam_agents.errors import ConfigError
from beam_agents.hosting._flags import (
    BUDGET_FLAGS,
    ENGINE_FLAGS,
    FLOW_FLAGS,
    MODEL_FLAGS,
    RETRY_FLAGS,
    STORE_FLAGS,
)
from beam_agents.hosting._tracing import tracing_config_from_flags
from beam_agents.memory import LruCompactor
from beam_agents.model import API_KEY_SOURCES, ModelConfig
from beam_agents.runtime import AgentConfig, RetryPolicy
from beam_agents.stores import call_journal_config_from_mapping, longterm_config_from_mapping

__all__ = ["agent_config_from_flags", "agent_config_from_mapping"]

_log = logging.getLogger(__name__)

_AGENT_FIELDS = frozenset({"agent", "model", "compactor", "timeout_ms", "longterm_memory",
                           "max_intent_bytes", "max_event_bytes", "traceback_bytes",
                           "max_in_flight", "agent_threads", "max_queued_per_key", "retry",
                           "call_journal", "call_journal_ttl_ms", "max_tokens_per_entity",
                           "budget_window_ms", "max_tool_calls_per_activation",
                           "max_pending_waits"})


def _warn_if_key_in_config(config: AgentConfig) -> None:
    if config.model.api_key is not None:
        _log.warning("model.api_key is set in the agent config: the key travels inside the job "
                     "graph (pickled into every worker's DoFn or Flink function, and saved with "
                     "the job). Pass --model_api_key_secret projects/P/secrets/S/versions/V or "
                     "--model_api_key_env NAME instead; the workers read the key at setup.")


def agent_config_from_mapping(data: Mapping[str, Any]) -> AgentConfig:
    """Build an `AgentConfig` from plain data (a JSON config file).

    ``model`` is a mapping of `ModelConfig` fields; ``longterm_memory`` a
    mapping with ``backend`` (``"sqlite"`` or ``"firestore"``) and that
    backend's fields; ``compactor`` is ``{"target_fraction": f}`` or null;
    ``retry`` a mapping of `RetryPolicy` fields.

    Raises:
        ConfigError: an unknown key (named) or a value out of range.
    """
    unknown = sorted(set(data) - _AGENT_FIELDS)
    if unknown:
        raise ConfigError(f"unknown AgentConfig field(s): {', '.join(unknown)}; "
                          f"known: {', '.join(sorted(_AGENT_FIELDS))}", field=unknown[0])
    kwargs: dict[str, Any] = dict(data)
    if isinstance(kwargs.get("model"), Mapping):
        kwargs["model"] = ModelConfig.from_mapping(kwargs["model"])
    if isinstance(kwargs.get("compactor"), Mapping):
        kwargs["compactor"] = LruCompactor(**kwargs["compactor"])
    if isinstance(kwargs.get("longterm_memory"), Mapping):
        kwargs["longterm_memory"] = longterm_config_from_mapping(kwargs["longterm_memory"])
    if isinstance(kwargs.get("call_journal"), Mapping):
        kwargs["call_journal"] = call_journal_config_from_mapping(kwargs["call_journal"])
    if isinstance(kwargs.get("retry"), Mapping):
        retry = dict(kwargs["retry"])
        known = {f.name for f in dataclasses.fields(RetryPolicy)}
        if unknown := sorted(set(retry) - known):
            raise ConfigError(f"unknown retry field(s): {', '.join(unknown)}; known: "
                              f"{', '.join(sorted(known))}", field=f"retry.{unknown[0]}")
        kwargs["retry"] = RetryPolicy(**retry)
    config = AgentConfig(**kwargs)
    _warn_if_key_in_config(config)
    return config


def _read_local(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


def _outage(text: str) -> dict[str, int]:
    """``FIRST:COUNT`` (a run of calls), or ``FIRST:DURATION`` (``3s``, ``2500ms``): a span."""
    first, sep, extent = str(text).partition(":")
    if sep and first.isdigit() and int(first) >= 1:
        if extent.isdigit():
            return {"local.outage_first_call": int(first), "local.outage_calls": int(extent)}
        for unit, scale in (("ms", 1), ("s", 1000)):
            number = extent.removesuffix(unit)
            if number != extent and number.isdigit() and int(number) > 0:
                return {"local.outage_first_call": int(first),
                        "local.outage_ms": int(number) * scale}
    raise ConfigError(f"--model_outage must be FIRST:COUNT (a run of calls, e.g. 40:4) or "
                      f"FIRST:DURATION (a span of time from call FIRST, e.g. 40:3s or 40:2500ms) "
                      f"with FIRST >= 1, got {text!r}", field="model_outage")


def _set_model(model: dict[str, Any], key: str, value: Any) -> None:
    """Set a flag's `ModelConfig` field, or its `LocalModelConfig` field for ``local.NAME``.

    The flag wins over the ``--agent_config`` file's value, under ``local`` or
    in the file's older flat spelling (``model.NAME``).
    """
    section, dot, name = key.partition(".")
    if not dot:
        model[key] = value
        return
    model.pop(name, None)
    current = model.get(section)
    model[section] = {**(current if isinstance(current, Mapping) else {}), name: value}


def _number_flag(flag: str, text: object, kind: type) -> int | float:
    """A numeric flag's value; a ConfigError naming the flag when it is not a number."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return kind(text)  # type: ignore[no-any-return]  # a JSON number passed through
    try:
        return kind(str(text).strip())  # type: ignore[no-any-return]
    except ValueError:
        noun = "a whole number" if kind is int else "a number"
        raise ConfigError(f"--{flag} must be {noun}, got {text!r}", field=flag) from None


def _journal_flags(given: Callable[[str], Any], data: dict[str, Any]) -> None:
    if given("call_journal_ttl_ms") is not None:
        data["call_journal_ttl_ms"] = given("call_journal_ttl_ms")
    backend = given("call_journal")
    if backend == "none":
        data["call_journal"] = None
    elif backend == "sqlite":
        data["call_journal"] = {"backend": "sqlite", "path": given("call_journal_path")}
    elif backend == "firestore":
        settings = {"backend": "firestore", "project": given("firestore_project"),
                    "database": given("firestore_database"),
                    "collection": given("call_journal_collection")}
        data["call_journal"] = {k: v for k, v in settings.items() if v is not None}


def agent_config_from_flags(values: Mapping[str, Any], *,
                            read_text: Callable[[str], str] = _read_local) -> AgentConfig:
    """Map flag values (and an optional ``--agent_config`` file) onto `AgentConfig`.

    Args:
        values: Flag name -> value, as parsed; absent and None mean "not given".
        read_text: Reads the ``--agent_config`` file; Beam passes one that
            understands ``gs://`` paths.

    Raises:
        ConfigError: a value is missing, unknown or out of range; names the field.
    """
    def given(name: str) -> Any:
        return values.get(name)

    data: dict[str, Any] = {}
    if given("agent_config"):
        try:
            data = json.loads(read_text(given("agent_config")))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--agent_config {given('agent_config')}: cannot read a JSON "
                              f"object: {exc}", field="agent_config") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"--agent_config {given('agent_config')} must hold a JSON object",
                              field="agent_config")
    if given("agent"):
        data["agent"] = given("agent")
    if "agent" not in data:
        raise ConfigError("set --agent (or 'agent' in --agent_config)", field="agent")
    if given("activation_timeout_ms") is not None:
        data["timeout_ms"] = given("activation_timeout_ms")
    if given("max_event_bytes") is not None:
        data["max_event_bytes"] = given("max_event_bytes")
    data.update({key: given(flag) for flag, key, _ in ENGINE_FLAGS if given(flag) is not None})
    retry = dict(data.get("retry") or {})
    retry.update({key: given(flag) for flag, key, _ in RETRY_FLAGS if given(flag) is not None})
    if retry:
        data["retry"] = retry
    model = dict(data.get("model") or {})
    if given("model_provider") is not None:
        model["provider"] = given("model_provider")
    flagged = {key: given(flag) for flag, key, _ in MODEL_FLAGS if given(flag) is not None}
    if any(source in flagged for source in API_KEY_SOURCES):
        # A flag naming where the key lives replaces whichever the file names.
        for source in API_KEY_SOURCES:
            model.pop(source, None)
    if given("model_latency_ms") is not None:
        flagged["local.latency_ms"] = given("model_latency_ms")
    if given("model_outage") is not None:
        flagged.update(_outage(given("model_outage")))
    for flag, key, kind, _ in FLOW_FLAGS:
        if given(flag) is not None:
            flagged[key] = _number_flag(flag, given(flag), kind)
    for key, value in flagged.items():
        _set_model(model, key, value)
    data["model"] = model
    for flag, key, _ in BUDGET_FLAGS:
        if given(flag) is not None:
            data[key] = _number_flag(flag, given(flag), int)
    _journal_flags(given, data)
    backend = given("longterm_store")
    if backend == "none":
        data["longterm_memory"] = None
    elif backend is not None:
        store: dict[str, Any] = {"backend": backend}
        store.update({key: given(flag) for flag, key, _ in STORE_FLAGS
                      if given(flag) is not None})
        data["longterm_memory"] = store
    config = agent_config_from_mapping(data)
    tracing = tracing_config_from_flags(given)
    return config if tracing is None else dataclasses.replace(config, tracing=tracing)
