"""AgentPipelineOptions: the pipeline's flags, and their one mapping onto AgentConfig.

Names are snake_case and mirrored one-to-one by ``flex_template.json``
parameters (a test checks both directions). Exactly one input (a Pub/Sub
subscription or files) is required; each output goes to a Pub/Sub topic or
to a file path.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from apache_beam.options.pipeline_options import PipelineOptions

from beam_agents.errors import ConfigError
from beam_agents.model import ModelConfig
from beam_agents.runtime import AgentConfig

__all__ = ["AgentPipelineOptions", "agent_config_from_options", "check_io"]


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


def _read_json(path: str) -> dict[str, Any]:
    from apache_beam.io.filesystems import FileSystems  # noqa: PLC0415 - reads gs:// too

    with FileSystems.open(path) as handle:
        data = json.loads(handle.read())
    if not isinstance(data, dict):
        raise ConfigError(f"--agent_config {path} must hold a JSON object", field="agent_config")
    return data


def agent_config_from_options(options: PipelineOptions) -> AgentConfig:
    """The single mapping from flags (and an optional config file) to AgentConfig.

    Raises:
        ConfigError: a value is missing, unknown or out of range; names the field.
    """
    opts = options.view_as(AgentPipelineOptions)
    data: dict[str, Any] = _read_json(opts.agent_config) if opts.agent_config else {}
    if opts.agent:
        data["agent"] = opts.agent
    if "agent" not in data:
        raise ConfigError("set --agent (or 'agent' in --agent_config)", field="agent")
    if opts.activation_timeout_ms is not None:
        data["timeout_ms"] = opts.activation_timeout_ms
    model = dict(data.get("model") or {})
    for flag, key in (("model_provider", "provider"), ("model_id", "model_id"),
                      ("model_project", "project"), ("model_location", "location"),
                      ("model_base_url", "base_url"), ("model_script", "script_path")):
        if getattr(opts, flag) is not None:
            model[key] = getattr(opts, flag)
    data["model"] = ModelConfig.from_mapping(model)
    backend = opts.longterm_store
    if backend == "none":
        data["longterm_memory"] = None
    elif backend is not None:
        store: dict[str, Any] = {"backend": backend}
        for flag, key in (("sqlite_path", "path"), ("firestore_project", "project"),
                          ("firestore_database", "database"),
                          ("firestore_collection", "collection")):
            if getattr(opts, flag) is not None:
                store[key] = getattr(opts, flag)
        data["longterm_memory"] = store
    return AgentConfig.from_mapping(data)
