"""An in-process long-term store for tests: dict rows, an operation log, fault injection.

`InMemoryLongtermStore` keeps the full store contract (staging, seq-guarded
flush, discard, point-in-time reads) so the contract suite runs against it like
any backend. On top it records every call in :attr:`~InMemoryLongtermStore.operations`,
so core tests can assert that no store operation happened (spec M19), and it
takes injected failures for chaos tests. Stdlib only; re-exported by
``beam_agents.testing``.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from beam_agents.backend import (
    as_batch,
    copy_record,
    seq_guard_allows,
    validate_entity_key,
    validate_key,
    validate_search,
)
from beam_agents.errors import ConfigError, MemoryContractError, MemoryUnavailable
from beam_agents.memory import DiscardReceipt, FlushReceipt, LongtermRecord
from beam_agents.stores._buffered import StoreBase

__all__ = ["InMemoryLongtermConfig", "InMemoryLongtermStore", "Operation"]

#: One logged call: the operation name first, then its arguments.
Operation = tuple[object, ...]

_OPERATIONS = frozenset({"load", "search", "stage", "flush", "discard", "close"})


class InMemoryLongtermStore(StoreBase):
    """A dict-backed `BufferedLongtermStore` that logs calls and fails on demand.

    Every call with valid arguments appends to :attr:`operations` before it
    runs, so failed calls are logged too: ``("load", entity_key, key)``, ``("search", entity_key,
    prefix, limit)``, ``("stage", entity_key, keys)``, ``("flush", entity_key)``,
    ``("discard", entity_key)``, ``("close",)``.

    Faults: :meth:`fail_next` queues an exception for the next call of one
    operation; :attr:`unreachable` makes the calls that would reach a server
    (``load``, ``search``, a ``flush`` with something pending) raise
    `MemoryUnavailable`; ``stage`` and ``discard`` touch only the local buffer,
    as in the real backends. A failed flush keeps its buffer.

    The store is reference-counted by :meth:`InMemoryLongtermConfig.open` so
    DoFn instances sharing it by name do not close it under each other; a
    directly constructed store starts with one holder.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._rows: dict[tuple[bytes, str], LongtermRecord] = {}
        self._faults: dict[str, deque[BaseException]] = {}
        self._holders = 1
        #: Every call made on this store, oldest first.
        self.operations: list[Operation] = []
        #: When True, calls that would reach a server raise MemoryUnavailable.
        self.unreachable = False

    # -- test controls -----------------------------------------------------

    def fail_next(self, op: str, exc: BaseException | None = None) -> None:
        """Make the next call of ``op`` raise ``exc`` (default: MemoryUnavailable).

        Calls queue up: two ``fail_next("flush")`` fail the next two flushes.
        The failing call has no effect other than being logged.
        """
        if op not in _OPERATIONS:
            raise ValueError(f"unknown store operation {op!r}; one of {sorted(_OPERATIONS)}")
        injected = exc if exc is not None else MemoryUnavailable(f"injected {op} failure")
        with self._lock:
            self._faults.setdefault(op, deque()).append(injected)

    def rows(self, entity_key: bytes | None = None) -> dict[tuple[bytes, str], LongtermRecord]:
        """Return copies of the committed rows, optionally of one entity only."""
        with self._lock:
            return {
                (ek, key): copy_record(row)
                for (ek, key), row in sorted(self._rows.items())
                if entity_key is None or ek == entity_key
            }

    def pending(self, entity_key: bytes) -> tuple[LongtermRecord, ...]:
        """Return copies of the entity's staged, unflushed records, by key."""
        snapshot = self._pending.snapshot(entity_key)
        return tuple(copy_record(snapshot[key]) for key in sorted(snapshot))

    def operation_names(self) -> tuple[str, ...]:
        """Return the names of the logged operations, oldest first."""
        return tuple(str(op[0]) for op in self.operations)

    @property
    def closed(self) -> bool:
        """Whether every holder has closed the store."""
        return self._holders == 0

    # -- the port ----------------------------------------------------------

    def _enter(self, op: str, *args: object, io: bool = False) -> None:
        with self._lock:
            self.operations.append((op, *args))
            if op != "close" and self._holders == 0:
                raise MemoryContractError(f"{op} on a closed InMemoryLongtermStore")
            queued = self._faults.get(op)
            fault = queued.popleft() if queued else None
        if fault is not None:
            raise fault
        if self.unreachable and io:
            raise MemoryUnavailable(f"in-memory store marked unreachable; {op} failed")

    async def load(self, entity_key: bytes, key: str) -> LongtermRecord | None:
        """Return a copy of the committed row, or None."""
        validate_entity_key(entity_key)
        validate_key(key)
        self._enter("load", entity_key, key, io=True)
        with self._lock:
            row = self._rows.get((entity_key, key))
            return None if row is None else copy_record(row)

    async def search(
        self, entity_key: bytes, prefix: str, limit: int
    ) -> tuple[LongtermRecord, ...]:
        """Return committed rows with ``prefix``, by code point order, at most ``limit``."""
        validate_entity_key(entity_key)
        validate_search(prefix, limit)
        self._enter("search", entity_key, prefix, limit, io=True)
        with self._lock:
            # Python compares str by code point, the order the port specifies.
            keys = sorted(
                key for ek, key in self._rows if ek == entity_key and key.startswith(prefix)
            )
            return tuple(copy_record(self._rows[(entity_key, key)]) for key in keys[:limit])

    async def stage(
        self, entity_key: bytes, records: Sequence[LongtermRecord]
    ) -> tuple[str, ...]:
        """Buffer upserts; see `LongtermStore.stage`."""
        batch = as_batch(records)
        self._enter("stage", entity_key, tuple(getattr(r, "key", None) for r in batch))
        return await super().stage(entity_key, batch)

    async def flush(self, entity_key: bytes) -> FlushReceipt:
        """Apply the buffer under the seq guard, atomically; see `LongtermStore.flush`."""
        validate_entity_key(entity_key)
        batch = self._pending.snapshot(entity_key)
        # Like the real backends, flushing nothing sends nothing: unreachable
        # does not apply, though an injected fault still does.
        self._enter("flush", entity_key, io=bool(batch))
        committed: list[str] = []
        superseded: list[str] = []
        with self._lock:
            for key, record in batch.items():
                row = self._rows.get((entity_key, key))
                if seq_guard_allows(None if row is None else row.seq, record):
                    self._rows[(entity_key, key)] = copy_record(record)
                    committed.append(key)
                else:
                    superseded.append(key)
        return self._settled(entity_key, batch, committed, superseded)

    async def discard(self, entity_key: bytes) -> DiscardReceipt:
        """Drop the entity's pending buffer; committed rows stay."""
        self._enter("discard", entity_key)
        return await super().discard(entity_key)

    async def close(self) -> None:
        """Release one holder; the last one drops the pending buffers. Idempotent."""
        self._enter("close")
        with self._lock:
            if self._holders == 0:
                return
            self._holders -= 1
            last = self._holders == 0
        if last:
            self._closed = True
            self._pending.clear()

    def _reopen(self) -> None:
        with self._lock:
            self._holders += 1
            self._closed = False


