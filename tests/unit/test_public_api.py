"""Pins the public surface: an API change shows up here as a diff (STYLE)."""

from __future__ import annotations

import importlib
import inspect
import re

import pytest

from beam_agents import errors, memory, runtime
from beam_agents._proto import error_record_pb2, event_pb2, intent_pb2, longterm_pb2

#: The author's door: what an agent's author writes against, about a dozen names.
AUTHOR = [
    "agent", "tool", "AgentContext", "AgentConfig", "Message", "ModelResponse",
    "AgentTestEnv", "ScriptedModel",
    "BeamAgentsError", "ConfigError", "MemoryOverflow", "ModelError", "ToolError",
    "ToolUnavailable",
]

PUBLIC = {
    "beam_agents": AUTHOR,
    "beam_agents.memory": [
        "DEFAULT_MAX_ITEMS", "DEFAULT_SEARCH_LIMIT", "HARD_CAP_BYTES", "SOFT_CAP_BYTES",
        "STATE_SCHEMA_VERSION", "BackgroundWork", "BufferedLongtermStore", "Compactor",
        "DiscardReceipt", "DiscardingLongtermStore", "FlushReceipt", "LongtermHandle",
        "LongtermRecord", "LongtermStore", "LongtermStoreConfig", "LruCompactor", "Memory",
        "MemoryContractError", "MemoryOverflow", "MemoryUnavailable",
        "RingCorruptError", "Scope", "ScopeViolation", "TaskRegistry", "WriteCoordinator",
        "WriteOutcome", "WriteReceipt", "WriteRequest",
    ],
    "beam_agents.model": [
        "API_KEY_SOURCES", "DEFAULT_BUDGET_WINDOW_MS", "DEFAULT_JOURNAL_TTL_MS",
        "BreakerConfig", "BreakerRegistry", "BreakerState", "CachedResponse", "CallJournal",
        "CallJournalConfig", "CircuitBreaker", "InMemoryCallJournal",
        "LocalModelConfig", "MAX_BLOB_BYTES", "MAX_ENTRIES", "Message",
        "ModelClient", "ModelConfig", "ModelFacade",
        "ModelProvider", "ModelRequest", "ModelResponse", "ReplayCache", "TTL_MS", "ToolCall",
        "compute_cache_key",
        # Flow control and cost (invariants 11 and 12).
        "ProviderAdmission", "RateLimits", "TokenBudget", "WaitLedger", "estimate_tokens",
        # What a provider does at its last look before sending, and the account it names.
        "RequestHeldBack", "check_before_send", "account_digest", "provider_account",
        # The learned share of a quota, kept in the journal between runs.
        "LearnedRateRecord", "RateMemory",
        # What shaped a call, kept with it: replay names a setting that differs.
        "MAX_REQUEST_SUMMARY_BYTES", "request_summary",
    ],
    "beam_agents.model.providers": [
        "GeminiProvider", "LocalModel", "OpenAICompatibleProvider", "build_provider",
    ],
    "beam_agents.runtime": [
        # What an agent author writes against, and the config and retry policy hosts build.
        "AgentConfig", "AgentContext", "AgentEvent", "Intent", "ErrorRecord", "RetryPolicy",
        "encode_payload", "MAX_EVENT_BYTES",
        # Declaring an agent and its tools; calling them durably (invariant 13).
        "Agent", "McpServer", "Tool", "ToolCalls", "ToolLoopResult", "ToolUnavailable", "agent",
        "idempotency_key", "tool",
        # An activation's outcomes, as an agent's tests see them.
        "Committed", "Failed", "Outcome",
    ],
    "beam_agents.hosting": [
        "add_agent_flags", "agent_config_from_flags", "agent_config_from_mapping",
        "call_journal_config_from_mapping", "load_agent", "start_runtime", "wall_ms",
        # The provider a config names, for a host that wraps it (replay --shadow).
        "model_provider",
        # The --otel_* flags and the standard OTEL_* variables (entry points only).
        "otel_flags_from_env", "tracing_config_from_flags",
        # --state_snapshot for a batch host: the plan a run reads and writes, its one line.
        "SnapshotPlan", "new_generation", "plan_snapshot", "state_line",
        # The activation and its outcomes.
        "ActivationRuntime", "Committed", "Failed", "KeyedState", "Outcome",
        # The per-key engine and the keyed state a host binds for it.
        "CELLS", "QUEUE_CELLS", "BagCell", "InputDecoder", "KeyCells", "KeyRuns", "KeyedEngine",
        "QueueCell", "ReadOnceCell", "StateCell", "StateCells", "Step", "ValueCell",
        # Event-time order (invariant 10).
        "EARLIEST_MS", "EventOrdering", "queue_order",
        # The JSON lines of events, intents and dead letters.
        "decode_event_json", "decode_input", "error_from_json", "error_to_json", "event_to_json",
        "intent_to_json",
        # Input bounds (invariant 8): the bounded line reader.
        "Oversize", "read_lines",
        # Keyed state between batch runs: a key's record, its parts and manifest, the store port.
        "SNAPSHOT_MARK", "KeyStateSnapshot", "Manifest", "PartInfo", "SnapshotStore",
        "SnapshotStoreConfig", "SnapshotWriter", "cells_by_name", "commit_snapshot", "mark",
        "parse_record", "read_manifest", "read_part", "refuse_events", "restore_cells",
        "restore_key", "snapshot_record", "split_marked",
        # What a key's record holds, for a person (beam-agents inspect).
        "pending_waits", "queued_events",
    ],
    # What a store backend builds on: the ports it implements and the kit it shares.
    "beam_agents.backend": [
        "BufferedLongtermStore", "CallJournal", "LongtermStore", "SnapshotStore",
        # The validators, the seq guard (invariant 5) and the pending buffer with its limit check.
        "LimitCheck", "PendingUpserts", "as_batch", "check_scope", "copy_record",
        "seq_guard_allows", "validate_entity_key", "validate_key", "validate_record",
        "validate_search", "validate_value",
        # The journal's entries, for its backends and the tool calls recorded beside the model's.
        "MAX_JOURNAL_RESPONSE_BYTES", "JournalEntry", "JournalWrite", "journal_entry",
        "journal_key",
        # What a snapshot store's methods take and return about one part.
        "PartInfo",
    ],
    "beam_agents.testing": [
        "DEFAULT_EVENT_TIME_MS", "InMemoryCallJournal", "InMemoryLongtermConfig",
        "InMemoryLongtermStore", "LocalModel", "Reply", "ScriptExhaustedError", "ScriptedModel",
        "make_event", "make_events", "run_activation",
        # A reply that asks for tool calls, in one line.
        "calls_tool",
        # The test environment, what it reads back, and a run over a file of events.
        "AgentTestEnv", "DeadLetter", "Emitted", "RunResult", "Sent", "run_file",
    ],
    "beam_agents.errors": [
        "ActivationTimeoutError", "BeamAgentsError", "ConfigError", "EventDecodeError",
        "IntentTooLargeError", "JournalCorruptError", "JournalUnavailable", "MemoryContractError",
        "MemoryOverflow", "MemoryUnavailable", "MemoryVersionError", "ModelError",
        "ProviderRejected",
        "ProviderUnavailable", "RingCorruptError", "ScopeViolation", "StateCorruptError",
        # Batch runs that remember: the snapshot's store failed, the run stops.
        "SnapshotUnavailable",
        "StateError", "StoreError", "StoreLimitError", "UnsupportedSchemaVersionError",
        "BudgetExceededError", "QuotaExhaustedError", "RateLimitedError",
        # Tools, structured output and waits (invariants 13 and 14).
        "StructuredOutputError", "ToolCallLimitError", "ToolError", "ToolFailedError",
        "ToolLoopError", "ToolNotRecordedError", "ToolUnavailable", "TooManyWaitsError",
        "WaitError",
        # Bounded backlogs and event-time order (invariants 4 and 10).
        "BacklogFullError", "LateEventError",
    ],
    "beam_agents.metrics": ["BufferedMetrics", "Distribution", "MetricsSink", "NoopMetrics",
                            "RecordingMetrics"],
    # The tracing port, its GenAI vocabulary, and its exporter at the edge.
    "beam_agents.tracing": ["NOOP_SPAN", "NOOP_TRACER", "TRACEPARENT", "ActivationTrace",
                            "AttributeValue", "CallTrace", "NoopTracer", "RecordedSpan",
                            "RecordingTracer", "Span", "Tracer", "TracingConfig",
                            "provider_system"],
    "beam_agents.otel": ["OtelTracer"],
    "beam_agents.stores": [
        "FirestoreCallJournal", "FirestoreCallJournalConfig", "FirestoreLongtermConfig",
        "FirestoreLongtermStore", "InMemoryLongtermConfig", "InMemoryLongtermStore",
        "SqliteCallJournal", "SqliteCallJournalConfig", "SqliteLongtermConfig",
        "SqliteLongtermStore", "call_journal_config_from_mapping", "longterm_config_from_mapping",
        # State snapshots: a folder or a Firestore collection.
        "FileSnapshotConfig", "Files", "FirestoreSnapshotConfig", "LocalFiles",
        "snapshot_config_from_uri",
    ],
    # One package per backend technology; the names `beam_agents.stores` gives are the same objects.
    "beam_agents.stores.sqlite": ["SqliteCallJournal", "SqliteCallJournalConfig",
                                  "SqliteLongtermConfig", "SqliteLongtermStore"],
    "beam_agents.stores.firestore": [
        "FirestoreCallJournal", "FirestoreCallJournalConfig", "FirestoreLongtermConfig",
        "FirestoreLongtermStore", "FirestoreSnapshotConfig", "FirestoreSnapshotStore",
        # The long-term store's document layout and limits, as `stores.firestore` gave them.
        "MAX_DOCUMENT_BYTES", "MAX_REQUEST_BYTES", "MAX_WRITES_PER_COMMIT", "decode_document_id",
        "document_size", "encode_document_id", "entity_document_id",
    ],
    "beam_agents.stores.memory": ["InMemoryLongtermConfig", "InMemoryLongtermStore", "Operation"],
    "beam_agents.stores.files": ["FileSnapshotConfig", "FileSnapshotStore", "Files", "LocalFiles"],
    "beam_agents.beam": [
        "ERRORS", "AgentBatchDoFn", "AgentDoFn", "AgentPipelineOptions", "BeamMetrics",
        "DecodeEvents",
        "agent_config_from_options", "build_pipeline", "check_io", "redrive_subscription", "run",
        # What `beam-agents run` checks and says before a run: runner flags, earlier outputs,
        # where keyed state starts.
        "check_runner_flags", "output_files", "snapshot_plan_from_options",
    ],
    "beam_agents.flink": [
        "ERRORS", "AgentKeyedProcessFunction", "DecodeEvents", "FlinkJobOptions", "FlinkMetrics",
        "KafkaJobOptions",
        "agent_stream", "build_job", "environment", "flink_settings", "job_parser", "parse_args",
        "run",
        # The job's entry point (it prints the summary) and what --input_files reads.
        "expand_input_files", "main",
    ],
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_exported_names_are_pinned(module: str) -> None:
    loaded = importlib.import_module(module)
    assert sorted(loaded.__all__) == sorted(PUBLIC[module])
    for name in loaded.__all__:
        assert hasattr(loaded, name), f"{module}.{name} is exported but missing"


#: Names that left a module for a door of their own: (old module, new module) -> names.
#: Each still resolves at its old path, with a warning, until the next release.
MOVED = {
    ("beam_agents.runtime", "beam_agents.hosting"): [
        "ActivationRuntime", "KeyedState", "KeyedEngine", "KeyCells", "KeyRuns", "Step",
        "QUEUE_CELLS", "CELLS", "BagCell", "ValueCell", "InputDecoder", "QueueCell", "StateCell",
        "StateCells", "EARLIEST_MS", "EventOrdering", "queue_order", "decode_input", "Oversize",
        "read_lines", "SNAPSHOT_MARK", "KeyStateSnapshot", "Manifest", "PartInfo",
        "SnapshotStore", "SnapshotStoreConfig", "SnapshotWriter", "cells_by_name",
        "commit_snapshot", "mark", "parse_record", "read_manifest", "read_part", "refuse_events",
        "restore_cells", "restore_key", "snapshot_record", "split_marked", "pending_waits",
        "queued_events", "decode_event_json", "event_to_json", "intent_to_json", "error_to_json",
        "error_from_json",
    ],
    ("beam_agents.memory", "beam_agents.backend"): [
        "LimitCheck", "PendingUpserts", "as_batch", "check_scope", "copy_record",
        "seq_guard_allows", "validate_entity_key", "validate_key", "validate_record",
        "validate_search", "validate_value",
    ],
    ("beam_agents.model", "beam_agents.backend"): [
        "JournalEntry", "JournalWrite", "journal_entry", "journal_key",
        "MAX_JOURNAL_RESPONSE_BYTES",
    ],
}
_MOVED_NAMES = [(old, new, name) for (old, new), names in MOVED.items() for name in names]


@pytest.mark.parametrize(("old", "new", "name"), _MOVED_NAMES,
                         ids=[f"{old}.{name}" for old, _, name in _MOVED_NAMES])
def test_a_moved_name_still_resolves_at_its_old_path_with_a_warning(
        old: str, new: str, name: str) -> None:
    """One release of grace: the very object the new door exports, and a warning naming it."""
    module = importlib.import_module(old)
    assert name not in module.__all__
    assert name in PUBLIC[new]
    message = re.escape(f"{old}.{name} is now {new}.{name}; the old path goes in the next release")
    with pytest.warns(DeprecationWarning, match=message) as seen:
        value = getattr(module, name)
    assert value is getattr(importlib.import_module(new), name)
    assert [w.filename for w in seen] == [__file__], "the warning points at the caller's line"


def test_a_from_import_of_a_moved_name_warns_too() -> None:
    with pytest.warns(DeprecationWarning, match="beam_agents.hosting.KeyedEngine"):
        from beam_agents.runtime import KeyedEngine  # noqa: PLC0415
    with pytest.warns(DeprecationWarning, match="beam_agents.backend.validate_key"):
        from beam_agents.memory import validate_key  # noqa: PLC0415
    import beam_agents.backend  # noqa: PLC0415
    import beam_agents.hosting  # noqa: PLC0415

    assert KeyedEngine is beam_agents.hosting.KeyedEngine
    assert validate_key is beam_agents.backend.validate_key


@pytest.mark.parametrize("old", sorted({old for old, _ in MOVED}))
def test_an_unknown_name_on_a_forwarding_module_is_still_an_attribute_error(old: str) -> None:
    module = importlib.import_module(old)
    with pytest.raises(AttributeError, match=f"{re.escape(old)}' has no attribute 'KeyedEngin'"):
        _ = module.KeyedEngin
    assert not hasattr(module, "no_such_name")


def test_the_library_reaches_no_moved_name_through_its_old_path() -> None:
    """Importing every public module of the library itself warns about no moved name."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    probe = ("import importlib, warnings\n"
             "warnings.filterwarnings('error', message=r'beam_agents\\.')\n"
             f"for m in {sorted(PUBLIC)!r}:\n"
             "    importlib.import_module(m)\n")
    subprocess.run([sys.executable, "-c", probe], check=True)


@pytest.mark.parametrize("package", ["sqlite", "firestore", "memory", "files"])
def test_a_backend_package_gives_the_objects_the_stores_package_gives(package: str) -> None:
    stores = importlib.import_module("beam_agents.stores")
    backend = importlib.import_module(f"beam_agents.stores.{package}")
    shared = set(backend.__all__) & set(stores.__all__)
    assert shared
    for name in shared:
        assert getattr(backend, name) is getattr(stores, name), name


def test_every_error_the_library_raises_on_purpose_is_in_one_tree() -> None:
    """The error tree is drawn in one place: each exported error derives from the root."""
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.BeamAgentsError), name


def test_the_wire_types_are_reachable_from_public_modules() -> None:
    assert (runtime.AgentEvent, runtime.Intent, runtime.ErrorRecord, memory.LongtermRecord) == (
        event_pb2.AgentEvent, intent_pb2.Intent, error_record_pb2.ErrorRecord,
        longterm_pb2.LongtermRecord)


def test_the_author_door_re_exports_each_name_from_where_it_lives() -> None:
    """``beam_agents.X`` is the very object its home module exports, not a copy."""
    import beam_agents  # noqa: PLC0415

    for name in AUTHOR:
        home = importlib.import_module(beam_agents._HOME[name])
        assert getattr(beam_agents, name) is getattr(home, name), name
        assert name in home.__all__, f"{name} is not public where it lives"


def test_the_author_door_loads_nothing_until_a_name_is_used() -> None:
    """Importing one core package does not load the test environment through the root."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    probe = ("import sys, beam_agents.memory; "
             "print(sorted(m for m in sys.modules if m.startswith('beam_agents.testing')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def test_an_unknown_name_on_the_author_door_is_an_attribute_error() -> None:
    import beam_agents  # noqa: PLC0415

    with pytest.raises(AttributeError, match="no attribute 'Agentcontext'"):
        _ = beam_agents.Agentcontext


#: What only the project's own notes mean: an invariant's number, a scenario ID, a seed's name.
_INTERNAL_WORDS = re.compile(
    r"\b(?i:invariants?) \d+|\bseed \d{3}\b|\b[A-Z]{1,2}\d{1,3}\b(?=[ ,.:;)])")


def _author_docs() -> list[tuple[str, str]]:
    """Every docstring ``help()`` shows for the author door and the test environment."""
    import beam_agents  # noqa: PLC0415
    import beam_agents.testing as testing  # noqa: PLC0415

    objects = [(name, getattr(beam_agents, name)) for name in AUTHOR]
    objects += [(f"testing.{name}", getattr(testing, name)) for name in testing.__all__]
    docs = []
    for name, obj in objects:
        docs.append((name, inspect.getdoc(obj) or ""))
        if inspect.isclass(obj):
            for member, value in vars(obj).items():
                if member.startswith("_") and member != "__init__":
                    continue
                if callable(value) or isinstance(value, (property, classmethod, staticmethod)):
                    docs.append((f"{name}.{member}", inspect.getdoc(value) or ""))
    return docs


def test_what_help_shows_an_author_speaks_the_users_language() -> None:
    """No invariant numbers, scenario IDs or seed names in the author door's help()."""
    found = [f"{where}: {hit.group()}" for where, doc in _author_docs()
             for hit in _INTERNAL_WORDS.finditer(doc)]
    assert found == []


def test_the_internal_words_check_sees_each_kind() -> None:
    sample = "Runs once (invariant 9), as seed 000 says; see M18. Invariants 4 and 14."
    assert [hit.group() for hit in _INTERNAL_WORDS.finditer(sample)] == [
        "invariant 9", "seed 000", "M18", "Invariants 4"]
