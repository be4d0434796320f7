"""The agent, model and store flags, declared once so a job keeps them across engines.

Mapped onto configs by `beam_agents.hosting._mapping`; docs/decisions/0008-edge-wiring.md.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["BUDGET_FLAGS", "ENGINE_FLAGS", "FLOW_FLAGS", "MODEL_FLAGS", "RETRY_FLAGS",
           "STORE_FLAGS", "TRACING_FLAGS", "add_agent_flags"]

#: flag, ModelConfig field (``local.``: a `LocalModelConfig` field), help
MODEL_FLAGS = (
    ("model_id", "model_id", "Model name, e.g. gemini-2.5-flash."),
    ("model_project", "project", "Google Cloud project for Vertex AI."),
    ("model_location", "location", "Vertex AI region, e.g. us-central1."),
    ("model_base_url", "base_url", "OpenAI-compatible server root."),
    ("model_script", "local.script_path", "JSONL of scripted replies (local provider)."),
    ("model_api_key_secret", "api_key_secret", "Secret Manager secret version holding the "
     "API key, projects/P/secrets/S/versions/V; each worker reads it at setup, so the key is "
     "never part of the job graph."),
    ("model_api_key_env", "api_key_env", "Name of the environment variable holding the API "
     "key on each worker (local runs, Flink clusters); read at setup."),
    ("secret_manager_endpoint", "secret_manager_endpoint", "Secret Manager endpoint for "
     "--model_api_key_secret instead of Google's: https://... (Private Service Connect, "
     "regional; default credentials) or http://... (a local peer; no credentials sent)."),
)
#: flag, long-term store config field, help
STORE_FLAGS = (
    ("sqlite_path", "path", "SQLite database file (sqlite backend)."),
    ("firestore_project", "project", "Firestore project (firestore backend)."),
    ("firestore_database", "database", "Firestore database id."),
    ("firestore_collection", "collection", "Root collection for records."),
)
#: flag, AgentConfig field, help: how many activations run at once
ENGINE_FLAGS = (
    ("max_in_flight", "max_in_flight", "Activations of different keys a worker runs at once "
     "(default 64); a key never runs two."),
    ("agent_threads", "agent_threads", "Threads for sync agents (default 64)."),
    ("max_queued_per_key", "max_queued_per_key", "Events one key may hold queued, its "
     "running one included (default 10000); past it the key's new events are BACKLOG dead "
     "letters, redrivable, instead of keyed state growing without bound."),
    ("max_tool_calls_per_activation", "max_tool_calls_per_activation", "Tool calls one "
     "activation may make, its tool loop's included (default 32); the next one is a TOOL dead "
     "letter, and the tool does not run."),
    ("max_pending_waits", "max_pending_waits", "Waits for an answer one entity may have "
     "pending (default 16); the next one is a WAIT dead letter."),
)
#: flag, RetryPolicy field, help: what happens while a provider or store is down
RETRY_FLAGS = (
    ("retry_initial_ms", "retry_initial_ms", "Wait before the first retry of a suspended "
     "activation, in ms (default 1000)."),
    ("retry_max_ms", "retry_max_ms", "Longest wait between retries, in ms (default 60000)."),
    ("max_attempts", "max_attempts", "Attempts before a retriable failure becomes a dead "
     "letter, the first included (default 8)."),
)
#: flag, ModelConfig field (``local.``: a `LocalModelConfig` field), number type, help:
#: flow control and cost (invariants 11, 12)
FLOW_FLAGS: tuple[tuple[str, str, type, str], ...] = (
    ("model_max_rps", "max_rps", float, "Requests per second each worker sends the model at "
     "most; set it to the provider's quota divided by the workers. Unset: each worker learns "
     "its share from the provider's 429s. A 429's Retry-After always pauses the worker."),
    ("model_max_tpm", "max_tpm", int, "Tokens per minute each worker sends at most (quota "
     "divided by the workers), estimated from each request and corrected by the usage the "
     "provider reports."),
    ("model_price_in_per_mtok", "price_in_per_mtok", float, "Price of a million prompt "
     "tokens; with it the summary estimates the spend."),
    ("model_price_out_per_mtok", "price_out_per_mtok", float, "Price of a million completion "
     "tokens."),
    ("model_quota", "local.quota_rps", float, "Local provider only: a simulated account quota, in "
     "requests per second per worker; past it the model answers 429 with Retry-After: 1."),
)
#: flag, AgentConfig field, help: the per-entity token budget (invariant 12)
BUDGET_FLAGS = (
    ("max_tokens_per_entity", "max_tokens_per_entity", "Tokens (prompt + completion) one "
     "entity may pay for per budget window; past it its activations are BUDGET dead letters "
     "and nothing more is paid for it until the window resets. Default: no budget."),
    ("budget_window_ms", "budget_window_ms", "The budget window, in ms of event time, "
     "aligned to multiples of itself (default 86400000, a day)."),
)


#: flag, help: traces and GenAI metrics over OTLP (off unless an endpoint is given).
#: Each has a standard ``OTEL_*`` variable the entry points map (`otel_flags_from_env`).
TRACING_FLAGS = (
    ("otel_exporter_otlp_endpoint", "OTLP/HTTP endpoint spans and GenAI metrics are exported "
     "to, e.g. http://127.0.0.1:4318 (OTEL_EXPORTER_OTLP_ENDPOINT). Unset: tracing off."),
    ("otel_exporter_otlp_traces_endpoint", "Full URL for spans instead "
     "(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)."),
    ("otel_exporter_otlp_metrics_endpoint", "Full URL for metrics instead "
     "(OTEL_EXPORTER_OTLP_METRICS_ENDPOINT)."),
    ("otel_exporter_otlp_headers", "key=value,... headers sent with every export "
     "(OTEL_EXPORTER_OTLP_HEADERS)."),
    ("otel_sample_ratio", "Share of activations traced, 0 to 1 (default 1; "
     "OTEL_TRACES_SAMPLER_ARG); a sampled producer context is always followed."),
    ("otel_metrics_exporter", "otlp (default) or none: whether gen_ai.client.* histograms "
     "are exported (OTEL_METRICS_EXPORTER)."),
    ("otel_service_name", "service.name of the spans (default beam-agents; OTEL_SERVICE_NAME)."),
    ("otel_resource_attributes", "key=value,... resource attributes "
     "(OTEL_RESOURCE_ATTRIBUTES)."),
    ("otel_capture_content", "true: put prompts and answers on spans. They may be personal "
     "data; off by default."),
    ("otel_entity_keys", "hash (default): spans carry the entity key's sha256; clear: the "
     "key itself."),
    ("otel_run_id", "Seeds activation span ids, so retries of one event share a trace; one "
     "is drawn per launch when unset."),
)


def add_agent_flags(parser: argparse.ArgumentParser | Any) -> None:
    """Declare the agent, model and long-term memory flags on `parser`.

    `parser` is an `argparse.ArgumentParser` or anything with its
    ``add_argument_group`` (Beam hands its own parser subclass to
    ``PipelineOptions._add_argparse_args``).
    """
    agent = parser.add_argument_group("agent")
    agent.add_argument("--agent", help="The agent callable, 'package.module:callable'.")
    agent.add_argument("--agent_config", help="JSON file with AgentConfig fields; flags "
                       "given explicitly override it.")
    agent.add_argument("--activation_timeout_ms", type=int, help="Per-activation timeout.")
    agent.add_argument("--max_event_bytes", type=int, help="Largest input element, in bytes, "
                       "1024 to 67108864 (default 1048576); a larger one is a DECODE dead "
                       "letter with its size, sha256 and first 4 KiB.")
    engine = parser.add_argument_group("concurrency and retries")
    for flag, _, text in (*ENGINE_FLAGS, *RETRY_FLAGS):
        engine.add_argument(f"--{flag}", type=int, help=text)
    model = parser.add_argument_group("model")
    model.add_argument("--model_provider", choices=("local", "gemini", "openai"),
                       help="Model provider (default local).")
    for flag, _, text in MODEL_FLAGS:
        model.add_argument(f"--{flag}", help=text)
    model.add_argument("--model_latency_ms", type=int,
                       help="Simulated latency of each local-provider call, in ms.")
    model.add_argument("--model_outage", metavar="FIRST:COUNT|FIRST:DURATION",
                       help="Simulated transient outage of the local provider: its calls "
                       "FIRST..FIRST+COUNT-1 (from 1, per worker) answer 503; or, as "
                       "FIRST:3s or FIRST:2500ms, every call for that long from call FIRST.")
    flow = parser.add_argument_group("flow control and cost")
    # Read as text and converted in `agent_config_from_flags`, so a bad value
    # is a one-line ConfigError naming the flag, not an argparse usage dump.
    for flag, _, _, text in FLOW_FLAGS:
        flow.add_argument(f"--{flag}", help=text)
    for flag, _, text in BUDGET_FLAGS:
        flow.add_argument(f"--{flag}", help=text)
    store = parser.add_argument_group("long-term memory")
    store.add_argument("--longterm_store", choices=("none", "sqlite", "firestore"),
                       help="Long-term memory backend (default none).")
    for flag, _, text in STORE_FLAGS:
        store.add_argument(f"--{flag}", help=text)
    journal = parser.add_argument_group("call journal")
    journal.add_argument("--call_journal", choices=("none", "sqlite", "firestore"),
                         help="Durable journal of paid model calls, so a retry, crash, restore "
                         "or rerun replays instead of paying again (default none).")
    journal.add_argument("--call_journal_path", help="SQLite file of the journal (sqlite).")
    journal.add_argument("--call_journal_collection", help="Firestore collection of the "
                         "journal (firestore; with --firestore_project/--firestore_database).")
    journal.add_argument("--call_journal_ttl_ms", type=int, help="How long a journal entry "
                         "lives, in ms (default 604800000, a week).")
    tracing = parser.add_argument_group("traces (OpenTelemetry)")
    # Read as text and converted in `tracing_config_from_flags`, so a bad value
    # is a one-line ConfigError naming the flag.
    for flag, text in TRACING_FLAGS:
        tracing.add_argument(f"--{flag}", help=text)
