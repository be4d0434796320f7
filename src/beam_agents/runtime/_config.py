"""AgentConfig: everything an activation needs besides state and the event.

Configs are frozen, validated and picklable (DoFns and Flink functions are
pickled to workers); they hold no clients and name no backend module: the
edge (`beam_agents.hosting`) maps flags and JSON onto them and turns them into
clients. The library never reads environment variables.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from beam_agents._checks import require_int
from beam_agents.errors import ConfigError
from beam_agents.memory import Compactor, LongtermStoreConfig, LruCompactor
from beam_agents.model import (
    DEFAULT_BUDGET_WINDOW_MS,
    DEFAULT_JOURNAL_TTL_MS,
    CallJournalConfig,
    ModelConfig,
)
from beam_agents.runtime._retry import RetryPolicy
from beam_agents.tracing import TracingConfig

__all__ = ["MAX_EVENT_BYTES", "AgentConfig"]

_MAX_TIMEOUT_MS = 3_600_000
#: The default input-element limit: 1 MiB, as large as most event buses carry.
MAX_EVENT_BYTES = 1 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentConfig:
    """Which agent runs, against which model and stores, within which limits.

    Attributes:
        agent: The agent: a callable taking an `AgentContext`, sync or async,
            or the ``"package.module:callable"`` that names one. A pipeline
            pickles its config onto the workers, so give it the string (or a
            module-level function); a test may pass any callable.
        model: The model provider configuration.
        compactor: Frees working memory when it reaches its caps; picklable.
            None means warn and reject at the caps without compacting.
        timeout_ms: Wall time one activation may take before it fails with
            stage TIMEOUT; in [1, 3 600 000].
        longterm_memory: The long-term store, or None to disable
            ``ctx.memory.longterm``.
        max_intent_bytes: Largest payload an intent may carry; a larger one
            fails the activation with stage OUTPUT (Pub/Sub allows 10 MB).
        traceback_bytes: Bound on the traceback kept in an error record.
        max_event_bytes: Largest input element (``--max_event_bytes``), in
            [1 024, 67 108 864]; 1 MiB by default. A larger one is a DECODE
            dead letter holding its size, its sha256 and a 4 KiB prefix, and
            never reaches the agent or keyed state.
        max_in_flight: Activations of different keys a worker runs at once
            (``--max_in_flight``), in [1, 10 000]; a key never runs two.
        agent_threads: Threads for sync agents (``--agent_threads``), in
            [1, 10 000]; a sync agent holds one for its whole activation, so
            fewer than `max_in_flight` caps how many sync agents overlap.
        max_queued_per_key: Events one key may hold queued, its running one
            included (``--max_queued_per_key``), in [1, 10 000 000]; 10 000 by
            default. The key's next event past it is a BACKLOG dead letter
            carrying the event, so keyed state stays bounded.
        retry: When a retriable failure is retried and when it gives up.
        call_journal: The durable model-call journal, which lets a retried
            activation replay the answers it already paid for, or None.
        call_journal_ttl_ms: How long a journal entry lives
            (``--call_journal_ttl_ms``), in [60 000, 31 536 000 000]; a week
            by default, so a restore from a savepoint up to a week old
            replays instead of paying again.
        max_tokens_per_entity: Tokens (prompt plus completion) one entity may
            pay for per budget window (``--max_tokens_per_entity``), in
            [1, 10**12]; past it the activation is a BUDGET dead letter and
            nothing more is paid for the entity until the window resets.
            Replayed answers are never counted again. None: no budget.
        budget_window_ms: The budget window, in event time
            (``--budget_window_ms``), in [60 000, 31 536 000 000]; a day by
            default. Windows are aligned to multiples of it.
        max_tool_calls_per_activation: Tool calls one activation may make,
            the tool loop's included (``--max_tool_calls_per_activation``), in
            [1, 10 000]; 32 by default. The next one fails the activation with
            stage TOOL, before the tool runs.
        max_pending_waits: Waits for an answer one entity may have pending
            (``--max_pending_waits``), in [1, 1 000]; 16 by default. The next
            one fails the activation with stage WAIT.
        tracing: Where spans and GenAI metrics are exported
            (``--otel_exporter_otlp_endpoint``); None, the default: tracing off.
    """

    agent: str | Callable[..., Any]
    model: ModelConfig = field(default_factory=ModelConfig)
    compactor: Compactor | None = field(default_factory=LruCompactor)
    timeout_ms: int = 60_000
    longterm_memory: LongtermStoreConfig | None = None
    max_intent_bytes: int = 1_000_000
    traceback_bytes: int = 4096
    max_event_bytes: int = MAX_EVENT_BYTES
    max_in_flight: int = 64
    agent_threads: int = 64
    max_queued_per_key: int = 10_000
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    call_journal: CallJournalConfig | None = None
    call_journal_ttl_ms: int = DEFAULT_JOURNAL_TTL_MS
    max_tokens_per_entity: int | None = None
    budget_window_ms: int = DEFAULT_BUDGET_WINDOW_MS
    max_tool_calls_per_activation: int = 32
    max_pending_waits: int = 16
    tracing: TracingConfig | None = None

    def __post_init__(self) -> None:
        if isinstance(self.agent, str):
            if ":" not in self.agent:
                raise ConfigError(f"AgentConfig.agent must look like 'package.module:callable', "
                                  f"got {self.agent!r}", field="AgentConfig.agent")
        elif not callable(self.agent):
            raise ConfigError(f"AgentConfig.agent must be a callable taking an AgentContext, or "
                              f"'package.module:callable', got {self.agent!r}",
                              field="AgentConfig.agent")
        if not isinstance(self.model, ModelConfig):
            raise ConfigError("AgentConfig.model must be a ModelConfig", field="AgentConfig.model")
        if self.compactor is not None and not isinstance(self.compactor, Compactor):
            raise ConfigError("AgentConfig.compactor must have compact(memory) or be None",
                              field="AgentConfig.compactor")
        for name, flag, low, high in (("timeout_ms", "activation_timeout_ms", 1, _MAX_TIMEOUT_MS),
                                      ("max_intent_bytes", None, 1, 10_000_000),
                                      ("traceback_bytes", None, 0, 1_000_000),
                                      ("max_event_bytes", "max_event_bytes", 1024, 1 << 26),
                                      ("max_in_flight", "max_in_flight", 1, 10_000),
                                      ("agent_threads", "agent_threads", 1, 10_000),
                                      ("max_queued_per_key", "max_queued_per_key", 1,
                                       10_000_000),
                                      ("call_journal_ttl_ms", "call_journal_ttl_ms", 60_000,
                                       31_536_000_000),
                                      ("budget_window_ms", "budget_window_ms", 60_000,
                                       31_536_000_000),
                                      ("max_tool_calls_per_activation",
                                       "max_tool_calls_per_activation", 1, 10_000),
                                      ("max_pending_waits", "max_pending_waits", 1, 1_000)):
            require_int(getattr(self, name), low=low, high=high, field=f"AgentConfig.{name}",
                        name=f"AgentConfig.{name}" + (f" (--{flag})" if flag else ""))
        if self.max_tokens_per_entity is not None:
            require_int(self.max_tokens_per_entity, low=1, high=10**12,
                        field="AgentConfig.max_tokens_per_entity",
                        name="AgentConfig.max_tokens_per_entity (--max_tokens_per_entity)")
        if self.call_journal is not None and not callable(getattr(self.call_journal, "open",
                                                                    None)):
            raise ConfigError("AgentConfig.call_journal must be a journal config with open(), "
                              "e.g. SqliteCallJournalConfig", field="AgentConfig.call_journal")
        if self.tracing is not None and not isinstance(self.tracing, TracingConfig):
            raise ConfigError("AgentConfig.tracing must be a TracingConfig or None",
                              field="AgentConfig.tracing")
        if not isinstance(self.retry, RetryPolicy):
            raise ConfigError("AgentConfig.retry must be a RetryPolicy", field="AgentConfig.retry")
        if self.longterm_memory is not None and not callable(
                getattr(self.longterm_memory, "open", None)):
            raise ConfigError("AgentConfig.longterm_memory must be a store config with open(), "
                              "e.g. SqliteLongtermConfig", field="AgentConfig.longterm_memory")

    @property
    def agent_name(self) -> str:
        """The agent as ``"package.module:callable"``: the string given, or the callable's own."""
        return _agent_name(self.agent)


def _agent_name(agent: str | Callable[..., Any]) -> str:
    """``"package.module:callable"`` for an agent given as that string or as the callable."""
    if isinstance(agent, str):
        return agent
    function = getattr(agent, "function", agent)  # an `Agent` wraps its function
    module = getattr(function, "__module__", None) or "?"
    name = getattr(function, "__qualname__", None) or type(function).__qualname__
    return f"{module}:{name}"
