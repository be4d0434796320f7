"""What the chaos tests inject and what they observe, on real stores.

* `FlushLogConfig` wraps any store config and records every flush the
  runtime makes, with the exact bytes of the upserts it tried to commit, so a
  test compares a retry's upserts with the failed or dropped attempt's.
* `GuardlessConfig` opens a SQLite or Firestore store whose flush has the seq
  guard of invariant 5 removed: the seq guard tests run the same scenario
  against it to show their check fires.
* `TcpGate` stands between the stores and the Firestore server; shutting it
  closes its port, so a store meets a real outage while the server keeps its
  data. `Outage` pairs a store config with the means to break and heal it.
* `Answers` is a provider's behaviour per request, failing, stalling or
  answering with bytes that change if a call is paid for twice.
* `drive` runs events through the `KeyedEngine` (queue, suspension, retry)
  over in-process cells, on a fake clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from beam_agents.backend import PendingUpserts
from beam_agents.errors import MemoryUnavailable
from beam_agents.hosting import (
    ActivationRuntime,
    BagCell,
    KeyCells,
    KeyedEngine,
    KeyedState,
    StateCells,
    ValueCell,
    error_from_json,
    start_runtime,
)
from beam_agents.memory import (
    BufferedLongtermStore,
    DiscardReceipt,
    FlushReceipt,
    LongtermRecord,
    LongtermStoreConfig,
    Memory,
)
from beam_agents.model import ModelRequest, ModelResponse
from beam_agents.runtime import AgentConfig, AgentEvent, Committed, ErrorRecord, Outcome
from beam_agents.stores import (
    FirestoreLongtermConfig,
    InMemoryLongtermConfig,
    SqliteLongtermConfig,
)
from beam_agents.stores.firestore import FirestoreLongtermStore
from beam_agents.stores.firestore._rules import document_fields
from beam_agents.stores.sqlite import SqliteLongtermStore
from beam_agents.stores.sqlite._base import immediate_transaction
from beam_agents.testing import ScriptedModel

# -- what reached the store ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FlushAttempt:
    """One flush the runtime made: the upserts it tried to commit, and how it ended."""

    entity_key: bytes
    upserts: tuple[bytes, ...]  # deterministic serializations, in key order
    receipt: FlushReceipt | None
    error: str | None

    @property
    def seqs(self) -> set[int]:
        return {LongtermRecord.FromString(data).seq for data in self.upserts}


_FLUSHES: dict[str, list[FlushAttempt]] = {}
_AFTER_FAILED_FLUSH: dict[str, Callable[[], None]] = {}


class FlushLogStore:
    """A `BufferedLongtermStore` that delegates to a real one and logs each flush."""

    def __init__(self, inner: BufferedLongtermStore, name: str) -> None:
        self._inner = inner
        self._name = name

    @property
    def pending_upserts(self) -> PendingUpserts:
        return self._inner.pending_upserts

    async def load(self, entity_key: bytes, key: str) -> LongtermRecord | None:
        return await self._inner.load(entity_key, key)

    async def search(self, entity_key: bytes, prefix: str, limit: int
                     ) -> tuple[LongtermRecord, ...]:
        return await self._inner.search(entity_key, prefix, limit)

    async def stage(self, entity_key: bytes, records: Sequence[LongtermRecord]
                    ) -> tuple[str, ...]:
        return await self._inner.stage(entity_key, records)

    async def discard(self, entity_key: bytes) -> DiscardReceipt:
        return await self._inner.discard(entity_key)

    async def close(self) -> None:
        await self._inner.close()

    async def flush(self, entity_key: bytes) -> FlushReceipt:
        staged = self._inner.pending_upserts.snapshot(entity_key)
        upserts = tuple(staged[key].SerializeToString(deterministic=True)
                        for key in sorted(staged))
        log = _FLUSHES.setdefault(self._name, [])
        try:
            receipt = await self._inner.flush(entity_key)
        except MemoryUnavailable as exc:
            log.append(FlushAttempt(entity_key, upserts, None, type(exc).__name__))
            heal = _AFTER_FAILED_FLUSH.pop(self._name, None)
            if heal is not None:
                heal()
            raise
        log.append(FlushAttempt(entity_key, upserts, receipt, None))
        return receipt


@dataclass(frozen=True, slots=True, kw_only=True)
class FlushLogConfig:
    """Opens ``inner``'s store wrapped in a `FlushLogStore`; the log is kept by ``name``."""

    inner: LongtermStoreConfig
    name: str = field(default_factory=lambda: uuid.uuid4().hex)

    def open(self) -> FlushLogStore:
        return FlushLogStore(self.inner.open(), self.name)

    @property
    def flushes(self) -> list[FlushAttempt]:
        return list(_FLUSHES.get(self.name, ()))

    def heal_after_next_failed_flush(self, heal: Callable[[], None]) -> None:
        """Call ``heal`` (once) right after the next flush that fails."""
        _AFTER_FAILED_FLUSH[self.name] = heal


