"""Working memory and the explicit long-term tier.

`Memory` is the per-activation facade over the `memory` keyed-state blob
(seed 000; invariants 2 and 4). ``Memory.longterm`` is a `LongtermHandle`
over a `BufferedLongtermStore`: saves stage into the store's pending buffer
and are flushed only when the activation succeeds. A long-term row is a
`LongtermRecord`. The `WriteCoordinator` (seed 004) owns writes whose unit of
work outlives one call (background and batched writers).

A long-term store backend implements the port (`LongtermStore`,
`BufferedLongtermStore`, the receipts) and builds on the kit in
`beam_agents.backend`: the validators, the seq guard and the pending buffer.
The kit was exported here before; its names still resolve, with a
DeprecationWarning naming the new path, until the next release.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from beam_agents.errors import (
    MemoryContractError,
    MemoryOverflow,
    MemoryUnavailable,
    RingCorruptError,
    ScopeViolation,
)
from beam_agents.memory._compactor import LruCompactor
from beam_agents.memory._facade import (
    DEFAULT_MAX_ITEMS,
    HARD_CAP_BYTES,
    SOFT_CAP_BYTES,
    STATE_SCHEMA_VERSION,
    Compactor,
    Memory,
)
from beam_agents.memory._longterm import DEFAULT_SEARCH_LIMIT, LongtermHandle
from beam_agents.memory._store import (
    BufferedLongtermStore,
    DiscardingLongtermStore,
    DiscardReceipt,
    FlushReceipt,
    LongtermRecord,
    LongtermStore,
    LongtermStoreConfig,
)
from beam_agents.memory._writes import (
    BackgroundWork,
    Scope,
    TaskRegistry,
    WriteCoordinator,
    WriteOutcome,
    WriteReceipt,
    WriteRequest,
)

__all__ = [
    "DEFAULT_MAX_ITEMS",
    "DEFAULT_SEARCH_LIMIT",
    "HARD_CAP_BYTES",
    "SOFT_CAP_BYTES",
    "STATE_SCHEMA_VERSION",
    "BackgroundWork",
    "BufferedLongtermStore",
    "Compactor",
    "DiscardReceipt",
    "DiscardingLongtermStore",
    "FlushReceipt",
    "LongtermHandle",
    "LongtermRecord",
    "LongtermStore",
    "LongtermStoreConfig",
    "LruCompactor",
    "Memory",
    "MemoryContractError",
    "MemoryOverflow",
    "MemoryUnavailable",
    "RingCorruptError",
    "Scope",
    "ScopeViolation",
    "TaskRegistry",
    "WriteCoordinator",
    "WriteOutcome",
    "WriteReceipt",
    "WriteRequest",
]

#: The backend kit, now `beam_agents.backend`'s: each name and the module that defines it.
_MOVED_TO_BACKEND = dict.fromkeys(
    ["LimitCheck", "PendingUpserts", "as_batch", "check_scope", "copy_record", "seq_guard_allows",
     "validate_entity_key", "validate_key", "validate_record", "validate_search",
     "validate_value"], "beam_agents.memory._store")


def __getattr__(name: str) -> Any:
    # A kit name at its old path keeps working for one release, with a
    # warning that points at the caller's line (PEP 562).
    home = _MOVED_TO_BACKEND.get(name)
    if home is None:
        raise AttributeError(f"module 'beam_agents.memory' has no attribute {name!r}")
    warnings.warn(f"beam_agents.memory.{name} is now beam_agents.backend.{name}; the old path "
                  "goes in the next release", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(home), name)
