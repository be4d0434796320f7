"""Pins the public surface: an API change shows up here as a diff (STYLE)."""

from __future__ import annotations

import importlib

import pytest

from beam_agents import errors, memory, runtime
from beam_agents._proto import error_record_pb2, event_pb2, intent_pb2, longterm_pb2

PUBLIC = {
    "beam_agents.memory": [
        "DEFAULT_MAX_ITEMS", "DEFAULT_SEARCH_LIMIT", "HARD_CAP_BYTES", "SOFT_CAP_BYTES",
        "STATE_SCHEMA_VERSION", "BackgroundWork", "BufferedLongtermStore", "Compactor",
        "DiscardReceipt", "DiscardingLongtermStore", "FlushReceipt", "LongtermHandle",
        "LongtermRecord", "LongtermStore", "LongtermStoreConfig", "LruCompactor", "Memory",
        "MemoryContractError", "MemoryOverflow", "MemoryUnavailable", "PendingUpserts",
        "RingCorruptError", "Scope", "ScopeViolation", "TaskRegistry", "WriteCoordinator",
        "WriteOutcome", "WriteReceipt", "WriteRequest",
        # The backend kit: the validators, the seq guard and the pending buffer's check.
        "LimitCheck", "as_batch", "check_scope", "copy_record", "seq_guard_allows",
        "validate_entity_key", "validate_key", "validate_record", "validate_search",
        "validate_value",
    ],
    "beam_agents.model": [
        "API_KEY_SOURCES", "DEFAULT_BUDGET_WINDOW_MS", "DEFAULT_JOURNAL_TTL_MS",
        "BreakerConfig", "BreakerRegistry", "BreakerState", "CachedResponse", "CallJournal",
        "CallJournalConfig", "CircuitBreaker", "InMemoryCallJournal", "JournalEntry",
        "JournalWrite", "MAX_BLOB_BYTES", "MAX_ENTRIES", "Message", "ModelConfig", "ModelFacade",
        "ModelProvider", "ModelRequest", "ModelResponse", "ReplayCache", "TTL_MS", "ToolCall",
        "compute_cache_key",
        # Flow control and cost (invariants 11 and 12).
        "ProviderAdmission", "RateLimits", "TokenBudget", "WaitLedger", "estimate_tokens",
    ],
    "beam_agents.model.providers": [
        "GeminiProvider", "LocalModel", "OpenAICompatibleProvider", "build_provider",
    ],
    "beam_agents.runtime": [
        # What an agent author writes against, and the config and retry policy hosts build.
        "AgentConfig", "AgentContext", "AgentEvent", "Intent", "ErrorRecord", "RetryPolicy",
        "encode_payload",
        # The activation and its outcomes, as hosts and agent tests see them.
        "ActivationRuntime", "Committed", "Failed", "KeyedState", "Outcome",
        # The per-key engine and the keyed state a host binds for it.
        "CELLS", "QUEUE_CELLS", "BagCell", "InputDecoder", "KeyCells", "KeyRuns", "KeyedEngine",
        "QueueCell", "StateCell", "StateCells", "Step", "ValueCell",
        # Event-time order (invariant 10).
        "EARLIEST_MS", "EventOrdering", "queue_order",
        # The JSON lines of events, intents and dead letters.
        "decode_event_json", "decode_input", "error_from_json", "error_to_json", "event_to_json",
        "intent_to_json",
        # Input bounds (invariant 8): the size limit and the bounded line reader.
        "MAX_EVENT_BYTES", "Oversize", "read_lines",
    ],
    "beam_agents.hosting": [
        "add_agent_flags", "agent_config_from_flags", "agent_config_from_mapping",
        "call_journal_config_from_mapping", "load_agent", "start_runtime", "wall_ms",
    ],
    "beam_agents.testing": [
        "DEFAULT_EVENT_TIME_MS", "InMemoryCallJournal", "InMemoryLongtermConfig",
        "InMemoryLongtermStore", "LocalModel", "Reply", "ScriptExhaustedError", "ScriptedModel",
        "make_event", "make_events", "run_activation",
    ],
    "beam_agents.errors": [
        "ActivationTimeoutError", "BeamAgentsError", "ConfigError", "EventDecodeError",
        "IntentTooLargeError", "JournalCorruptError", "JournalUnavailable", "MemoryContractError",
        "MemoryOverflow", "MemoryUnavailable", "MemoryVersionError", "ModelError",
        "ProviderRejected",
        "ProviderUnavailable", "RingCorruptError", "ScopeViolation", "StateCorruptError",
        "StateError", "StoreError", "StoreLimitError", "UnsupportedSchemaVersionError",
        "BudgetExceededError", "QuotaExhaustedError", "RateLimitedError",
        # Bounded backlogs and event-time order (invariants 4 and 10).
        "BacklogFullError", "LateEventError",
    ],
    "beam_agents.metrics": ["BufferedMetrics", "Distribution", "MetricsSink", "NoopMetrics",
                            "RecordingMetrics"],
    "beam_agents.stores": [
        "FirestoreCallJournal", "FirestoreCallJournalConfig", "FirestoreLongtermConfig",
        "FirestoreLongtermStore", "InMemoryLongtermConfig", "InMemoryLongtermStore",
        "SqliteCallJournal", "SqliteCallJournalConfig", "SqliteLongtermConfig",
        "SqliteLongtermStore", "call_journal_config_from_mapping", "longterm_config_from_mapping",
    ],
    "beam_agents.beam": [
        "ERRORS", "AgentBatchDoFn", "AgentDoFn", "AgentPipelineOptions", "BeamMetrics",
        "DecodeEvents",
        "agent_config_from_options", "build_pipeline", "check_io", "redrive_subscription", "run",
    ],
    "beam_agents.flink": [
        "ERRORS", "AgentKeyedProcessFunction", "DecodeEvents", "FlinkJobOptions", "FlinkMetrics",
        "agent_stream", "build_job", "environment", "flink_settings", "job_parser", "parse_args",
        "run",
    ],
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_exported_names_are_pinned(module: str) -> None:
    loaded = importlib.import_module(module)
    assert sorted(loaded.__all__) == sorted(PUBLIC[module])
    for name in loaded.__all__:
        assert hasattr(loaded, name), f"{module}.{name} is exported but missing"


def test_every_error_the_library_raises_on_purpose_is_in_one_tree() -> None:
    """The error tree is drawn in one place: each exported error derives from the root."""
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.BeamAgentsError), name


def test_the_wire_types_are_reachable_from_public_modules() -> None:
    assert (runtime.AgentEvent, runtime.Intent, runtime.ErrorRecord, memory.LongtermRecord) == (
        event_pb2.AgentEvent, intent_pb2.Intent, error_record_pb2.ErrorRecord,
        longterm_pb2.LongtermRecord)
