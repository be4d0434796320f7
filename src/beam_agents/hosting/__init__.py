"""The host's front door: flags and JSON become an `AgentConfig`, and a config a running runtime.

Every host goes through here; the core names no backend. Why, and how API keys
reach the workers: docs/decisions/0008-edge-wiring.md and docs/design.md,
"Model API keys".

An agent's author needs none of this (``import beam_agents`` holds their
names). A host, something that runs agents over its own input and keyed
state, uses, besides the names exported here:

* ``beam_agents.runtime``: `ActivationRuntime` (what `start_runtime`
  returns; ``activate`` one event, ``close`` at teardown), its outcomes
  `Committed` and `Failed`, `KeyedState`; `KeyedEngine`, `KeyCells`,
  `StateCells`, `StateCell`, `QueueCell`, `CELLS` and `QUEUE_CELLS` to bind
  the engine to the runner's keyed state; `InputDecoder` for its input;
  `EventOrdering` for event-time order; the JSON lines of events, intents
  and dead letters (`event_to_json`, `intent_to_json`, `error_to_json`,
  `error_from_json`); and the state snapshot of batch runs
  (`snapshot_record`, `restore_cells`, `SnapshotStore`, `SnapshotWriter`).
* ``beam_agents.metrics``: `MetricsSink`, where the core's counters go.
* ``beam_agents.tracing``: `TracingConfig` and `Tracer`.
* ``beam_agents.stores``: the store and journal backends a config may name.

The Beam and Flink hosts (``beam_agents.beam``, ``beam_agents.flink``) are
built on exactly these.
"""

from beam_agents.hosting._flags import add_agent_flags
from beam_agents.hosting._mapping import agent_config_from_flags, agent_config_from_mapping
from beam_agents.hosting._runtime import load_agent, model_provider, start_runtime, wall_ms
from beam_agents.hosting._snapshot import SnapshotPlan, new_generation, plan_snapshot, state_line
from beam_agents.hosting._tracing import otel_flags_from_env, tracing_config_from_flags
from beam_agents.stores import call_journal_config_from_mapping

__all__ = [
    "SnapshotPlan",
    "add_agent_flags",
    "agent_config_from_flags",
    "agent_config_from_mapping",
    "call_journal_config_from_mapping",
    "load_agent",
    "model_provider",
    "new_generation",
    "otel_flags_from_env",
    "plan_snapshot",
    "start_runtime",
    "state_line",
    "tracing_config_from_flags",
    "wall_ms",
]
