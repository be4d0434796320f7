"""``--state_snapshot`` on the native Flink job's bounded mode: read beside the events, write after.

The same snapshot as the Beam batch path's (docs/operations.md, "State between
batch runs"), so either host continues what the other wrote:

* **Read.** The parts the current generation lists are spread over the job's
  subtasks and read in parallel into ``(key, marked record)`` elements, which
  join the decoded events before the key-by: each key's record reaches the
  subtask that runs its events, with no step that holds every key. Events
  only queue until the input ends (event-time order), so a record is always
  in before its key's first activation.
* **Write.** Each key's cells go into parts of the next generation as its
  end-of-input drain finishes. Parts are named by subtask and attempt, and
  each is recorded in the store as it closes (`SnapshotStore.write_info`).
* **Commit.** Once the job has ended, the client makes the generation
  current in one write, listing per subtask only the parts of its latest
  attempt that wrote any (`committed_parts`): a failover restores a
  checkpoint taken before the input ended, and the restarted attempt writes
  every key of its subtask again, while a subtask that had finished is
  restored as finished and writes nothing. A run that fails leaves the last
  good snapshot.
* **Waits.** A wait whose deadline lies past the input's latest event time
  stays pending for the next run, as on Beam. That time is one number over
  the whole input, found before the job by a small batch query in Flink's
  own JSON reader (`latest_event_time`), so both hosts decide alike.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pyflink.common import Types
from pyflink.datastream import DataStream, FlatMapFunction, StreamExecutionEnvironment

from beam_agents.hosting import (
    Manifest,
    PartInfo,
    SnapshotPlan,
    SnapshotStoreConfig,
    commit_snapshot,
    mark,
    parse_record,
    read_part,
)

__all__ = ["SNAPSHOT_UIDS", "FlinkSnapshot", "commit_job_snapshot", "committed_parts",
           "job_snapshot", "latest_event_time", "part_prefix", "snapshot_records"]

#: The uids of the operators that read the snapshot (see `beam_agents.flink._job.UIDS`).
SNAPSHOT_UIDS = {"parts": "state-snapshot-parts", "read": "read-state-snapshot"}

_KEYED_RECORD = Types.TUPLE([Types.STRING(), Types.PRIMITIVE_ARRAY(Types.BYTE())])
_PART_NAME = re.compile(r"part-s(?P<subtask>\d+)-a(?P<attempt>\d+)-")


@dataclass(frozen=True, slots=True, kw_only=True)
class FlinkSnapshot:
    """What the keyed function needs to write the next generation.

    Attributes:
        config: The snapshot's store.
        generation: The generation this run writes.
        waits_through_ms: The input's latest event time: a wait's timeout past
            it stays pending. None: the input holds no event.
    """

    config: SnapshotStoreConfig
    generation: str
    waits_through_ms: int | None


def part_prefix(subtask: int, attempt: int) -> str:
    """What starts the name of every part a subtask's attempt writes."""
    return f"part-s{subtask:05d}-a{attempt:05d}"


def committed_parts(infos: Iterable[PartInfo]) -> list[PartInfo]:
    """The parts a finished job committed: per subtask, those of its latest attempt that wrote any.

    A part whose name has no subtask and attempt is not this job's; it is
    left out, and the commit prunes it with the failed attempts' parts.
    """
    by_subtask: dict[int, dict[int, list[PartInfo]]] = {}
    for info in infos:
        found = _PART_NAME.match(info.name)
        if found is not None:
            attempts = by_subtask.setdefault(int(found["subtask"]), {})
            attempts.setdefault(int(found["attempt"]), []).append(info)
    return sorted((info for attempts in by_subtask.values() for info in attempts[max(attempts)]),
                  key=lambda info: info.name)


class _ReadPart(FlatMapFunction):
    """``(generation, PartInfo JSON)`` -> ``(key, marked record)`` for each record in the part."""

    def __init__(self, config: SnapshotStoreConfig) -> None:
        self._config = config

    def flat_map(self, value: tuple[str, str]) -> Iterator[tuple[str, bytes]]:
        """Read one part; a record that does not restore fails its own key's events, not the job."""
        generation, doc = value
        part = PartInfo.from_json(json.loads(doc), where=self._config.where)
        store = self._config.open()
        try:
            for record in read_part(store, generation, part):
                parsed = parse_record(record, where=f"{self._config.where}/{generation}/"
                                      f"{part.name}", any_version=True)
                yield parsed.entity_key.hex(), mark(record)
        finally:
            store.close()


def snapshot_records(env: StreamExecutionEnvironment, plan: SnapshotPlan) -> DataStream | None:
    """The current generation's records as ``(key, marked record)``; None when there is none."""
    manifest = plan.read
    if manifest is None or not manifest.parts:
        return None
    parts = [(manifest.generation, json.dumps(part.to_json(), sort_keys=True))
             for part in manifest.parts]
    listed = env.from_collection(parts, type_info=Types.TUPLE([Types.STRING(), Types.STRING()]))
    return (listed.uid(SNAPSHOT_UIDS["parts"]).rebalance()
            .flat_map(_ReadPart(plan.config), output_type=_KEYED_RECORD)
            .name("ReadStateSnapshot").uid(SNAPSHOT_UIDS["read"]))


def latest_event_time(input_files: Iterable[str]) -> int | None:
    """The latest ``event_time_ms`` over the input's lines, by a batch query in Flink's JVM.

    Lines that are not JSON, or name no entity, are left out, as the decoder
    leaves them out of the run. None when no line has an event time.
    """
    from pyflink.table import EnvironmentSettings, TableEnvironment  # noqa: PLC0415

    tables = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    selects = []
    for n, path in enumerate(input_files):
        uri = path if "://" in path else f"file://{_absolute(path)}"
        escaped = uri.replace("'", "''")
        tables.execute_sql(
            f"CREATE TEMPORARY TABLE input_{n} (event_time_ms BIGINT, entity_key STRING, "
            f"entity_key_b64 STRING) WITH ('connector' = 'filesystem', 'path' = '{escaped}', "
            "'format' = 'json', 'json.ignore-parse-errors' = 'true')")
        selects.append(f"SELECT event_time_ms FROM input_{n} WHERE event_time_ms >= 0 AND "
                       "(CHAR_LENGTH(entity_key) > 0 OR CHAR_LENGTH(entity_key_b64) > 0)")
    query = f"SELECT MAX(event_time_ms) FROM ({' UNION ALL '.join(selects)})"
    with tables.execute_sql(query).collect() as rows:
        found = [row[0] for row in rows]
    return int(found[0]) if found and found[0] is not None else None


def _absolute(path: str) -> str:
    return str(Path(path).resolve())


def commit_job_snapshot(plan: SnapshotPlan, *, now_ms: int | None = None) -> Manifest:
    """Make the generation the finished job wrote current; returns its manifest."""
    store = plan.config.open()
    try:
        return commit_snapshot(
            store, generation=plan.generation,
            parts=committed_parts(store.list_infos(plan.generation)),
            previous=None if plan.read is None else plan.read.generation, writer="flink",
            now_ms=int(time.time() * 1000) if now_ms is None else now_ms)
    finally:
        store.close()


def job_snapshot(plan: SnapshotPlan, input_files: Iterable[str]) -> FlinkSnapshot:
    """What the keyed function writes with, the input's latest event time found first."""
    return FlinkSnapshot(config=plan.config, generation=plan.generation,
                         waits_through_ms=latest_event_time(input_files))
