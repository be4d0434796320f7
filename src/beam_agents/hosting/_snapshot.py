"""``--state_snapshot`` for every batch host: the plan a run reads and writes, and its one line.

The Beam batch path and the native Flink job's bounded mode read a key's
record beside its events and write the next generation at the end
(`beam_agents.runtime._snapshot_parts`). What they share is decided once,
where the run is built: which store, which generation is current, which one
this run writes. Why: docs/operations.md, "State between batch runs".
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from beam_agents.runtime._snapshot_parts import Manifest, SnapshotStoreConfig, read_manifest
from beam_agents.stores import Files, snapshot_config_from_uri

__all__ = ["SnapshotPlan", "new_generation", "plan_snapshot", "state_line"]


def new_generation(now_s: float | None = None) -> str:
    """A fresh generation's id: when it started, and a random part."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now_s is None else now_s))
    return f"g-{stamp}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotPlan:
    """What a run reads and writes: the store, the generation it read, the one it writes."""

    config: SnapshotStoreConfig
    read: Manifest | None
    generation: str

    @property
    def where(self) -> str:
        """The snapshot's URI."""
        return self.config.where


def plan_snapshot(uri: str, *, project: str | None, database: str | None,
                  files: Files | None = None,
                  writer_generation: str | None = None) -> SnapshotPlan:
    """Read the current manifest (small) when the run is built, and name the next generation.

    Args:
        uri: ``--state_snapshot``: a folder or ``firestore://COLLECTION``.
        project: ``--firestore_project``, for a collection.
        database: ``--firestore_database``, for a collection.
        files: The folder's filesystem; local files by default.
        writer_generation: The generation to write; a fresh one by default.

    Raises:
        ConfigError: the URI is unusable; names the flag.
        StateCorruptError: the manifest cannot be read by this version.
        SnapshotUnavailable: its store failed.
    """
    config = snapshot_config_from_uri(uri, project=project, database=database, files=files)
    store = config.open()
    try:
        manifest = read_manifest(store)
    finally:
        store.close()
    return SnapshotPlan(config=config, read=manifest,
                        generation=writer_generation or new_generation())


def state_line(snapshot: SnapshotPlan | None) -> str:
    """One line on where a batch run's keyed state starts: a snapshot, or empty."""
    if snapshot is None:
        return ("keyed state starts empty: without --state_snapshot every key starts at seq 0 "
                "with no working memory, and its state ends with the run (docs/operations.md, "
                "\"State between batch runs\")")
    if snapshot.read is None:
        return (f"keyed state starts empty: {snapshot.where} holds no snapshot yet; this run "
                "writes the first")
    read = snapshot.read
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(read.written_at_ms / 1000))
    return (f"keyed state from {snapshot.where}: {read.keys} key(s), generation "
            f"{read.generation}, written {when}; this run writes {snapshot.generation}")
