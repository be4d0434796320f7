"""A long-term store that crashes its worker once, right after a flush has committed.

Used by the Flink failover test (run in the Python workers, so it must be
importable there and picklable). The crash is a `BaseException`, which the
activation core deliberately does not turn into a dead letter: it escapes
the operator's callback and fails the Flink task, as a killed worker would.
The marker file makes it happen exactly once across restarts. Every flush is
logged, so the test can see which activations ran before and after the crash.
It can also wait until other entities' activations are in flight in the same
worker (`tests.agents.RUNNING`), so the crash abandons them mid-run.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from beam_agents.memory import BufferedLongtermStore, LongtermStoreConfig
from tests import agents
from tests.flink._sink import part_lines

__all__ = ["CrashAfterFlushConfig", "WorkerCrash"]


class WorkerCrash(BaseException):  # a BaseException on purpose: it must escape the core
    """The injected failure: the worker dies between the flush and the state commit."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CrashAfterFlushConfig:
    """Wraps a store config; a flush of `entity_key` at `crash_seq` or later crashes once.

    The crash waits until a completed checkpoint holds the entity's progress,
    seen as a committed intent of it under `committed_dir` (the job's file
    sinks commit only on completed checkpoints), so the restart restores a
    checkpoint rather than starting over, however slowly the machine runs.

    Attributes:
        inner: The real store's config.
        entity_key: The entity whose flush crashes.
        crash_seq: The first activation seq whose flush may crash, after it
            committed; 0 never crashes.
        committed_dir: The intents sink's directory; the crash waits for a
            committed intent of `entity_key` there.
        marker: Created at the crash, holding the crashed seq; while it exists no
            crash happens.
        flush_log: Every flush appends ``<before|after> <entity> <seq>``.
        flush_delay_ms: Paces activations so that checkpoints complete mid-stream.
        kill_process: Exit the worker process instead of raising in it.
        min_in_flight: The crash also waits until at least this many other
            entities' ``paced_journal`` activations are running in the worker
            process (on a MiniCluster, the client process, which runs every
            subtask's operator); it writes their keys, one a line, to
            ``<marker>.in_flight``.
    """

    inner: LongtermStoreConfig
    entity_key: bytes
    crash_seq: int
    committed_dir: str
    marker: str
    flush_log: str
    flush_delay_ms: int = 0
    kill_process: bool = False
    min_in_flight: int = 0

    def open(self) -> BufferedLongtermStore:
        """Open the inner store behind the crashing wrapper."""
        return _CrashingStore(self, self.inner.open())  # type: ignore[return-value]


class _CrashingStore:
    def __init__(self, config: CrashAfterFlushConfig, inner: BufferedLongtermStore) -> None:
        self._config = config
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def flush(self, entity_key: bytes) -> Any:
        # Activations stage straight into the store's pending buffer, and several
        # entities' activations flush concurrently: read the flushed seq from
        # this entity's own pending records.
        pending = self._inner.pending_upserts.snapshot(entity_key)
        seq = max((record.seq for record in pending.values()), default=0)
        receipt = await self._inner.flush(entity_key)
        marker = Path(self._config.marker)
        phase = "after" if marker.exists() else "before"
        with open(self._config.flush_log, "a", encoding="utf-8") as log:
            log.write(f"{phase} {entity_key.decode()} {seq}\n")
        if self._config.flush_delay_ms:
            await asyncio.sleep(self._config.flush_delay_ms / 1000)
        due = (phase == "before" and entity_key == self._config.entity_key
               and 0 < self._config.crash_seq <= seq)
        if due:
            await self._await_checkpoint(entity_key)
        if (due and _checkpointed(Path(self._config.committed_dir), entity_key)
                and len(others := sorted(agents.RUNNING - {entity_key}))
                >= self._config.min_in_flight):
            Path(f"{marker}.in_flight").write_text("".join(f"{k.decode()}\n" for k in others))
            marker.write_text(str(seq))
            if self._config.kill_process:
                os._exit(70)  # the Python worker dies outright, as under the OOM killer
            raise WorkerCrash(f"injected crash after the flush of seq {seq}")
        return receipt

    async def _await_checkpoint(self, entity_key: bytes) -> None:
        """Hold the entity's flush until a checkpoint covers it, for up to `CHECKPOINT_WAIT_S`.

        On a loaded standalone cluster the first checkpoint can come tens of
        seconds after the job starts, by when the entity may have run all its
        events and the crash would never come. Holding this one flush slows
        the entity (and, in arrival order, its subtask's input) until one has;
        the others' activations and the checkpoints go on meanwhile.
        """
        directory = Path(self._config.committed_dir)
        for _ in range(int(CHECKPOINT_WAIT_S / CHECKPOINT_POLL_S)):
            if _checkpointed(directory, entity_key):
                return
            await asyncio.sleep(CHECKPOINT_POLL_S)


#: How long the crashing flush waits for a checkpoint, and how often it looks.
CHECKPOINT_WAIT_S, CHECKPOINT_POLL_S = 3.0, 0.1


def _checkpointed(directory: Path, entity_key: bytes) -> bool:
    """True once a file sink has committed an intent of `entity_key`.

    The sink commits only on completed checkpoints, so the entity's keyed
    state in that checkpoint is past seq 1.
    """
    entity = entity_key.decode()
    return any(json.loads(line)["entity_key"] == entity for line in part_lines(directory))
