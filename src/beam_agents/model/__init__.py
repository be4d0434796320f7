"""Model access for agents: the replay cache, its key, the facade, admission, budgets, breakers.

See seed 002 and DESIGN's invariants 3, 11 and 12: the facade looks up the
replay cache and the journal before admission and the circuit breaker, so
replays are byte-identical, never pay twice and are never counted as paid; a
429 slows admission and never trips the breaker.
Providers live in `beam_agents.model.providers` and load their SDKs lazily.
"""

from beam_agents.model._admission import ProviderAdmission, WaitLedger, estimate_tokens
from beam_agents.model._breaker import BreakerRegistry, BreakerState, CircuitBreaker
from beam_agents.model._budget import DEFAULT_BUDGET_WINDOW_MS, TokenBudget
from beam_agents.model._cache_key import compute_cache_key
from beam_agents.model._config import (
    API_KEY_SOURCES,
    BreakerConfig,
    LocalModelConfig,
    ModelConfig,
)
from beam_agents.model._facade import ModelClient, ModelFacade
from beam_agents.model._journal import (
    DEFAULT_JOURNAL_TTL_MS,
    MAX_JOURNAL_RESPONSE_BYTES,
    MAX_REQUEST_SUMMARY_BYTES,
    CallJournal,
    CallJournalConfig,
    InMemoryCallJournal,
    JournalEntry,
    JournalWrite,
    LearnedRateRecord,
    journal_entry,
    journal_key,
    request_summary,
)
from beam_agents.model._provider import ModelProvider, account_digest, provider_account
from beam_agents.model._rate_memory import RateMemory
from beam_agents.model._replay_cache import (
    MAX_BLOB_BYTES,
    MAX_ENTRIES,
    TTL_MS,
    CachedResponse,
    ReplayCache,
)
from beam_agents.model._send_gate import RequestHeldBack, check_before_send
from beam_agents.model._types import Message, ModelRequest, ModelResponse, RateLimits, ToolCall

__all__ = [
    "API_KEY_SOURCES",
    "DEFAULT_BUDGET_WINDOW_MS",
    "DEFAULT_JOURNAL_TTL_MS",
    "MAX_BLOB_BYTES",
    "MAX_ENTRIES",
    "MAX_JOURNAL_RESPONSE_BYTES",
    "MAX_REQUEST_SUMMARY_BYTES",
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
    "LearnedRateRecord",
    "LocalModelConfig",
    "Message",
    "ModelClient",
    "ModelConfig",
    "ModelFacade",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "ProviderAdmission",
    "RateLimits",
    "RateMemory",
    "ReplayCache",
    "RequestHeldBack",
    "TokenBudget",
    "ToolCall",
    "WaitLedger",
    "account_digest",
    "check_before_send",
    "compute_cache_key",
    "estimate_tokens",
    "journal_entry",
    "journal_key",
    "provider_account",
    "request_summary",
]
