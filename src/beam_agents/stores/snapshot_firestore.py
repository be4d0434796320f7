"""Deprecated: the Firestore snapshot store is in `beam_agents.stores.firestore`."""

from __future__ import annotations

from beam_agents.stores._moved import warn_moved
from beam_agents.stores._snapshot_config import FirestoreSnapshotConfig
from beam_agents.stores.firestore._snapshot import CHUNK_BYTES, FirestoreSnapshotStore

__all__ = ["CHUNK_BYTES", "FirestoreSnapshotConfig", "FirestoreSnapshotStore"]

warn_moved(__name__, "beam_agents.stores.firestore")
