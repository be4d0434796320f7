"""Model access for agents: the replay cache, its key, the facade, breakers, providers.

See seed 002 and DESIGN's invariant 3: the facade looks up the replay cache
before the circuit breaker, so replays are byte-identical and never pay twice.
Providers live in `beam_agents.model.providers` and load their SDKs lazily.
"""

from beam_agents.model._breaker import BreakerRegistry, BreakerState, CircuitBreaker
from beam_agents.model._cache_key import compute_cache_key
from beam_agents.model._config import BreakerConfig, ModelConfig
from beam_agents.model._facade import ModelFacade
from beam_agents.model._journal import (
    CallJournal,
    CallJournalConfig,
    InMemoryCallJournal,
    JournalEntry,
    JournalWrite,
)
from beam_agents.model._provider import ModelProvider
from beam_agents.model._replay_cache import (
    MAX_BLOB_BYTES,
    MAX_ENTRIES,
    TTL_MS,
    CachedResponse,
    ReplayCache,
)
from beam_agents.model._types import Message, ModelRequest, ModelResponse, ToolCall

__all__ = [
    "MAX_BLOB_BYTES",
    "MAX_ENTRIES",
    "TTL_MS",
    "BreakerConfig",
    "BreakerRegistry",
    "BreakerState",
    "CachedResponse",
    "CallJournal",
    "CallJournalConfig",
    "CircuitBreaker",
    "InMemoryCallJournal",
    "JournalEntry",
    "JournalWrite",
    "Message",
    "ModelConfig",
    "ModelFacade",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "ReplayCache",
    "ToolCall",
    "compute_cache_key",
]
