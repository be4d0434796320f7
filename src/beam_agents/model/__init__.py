"""Model access for agents: the replay cache, its key, the facade, admission, budgets, breakers.

See seed 002 and DESIGN's invariants 3, 11 and 12: the facade looks up the
replay cache and the journal before admission and the circuit breaker, so
replays are byte-identical, never pay twice and are never counted as paid; a
429 slows admission and never trips the breaker.
Providers live in `beam_agents.model.providers` and load their SDKs lazily.

A call-journal backend implements the port (`CallJournal`) and builds on the
journal's entries and keys in `beam_agents.backend`. Those were exported here
before; they still resolve, with a DeprecationWarning naming the new path,
until the next release.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

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
    MAX_REQUEST_SUMMARY_BYTES,
    CallJournal,
    CallJournalConfig,
    InMemoryCallJournal,
    LearnedRateRecord,
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
    "provider_account",
    "request_summary",
]

#: The journal's entries and keys, now `beam_agents.backend`'s, and the module that defines them.
_MOVED_TO_BACKEND = dict.fromkeys(
    ["MAX_JOURNAL_RESPONSE_BYTES", "JournalEntry", "JournalWrite", "journal_entry", "journal_key"],
    "beam_agents.model._journal")


def __getattr__(name: str) -> Any:
    # A kit name at its old path keeps working for one release, with a
    # warning that points at the caller's line (PEP 562).
    home = _MOVED_TO_BACKEND.get(name)
    if home is None:
        raise AttributeError(f"module 'beam_agents.model' has no attribute {name!r}")
    warnings.warn(f"beam_agents.model.{name} is now beam_agents.backend.{name}; the old path "
                  "goes in the next release", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(home), name)
