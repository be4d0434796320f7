"""The runner-agnostic activation core and what an agent's author writes against.

An agent is any callable ``agent(ctx: AgentContext)``, sync or async, declared
with `agent` and given tools made with `tool`; `AgentConfig` and `RetryPolicy`
set how it runs. The wire types it handles are here too: `AgentEvent` (the
input), `Intent` (what it emits) and `ErrorRecord` (a dead letter). An
activation ends `Committed` (state written, intents emitted) or `Failed` (one
error record); an agent's tests see these outcomes.

What a host needs to run agents (the activation runtime, the per-key engine
and its keyed-state cells, event-time order, the JSON lines, the state
snapshot of batch runs) is `beam_agents.hosting`'s. Those names were exported
here before; they still resolve, with a DeprecationWarning naming the new
path, until the next release.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from beam_agents._proto.error_record_pb2 import ErrorRecord
from beam_agents._proto.event_pb2 import AgentEvent
from beam_agents._proto.intent_pb2 import Intent
from beam_agents.errors import ToolUnavailable
from beam_agents.runtime._activation import Committed, Failed, Outcome
from beam_agents.runtime._agent import Agent, McpServer, agent
from beam_agents.runtime._config import MAX_EVENT_BYTES, AgentConfig
from beam_agents.runtime._context import AgentContext, encode_payload
from beam_agents.runtime._retry import RetryPolicy
from beam_agents.runtime._tool_calls import ToolCalls, ToolLoopResult, idempotency_key
from beam_agents.runtime._tools import Tool, tool

__all__ = [
    "MAX_EVENT_BYTES",
    "Agent",
    "AgentConfig",
    "AgentContext",
    "AgentEvent",
    "Committed",
    "ErrorRecord",
    "Failed",
    "Intent",
    "McpServer",
    "Outcome",
    "RetryPolicy",
    "Tool",
    "ToolCalls",
    "ToolLoopResult",
    "ToolUnavailable",
    "agent",
    "encode_payload",
    "idempotency_key",
    "tool",
]

#: The host's names that moved to `beam_agents.hosting`, each with the private
#: module that defines it. Imported on use, so that this module never loads
#: the host door (the core must not import it).
_MOVED_TO_HOSTING = {
    **dict.fromkeys(["ActivationRuntime", "KeyedState"], "beam_agents.runtime._activation"),
    "KeyRuns": "beam_agents.runtime._batch",
    **dict.fromkeys(["decode_event_json", "error_from_json", "error_to_json", "event_to_json",
                     "intent_to_json"], "beam_agents.runtime._codec"),
    **dict.fromkeys(["QUEUE_CELLS", "KeyCells", "KeyedEngine", "Step"],
                    "beam_agents.runtime._engine"),
    "decode_input": "beam_agents.runtime._errors",
    **dict.fromkeys(["CELLS", "BagCell", "InputDecoder", "QueueCell", "StateCell", "StateCells",
                     "ValueCell"], "beam_agents.runtime._keyed"),
    **dict.fromkeys(["Oversize", "read_lines"], "beam_agents.runtime._lines"),
    **dict.fromkeys(["EARLIEST_MS", "EventOrdering"], "beam_agents.runtime._ordering"),
    "queue_order": "beam_agents.runtime._queue",
    **dict.fromkeys(["SNAPSHOT_MARK", "KeyStateSnapshot", "cells_by_name", "mark", "parse_record",
                     "pending_waits", "queued_events", "refuse_events", "restore_cells",
                     "restore_key", "snapshot_record", "split_marked"],
                    "beam_agents.runtime._snapshot"),
    **dict.fromkeys(["Manifest", "PartInfo", "SnapshotStore", "SnapshotStoreConfig",
                     "SnapshotWriter", "commit_snapshot", "read_manifest", "read_part"],
                    "beam_agents.runtime._snapshot_parts"),
}


def __getattr__(name: str) -> Any:
    # A host's name at its old path keeps working for one release, with a
    # warning that points at the caller's line (PEP 562).
    home = _MOVED_TO_HOSTING.get(name)
    if home is None:
        raise AttributeError(f"module 'beam_agents.runtime' has no attribute {name!r}")
    warnings.warn(f"beam_agents.runtime.{name} is now beam_agents.hosting.{name}; the old path "
                  "goes in the next release", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(home), name)
