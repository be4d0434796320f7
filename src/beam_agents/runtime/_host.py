"""Starting a runtime from a config: what every host does in setup()/open()."""

from __future__ import annotations

import time

from beam_agents.metrics import MetricsSink
from beam_agents.runtime._activation import ActivationRuntime
from beam_agents.runtime._config import AgentConfig

__all__ = ["start_runtime"]


def start_runtime(config: AgentConfig, *, metrics: MetricsSink | None = None) -> ActivationRuntime:
    """Build the provider and open the long-term store for `config`, then the runtime.

    Hosts call this once per worker instance (``DoFn.setup``, Flink ``open``)
    and `ActivationRuntime.close` once at the end (``teardown``/``close``). The
    provider SDK and the store client are imported only here, and only for the
    backend the config names, so the core stays free of them.
    """
    from beam_agents.model.providers import build_provider  # noqa: PLC0415 - edges load lazily

    provider = build_provider(config.model)
    store = config.longterm_memory.open() if config.longterm_memory is not None else None
    return ActivationRuntime(config, provider=provider, store=store, clock=time.monotonic,
                             metrics=metrics)
