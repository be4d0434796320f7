"""The long-term store port: what every backend promises the activation core.

A store holds one entity's long-term records as rows keyed by
``(entity_key, key)``. Writes reach it in two steps, so an activation that
fails leaves no trace (DESIGN invariant 1, spec M20):

1. :meth:`LongtermStore.stage` buffers upserts inside the store object. They
   are invisible to :meth:`~LongtermStore.load` and :meth:`~LongtermStore.search`.
2. :meth:`LongtermStore.flush` commits one entity's buffer in one transaction
   with the seq guard of invariant 5: a stored row with a *higher* seq wins and
   the record is reported as superseded; an *equal* seq re-applies (a replayed
   activation re-stages byte-identical records, so rows converge, spec M21);
   a lower or absent seq is overwritten.

Rollback is dropping the buffer (:meth:`DiscardingLongtermStore.discard`),
which never touches committed rows. A flush that fails raises
`MemoryUnavailable` and keeps the buffer, so a later flush still commits it
(seed 004: a lost flush does not lose the write).

The buffer is one `PendingUpserts` per store, and a `BufferedLongtermStore`
exposes it, so an activation's long-term handle stages straight into it: an
activation's upserts live in exactly one buffer from `save` to `flush`.

This module is pure: stdlib, protobuf and beam_agents only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from beam_agents._proto.longterm_pb2 import LongtermRecord
from beam_agents.errors import ScopeViolation, StoreLimitError

__all__ = [
    "MAX_KEY_BYTES",
    "MAX_SEQ",
    "BufferedLongtermStore",
    "DiscardReceipt",
    "DiscardingLongtermStore",
    "FlushReceipt",
    "LimitCheck",
    "LongtermRecord",
    "LongtermStore",
    "LongtermStoreConfig",
    "PendingUpserts",
    "as_batch",
    "check_scope",
    "copy_record",
    "seq_guard_allows",
    "validate_entity_key",
    "validate_key",
    "validate_record",
    "validate_search",
    "validate_value",
]

#: Longest record key, in UTF-8 bytes. Keeps Firestore document ids and
#: indexed fields inside their 1,500-byte limits after encoding.
MAX_KEY_BYTES = 512

#: Largest seq any backend stores: SQLite and Firestore integers are signed
#: 64-bit, although the wire field is uint64.
MAX_SEQ = 2**63 - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class FlushReceipt:
    """What one flush did for one entity; key tuples are sorted and disjoint.

    Attributes:
        entity_key: The entity whose buffer was flushed.
        committed: Keys written by this flush (including equal-seq re-applies).
        superseded: Keys skipped because the store already held a newer seq.
        degraded: True when the caller could not confirm the outcome. Stores
            never set it: a store that cannot commit raises `MemoryUnavailable`.
        reason: Why a degraded flush failed (the store's message), so the
            dead letter of the activation that needed it can say so.
    """

    entity_key: bytes
    committed: tuple[str, ...] = ()
    superseded: tuple[str, ...] = ()
    degraded: bool = False
    reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class DiscardReceipt:
    """The pending keys one discard dropped, sorted.

    Attributes:
        entity_key: The entity whose buffer was dropped.
        discarded: Keys that were pending and are now gone.
        degraded: True when the rollback was not enforced at the store (set
            by callers wrapping a store without discard; stores never set it).
    """

    entity_key: bytes
    discarded: tuple[str, ...] = ()
    degraded: bool = False


@runtime_checkable
class LongtermStore(Protocol):
    """A per-entity record store with a staged, seq-guarded, transactional flush.

    Contract shared by every backend (the suite in ``tests/contract`` holds them
    to it):

    * **Scope.** Every call names one entity; nothing reads or writes another
      entity's rows (invariant 7).
    * **Consistency.** Reads are point-in-time: they see rows committed before
      the call and never the pending buffer. The activation's read-your-writes
      overlay lives above the store, in the long-term handle (spec M23).
    * **Idempotency.** ``load``/``search`` have no effects. ``stage`` of the
      same record twice buffers it once. ``flush`` is idempotent per record
      through the seq guard, so retried flushes converge on byte-identical rows.
    * **Errors.** An unreachable or failing store raises `MemoryUnavailable`
      (retriable); backends translate their SDK errors so callers never see
      ``sqlite3`` or ``google.api_core`` types. Bad arguments raise
      `TypeError`/`ValueError`, a backend limit `StoreLimitError`, a foreign
      record `ScopeViolation`, use after `close` `MemoryContractError`.
    * **Concurrency.** One object serves one DoFn instance (one event loop), and
      is safe under concurrent use by several tasks on that loop.
    * **Lifecycle.** :meth:`LongtermStoreConfig.open` builds the store in
      ``DoFn.setup()``; clients connect lazily on first use. Whoever opened the
      store closes it (``DoFn.teardown()``).
    """

    async def load(self, entity_key: bytes, key: str) -> LongtermRecord | None:
        """Return the committed row for ``key``, or None when there is none.

        Raises:
            MemoryUnavailable: The store could not be read.
        """
        ...

    async def search(
        self, entity_key: bytes, prefix: str, limit: int
    ) -> tuple[LongtermRecord, ...]:
        """Return up to ``limit`` committed rows whose key starts with ``prefix``.

        Rows come in ascending key order by Unicode code point (the order of
        the keys' UTF-8 bytes). An empty prefix matches every key. ``limit``
        must be a non-negative int.

        Raises:
            MemoryUnavailable: The store could not be read.
        """
        ...

    async def stage(
        self, entity_key: bytes, records: Sequence[LongtermRecord]
    ) -> tuple[str, ...]:
        """Buffer upserts for ``entity_key`` until :meth:`flush`; no I/O.

        A later stage of a key replaces the pending record for it. Validation
        happens before anything is buffered, so a rejected call stages nothing.

        Returns:
            The accepted keys, sorted and unique.

        Raises:
            ScopeViolation: A record's ``entity_key`` is not ``entity_key``.
            TypeError: An item is not a LongtermRecord.
            ValueError: A key is empty or longer than `MAX_KEY_BYTES`.
            StoreLimitError: A record or the buffer exceeds a backend limit.
        """
        ...

    async def flush(self, entity_key: bytes) -> FlushReceipt:
        """Commit the entity's pending upserts in one transaction with the seq guard.

        On success the flushed records leave the buffer. Flushing an empty
        buffer returns an empty receipt without I/O.

        Raises:
            MemoryUnavailable: Nothing was committed and the buffer is kept,
                so a later flush commits it.
        """
        ...

    async def close(self) -> None:
        """Release the client; pending buffers are dropped. Idempotent."""
        ...


@runtime_checkable
class DiscardingLongtermStore(LongtermStore, Protocol):
    """A store whose pending buffer can be dropped, making rollback real (seed 004)."""

    async def discard(self, entity_key: bytes) -> DiscardReceipt:
        """Drop the entity's pending buffer; committed rows are never touched. No I/O."""
        ...


class BufferedLongtermStore(DiscardingLongtermStore, Protocol):
    """A discarding store that exposes its pending buffer: what an activation needs.

    ``pending_upserts`` is the buffer `stage` fills and `flush` commits, with
    the backend's limit check bound in. Staging through it is the same as
    `stage` without a coroutine, so sync code (``longterm.save``) stages with
    no I/O and no event-loop round trip.
    """

    @property
    def pending_upserts(self) -> PendingUpserts:
        """The store's one pending buffer."""
        ...


class LongtermStoreConfig(Protocol):
    """Picklable settings for a store, held by ``AgentConfig.longterm_memory``.

    Implementations hold no client: DoFns are pickled to workers, and each
    worker builds its own store.
    """

    def open(self) -> BufferedLongtermStore:
        """Build a store; called once per DoFn instance in ``setup()``."""
        ...


def validate_entity_key(entity_key: object) -> bytes:
    """Return ``entity_key`` if it is bytes; raise TypeError otherwise."""
    if not isinstance(entity_key, bytes):
        raise TypeError(f"entity_key must be bytes, not {type(entity_key).__name__}")
    return entity_key


def validate_key(key: object) -> str:
    """Return ``key`` if it is a usable record key.

    Raises:
        ValueError: ``key`` is not a str, is empty, is not encodable as UTF-8
            (lone surrogates), or is longer than `MAX_KEY_BYTES` UTF-8 bytes.
    """
    if not isinstance(key, str):
        # The specification asks for ValueError for a key that is not text.
        raise ValueError(f"a long-term key must be text (str), not {type(key).__name__}: {key!r}")
    if not key:
        raise ValueError("a long-term key must not be empty")
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"long-term key {key!r} is not valid Unicode text (lone surrogate at "
            f"index {exc.start}); keys must be encodable as UTF-8"
        ) from exc
    if size > MAX_KEY_BYTES:
        raise ValueError(
            f"long-term key {key[:40]!r}... is {size} UTF-8 bytes, over the "
            f"{MAX_KEY_BYTES}-byte limit; use a shorter key"
        )
    return key


def validate_search(prefix: object, limit: object) -> tuple[str, int]:
    """Check :meth:`LongtermStore.search` arguments and return them.

    Raises:
        ValueError: ``prefix`` is not UTF-8-encodable text, or ``limit`` is negative.
        TypeError: ``limit`` is not an int.
    """
    if not isinstance(prefix, str):
        raise ValueError(f"a search prefix must be text (str), not {type(prefix).__name__}")
    try:
        prefix.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"search prefix {prefix!r} is not encodable as UTF-8") from exc
    if not isinstance(limit, int) or isinstance(limit, bool):
        raise TypeError(f"search limit must be an int, not {type(limit).__name__}")
    if limit < 0:
        raise ValueError(f"search limit must be >= 0, got {limit}")
    return prefix, limit


