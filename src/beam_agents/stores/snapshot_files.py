"""Deprecated: the file snapshot store is in `beam_agents.stores.files`."""

from __future__ import annotations

from beam_agents.stores._moved import warn_moved
from beam_agents.stores.files import FileSnapshotStore

__all__ = ["FileSnapshotStore"]

warn_moved(__name__, "beam_agents.stores.files")
