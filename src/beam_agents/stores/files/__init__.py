"""State snapshots in a folder, reached through a `Files` (local, or Beam's file systems)."""

from __future__ import annotations

from beam_agents.stores._snapshot_config import Files, FileSnapshotConfig, LocalFiles
from beam_agents.stores.files._snapshot import FileSnapshotStore

__all__ = ["FileSnapshotConfig", "FileSnapshotStore", "Files", "LocalFiles"]
