"""Fixtures for the long-term store contract suite: one store per backend, and outages.

Every backend is built the way production builds it (a config's ``open()``),
in a private namespace (temp file, unique Firestore project), so tests never
see each other's rows.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

from beam_agents.errors import MemoryUnavailable
from beam_agents.memory._store import LongtermStore
from beam_agents.stores import (
    FirestoreLongtermConfig,
    InMemoryLongtermConfig,
    InMemoryLongtermStore,
    SqliteLongtermConfig,
)
from tests._firestore_server import (
    FirestoreServer,
    firestore_host,
    private_firestore_process,
    private_firestore_server,
)
from tests.conftest import Run

__all__ = ["backend", "firestore_host", "outage", "private_firestore_process",
           "private_firestore_server", "store", "store_factory"]

BACKENDS = ("memory", "sqlite", "firestore")



class StoreFactory(Protocol):
    def __call__(self, **overrides: Any) -> LongtermStore: ...


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The backend name; Firestore tests start (or reuse) the session's server."""
    name: str = request.param
    if name == "firestore":
        request.getfixturevalue("firestore_host")
    return name


@pytest.fixture
def store_factory(backend: str, tmp_path: Path, run: Run[Any]) -> Iterator[StoreFactory]:
    """Open fresh, empty stores of the backend; all are closed after the test."""
    opened: list[LongtermStore] = []
    names: list[str] = []

    def open_store(**overrides: Any) -> LongtermStore:
        store: LongtermStore
        if backend == "memory":
            name = overrides.get("name", f"contract-{uuid.uuid4().hex}")
            names.append(name)
            store = InMemoryLongtermConfig(name=name).open()
        elif backend == "sqlite":
            settings = {"path": str(tmp_path / f"store-{len(opened)}.db"), **overrides}
            store = SqliteLongtermConfig(**settings).open()
        else:
            settings = {"project": f"contract-{uuid.uuid4().hex[:12]}", "timeout_ms": 10_000,
                        **overrides}
            store = FirestoreLongtermConfig(**settings).open()
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        run(store.close())
    for name in names:
        InMemoryLongtermConfig(name=name).reset()


@pytest.fixture
def store(store_factory: StoreFactory) -> LongtermStore:
    """A fresh, empty store of the backend under test."""
    return store_factory()


class Outage:
    """Takes a store's backing service away and brings it back, per backend.

    * memory: the fake's ``unreachable`` flag.
    * sqlite: another connection holds the database's write lock past the
      store's busy timeout, the failure a real deployment sees when a writer
      wedges; reads still work (WAL), writes fail.
    * firestore: the store's private server process (of the run's kind: the
      official emulator unless the Cloud SDK is absent) is killed and
      restarted on the same port; ``heal`` waits until the store reaches it again.
    """

    def __init__(self, store: LongtermStore, fail: Callable[[], None],
                 heal: Callable[[], None]) -> None:
        self.store = store
        self._fail = fail
        self._heal = heal

    def fail(self) -> None:
        self._fail()

    def heal(self) -> None:
        self._heal()


@pytest.fixture
def outage(backend: str, store_factory: StoreFactory, tmp_path: Path, run: Run[Any],
           request: pytest.FixtureRequest) -> Iterator[Outage]:
    """A store plus the means to make its backend unreachable and reachable again."""
    if backend == "memory":
        memory = InMemoryLongtermStore()

        def fail_memory() -> None:
            memory.unreachable = True

        def heal_memory() -> None:
            memory.unreachable = False

        yield Outage(memory, fail_memory, heal_memory)
        return

    if backend == "sqlite":
        path = tmp_path / "outage.db"
        store = store_factory(path=str(path), busy_timeout_ms=100)
        run(store.load(b"probe", "probe"))  # create the database and its table
        holder: list[sqlite3.Connection] = []

        def fail_sqlite() -> None:
            blocker = sqlite3.connect(path, isolation_level=None)
            blocker.execute("BEGIN EXCLUSIVE")
            holder.append(blocker)

        def heal_sqlite() -> None:
            blocker = holder.pop()
            blocker.execute("ROLLBACK")
            blocker.close()

        yield Outage(store, fail_sqlite, heal_sqlite)
        for blocker in holder:
            blocker.close()
        return

    server: FirestoreServer = request.getfixturevalue("private_firestore_server")
    store = store_factory(timeout_ms=1_500)
    run(store.load(b"probe", "probe"))  # build the client against this server

    def heal_firestore() -> None:
        server.start()
        # gRPC reconnects with backoff; wait until the store gets through so
        # the test's next call meets a reachable store, as the contract says.
        deadline = time.monotonic() + 15
        while True:
            try:
                run(store.load(b"probe", "probe"))
                return
            except MemoryUnavailable:
                if time.monotonic() > deadline:
                    raise

    yield Outage(store, server.stop, heal_firestore)
