"""A config becomes a running runtime on the worker: the agent, its clients, its API key.

Keys are read here, never carried in a config; docs/design.md, "The edge wiring"
and "Model API keys".
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable
from typing import Any

from beam_agents.errors import ConfigError
from beam_agents.metrics import MetricsSink
from beam_agents.model import ModelConfig, ModelProvider
from beam_agents.model.providers import build_provider
from beam_agents.runtime import ActivationRuntime, AgentConfig

__all__ = ["load_agent", "start_runtime", "wall_ms"]


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


def wall_ms() -> int:
    """The worker's processing time, for the hosts: retry backoff waits on the wall clock."""
    return int(time.time() * 1000)
