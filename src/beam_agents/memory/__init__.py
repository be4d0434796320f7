"""Working memory: the per-activation `Memory` facade over the `memory` keyed-state blob.

See seed 000 and DESIGN's invariants 2 (no I/O, no clock) and 4 (bounded state).
"""

from beam_agents.errors import MemoryOverflow, RingCorruptError
from beam_agents.memory._compactor import LruCompactor
from beam_agents.memory._facade import (
    DEFAULT_MAX_ITEMS,
    HARD_CAP_BYTES,
    SOFT_CAP_BYTES,
    STATE_SCHEMA_VERSION,
    Compactor,
    Memory,
)

__all__ = [
    "DEFAULT_MAX_ITEMS",
    "HARD_CAP_BYTES",
    "SOFT_CAP_BYTES",
    "STATE_SCHEMA_VERSION",
    "Compactor",
    "LruCompactor",
    "Memory",
    "MemoryOverflow",
    "RingCorruptError",
]
