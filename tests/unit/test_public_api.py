"""Pins the public surface: an API change shows up here as a diff (STYLE)."""

from __future__ import annotations

import importlib

import pytest

PUBLIC = {
    "beam_agents.memory": [
        "DEFAULT_MAX_ITEMS", "DEFAULT_SEARCH_LIMIT", "HARD_CAP_BYTES", "SOFT_CAP_BYTES",
        "STATE_SCHEMA_VERSION", "BackgroundWork", "Compactor", "DiscardReceipt",
        "DiscardingLongtermStore", "FlushReceipt", "LongtermHandle", "LongtermStore",
        "LongtermStoreConfig", "LruCompactor", "Memory", "MemoryContractError", "MemoryOverflow",
        "MemoryUnavailable", "RingCorruptError", "Scope", "ScopeViolation", "TaskRegistry",
        "WriteCoordinator", "WriteOutcome", "WriteReceipt", "WriteRequest",
    ],
    "beam_agents.model": [
        "MAX_BLOB_BYTES", "MAX_ENTRIES", "TTL_MS", "BreakerConfig", "BreakerRegistry",
        "BreakerState", "CachedResponse", "CircuitBreaker", "Message", "ModelConfig",
        "ModelFacade", "ModelProvider", "ModelRequest", "ModelResponse", "ReplayCache",
        "ToolCall", "compute_cache_key",
    ],
    "beam_agents.model.providers": [
        "GeminiProvider", "LocalModel", "OpenAICompatibleProvider", "build_provider",
    ],
    "beam_agents.runtime": [
        "ActivationRuntime", "AgentConfig", "AgentContext", "Committed", "Failed",
        "IntentTooLargeError", "KeyedState", "Outcome", "add_agent_flags",
        "agent_config_from_flags", "decode_event", "decode_event_json", "decode_event_proto",
        "decode_input", "encode_payload", "error_from_json", "error_record", "error_to_json",
        "event_to_json", "intent_to_json", "load_agent", "stage_of", "start_runtime",
    ],
    "beam_agents.testing": [
        "InMemoryLongtermConfig", "InMemoryLongtermStore", "LocalModel", "run_activation",
    ],
    "beam_agents.stores": [
        "FirestoreLongtermConfig", "FirestoreLongtermStore", "InMemoryLongtermConfig",
        "InMemoryLongtermStore", "SqliteLongtermConfig", "SqliteLongtermStore",
        "longterm_config_from_mapping",
    ],
    "beam_agents.beam": [
        "ERRORS", "AgentDoFn", "AgentPipelineOptions", "BeamMetrics", "DecodeEvents",
        "agent_config_from_options", "build_pipeline", "check_io", "run",
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
