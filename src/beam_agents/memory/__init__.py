"""Working memory and the explicit long-term tier.

`Memory` is the per-activation facade over the `memory` keyed-state blob
(seed 000; invariants 2 and 4). ``Memory.longterm`` is a `LongtermHandle`
over a `LongtermStore`: saves stage in the activation and flush through the
`WriteCoordinator` (seed 004) only when the activation succeeds.
"""

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
    DiscardingLongtermStore,
    DiscardReceipt,
    FlushReceipt,
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
    "Compactor",
    "DiscardReceipt",
    "DiscardingLongtermStore",
    "FlushReceipt",
    "LongtermHandle",
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
