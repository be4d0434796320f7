"""The host's front door: flags and JSON become an `AgentConfig`, and a config a running runtime.

Every host goes through here; the core names no backend. Why, and how API keys
reach the workers: docs/decisions/0008-edge-wiring.md and docs/design.md,
"Model API keys".

An agent's author needs none of this (``import beam_agents`` holds their
names). A host, something that runs agents over its own input and keyed
state, finds here what it runs them with:

* The runtime: `start_runtime` builds an `ActivationRuntime` (``activate``
  one event, ``close`` at teardown) from a config `agent_config_from_flags`
  or `agent_config_from_mapping` made; an activation's outcome is `Committed`
  or `Failed`, over a key's `KeyedState`.
* The per-key engine over the runner's keyed state: `KeyedEngine` and the
  `Step` it returns, `KeyCells` and `StateCells` to bind it, the cell
  protocols `StateCell` and `QueueCell` with their in-memory forms
  `ValueCell` and `BagCell`, `ReadOnceCell` over a runner's state, the cell
  names `CELLS` and `QUEUE_CELLS`, and
  `KeyRuns`, which runs whole keys through it until each queue is empty
  (a batch run).
* Its input: `InputDecoder` and `decode_input`, the bounded line reader
  `read_lines` (and `Oversize`), `EventOrdering`, `EARLIEST_MS` and
  `queue_order` for event-time order.
* The JSON lines of events, intents and dead letters: `decode_event_json`,
  `event_to_json`, `intent_to_json`, `error_to_json`, `error_from_json`.
* The keyed state of batch runs that remember: a key's record
  (`snapshot_record`, `restore_cells`, `restore_key`, `KeyStateSnapshot`,
  `parse_record`, `mark`, `split_marked`, `SNAPSHOT_MARK`, `cells_by_name`,
  `refuse_events`; `pending_waits` and `queued_events` to show one), its
  parts and manifest (`SnapshotWriter`, `commit_snapshot`, `read_manifest`,
  `read_part`, `Manifest`, `PartInfo`), the store (`SnapshotStore`,
  `SnapshotStoreConfig`) and the plan of a run (`plan_snapshot`,
  `SnapshotPlan`, `new_generation`, `state_line`).

These names were exported by ``beam_agents.runtime`` before; there they still
resolve, with a DeprecationWarning, until the next release. Besides them a
host uses:

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
from beam_agents.runtime._activation import (
    ActivationRuntime,
    Committed,
    Failed,
    KeyedState,
    Outcome,
)
from beam_agents.runtime._batch import KeyRuns
from beam_agents.runtime._codec import (
    decode_event_json,
    error_from_json,
    error_to_json,
    event_to_json,
    intent_to_json,
)
from beam_agents.runtime._engine import QUEUE_CELLS, KeyCells, KeyedEngine, Step
from beam_agents.runtime._errors import decode_input
from beam_agents.runtime._keyed import (
    CELLS,
    BagCell,
    InputDecoder,
    QueueCell,
    ReadOnceCell,
    StateCell,
    StateCells,
    ValueCell,
)
from beam_agents.runtime._lines import Oversize, read_lines
from beam_agents.runtime._ordering import EARLIEST_MS, EventOrdering
from beam_agents.runtime._queue import queue_order
from beam_agents.runtime._snapshot import (
    SNAPSHOT_MARK,
    KeyStateSnapshot,
    cells_by_name,
    mark,
    parse_record,
    pending_waits,
    queued_events,
    refuse_events,
    restore_cells,
    restore_key,
    snapshot_record,
    split_marked,
)
from beam_agents.runtime._snapshot_parts import (
    Manifest,
    PartInfo,
    SnapshotStore,
    SnapshotStoreConfig,
    SnapshotWriter,
    commit_snapshot,
    read_manifest,
    read_part,
)
from beam_agents.stores import call_journal_config_from_mapping

__all__ = [
    "CELLS",
    "EARLIEST_MS",
    "QUEUE_CELLS",
    "SNAPSHOT_MARK",
    "ActivationRuntime",
    "BagCell",
    "Committed",
    "EventOrdering",
    "Failed",
    "InputDecoder",
    "KeyCells",
    "KeyRuns",
    "KeyStateSnapshot",
    "KeyedEngine",
    "KeyedState",
    "Manifest",
    "Outcome",
    "Oversize",
    "PartInfo",
    "QueueCell",
    "ReadOnceCell",
    "SnapshotPlan",
    "SnapshotStore",
    "SnapshotStoreConfig",
    "SnapshotWriter",
    "StateCell",
    "StateCells",
    "Step",
    "ValueCell",
    "add_agent_flags",
    "agent_config_from_flags",
    "agent_config_from_mapping",
    "call_journal_config_from_mapping",
    "cells_by_name",
    "commit_snapshot",
    "decode_event_json",
    "decode_input",
    "error_from_json",
    "error_to_json",
    "event_to_json",
    "intent_to_json",
    "load_agent",
    "mark",
    "model_provider",
    "new_generation",
    "otel_flags_from_env",
    "parse_record",
    "pending_waits",
    "plan_snapshot",
    "queue_order",
    "queued_events",
    "read_lines",
    "read_manifest",
    "read_part",
    "refuse_events",
    "restore_cells",
    "restore_key",
    "snapshot_record",
    "split_marked",
    "start_runtime",
    "state_line",
    "tracing_config_from_flags",
    "wall_ms",
]