def committed_rows(config: LongtermStoreConfig, entity_key: bytes) -> dict[str, bytes]:
    """Every committed row of the entity, by key, as deterministic bytes; via a fresh store."""

    async def read() -> tuple[LongtermRecord, ...]:
        store = config.open()
        try:
            return await store.search(entity_key, "", 1000)
        finally:
            await store.close()

    return {row.key: row.SerializeToString(deterministic=True) for row in asyncio.run(read())}


def overwritten(newer: Mapping[str, bytes], later: Mapping[str, bytes]) -> list[str]:
    """Keys whose row went back to an older seq between two snapshots (invariant 5)."""
    return sorted(key for key, data in newer.items()
                  if key in later and LongtermRecord.FromString(later[key]).seq
                  < LongtermRecord.FromString(data).seq)


# -- a store without the seq guard ---------------------------------------------------

_UNGUARDED_UPSERT = """
INSERT INTO longterm_records (entity_key, key, value, seq, updated_at_ms) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (entity_key, key) DO UPDATE SET
    value = excluded.value, seq = excluded.seq, updated_at_ms = excluded.updated_at_ms
"""


class GuardlessSqliteStore(SqliteLongtermStore):
    """The SQLite store with the ``WHERE excluded.seq >= longterm_records.seq`` dropped."""

    async def flush(self, entity_key: bytes) -> FlushReceipt:
        batch = self._pending.snapshot(entity_key)
        if not batch:
            return FlushReceipt(entity_key=entity_key)

        def work(connection: Any) -> None:
            with immediate_transaction(connection):
                for key in sorted(batch):
                    record = batch[key]
                    connection.execute(_UNGUARDED_UPSERT, (
                        entity_key, record.key, record.value, record.seq, record.updated_at_ms))

        await self._db.run("flush", work)
        return self._settled(entity_key, batch, sorted(batch), ())


class GuardlessFirestoreStore(FirestoreLongtermStore):
    """The Firestore store writing every staged record, whatever seq the stored row holds."""

    async def flush(self, entity_key: bytes) -> FlushReceipt:
        batch = self._pending.snapshot(entity_key)
        if not batch:
            return FlushReceipt(entity_key=entity_key)

        async def work(client: Any) -> None:
            writes = client.batch()
            for key in sorted(batch):
                writes.set(self._document(client, entity_key, key), document_fields(batch[key]))
            await writes.commit(timeout=self._timeout_s)

        await self._call("flush", work)
        return self._settled(entity_key, batch, sorted(batch), ())


@dataclass(frozen=True, slots=True, kw_only=True)
class GuardlessConfig:
    """Opens ``inner``'s backend with the seq guard removed."""

    inner: LongtermStoreConfig

    def open(self) -> BufferedLongtermStore:
        if isinstance(self.inner, SqliteLongtermConfig):
            return GuardlessSqliteStore(self.inner)
        assert isinstance(self.inner, FirestoreLongtermConfig), self.inner
        return GuardlessFirestoreStore(self.inner)


# -- outages -----------------------------------------------------------------------


