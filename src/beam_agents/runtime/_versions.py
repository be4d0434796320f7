"""Working-memory versions: an agent's ``memory_version`` and its ``migrate`` hook.

Why and how: docs/design.md, "Working-memory versions".
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from beam_agents.errors import ConfigError, MemoryVersionError
from beam_agents.memory import Memory
from beam_agents.metrics import MetricsSink

__all__ = ["MemoryVersioning"]

_MAX_VERSION = (1 << 32) - 1


@dataclass(frozen=True, slots=True)
class MemoryVersioning:
    """The memory version an agent reads and writes, and how it upgrades older memory.

    Attributes:
        version: The agent's ``memory_version`` (0 when it declares none).
        migrate: ``migrate(old_version, memory)``, sync or async; it rewrites
            `memory` in place, staged like the agent's own writes.
    """

    version: int = 0
    migrate: Callable[[int, Memory], Any] | None = None

    @classmethod
    def of(cls, agent: Any, name: str) -> MemoryVersioning:
        """Read the agent's ``memory_version`` and ``migrate`` attributes.

        Raises:
            ConfigError: the version is not a uint32, ``migrate`` is not
                callable, or a version above 0 comes without ``migrate``.
        """
        # An `Agent` declares them; a plain function may carry them as attributes.
        version = getattr(agent, "memory_version", 0)
        if isinstance(version, bool) or not isinstance(version, int) or not (
                0 <= version <= _MAX_VERSION):
            raise ConfigError(f"agent {name}: memory_version must be an int from 0 to "
                              f"{_MAX_VERSION}, got {version!r}", field="memory_version")
        migrate = getattr(agent, "migrate", None)
        if migrate is not None and not callable(migrate):
            raise ConfigError(f"agent {name}: migrate must be callable as "
                              "migrate(old_version, memory)", field="migrate")
        if version and migrate is None:
            raise ConfigError(f"agent {name} declares memory_version {version} but no "
                              "migrate(old_version, memory) for older memory",
                              field="migrate")
        return cls(version, migrate)

    async def upgrade(self, memory: Memory, metrics: MetricsSink) -> None:
        """Bring `memory` to this version inside the activation, so it commits or fails with it.

        Raises:
            MemoryVersionError: the memory is newer than this agent.
        """
        found = memory.version
        if found == self.version:
            return
        if found > self.version:
            raise MemoryVersionError(found=found, supported=self.version)
        if len(memory) and self.migrate is not None:  # an empty memory has nothing to migrate
            result = self.migrate(found, memory)
            if inspect.isawaitable(result):
                await result
            metrics.inc("beam_agents.memory", "migrations")
        memory.set_version(self.version)
