"""Deprecated: the in-process long-term store is in `beam_agents.stores.memory`.

A config pickled before the move names ``beam_agents.stores.in_memory.InMemoryLongtermConfig``;
this module gives it the same class, so such a pickle still loads.
"""

from __future__ import annotations

from beam_agents.stores._moved import warn_moved
from beam_agents.stores.memory import InMemoryLongtermConfig, InMemoryLongtermStore, Operation

__all__ = ["InMemoryLongtermConfig", "InMemoryLongtermStore", "Operation"]

warn_moved(__name__, "beam_agents.stores.memory")
