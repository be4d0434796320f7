"""AgentConfig: everything an activation needs besides state and the event.

Configs are frozen, validated and picklable (DoFns and Flink functions are
pickled to workers); they hold no clients and name no backend module: the
edge (`beam_agents.hosting`) maps flags and JSON onto them and turns them into
clients. The library never reads environment variables.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from beam_agents.errors import ConfigError
from beam_agents.memory import Compactor, LongtermStoreConfig, LruCompactor
from beam_agents.model import ModelConfig

__all__ = ["AgentConfig"]

_MAX_TIMEOUT_MS = 3_600_000


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentConfig:
    """Which agent runs, against which model and stores, within which limits.

    Attributes:
        agent: ``"package.module:callable"``; the callable takes an
            `AgentContext` and may be sync or async.
        model: The model provider configuration.
        compactor: Frees working memory at the caps (seed 000); picklable.
            None means warn and reject at the caps without compacting.
        timeout_ms: Wall time one activation may take before it fails with
            stage TIMEOUT; in [1, 3 600 000].
        longterm_memory: The long-term store, or None to disable
            ``ctx.memory.longterm`` (seed 000, M18).
        max_intent_bytes: Largest payload an intent may carry; a larger one
            fails the activation with stage OUTPUT (Pub/Sub allows 10 MB).
        traceback_bytes: Bound on the traceback kept in an error record.
    """

    agent: str
    model: ModelConfig = field(default_factory=ModelConfig)
    compactor: Compactor | None = field(default_factory=LruCompactor)
    timeout_ms: int = 60_000
    longterm_memory: LongtermStoreConfig | None = None
    max_intent_bytes: int = 1_000_000
    traceback_bytes: int = 4096

    def __post_init__(self) -> None:
        if not isinstance(self.agent, str) or ":" not in self.agent:
            raise ConfigError(
                f"AgentConfig.agent must look like 'package.module:callable', got {self.agent!r}",
                field="AgentConfig.agent",
            )
        if not isinstance(self.model, ModelConfig):
            raise ConfigError("AgentConfig.model must be a ModelConfig", field="AgentConfig.model")
        if self.compactor is not None and not isinstance(self.compactor, Compactor):
            raise ConfigError("AgentConfig.compactor must have compact(memory) or be None",
                              field="AgentConfig.compactor")
        for name, low, high in (("timeout_ms", 1, _MAX_TIMEOUT_MS),
                                ("max_intent_bytes", 1, 10_000_000),
                                ("traceback_bytes", 0, 1_000_000)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ConfigError(f"AgentConfig.{name} must be an int in [{low}, {high}], "
                                  f"got {value!r}", field=f"AgentConfig.{name}")
        if self.longterm_memory is not None and not callable(
                getattr(self.longterm_memory, "open", None)):
            raise ConfigError("AgentConfig.longterm_memory must be a store config with open(), "
                              "e.g. SqliteLongtermConfig", field="AgentConfig.longterm_memory")
