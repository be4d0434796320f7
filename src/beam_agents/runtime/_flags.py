"""The agent's command-line flags, shared by every entry point, and their one mapping.

The Beam pipeline (``AgentPipelineOptions``), the native Flink job and the
Dataflow template all take the same ``--agent``/``--model_*``/
``--longterm_store`` flags, so a job moves between engines with its flags
unchanged. `add_agent_flags` declares them on any argparse parser;
`agent_config_from_flags` is the single place their values become an
`AgentConfig` (STYLE: only entry points map options to configs, in one
tested function). The library itself never reads ``argv`` or the environment.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from beam_agents.errors import ConfigError
from beam_agents.model import ModelConfig
from beam_agents.runtime._config import AgentConfig

__all__ = ["add_agent_flags", "agent_config_from_flags"]

#: flag -> ModelConfig field
_MODEL_FLAGS = (("model_provider", "provider"), ("model_id", "model_id"),
                ("model_project", "project"), ("model_location", "location"),
                ("model_base_url", "base_url"), ("model_script", "script_path"))
#: flag -> long-term store config field
_STORE_FLAGS = (("sqlite_path", "path"), ("firestore_project", "project"),
                ("firestore_database", "database"), ("firestore_collection", "collection"))


def add_agent_flags(parser: argparse.ArgumentParser | Any) -> None:
    """Declare the agent, model and long-term memory flags on `parser`.

    `parser` is an `argparse.ArgumentParser` or anything with its
    ``add_argument_group`` (Beam hands its own parser subclass to
    ``PipelineOptions._add_argparse_args``).
    """
    agent = parser.add_argument_group("agent")
    agent.add_argument("--agent", help="The agent callable, 'package.module:callable'.")
    agent.add_argument("--agent_config", help="JSON file with AgentConfig fields; flags "
                       "given explicitly override it.")
    agent.add_argument("--activation_timeout_ms", type=int, help="Per-activation timeout.")
    model = parser.add_argument_group("model")
    model.add_argument("--model_provider", choices=("local", "gemini", "openai"),
                       help="Model provider (default local).")
    model.add_argument("--model_id", help="Model name, e.g. gemini-2.5-flash.")
    model.add_argument("--model_project", help="Google Cloud project for Vertex AI.")
    model.add_argument("--model_location", help="Vertex AI region, e.g. us-central1.")
    model.add_argument("--model_base_url", help="OpenAI-compatible server root.")
    model.add_argument("--model_script", help="JSONL of scripted replies (local provider).")
    store = parser.add_argument_group("long-term memory")
    store.add_argument("--longterm_store", choices=("none", "sqlite", "firestore"),
                       help="Long-term memory backend (default none).")
    store.add_argument("--sqlite_path", help="SQLite database file (sqlite backend).")
    store.add_argument("--firestore_project", help="Firestore project (firestore backend).")
    store.add_argument("--firestore_database", help="Firestore database id.")
    store.add_argument("--firestore_collection", help="Root collection for records.")


def _read_local(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


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
    def flag(name: str) -> Any:
        return values.get(name)

    data: dict[str, Any] = {}
    if flag("agent_config"):
        try:
            data = json.loads(read_text(flag("agent_config")))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--agent_config {flag('agent_config')}: cannot read a JSON "
                              f"object: {exc}", field="agent_config") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"--agent_config {flag('agent_config')} must hold a JSON object",
                              field="agent_config")
    if flag("agent"):
        data["agent"] = flag("agent")
    if "agent" not in data:
        raise ConfigError("set --agent (or 'agent' in --agent_config)", field="agent")
    if flag("activation_timeout_ms") is not None:
        data["timeout_ms"] = flag("activation_timeout_ms")
    model = dict(data.get("model") or {})
    model.update({key: flag(name) for name, key in _MODEL_FLAGS if flag(name) is not None})
    data["model"] = ModelConfig.from_mapping(model)
    backend = flag("longterm_store")
    if backend == "none":
        data["longterm_memory"] = None
    elif backend is not None:
        store: dict[str, Any] = {"backend": backend}
        store.update({key: flag(name) for name, key in _STORE_FLAGS if flag(name) is not None})
        data["longterm_memory"] = store
    return AgentConfig.from_mapping(data)
