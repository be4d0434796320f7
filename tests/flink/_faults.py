"""A long-term store that crashes its worker once, right after a flush has committed.

Used by the Flink failover test (run in the Python workers, so it must be
importable there and picklable). The crash is a `BaseException`, which the
activation core deliberately does not turn into a dead letter: it escapes
``process_element`` and fails the Flink task, as a killed worker would. The
marker file makes it happen exactly once across restarts. Every flush is
logged, so the test can see which activations ran before and after the crash.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from beam_agents.memory import LongtermStore, LongtermStoreConfig

__all__ = ["CrashAfterFlushConfig", "WorkerCrash"]


class WorkerCrash(BaseException):  # a BaseException on purpose: it must escape the core
    """The injected failure: the worker dies between the flush and the state commit."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CrashAfterFlushConfig:
    """Wraps a store config; the flush of (`entity_key`, `crash_seq`) crashes once.

    Attributes:
        inner: The real store's config.
        entity_key: The entity whose flush crashes.
        crash_seq: The activation seq whose flush crashes, after it committed.
        marker: Created at the crash; while it exists no crash happens.
        flush_log: Every flush appends ``<before|after> <entity> <seq>``.
        flush_delay_ms: Paces activations so that checkpoints complete mid-stream.
        kill_process: Exit the worker process instead of raising in it.
    """

    inner: LongtermStoreConfig
    entity_key: bytes
    crash_seq: int
    marker: str
    flush_log: str
    flush_delay_ms: int = 0
    kill_process: bool = False

    def open(self) -> LongtermStore:
        """Open the inner store behind the crashing wrapper."""
        return _CrashingStore(self, self.inner.open())  # type: ignore[return-value]


class _CrashingStore:
    def __init__(self, config: CrashAfterFlushConfig, inner: LongtermStore) -> None:
        self._config = config
        self._inner = inner
        self._seq = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def stage(self, entity_key: bytes, records: Any) -> Any:
        self._seq = max((record.seq for record in records), default=self._seq)
        return await self._inner.stage(entity_key, records)

    async def flush(self, entity_key: bytes) -> Any:
        receipt = await self._inner.flush(entity_key)
        marker = Path(self._config.marker)
        phase = "after" if marker.exists() else "before"
        with open(self._config.flush_log, "a", encoding="utf-8") as log:
            log.write(f"{phase} {entity_key.decode()} {self._seq}\n")
        if self._config.flush_delay_ms:
            await asyncio.sleep(self._config.flush_delay_ms / 1000)
        if (phase == "before" and entity_key == self._config.entity_key
                and self._seq == self._config.crash_seq):
            marker.touch()
            if self._config.kill_process:
                os._exit(70)  # the Python worker dies outright, as under the OOM killer
            raise WorkerCrash(f"injected crash after the flush of seq {self._seq}")
        return receipt
