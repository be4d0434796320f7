"""Chaos fixtures: long-term stores on every durable backend, and real outages of them.

Firestore runs on the session's server. Its outages go through a `TcpGate`
in front of that server, so a store loses its connection (the gate's port
refuses) while the server keeps the rows committed before the outage.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from beam_agents.memory import LongtermStoreConfig
from beam_agents.stores import FirestoreLongtermConfig, InMemoryLongtermConfig, SqliteLongtermConfig
from tests._firestore_server import EMULATOR_HOST_ENV, firestore_host
from tests.chaos._faults import Outage, TcpGate

__all__ = ["firestore_host", "outage", "store_config", "unreachable"]

BACKENDS = ("sqlite", "firestore")

#: A Firestore call during an outage fails after this deadline; short keeps the suite quick,
#: long enough for a warm official emulator on a loaded machine (a flush takes 30-450 ms).
OUTAGE_TIMEOUT_MS = 1_000


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The durable backend under test; Firestore starts (or reuses) the session's server."""
    name: str = request.param
    if name == "firestore":
        request.getfixturevalue("firestore_host")
    return name


@pytest.fixture
def store_config(backend: str, tmp_path: Path) -> Iterator[LongtermStoreConfig]:
    """A fresh store config of each durable backend."""
    if backend == "firestore":
        yield FirestoreLongtermConfig(project=f"chaos-{uuid.uuid4().hex[:12]}", timeout_ms=10_000)
    else:
        yield SqliteLongtermConfig(path=str(tmp_path / "longterm.db"))


@pytest.fixture
def memory_store_config() -> Iterator[InMemoryLongtermConfig]:
    """An in-memory store shared by name, so the test can inspect what reached it."""
    config = InMemoryLongtermConfig(name=f"chaos-{uuid.uuid4().hex}")
    yield config
    config.reset()


@pytest.fixture
def gate(backend: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[TcpGate | None]:
    """For Firestore, a shut gate in front of the server that every client of the test uses."""
    if backend != "firestore":
        yield None
        return
    through = TcpGate(os.environ[EMULATOR_HOST_ENV])
    monkeypatch.setenv(EMULATOR_HOST_ENV, through.host)
    try:
        yield through
    finally:
        through.shut()


@pytest.fixture
def outage(backend: str, tmp_path: Path, gate: TcpGate | None) -> Iterator[Outage]:
    """A reachable store that `fail()` takes away mid-life and `heal()` brings back.

    * sqlite: another connection holds the write lock past the store's busy
      timeout, as a wedged writer does; reads still work (WAL), writes fail.
    * firestore: the gate is shut, so every call fails after its deadline.
    """
    if gate is not None:
        gate.open()
        config = FirestoreLongtermConfig(project=f"outage-{uuid.uuid4().hex[:12]}",
                                         timeout_ms=OUTAGE_TIMEOUT_MS)
        yield Outage("firestore", config, gate.shut, gate.open)
        return
    path = tmp_path / "outage.db"
    sqlite_config = SqliteLongtermConfig(path=str(path), busy_timeout_ms=100)
    _create(sqlite_config)
    blockers: list[sqlite3.Connection] = []

    def fail() -> None:
        # The store heals from its loop thread (after a failed flush), hence no thread check.
        blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        blocker.execute("BEGIN EXCLUSIVE")
        blockers.append(blocker)

    def heal() -> None:
        while blockers:
            blocker = blockers.pop()
            blocker.execute("ROLLBACK")
            blocker.close()

    try:
        yield Outage("sqlite", sqlite_config, fail, heal)
    finally:
        heal()


@pytest.fixture
def unreachable(backend: str, tmp_path: Path, gate: TcpGate | None) -> Iterator[Outage]:
    """A store that cannot be reached from the start; `heal()` makes it reachable.

    * sqlite: its path lies below a regular file, so the database cannot be
      opened; healing removes the file.
    * firestore: it points at the gate's closed port; healing opens the gate.
    """
    if gate is not None:
        config = FirestoreLongtermConfig(project=f"unreachable-{uuid.uuid4().hex[:12]}",
                                         timeout_ms=OUTAGE_TIMEOUT_MS)
        yield Outage("firestore", config, None, gate.open)
        return
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the database's folder should be")

    def heal() -> None:
        blocker.unlink(missing_ok=True)

    yield Outage("sqlite", SqliteLongtermConfig(path=str(blocker / "longterm.db")), None, heal)


def _create(config: SqliteLongtermConfig) -> None:
    """Create the database and its table, so an outage meets an existing store."""

    async def touch() -> None:
        store = config.open()
        try:
            await store.load(b"probe", "probe")
        finally:
            await store.close()

    asyncio.run(touch())
