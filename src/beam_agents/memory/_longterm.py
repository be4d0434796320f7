"""The activation-scoped long-term handle an agent reaches as ``ctx.memory.longterm``.

Saves stage, reads overlay (seed 000, M18-M24):

* `LongtermHandle.save` performs no store I/O. It stages an upsert stamped
  with the activation's frozen ``seq`` and ``now_ms`` straight into the store's
  pending buffer, the one buffer an upsert passes through on its way to a row;
  a later save of the same key replaces the earlier one in program order.
* The runtime calls `LongtermHandle.commit` in the commit tail, only after the
  agent returned. It flushes the entity's buffer in one seq-guarded
  transaction (invariant 5), or raises `MemoryUnavailable` carrying the
  store's reason, so the activation fails closed (M22). A failed activation
  calls `LongtermHandle.abandon` instead, which drops the buffer, and nothing
  it staged becomes visible (M20).
* `load` and `search` run inline against the store and overlay the pending
  upserts, so an agent observes its own writes before any flush (M23).

**Replay discipline (normative).** Reads are *point-in-time*: a replayed
activation may observe rows that its first attempt flushed. A long-term write
MUST therefore be computed from replay-stable inputs only (the event, working
memory, replay-cached model output) and MUST NOT be conditioned on a
same-activation long-term read of the same key. Followed, a replay re-stages
byte-identical upserts and the equal-seq guard makes the re-flush converge (M21,
M24).

Pure core: stdlib, protobuf and beam_agents only; no clock, and no I/O except
through the store port.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import threading
from collections.abc import Awaitable
from typing import TypeVar

from beam_agents._bridge import RunSync
from beam_agents._checks import require_int
from beam_agents.errors import MemoryContractError, MemoryUnavailable
from beam_agents.memory._store import (
    BufferedLongtermStore,
    DiscardReceipt,
    FlushReceipt,
    LongtermRecord,
    copy_record,
    validate_entity_key,
    validate_key,
    validate_search,
    validate_value,
)
from beam_agents.memory._writes import BackgroundWork

__all__ = ["DEFAULT_SEARCH_LIMIT", "SAVE_OWNER", "LongtermHandle"]

T = TypeVar("T")

#: Rows `LongtermHandle.search` returns when no limit is given.
DEFAULT_SEARCH_LIMIT = 100

#: The owner the handle names when it spawns a background save.
SAVE_OWNER = "beam_agents.memory.longterm"


class LongtermHandle:
    """One activation's long-term memory: staged saves, point-in-time overlaid reads.

    Built by the runtime per activation with the activation's frozen
    ``entity_key``, ``seq`` and ``now_ms``, over a store opened once per DoFn
    instance. It reaches only its own entity's records (invariant 7), and it
    holds no records itself: they are in the store's pending buffer, which
    belongs to this activation while it runs (a key runs one activation at a
    time, invariant 6).

    Async agents use `aload`/`asearch`; sync agents (run in a worker thread)
    use `load`/`search`, which drive the same coroutines through ``run_sync``.
    Reads are point-in-time; see the module docstring for the replay discipline.
    """

    def __init__(
        self,
        *,
        store: BufferedLongtermStore,
        entity_key: bytes,
        seq: int,
        now_ms: int,
        run_sync: RunSync,
        background: BackgroundWork | None = None,
    ) -> None:
        self._store = store
        self._entity_key = validate_entity_key(entity_key)
        self._seq = require_int(seq, name="LongtermHandle seq", low=0, error=ValueError)
        self._now_ms = require_int(now_ms, name="LongtermHandle now_ms", low=0, error=ValueError)
        self._run_sync = run_sync
        self._background = background
        self._buffer = store.pending_upserts
        self._lock = threading.Lock()
        # key -> program-order number of the save staged for it; lets a
        # background save that completes late lose to a save issued after it.
        self._staged_order: dict[str, int] = {}
        self._order = itertools.count()
        self._saves: list[tuple[str, asyncio.Task[None], Awaitable[bytes]]] = []
        self._open = True  # takes new saves
        self._sealed = False  # stages nothing more, not even a late background save

    @property
    def entity_key(self) -> bytes:
        """The entity this handle is scoped to."""
        return self._entity_key

    @property
    def seq(self) -> int:
        """The activation's seq, stamped on every staged record."""
        return self._seq

    @property
    def now_ms(self) -> int:
        """The activation's event time, stamped as ``updated_at_ms``."""
        return self._now_ms

    @property
    def staged(self) -> tuple[LongtermRecord, ...]:
        """Copies of the staged upserts, in key order."""
        pending = self._buffer.snapshot(self._entity_key)
        return tuple(copy_record(pending[key]) for key in sorted(pending))

    # -- writes ------------------------------------------------------------------

    def save(self, key: str, value: bytes) -> None:
        """Stage an upsert of ``key``; no store I/O until the commit tail.

        Raises:
            ValueError: ``key`` is not a usable key (names it).
            TypeError: ``value`` is not bytes (names the key).
            MemoryContractError: The activation already committed or abandoned.
        """
        self._check_open(key)
        validate_key(key)
        validate_value(key, value)
        self._stage(key, value, next(self._order))

    def save_in_background(self, key: str, value: Awaitable[bytes]) -> None:
        """Stage ``key`` with ``value``'s result once it completes, without blocking now.

        The work is spawned through the owned background-work registry; the
        commit joins it first, and a save that raised fails the commit. For a
        key saved more than once the save issued last wins, however the work
        interleaves.

        Raises:
            MemoryContractError: No registry is bound, or the activation ended.
            ValueError: ``key`` is not a usable key.
            TypeError: ``value`` is not awaitable.
        """
        try:
            self._check_open(key)
            validate_key(key)
            if self._background is None:
                raise MemoryContractError(
                    f"longterm.save_in_background({key!r}) needs a background-work registry "
                    "to own the work, and this handle has none; use save() with a computed "
                    "value, or have the runtime bind one"
                )
        except BaseException:
            if inspect.iscoroutine(value):
                value.close()  # refused: never leave an un-awaited coroutine behind
            raise
        if not inspect.isawaitable(value):
            raise TypeError(
                f"longterm.save_in_background({key!r}) takes an awaitable, "
                f"not {type(value).__name__}"
            )
        background = self._background
        work = self._compute(key, value, next(self._order))

        async def spawn() -> asyncio.Task[None]:
            return background.spawn(work, owner=SAVE_OWNER, purpose=f"longterm-save:{key}")

        try:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                task = self._run_sync(spawn())  # a sync agent: spawn on the runtime's loop
            else:
                task = background.spawn(work, owner=SAVE_OWNER, purpose=f"longterm-save:{key}")
        except BaseException:
            work.close()
            if inspect.iscoroutine(value):
                value.close()  # the registry refused: nothing may be left un-awaited
            raise
        self._saves.append((key, task, value))

    async def _compute(self, key: str, value: Awaitable[bytes], order: int) -> None:
        result = await value
        validate_value(key, result)
        self._stage(key, result, order)

    def _stage(self, key: str, value: bytes, order: int) -> None:
        record = LongtermRecord(
            entity_key=self._entity_key,
            key=key,
            value=value,
            seq=self._seq,
            updated_at_ms=self._now_ms,
        )
        with self._lock:
            # Under the lock, so that abandon either sees this record in the
            # buffer and drops it, or this save sees the activation ended.
            if self._sealed:
                raise MemoryContractError(
                    f"longterm save of {key!r} after the activation committed or abandoned; "
                    "it would never be flushed")
            if self._staged_order.get(key, -1) < order:
                self._buffer.stage(self._entity_key, (record,))
                self._staged_order[key] = order

    def _check_open(self, key: str) -> None:
        if not self._open:
            raise MemoryContractError(
                f"longterm save of {key!r} after the activation committed or abandoned; "
                "it would never be flushed"
            )

    # -- reads -------------------------------------------------------------------

    async def aload(self, key: str) -> LongtermRecord | None:
        """Return the staged record for ``key``, else the store's committed row, else None.

        Raises:
            MemoryUnavailable: The store could not be read; fails the activation.
        """
        validate_key(key)
        hit = self._buffer.get(self._entity_key, key)
        if hit is not None:
            return copy_record(hit)
        return await self._store.load(self._entity_key, key)

    async def asearch(
        self, prefix: str = "", *, limit: int = DEFAULT_SEARCH_LIMIT
    ) -> tuple[LongtermRecord, ...]:
        """Return up to ``limit`` records whose key starts with ``prefix``, in key order.

        Staged records replace store rows of the same key and are merged in
        before the limit is applied, so a staged key sorting before the store's
        rows displaces the last of them.

        Raises:
            MemoryUnavailable: The store could not be read; fails the activation.
        """
        prefix, limit = validate_search(prefix, limit)
        if limit == 0:
            return ()
        rows = await self._store.search(self._entity_key, prefix, limit)
        # The store's first `limit` rows suffice: merging only adds keys, so no
        # row past them can rank within the merged first `limit`.
        merged = {row.key: row for row in rows[:limit]}
        for key, record in self._buffer.snapshot(self._entity_key).items():
            if key.startswith(prefix):
                merged[key] = copy_record(record)
        return tuple(merged[key] for key in sorted(merged)[:limit])

    def load(self, key: str) -> LongtermRecord | None:
        """Sync `aload`, for agents running in a worker thread."""
        return self._run_sync(self.aload(key))

    def search(
        self, prefix: str = "", *, limit: int = DEFAULT_SEARCH_LIMIT
    ) -> tuple[LongtermRecord, ...]:
        """Sync `asearch`, for agents running in a worker thread."""
        return self._run_sync(self.asearch(prefix, limit=limit))

    # -- the commit tail ---------------------------------------------------------

    async def commit(self) -> FlushReceipt:
        """Flush every staged upsert in one seq-guarded transaction, or raise.

        Joins background saves first. With nothing staged it does no store I/O
        (M19). On a raise the buffer still holds the staged upserts; the
        runtime then calls `abandon`.

        Raises:
            MemoryUnavailable: The store could not commit; names the entity,
                the seq and the store's reason. The activation fails closed (M22).
            MemoryContractError: The store did not publish a staged record, or
                the handle already committed or abandoned.
            Exception: Whatever a background save raised; an activation must
                not commit half its writes.
        """
        if not self._open:
            raise MemoryContractError("longterm commit after the activation committed or abandoned")
        self._open = False
        await self._join_saves()
        with self._lock:
            self._sealed = True  # what is flushed is all this activation will ever stage
        staged = self._buffer.snapshot(self._entity_key)
        if not staged:
            return FlushReceipt(entity_key=self._entity_key)
        try:
            receipt = await self._store.flush(self._entity_key)
        except MemoryUnavailable as exc:
            raise MemoryUnavailable(
                f"long-term flush of {len(staged)} record(s) of entity {self._entity_key!r} at "
                f"seq {self._seq} failed ({exc}); the activation fails closed and is redriven"
            ) from exc
        # Superseded keys are published too: the store holds a newer seq (invariant 5).
        missing = sorted(set(staged) - set(receipt.committed) - set(receipt.superseded))
        if missing:
            raise MemoryContractError(
                f"the store's flush of entity {self._entity_key!r} at seq {self._seq} did not "
                f"publish staged record(s) {missing}")
        return receipt

    async def abandon(self) -> DiscardReceipt:
        """Roll back: cancel background saves and drop the entity's pending buffer.

        Committed rows are never touched, and nothing reaches the store: the
        buffer is local to the store object.
        """
        self._open = False
        saves, self._saves = self._saves, []
        for _, task, _ in saves:
            task.cancel()
        await _settle(saves)
        for _, task, _ in saves:
            if not task.cancelled():
                task.exception()  # retrieved: the rollback makes it moot
        with self._lock:
            self._sealed = True
            discarded = self._buffer.discard(self._entity_key)
        return DiscardReceipt(entity_key=self._entity_key, discarded=discarded)

    async def _join_saves(self) -> None:
        saves, self._saves = self._saves, []
        if not saves:
            return
        await _settle(saves)
        failures: list[BaseException] = []
        for key, task, _ in saves:
            if task.cancelled():
                failures.append(MemoryContractError(
                    f"background longterm save of {key!r} was cancelled before it staged"
                ))
            elif (error := task.exception()) is not None:
                failures.append(error)
        if failures:
            raise failures[0]  # the first in program order; all were retrieved


async def _settle(saves: list[tuple[str, asyncio.Task[None], Awaitable[bytes]]]) -> None:
    """Wait for the saves' tasks; close values a task cancelled before it awaited them."""
    if saves:
        await asyncio.wait([task for _, task, _ in saves])
    for _, _, value in saves:
        if inspect.iscoroutine(value):
            value.close()  # a no-op for a coroutine that ran
