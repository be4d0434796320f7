"""Model backends behind the `ModelProvider` port, built from a `ModelConfig`.

`LocalModel` (stdlib only) is imported eagerly. The HTTP backends import
their SDKs (httpx, google-genai) only when built or named, so importing
`beam_agents.model` never loads them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from beam_agents.model._config import LocalModelConfig, ModelConfig
from beam_agents.model._provider import ModelProvider
from beam_agents.model.providers.local import LocalModel

if TYPE_CHECKING:
    from beam_agents.model.providers.gemini import GeminiProvider
    from beam_agents.model.providers.openai_compat import OpenAICompatibleProvider

__all__ = ["GeminiProvider", "LocalModel", "OpenAICompatibleProvider", "build_provider"]

_LAZY = {
    "GeminiProvider": "beam_agents.model.providers.gemini",
    "OpenAICompatibleProvider": "beam_agents.model.providers.openai_compat",
}


def build_provider(config: ModelConfig, *, api_key: str | None = None) -> ModelProvider:
    """Build the backend `config` names; call at worker setup, never in `__init__`.

    Building does no network I/O (clients connect on first use); a local
    script file is read and validated here, so a bad script fails at setup.

    Args:
        config: Which backend, and its settings.
        api_key: The key the host read from ``config.api_key_secret`` or
            ``config.api_key_env`` on the worker; it wins over
            ``config.api_key``. Passed here, not through the config, so it is
            never pickled.
    """
    key = api_key if api_key is not None else config.api_key
    if config.provider == "local":
        local = config.local
        if local.script_path is not None:
            return LocalModel.from_script_file(local.script_path, model_id=config.model_id,
                                               latency_ms=local.latency_ms,
                                               outage=_outage(local),
                                               outage_ms=local.outage_ms,
                                               quota_rps=local.quota_rps)
        return LocalModel(config.model_id, latency_ms=local.latency_ms, outage=_outage(local),
                          outage_ms=local.outage_ms, quota_rps=local.quota_rps)
    if config.provider == "openai":
        # Lazy imports keep httpx / google-genai unloaded until a backend is built.
        from beam_agents.model.providers.openai_compat import (  # noqa: PLC0415
            OpenAICompatibleProvider,
        )

        assert config.base_url is not None  # ModelConfig defaults it for openai
        return OpenAICompatibleProvider(model_id=config.model_id, base_url=config.base_url,
                                        api_key=key, timeout_s=config.timeout_s)
    from beam_agents.model.providers.gemini import GeminiProvider  # noqa: PLC0415

    return GeminiProvider(model_id=config.model_id, project=config.project,
                          location=config.location, api_key=key,
                          base_url=config.base_url, timeout_s=config.timeout_s)


def _outage(local: LocalModelConfig) -> range:
    first = local.outage_first_call
    calls = 1 if local.outage_ms else local.outage_calls  # a span of time starts at `first`
    return range(first, first + calls) if first and calls else range(0)


def __getattr__(name: str) -> Any:
    # Importing a backend by name is the moment its SDK gets loaded.
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module_name), name)
