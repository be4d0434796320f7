"""Working memory and the explicit long-term tier.

`Memory` is the per-activation facade over the `memory` keyed-state blob
(seed 000; invariants 2 and 4). ``Memory.longterm`` is a `LongtermHandle`
over a `BufferedLongtermStore`: saves stage into the store's pending buffer
and are flushed only when the activation succeeds. A long-term row is a
`LongtermRecord`. The `WriteCoordinator` (seed 004) owns writes whose unit of
work outlives one call (background and batched writers).

A long-term store backend, here or in another package, builds on the port
(`LongtermStore`, `PendingUpserts`, the receipts), the validators and the seq
guard (`seq_guard_allows`, invariant 5) exported here.
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
    BufferedLongtermStore,
    DiscardingLongtermStore,
    DiscardReceipt,
    FlushReceipt,
    LimitCheck,
    LongtermRecord,
    LongtermStore,
    LongtermStoreConfig,
    PendingUpserts,
    as_batch,
    check_scope,
    copy_record,
    seq_guard_allows,
    validate_entity_key,
    validate_key,
    validate_record,
    validate_search,
    validate_value,
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
    "LimitCheck",
    "LongtermHandle",
    "LongtermRecord",
    "LongtermStore",
    "LongtermStoreConfig",
    "LruCompactor",
    "Memory",
    "MemoryContractError",
    "MemoryOverflow",
    "MemoryUnavailable",
    "PendingUpserts",
    "RingCorruptError",
    "Scope",
    "ScopeViolation",
    "TaskRegistry",
    "WriteCoordinator",
    "WriteOutcome",
    "WriteReceipt",
    "WriteRequest",
    # The backend kit: what a long-term store outside this package builds on.
    "as_batch",
    "check_scope",
    "copy_record",
    "seq_guard_allows",
    "validate_entity_key",
    "validate_key",
    "validate_record",
    "validate_search",
    "validate_value",
]
