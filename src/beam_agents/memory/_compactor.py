"""The default compaction strategy: evict least-recently-used keys."""

from __future__ import annotations

from dataclasses import dataclass

from beam_agents.errors import ConfigError
from beam_agents.memory._facade import HARD_CAP_BYTES, SOFT_CAP_BYTES, Memory

__all__ = ["LruCompactor"]


@dataclass(frozen=True, slots=True, kw_only=True)
class LruCompactor:
    """Deletes least-recently-used keys until memory is at most `target_fraction` of the cap.

    It walks `Memory.keys()` and reads `Memory.entry_size()`, neither of which
    re-stamps or reorders (M25, M26), so the key being written right now, which
    is most-recently-used, goes last. The target sits below the soft cap so one
    compaction buys room for many writes instead of running on every one.
    """

    target_fraction: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.target_fraction < SOFT_CAP_BYTES / HARD_CAP_BYTES:
            raise ConfigError(
                f"LruCompactor.target_fraction must be in [0, 0.75), below the soft cap; "
                f"got {self.target_fraction}",
                field="LruCompactor.target_fraction",
            )

    @property
    def target_bytes(self) -> int:
        """The size compaction shrinks memory to."""
        return int(HARD_CAP_BYTES * self.target_fraction)

    def compact(self, memory: Memory) -> None:
        """Delete keys, least-recently-used first, until `memory.size_bytes <= target_bytes`."""
        target = self.target_bytes
        for key in memory.keys():
            if memory.size_bytes <= target:
                return
            memory.delete(key)
