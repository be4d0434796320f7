"""Wiring at the edge: flags and plain data become configs, and configs become clients.

Every host (the Beam DoFn and pipeline, the native Flink job, ``beam-agents
run``, `beam_agents.testing`) goes through this one module to turn what a
user wrote into a running `ActivationRuntime`:

* `add_agent_flags` declares the agent, model and long-term memory flags on
  any argparse parser, so a job moves between engines with its flags unchanged;
* `agent_config_from_flags` and `agent_config_from_mapping` are the single
  place flag values and JSON config files become an `AgentConfig` (STYLE: only
  entry points map options to configs, in one tested function);
* `load_agent` resolves ``"package.module:callable"``;
* `start_runtime` builds the provider and opens the store a config names, in
  ``DoFn.setup()`` / Flink ``open()``, and reads the model's API key there.

The core (`beam_agents.memory`, `beam_agents.model`, `beam_agents.runtime`)
receives the resolved agent and the built clients and names none of the
backends; this module is the only one that knows both sides. The library never
reads ``argv`` or the environment: hosts pass what they parsed. The one
exception is here, at the edge: `start_runtime` reads the environment
variable ``ModelConfig.api_key_env`` names, on the worker.

API keys never travel in the job graph: a config names where the key lives
(``--model_api_key_secret``, ``--model_api_key_env``) and `start_runtime`
reads it on the worker and hands it to the provider, never to a config. A
key written into ``--agent_config`` still works, with a warning.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from beam_agents.errors import ConfigError
from beam_agents.memory import LruCompactor
from beam_agents.metrics import MetricsSink
from beam_agents.model import API_KEY_SOURCES, ModelConfig, ModelProvider
from beam_agents.model.providers import build_provider
from beam_agents.runtime import ActivationRuntime, AgentConfig, RetryPolicy
from beam_agents.stores import call_journal_config_from_mapping, longterm_config_from_mapping

__all__ = [
    "add_agent_flags",
    "agent_config_from_flags",
    "agent_config_from_mapping",
    "call_journal_config_from_mapping",
    "load_agent",
    "start_runtime",
    "wall_ms",
]

_log = logging.getLogger(__name__)

#: flag, ModelConfig field, help
_MODEL_FLAGS = (
    ("model_id", "model_id", "Model name, e.g. gemini-2.5-flash."),
    ("model_project", "project", "Google Cloud project for Vertex AI."),
    ("model_location", "location", "Vertex AI region, e.g. us-central1."),
    ("model_base_url", "base_url", "OpenAI-compatible server root."),
    ("model_script", "script_path", "JSONL of scripted replies (local provider)."),
    ("model_api_key_secret", "api_key_secret", "Secret Manager secret version holding the "
     "API key, projects/P/secrets/S/versions/V; each worker reads it at setup, so the key is "
     "never part of the job graph."),
    ("model_api_key_env", "api_key_env", "Name of the environment variable holding the API "
     "key on each worker (local runs, Flink clusters); read at setup."),
    ("secret_manager_endpoint", "secret_manager_endpoint", "Secret Manager endpoint for "
     "--model_api_key_secret instead of Google's: https://... (Private Service Connect, "
     "regional; default credentials) or http://... (a local peer; no credentials sent)."),
)
#: flag, long-term store config field, help
_STORE_FLAGS = (
    ("sqlite_path", "path", "SQLite database file (sqlite backend)."),
    ("firestore_project", "project", "Firestore project (firestore backend)."),
    ("firestore_database", "database", "Firestore database id."),
    ("firestore_collection", "collection", "Root collection for records."),
)
#: flag, AgentConfig field, help: how many activations run at once
_ENGINE_FLAGS = (
    ("max_in_flight", "max_in_flight", "Activations of different keys a worker runs at once "
     "(default 64); a key never runs two."),
    ("agent_threads", "agent_threads", "Threads for sync agents (default 64)."),
    ("max_queued_per_key", "max_queued_per_key", "Events one key may hold queued, its "
     "running one included (default 10000); past it the key's new events are BACKLOG dead "
     "letters, redrivable, instead of keyed state growing without bound."),
)
#: flag, RetryPolicy field, help: what happens while a provider or store is down
_RETRY_FLAGS = (
    ("retry_initial_ms", "retry_initial_ms", "Wait before the first retry of a suspended "
     "activation, in ms (default 1000)."),
    ("retry_max_ms", "retry_max_ms", "Longest wait between retries, in ms (default 60000)."),
    ("max_attempts", "max_attempts", "Attempts before a retriable failure becomes a dead "
     "letter, the first included (default 8)."),
)
#: flag, ModelConfig field, number type, help: flow control and cost (invariants 11, 12)
_FLOW_FLAGS: tuple[tuple[str, str, type, str], ...] = (
    ("model_max_rps", "max_rps", float, "Requests per second each worker sends the model at "
     "most; set it to the provider's quota divided by the workers. Unset: each worker learns "
     "its share from the provider's 429s. A 429's Retry-After always pauses the worker."),
    ("model_max_tpm", "max_tpm", int, "Tokens per minute each worker sends at most (quota "
     "divided by the workers), estimated from each request and corrected by the usage the "
     "provider reports."),
    ("model_price_in_per_mtok", "price_in_per_mtok", float, "Price of a million prompt "
     "tokens; with it the summary estimates the spend."),
    ("model_price_out_per_mtok", "price_out_per_mtok", float, "Price of a million completion "
     "tokens."),
    ("model_quota", "quota_rps", float, "Local provider only: a simulated account quota, in "
     "requests per second per worker; past it the model answers 429 with Retry-After: 1."),
)
#: flag, AgentConfig field, help: the per-entity token budget (invariant 12)
_BUDGET_FLAGS = (
    ("max_tokens_per_entity", "max_tokens_per_entity", "Tokens (prompt + completion) one "
     "entity may pay for per budget window; past it its activations are BUDGET dead letters "
     "and nothing more is paid for it until the window resets. Default: no budget."),
    ("budget_window_ms", "budget_window_ms", "The budget window, in ms of event time, "
     "aligned to multiples of itself (default 86400000, a day)."),
)
_AGENT_FIELDS = frozenset({"agent", "model", "compactor", "timeout_ms", "longterm_memory",
                           "max_intent_bytes", "max_event_bytes", "traceback_bytes",
                           "max_in_flight", "agent_threads", "max_queued_per_key", "retry",
                           "call_journal", "call_journal_ttl_ms", "max_tokens_per_entity",
                           "budget_window_ms"})


def load_agent(reference: str) -> Callable[..., Any]:
    """Resolve ``"package.module:callable"`` to the agent callable.

    Raises:
        ConfigError: the reference is malformed, the module does not import, or
            the attribute is missing or not callable; names `AgentConfig.agent`.
    """
    module_name, sep, attr = reference.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(
            f"AgentConfig.agent must look like 'package.module:callable', got {reference!r}",
            field="AgentConfig.agent",
        )
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"AgentConfig.agent {reference!r}: cannot import {module_name!r}: {exc}",
                          field="AgentConfig.agent") from exc
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise ConfigError(f"AgentConfig.agent {reference!r}: {module_name!r} has no {attr!r}",
                              field="AgentConfig.agent")
    if not callable(target):
        raise ConfigError(f"AgentConfig.agent {reference!r} is not callable",
                          field="AgentConfig.agent")
    return target  # type: ignore[no-any-return]


def start_runtime(config: AgentConfig, *, metrics: MetricsSink | None = None,
                  provider: ModelProvider | None = None) -> ActivationRuntime:
    """Resolve the agent, build the provider and open the store `config` names.

    Hosts call this once per worker instance (``DoFn.setup``, Flink ``open``)
    and `ActivationRuntime.close` once at the end (``teardown``/``close``).
    Building connects nothing: clients connect lazily on first use.

    Args:
        config: What to run.
        metrics: Where the core's counters go.
        provider: A provider to use instead of the one ``config.model`` names,
            e.g. a scripted one in a test; the runtime still closes it.

    Raises:
        ConfigError: the agent does not load, or the API key named by
            ``config.model.api_key_env`` / ``api_key_secret`` cannot be read.
        ProviderUnavailable: Secret Manager is unreachable (retriable).
    """
    agent = load_agent(config.agent)
    model = provider if provider is not None else build_provider(
        config.model, api_key=_read_api_key(config.model))
    store = config.longterm_memory.open() if config.longterm_memory is not None else None
    journal = config.call_journal.open() if config.call_journal is not None else None
    return ActivationRuntime(config, agent=agent, provider=model, store=store, journal=journal,
                             clock=time.monotonic, metrics=metrics)


def _read_api_key(model: ModelConfig) -> str | None:
    """The API key, read on the worker from where `model` says it lives; None if it names none.

    Raises:
        ConfigError: the variable is unset or empty, the secret cannot be
            read as configured, or the key is not one an HTTP header can
            carry. No message holds the key.
        ProviderUnavailable: Secret Manager is unreachable or failing (retriable).
    """
    if model.api_key_env is not None:
        name = model.api_key_env
        key = os.environ.get(name, "").strip()
        if not key:
            raise ConfigError(f"--model_api_key_env names the environment variable {name}, "
                              f"which is not set or empty on this worker; export {name} where "
                              "the workers run (the Flink task managers, the local process), or "
                              "use --model_api_key_secret", field="api_key_env")
        return _header_safe(key, f"environment variable {name}", field="api_key_env")
    if model.api_key_secret is not None:
        from beam_agents._secrets import read_secret_version  # noqa: PLC0415 - loads the client

        key = read_secret_version(model.api_key_secret, endpoint=model.secret_manager_endpoint)
        return _header_safe(key, f"secret version {model.api_key_secret}",
                            field="api_key_secret")
    return model.api_key


def _header_safe(key: str, source: str, *, field: str) -> str:
    # An Authorization header takes visible ASCII only; httpx would fail later,
    # inside an activation, with the offending character in its message.
    if not all("!" <= char <= "~" for char in key):
        raise ConfigError(f"the API key in {source} holds whitespace, control or non-ASCII "
                          "characters, which an HTTP header cannot carry; store the key alone",
                          field=field)
    return key


def _warn_if_key_in_config(config: AgentConfig) -> None:
    if config.model.api_key is not None:
        _log.warning("model.api_key is set in the agent config: the key travels inside the job "
                     "graph (pickled into every worker's DoFn or Flink function, and saved with "
                     "the job). Pass --model_api_key_secret projects/P/secrets/S/versions/V or "
                     "--model_api_key_env NAME instead; the workers read the key at setup.")


def wall_ms() -> int:
    """The worker's processing time, for the hosts: retry backoff waits on the wall clock."""
    return int(time.time() * 1000)


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
    agent.add_argument("--max_event_bytes", type=int, help="Largest input element, in bytes, "
                       "1024 to 67108864 (default 1048576); a larger one is a DECODE dead "
                       "letter with its size, sha256 and first 4 KiB.")
    engine = parser.add_argument_group("concurrency and retries")
    for flag, _, text in (*_ENGINE_FLAGS, *_RETRY_FLAGS):
        engine.add_argument(f"--{flag}", type=int, help=text)
    model = parser.add_argument_group("model")
    model.add_argument("--model_provider", choices=("local", "gemini", "openai"),
                       help="Model provider (default local).")
    for flag, _, text in _MODEL_FLAGS:
        model.add_argument(f"--{flag}", help=text)
    model.add_argument("--model_latency_ms", type=int,
                       help="Simulated latency of each local-provider call, in ms.")
    model.add_argument("--model_outage", metavar="FIRST:COUNT",
                       help="Simulated transient outage of the local provider: its calls "
                       "FIRST..FIRST+COUNT-1 (from 1, per worker) answer 503.")
    flow = parser.add_argument_group("flow control and cost")
    # Read as text and converted in `agent_config_from_flags`, so a bad value
    # is a one-line ConfigError naming the flag, not an argparse usage dump.
    for flag, _, _, text in _FLOW_FLAGS:
        flow.add_argument(f"--{flag}", help=text)
    for flag, _, text in _BUDGET_FLAGS:
        flow.add_argument(f"--{flag}", help=text)
    store = parser.add_argument_group("long-term memory")
    store.add_argument("--longterm_store", choices=("none", "sqlite", "firestore"),
                       help="Long-term memory backend (default none).")
    for flag, _, text in _STORE_FLAGS:
        store.add_argument(f"--{flag}", help=text)
    journal = parser.add_argument_group("call journal")
    journal.add_argument("--call_journal", choices=("none", "sqlite", "firestore"),
                         help="Durable journal of paid model calls, so a retry, crash, restore "
                         "or rerun replays instead of paying again (default none).")
    journal.add_argument("--call_journal_path", help="SQLite file of the journal (sqlite).")
    journal.add_argument("--call_journal_collection", help="Firestore collection of the "
                         "journal (firestore; with --firestore_project/--firestore_database).")
    journal.add_argument("--call_journal_ttl_ms", type=int, help="How long a journal entry "
                         "lives, in ms (default 604800000, a week).")