@dataclass(frozen=True, slots=True, kw_only=True)
class InMemoryLongtermConfig:
    """Opens the process-wide `InMemoryLongtermStore` registered under ``name``.

    Picklable; an unpickled copy in the same process opens the same store, so a
    test can hand the config to a pipeline and inspect the store afterwards
    with :meth:`store`.
    """

    name: str = "default"

    _registry: ClassVar[dict[str, InMemoryLongtermStore]] = {}
    _registry_lock: ClassVar[threading.Lock] = threading.Lock()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(
                f"InMemoryLongtermConfig.name must be a non-empty str, got {self.name!r}",
                field="name",
            )

    def open(self) -> InMemoryLongtermStore:
        """Return the shared store, creating it on first use; adds one holder."""
        with self._registry_lock:
            store = self._registry.get(self.name)
            if store is None:
                store = self._registry[self.name] = InMemoryLongtermStore()
            else:
                store._reopen()
            return store

    def store(self) -> InMemoryLongtermStore:
        """Return the shared store without adding a holder (for assertions)."""
        with self._registry_lock:
            store = self._registry.get(self.name)
            if store is None:
                store = self._registry[self.name] = InMemoryLongtermStore()
                store._holders, store._closed = 0, True
            return store

    def reset(self) -> None:
        """Forget the shared store, so the next :meth:`open` starts empty."""
        with self._registry_lock:
            self._registry.pop(self.name, None)
