"""A config becomes a running runtime on the worker: the agent, its clients, its API key.

Keys are read here, never carried in a config; docs/decisions/0008-edge-wiring.md
and docs/design.md, "Model API keys".
"""

from __future__ import annotations

import importlib
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

from beam_agents.errors import ConfigError
from beam_agents.memory import BufferedLongtermStore
from beam_agents.metrics import MetricsSink
from beam_agents.model import (
    CallJournal,
    ModelConfig,
    ModelProvider,
    RateMemory,
    provider_account,
)
from beam_agents.model.providers import build_provider
from beam_agents.runtime import Agent, AgentConfig
from beam_agents.runtime._activation import ActivationRuntime
from beam_agents.tracing import Tracer

__all__ = ["load_agent", "model_provider", "start_runtime", "wall_ms"]


def load_agent(reference: str | Callable[..., Any]) -> Callable[..., Any]:
    """Resolve ``"package.module:callable"`` to the agent callable; a callable is returned as is.

    Raises:
        ConfigError: the reference is malformed, the module does not import, or
            the attribute is missing or not callable; names `AgentConfig.agent`.
    """
    if not isinstance(reference, str):
        if not callable(reference):
            raise ConfigError(f"AgentConfig.agent {reference!r} is not callable",
                              field="AgentConfig.agent")
        return reference
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


def model_provider(config: ModelConfig) -> ModelProvider:
    """The provider `config` names, with its API key read from where the config says.

    For a host that wraps the provider before handing it to `start_runtime`
    (``beam-agents replay --shadow`` caps what it pays).

    Raises:
        ConfigError: the API key cannot be read.
    """
    return build_provider(config, api_key=_read_api_key(config))


def start_runtime(config: AgentConfig, *, metrics: MetricsSink | None = None,
                  provider: ModelProvider | None = None,
                  dry_tools: bool = False, store: BufferedLongtermStore | None = None,
                  journal: CallJournal | None = None,
                  clock: Callable[[], float] = time.monotonic) -> ActivationRuntime:
    """Resolve the agent, build the provider and open the store `config` names.

    Hosts call this once per worker instance (``DoFn.setup``, Flink ``open``)
    and `ActivationRuntime.close` once at the end (``teardown``/``close``).
    Building connects nothing: clients connect lazily on first use.

    Args:
        config: What to run.
        metrics: Where the core's counters go.
        provider: A provider to use instead of the one ``config.model`` names,
            e.g. a scripted one in a test; the runtime still closes it.
        dry_tools: Run no tool and reach no MCP server: a tool call with no
            record in the journal stops its activation (``beam-agents replay``).
        store: A long-term store to use instead of the one
            ``config.longterm_memory`` names (a test's private one); the
            runtime closes it.
        journal: A call journal to use instead of the one
            ``config.call_journal`` names; the runtime closes it.
        clock: Monotonic seconds, for the circuit breaker and the scheduler
            (a test's fake clock).

    Raises:
        ConfigError: the agent does not load, or the API key named by
            ``config.model.api_key_env`` / ``api_key_secret`` cannot be read.
        ProviderUnavailable: Secret Manager is unreachable (retriable).
    """
    agent = load_agent(config.agent)
    model = provider if provider is not None else model_provider(config.model)
    if store is None and config.longterm_memory is not None:
        store = config.longterm_memory.open()
    if journal is None and config.call_journal is not None:
        journal = config.call_journal.open()
    # With a journal, what this worker learns of the provider's quota is kept
    # for the next run; each worker keeps its own row (docs/decisions/0007-flow-control.md).
    rates = None if journal is None else RateMemory(
        journal, account=provider_account(model), worker=uuid.uuid4().hex, wall_ms=wall_ms)
    return ActivationRuntime(config, agent=agent, provider=model, store=store, journal=journal,
                             clock=clock, metrics=metrics, rates=rates,
                             tool_sources=[] if dry_tools else _mcp_sources(agent),
                             dry_tools=dry_tools, tracer=_tracer(config, metrics))


def _tracer(config: AgentConfig, metrics: MetricsSink | None) -> Tracer | None:
    """This process's exporter of spans for ``config.tracing``; None when tracing is off.

    Raises:
        ConfigError: tracing is on but the ``otel`` extra is not installed.
    """
    if config.tracing is None:
        return None
    try:
        from beam_agents.otel import OtelTracer  # noqa: PLC0415 - the otel extra
    except ImportError as exc:
        raise ConfigError(f"--otel_exporter_otlp_endpoint needs the OpenTelemetry SDK: "
                          f"pip install 'beam-agents[otel]' on the workers ({exc})",
                          field="otel_exporter_otlp_endpoint") from exc
    return OtelTracer.shared(config.tracing, metrics)


def _mcp_sources(agent: Callable[..., Any]) -> list[Any]:
    """The agent's MCP servers, as tool sources (the ``mcp`` SDK loads only if it has some)."""
    servers = agent.mcp if isinstance(agent, Agent) else ()
    if not servers:
        return []
    from beam_agents.mcp import McpToolSource  # noqa: PLC0415 - the SDK loads on demand

    return [McpToolSource(server) for server in servers]


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


def wall_ms() -> int:
    """The worker's processing time, for the hosts: retry backoff waits on the wall clock."""
    return int(time.time() * 1000)