def _read_local(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


def _outage(text: str) -> tuple[int, int]:
    first, sep, count = str(text).partition(":")
    if sep and first.isdigit() and count.isdigit() and int(first) >= 1:
        return int(first), int(count)
    raise ConfigError(f"--model_outage must be FIRST:COUNT with FIRST >= 1, e.g. 40:4, got "
                      f"{text!r}", field="model_outage")


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
    data.update({key: given(flag) for flag, key, _ in _ENGINE_FLAGS if given(flag) is not None})
    retry = dict(data.get("retry") or {})
    retry.update({key: given(flag) for flag, key, _ in _RETRY_FLAGS if given(flag) is not None})
    if retry:
        data["retry"] = retry
    model = dict(data.get("model") or {})
    if given("model_provider") is not None:
        model["provider"] = given("model_provider")
    flagged = {key: given(flag) for flag, key, _ in _MODEL_FLAGS if given(flag) is not None}
    if any(source in flagged for source in API_KEY_SOURCES):
        # A flag naming where the key lives replaces whichever the file names.
        for source in API_KEY_SOURCES:
            model.pop(source, None)
    model.update(flagged)
    if given("model_latency_ms") is not None:
        model["latency_ms"] = given("model_latency_ms")
    if given("model_outage") is not None:
        model["outage_first_call"], model["outage_calls"] = _outage(given("model_outage"))
    for flag, key, kind, _ in _FLOW_FLAGS:
        if given(flag) is not None:
            model[key] = _number_flag(flag, given(flag), kind)
    data["model"] = model
    for flag, key, _ in _BUDGET_FLAGS:
        if given(flag) is not None:
            data[key] = _number_flag(flag, given(flag), int)
    _journal_flags(given, data)
    backend = given("longterm_store")
    if backend == "none":
        data["longterm_memory"] = None
    elif backend is not None:
        store: dict[str, Any] = {"backend": backend}
        store.update({key: given(flag) for flag, key, _ in _STORE_FLAGS
                      if given(flag) is not None})
        data["longterm_memory"] = store
    return agent_config_from_mapping(data)