class TcpGate:
    """A TCP forwarder on 127.0.0.1 that can be shut (its port refuses) and reopened.

    While shut, nothing listens on its port and every connection through it is
    cut, which is what a client sees when the network or the server goes away;
    the server behind it keeps running, and keeps its data.
    """

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self._target = (host, int(port))
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            self.port: int = probe.getsockname()[1]
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._links: set[socket.socket] = set()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def open(self) -> None:
        with self._lock:
            if self._listener is not None:
                return
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", self.port))
            listener.listen(64)
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def shut(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            links, self._links = self._links, set()
        for sock in ([listener] if listener is not None else []) + list(links):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the accept and pump threads
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    upstream.close()
                    return
                self._links |= {client, upstream}
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


@dataclass
class Outage:
    """A store config whose backend the test takes away (`fail`) and brings back (`heal`).

    ``fail`` is None for a store that is unreachable from the start.
    """

    backend: str
    config: LongtermStoreConfig
    fail: Callable[[], None] | None
    heal: Callable[[], None]

    def take_away(self) -> None:
        assert self.fail is not None, "this store is unreachable from the start"
        self.fail()

    def wait_reachable(self, probe: Callable[[], object], timeout_s: float = 20.0) -> None:
        """Retry `probe` until the store answers it (a gRPC channel reconnects with backoff)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                probe()
                return
            except MemoryUnavailable:
                if time.monotonic() > deadline:
                    raise


# -- corrupt state -------------------------------------------------------------------

GARBAGE = b"\xff\xff\xff"


def blob_of_version(version: int) -> bytes:
    """A well-formed memory blob claiming a schema version this library does not know."""
    blob = Memory(None, now_ms=1).to_blob()
    blob.state_schema_version = version
    return blob.SerializeToString(deterministic=True)


def blob_with_corrupt_ring(key: str = "history") -> bytes:
    """A canonical memory blob whose ring `key` claims an item longer than its bytes.

    The envelope is valid, so it loads; only reading the ring finds the damage,
    which is the one corruption an activation meets after its agent started.
    """
    memory = Memory(None, now_ms=1)
    memory.append(key, b"abc")
    data = memory.to_bytes()
    ring = bytes([1, 3]) + b"abc"  # version 1, one item of 3 bytes
    assert data.count(ring) == 1, data
    return data.replace(ring, bytes([1, 9]) + b"abc")  # an item of 9 bytes, 3 present


# -- the provider --------------------------------------------------------------------


class StallError(Exception):
    """Returned by a plan: the call never answers (until the activation times out)."""


Plan = Callable[[str, int], BaseException | None]


class Answers:
    """A provider's behaviour per request content, counting what was asked and answered.

    A request is answered ``"<content> #<n>"``, n counting the *answered* calls
    of that content, so a call paid for twice answers differently the second
    time and every byte built on it diverges. ``plan(content, asked)`` returns
    an exception to fail that call with (`StallError` to hang), or None to answer.
    """

    def __init__(self, plan: Plan | None = None) -> None:
        self._plan = plan
        self._lock = threading.Lock()
        self.asked: Counter[str] = Counter()
        self.answered: Counter[str] = Counter()

    def __call__(self, request: ModelRequest) -> str | BaseException:
        content = str(request.messages[-1]["content"])
        with self._lock:
            self.asked[content] += 1
            failure = self._plan(content, self.asked[content]) if self._plan else None
            if failure is not None:
                return failure
            self.answered[content] += 1
            return f"{content} #{self.answered[content]}"

    def model(self) -> ScriptedModel:
        return _StallingModel(self)


class _StallingModel(ScriptedModel):
    async def complete(self, request: ModelRequest) -> ModelResponse:
        try:
            return await super().complete(request)
        except StallError:
            await asyncio.Event().wait()
            raise AssertionError("unreachable") from None


# -- the engine ----------------------------------------------------------------------


class StepClock:
    """Fake processing time that moves on a second per reading: every backoff has passed."""

    def __init__(self) -> None:
        self._now_ms = 0

    def __call__(self) -> int:
        self._now_ms += 1_000
        return self._now_ms


def fresh_cells(*, memory: bytes | None = None, llm_cache: bytes | None = None,
                seq: int | None = None) -> KeyCells:
    """A key's ten keyed-state cells, in process, optionally seeded."""
    return KeyCells(state=StateCells(ValueCell(memory), ValueCell(llm_cache), ValueCell(seq),
                                      ValueCell(), ValueCell()),
                    queue=BagCell(), dequeued=BagCell(), queue_meta=ValueCell(),
                    attempt=ValueCell(), retry_at_ms=ValueCell())


@dataclass
class Driven:
    """What a run through the engine produced: output lines, and each key's cells after it."""

    lines: list[tuple[str, bytes]]
    cells: dict[bytes, KeyCells]

    @property
    def intents(self) -> list[bytes]:
        return [line for channel, line in self.lines if channel == "intents"]

    @property
    def errors(self) -> list[ErrorRecord]:
        return [error_from_json(line) for channel, line in self.lines if channel == "errors"]


def drive(runtime: ActivationRuntime, events: Iterable[AgentEvent], *,
          cells: Mapping[bytes, KeyCells] | None = None) -> Driven:
    """Offer every event to the runtime's engine, then drain each key to the end."""
    engine = KeyedEngine.over(runtime)
    clock = StepClock()
    by_key = dict(cells or {})
    lines: list[tuple[str, bytes]] = []
    for event in events:
        key_cells = by_key.setdefault(event.entity_key, fresh_cells())
        step = engine.on_element(event.entity_key, key_cells,
                            event.SerializeToString(deterministic=True), clock())
        lines.extend(step.lines)
    for key, key_cells in by_key.items():
        lines.extend(engine.on_end_of_input(key, key_cells, clock_ms=clock).lines)
    return Driven(lines, by_key)


def event_ids(lines: Iterable[tuple[str, bytes]]) -> Counter[str]:
    """How many output lines (intents and error records together) each event produced."""
    return Counter(json.loads(line)["event_id"] for _, line in lines)


def reference_run(config: AgentConfig, events: Sequence[AgentEvent],
                  provider: Callable[[], ScriptedModel] | None = None,
                  ) -> tuple[list[bytes], dict[bytes, dict[str, bytes]]]:
    """The fault-free run of `events` on the in-memory store: its intents and rows per entity."""
    memory = InMemoryLongtermConfig(name=f"reference-{uuid.uuid4().hex}")
    try:
        with start_runtime(_with_store(config, memory),
                           provider=provider() if provider is not None else None) as runtime:
            driven = drive(runtime, events)
        assert driven.errors == [], driven.errors
        rows: dict[bytes, dict[str, bytes]] = {}
        for (entity, key), row in memory.store().rows().items():
            rows.setdefault(entity, {})[key] = row.SerializeToString(deterministic=True)
        return driven.intents, rows
    finally:
        memory.reset()


def _with_store(config: AgentConfig, store: LongtermStoreConfig) -> AgentConfig:
    return dataclasses.replace(config, longterm_memory=store)


def advance(state: KeyedState, outcome: Outcome) -> KeyedState:
    """The key's state after the host applied a committed outcome, as the engine does."""
    assert isinstance(outcome, Committed), outcome
    return state.after(outcome)