def validate_value(key: str, value: object) -> bytes:
    """Return ``value`` if it is bytes; raise TypeError naming ``key`` otherwise."""
    if not isinstance(value, bytes):
        raise TypeError(
            f"the value for long-term key {key!r} must be bytes, not {type(value).__name__}"
        )
    return value


def check_scope(entity_key: bytes, record: LongtermRecord) -> None:
    """Raise ScopeViolation unless ``record`` belongs to ``entity_key`` (invariant 7)."""
    if record.entity_key != entity_key:
        raise ScopeViolation(
            f"record {record.key!r} belongs to entity {record.entity_key!r}, not to "
            f"{entity_key!r}; a store call reaches only its own entity's records",
            expected=entity_key,
            actual=record.entity_key,
        )


def validate_record(entity_key: bytes, record: object) -> LongtermRecord:
    """Check one record for :meth:`LongtermStore.stage` and return it.

    Raises:
        TypeError: ``record`` is not a LongtermRecord, or its value is not bytes.
        ScopeViolation: The record belongs to another entity.
        ValueError: The key is not usable (see :func:`validate_key`).
        StoreLimitError: The seq does not fit a signed 64-bit integer.
    """
    if not isinstance(record, LongtermRecord):
        raise TypeError(f"stage takes LongtermRecord values, not {type(record).__name__}")
    check_scope(entity_key, record)
    validate_key(record.key)
    validate_value(record.key, record.value)
    if record.seq > MAX_SEQ:
        raise StoreLimitError(
            f"record {record.key!r} has seq {record.seq}, over the largest storable seq "
            f"{MAX_SEQ}",
            limit=MAX_SEQ,
            attempted=record.seq,
        )
    return record


