"""The in-process long-term store, for tests: dict rows, an operation log, fault injection.

Stdlib only; `beam_agents.testing` re-exports it.
"""

from __future__ import annotations

from beam_agents.stores.memory._longterm import (
    InMemoryLongtermConfig,
    InMemoryLongtermStore,
    Operation,
)

__all__ = ["InMemoryLongtermConfig", "InMemoryLongtermStore", "Operation"]
