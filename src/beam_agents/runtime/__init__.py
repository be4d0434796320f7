"""The runner-agnostic activation core and what agents see.

An agent is any callable ``agent(ctx: AgentContext)``, sync or async. Hosts
(the Beam DoFn, the Flink function, the CLI, tests) build an
`ActivationRuntime` (through `beam_agents.hosting.start_runtime`) and call
`activate` per event; the outcome is `Committed` (write state, emit intents)
or `Failed` (one error record).

The wire types an agent and a host handle are exported here: `AgentEvent`
(the input), `Intent` (what an agent emits) and `ErrorRecord` (a dead
letter), with their canonical JSON forms. So is what a host needs to run
the per-key engine (`KeyedEngine`) over its own keyed state: the cell
protocols (`StateCell`, `QueueCell`), their in-memory forms (`ValueCell`,
`BagCell`), the cell names (`CELLS`, `QUEUE_CELLS`) and `InputDecoder`; and
what carries a key's cells from one batch run to the next (a state snapshot:
`snapshot_record`, `restore_cells`, `SnapshotStore`, `SnapshotWriter`).
"""

from beam_agents._proto.error_record_pb2 import ErrorRecord
from beam_agents._proto.event_pb2 import AgentEvent
from beam_agents._proto.intent_pb2 import Intent
from beam_agents.errors import ToolUnavailable
from beam_agents.runtime._activation import (
    ActivationRuntime,
    Committed,
    Failed,
    KeyedState,
    Outcome,
)
from beam_agents.runtime._agent import Agent, McpServer, agent
from beam_agents.runtime._batch import KeyRuns
from beam_agents.runtime._codec import (
    decode_event_json,
    error_from_json,
    error_to_json,
    event_to_json,
    intent_to_json,
)
from beam_agents.runtime._config import MAX_EVENT_BYTES, AgentConfig
from beam_agents.runtime._context import AgentContext, encode_payload
from beam_agents.runtime._engine import QUEUE_CELLS, KeyCells, KeyedEngine, Step
from beam_agents.runtime._errors import decode_input
from beam_agents.runtime._keyed import (
    CELLS,
    BagCell,
    InputDecoder,
    QueueCell,
    StateCell,
    StateCells,
    ValueCell,
)
from beam_agents.runtime._lines import Oversize, read_lines
from beam_agents.runtime._ordering import EARLIEST_MS, EventOrdering
from beam_agents.runtime._queue import queue_order
from beam_agents.runtime._retry import RetryPolicy
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
from beam_agents.runtime._tool_calls import ToolCalls, ToolLoopResult, idempotency_key
from beam_agents.runtime._tools import Tool, tool

__all__ = [
    "CELLS",
    "EARLIEST_MS",
    "MAX_EVENT_BYTES",
    "QUEUE_CELLS",
    "SNAPSHOT_MARK",
    "ActivationRuntime",
    "Agent",
    "AgentConfig",
    "AgentContext",
    "AgentEvent",
    "BagCell",
    "Committed",
    "ErrorRecord",
    "EventOrdering",
    "Failed",
    "InputDecoder",
    "Intent",
    "KeyCells",
    "KeyRuns",
    "KeyStateSnapshot",
    "KeyedEngine",
    "KeyedState",
    "Manifest",
    "McpServer",
    "Outcome",
    "Oversize",
    "PartInfo",
    "QueueCell",
    "RetryPolicy",
    "SnapshotStore",
    "SnapshotStoreConfig",
    "SnapshotWriter",
    "StateCell",
    "StateCells",
    "Step",
    "Tool",
    "ToolCalls",
    "ToolLoopResult",
    "ToolUnavailable",
    "ValueCell",
    "agent",
    "cells_by_name",
    "commit_snapshot",
    "decode_event_json",
    "decode_input",
    "encode_payload",
    "error_from_json",
    "error_to_json",
    "event_to_json",
    "idempotency_key",
    "intent_to_json",
    "mark",
    "parse_record",
    "pending_waits",
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
    "tool",
]