#: A backend's limit check: the entity, and its buffer as it would be after a stage.
LimitCheck = Callable[[bytes, Mapping[str, LongtermRecord]], None]


class PendingUpserts:
    """The per-entity pending buffer every backend keeps between stage and flush.

    Records are copied on the way in, so a caller mutating its message after
    staging cannot change what is flushed. Methods never await, so each call is
    atomic for asyncio tasks; a lock makes them atomic across threads too.

    Args:
        check: The backend's limit check, called with the entity and its
            buffer as it would be after a stage; raising (`StoreLimitError`)
            leaves the buffer unchanged.
    """

    def __init__(self, check: LimitCheck | None = None) -> None:
        self._lock = threading.Lock()
        self._by_entity: dict[bytes, dict[str, LongtermRecord]] = {}
        self._check = check

    def stage(self, entity_key: bytes, records: Sequence[LongtermRecord]) -> tuple[str, ...]:
        """Validate and buffer ``records``; all or nothing.

        Args:
            entity_key: The scope every record must belong to.
            records: Upserts; a later record for a key replaces an earlier one.

        Returns:
            The accepted keys, sorted and unique.
        """
        validate_entity_key(entity_key)
        incoming: dict[str, LongtermRecord] = {}
        for record in as_batch(records):
            validate_record(entity_key, record)
            incoming[record.key] = copy_record(record)
        with self._lock:
            merged = {**self._by_entity.get(entity_key, {}), **incoming}
            if self._check is not None:
                self._check(entity_key, merged)
            if merged:
                self._by_entity[entity_key] = merged
        return tuple(sorted(incoming))

    def get(self, entity_key: bytes, key: str) -> LongtermRecord | None:
        """Return the pending record for ``key`` (shared, not copied), or None."""
        with self._lock:
            return self._by_entity.get(entity_key, {}).get(key)

    def snapshot(self, entity_key: bytes) -> dict[str, LongtermRecord]:
        """Return the entity's pending records by key (a new dict; records are shared)."""
        with self._lock:
            return dict(self._by_entity.get(entity_key, {}))

    def settle(self, entity_key: bytes, flushed: Mapping[str, LongtermRecord]) -> None:
        """Forget the flushed records, keeping any staged again while the flush ran."""
        with self._lock:
            pending = self._by_entity.get(entity_key)
            if pending is None:
                return
            for key, record in flushed.items():
                if pending.get(key) is record:
                    del pending[key]
            if not pending:
                del self._by_entity[entity_key]

    def discard(self, entity_key: bytes) -> tuple[str, ...]:
        """Drop the entity's buffer and return the keys it held, sorted."""
        with self._lock:
            return tuple(sorted(self._by_entity.pop(entity_key, {})))

    def clear(self) -> None:
        """Drop every entity's buffer."""
        with self._lock:
            self._by_entity.clear()


def as_batch(records: Sequence[LongtermRecord]) -> tuple[LongtermRecord, ...]:
    """Return ``records`` as a tuple; a lone record, str or bytes is a TypeError."""
    if isinstance(records, (LongtermRecord, str, bytes)) or not isinstance(records, Iterable):
        raise TypeError(
            f"stage takes a sequence of LongtermRecord values, not {type(records).__name__}"
        )
    return tuple(records)


def seq_guard_allows(stored_seq: int | None, record: LongtermRecord) -> bool:
    """Whether ``record`` may overwrite a row holding ``stored_seq`` (invariant 5).

    Absent, lower and equal seqs are overwritten (equal re-applies a replay);
    a higher stored seq wins.
    """
    return stored_seq is None or stored_seq <= record.seq


def copy_record(record: LongtermRecord) -> LongtermRecord:
    """Return an independent copy of ``record``."""
    copy = LongtermRecord()
    copy.CopyFrom(record)
    return copy
