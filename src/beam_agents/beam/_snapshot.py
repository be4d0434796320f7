"""``--state_snapshot`` on the batch path: read it beside the events, write it after them.

The snapshot's parts are read in parallel (one part per worker at a time) into
``(entity_key, marked record)`` pairs, flattened with the events and grouped
by key with them, so each key's state reaches the worker that runs its
events with no step that holds every key (`split_marked` tells them apart).
`AgentBatchDoFn` writes each key's cells, once its events ran, into parts of
a new generation and emits each part it closed; the commit, one small step
over the part list, runs only once both file outputs are written, and then
makes the generation current in one atomic write. A run that fails before
leaves the last good snapshot. Why: docs/operations.md, "State between batch runs".
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms import combiners

from beam_agents.hosting import (
    PartInfo,
    SnapshotPlan,
    SnapshotStoreConfig,
    commit_snapshot,
    mark,
    new_generation,
    parse_record,
    read_part,
)
from beam_agents.hosting import plan_snapshot as _plan_snapshot

__all__ = ["SNAPSHOT_PARTS", "BeamFiles", "ReadSnapshot", "SnapshotPlan", "commit_after",
           "new_generation", "plan_snapshot"]

#: The batch DoFn's output of the snapshot parts it wrote (PartInfo JSON).
SNAPSHOT_PARTS = "snapshot_parts"


@dataclass(frozen=True, slots=True)
class BeamFiles:
    """`Files` through Beam's ``FileSystems``: local paths, ``gs://``, ``s3://``, ..."""

    def join(self, base: str, name: str) -> str:
        """`name` inside `base`."""
        return FileSystems.join(base, name)

    def open_read(self, path: str) -> IO[bytes]:
        """Open for reading; FileNotFoundError when absent."""
        if not FileSystems.exists(path):
            raise FileNotFoundError(path)
        return FileSystems.open(path, compression_type="uncompressed")

    def open_write(self, path: str) -> IO[bytes]:
        """Create for writing (the folder, where there are folders, too)."""
        return FileSystems.create(path, compression_type="uncompressed")

    def rename(self, source: str, target: str) -> None:
        """Move onto `target`: one rename locally, one object copy on object stores."""
        if FileSystems.exists(target):
            FileSystems.delete([target])
        FileSystems.rename([source], [target])

    def delete(self, paths: list[str]) -> None:
        """Delete files and folders (on object stores, every object under the folder)."""
        doomed: list[str] = []
        for path in paths:
            inside = FileSystems.match([path.rstrip("/") + "/**"])[0].metadata_list
            doomed.extend(item.path for item in inside)
            if FileSystems.exists(path):
                doomed.append(path)
        if doomed:
            FileSystems.delete(doomed)

    def children(self, folder: str) -> list[str]:
        """Names directly inside `folder` (a folder's files collapse to its name)."""
        base = folder.rstrip("/") + "/"
        found = FileSystems.match([base + "**"])[0].metadata_list
        names = {item.path[len(base):].split("/", 1)[0] for item in found
                 if item.path.startswith(base)}
        return sorted(name for name in names if name)


def plan_snapshot(uri: str, *, project: str | None, database: str | None,
                  writer_generation: str | None = None) -> SnapshotPlan:
    """`beam_agents.hosting.plan_snapshot` on Beam's filesystems (``gs://`` too)."""
    return _plan_snapshot(uri, project=project, database=database, files=BeamFiles(),
                          writer_generation=writer_generation)


def _read_part(item: tuple[str, str], config: SnapshotStoreConfig) -> Iterator[tuple[bytes, bytes]]:
    generation, doc = item
    part = PartInfo.from_json(json.loads(doc), where=config.where)
    store = config.open()
    try:
        for record in read_part(store, generation, part):
            # Only its key here: a record that does not restore fails its own key's
            # events where they run, not the whole run.
            parsed = parse_record(record, where=f"{config.where}/{generation}/{part.name}",
                                  any_version=True)
            yield parsed.entity_key, mark(record)
    finally:
        store.close()


class ReadSnapshot(beam.PTransform):  # type: ignore[type-arg]
    """The parts a run read -> ``(entity_key, marked record)``, one part per worker at a time."""

    def __init__(self, plan: SnapshotPlan) -> None:
        super().__init__()
        self._plan = plan

    def expand(self, pipeline: Any) -> Any:
        """Create the part list, spread it over the workers, read each part."""
        manifest = self._plan.read
        parts = [] if manifest is None else [
            (manifest.generation, json.dumps(part.to_json())) for part in manifest.parts]
        keyed = beam.typehints.Tuple[bytes, bytes]
        return (pipeline
                | "SnapshotParts" >> beam.Create(parts, reshuffle=False)
                | "SpreadParts" >> beam.Reshuffle()
                | "ReadParts" >> beam.FlatMap(_read_part, self._plan.config).with_output_types(
                    keyed))


def _commit(parts: list[str], plan: SnapshotPlan, *written: Any) -> str:
    store = plan.config.open()
    try:
        manifest = commit_snapshot(
            store, generation=plan.generation,
            parts=[PartInfo.from_json(json.loads(doc), where=plan.where) for doc in parts],
            previous=None if plan.read is None else plan.read.generation, writer="beam",
            now_ms=int(time.time() * 1000))
    finally:
        store.close()
    return manifest.generation


def commit_after(parts: Any, plan: SnapshotPlan, *written: Any) -> Any:
    """Commit the generation once `parts` are all in and every `written` output has ended.

    `written` are the outputs' last steps, taken as side inputs: the commit
    cannot start before they have all run.
    """
    waits = [beam.pvalue.AsList(done) for done in written]
    return (parts
            | "AllParts" >> combiners.ToList()
            | "CommitSnapshot" >> beam.Map(_commit, plan, *waits))
