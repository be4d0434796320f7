"""The write coordinator between a produced long-term record and a stored one (seed 004).

It exists for three failures that only show under load or under faults:

* **Background writes are owned.** A write detached onto a bare
  ``asyncio.create_task`` outlives the activation that made it: nothing waits
  for it and nothing reports it. The coordinator spawns through an owned
  `BackgroundWork` registry or refuses to spawn at all (W01).
* **A flush waits for what it commits.** A flush that overtakes one of its own
  background writes publishes half an activation, so `WriteCoordinator.flush`
  joins them first (W02).
* **A lost flush does not lose the write.** An unreachable store yields a
  degraded receipt and the pending bookkeeping stays, so the next flush still
  commits it (W04). Forgetting it would turn one transport blip into silent loss.

Rollback is the store's pending buffer: staged records are invisible until
flushed, so abandoning a scope leaves nothing visible where the store can
discard (`DiscardingLongtermStore`), and says so with ``degraded`` where it
cannot (W09, W10).

Our store stages and flushes per entity, so a `Scope` below the entity (a
sub-path) groups bookkeeping only; the store acts on the whole entity. After a
store-level flush or discard, ids the store reports as handled are forgotten in
every scope of that entity, so bookkeeping never claims a committed record is
pending.

Pure core: stdlib, protobuf and beam_agents only; no clock (the loop enforces deadlines).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from beam_agents.errors import MemoryContractError, MemoryUnavailable
from beam_agents.memory._store import (
    DiscardingLongtermStore,
    DiscardReceipt,
    FlushReceipt,
    LongtermRecord,
    LongtermStore,
    check_scope,
    validate_entity_key,
)

__all__ = [
    "WRITE_OWNER",
    "BackgroundWork",
    "OwnedWork",
    "Scope",
    "TaskRegistry",
    "WriteCoordinator",
    "WriteOutcome",
    "WriteReceipt",
    "WriteRequest",
]

T = TypeVar("T")

#: The owner the coordinator names when it spawns a background write.
WRITE_OWNER = "beam_agents.memory.writes"


@dataclass(frozen=True, slots=True, kw_only=True)
class Scope:
    """One entity's records, optionally narrowed to a sub-path; the tenant boundary.

    ``path`` is the entity key in hex, then ``/part`` per sub-path part. A scope
    is *below* another when its path starts with the other's path plus ``/``.
    """

    entity_key: bytes
    parts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        validate_entity_key(self.entity_key)
        if not isinstance(self.parts, tuple):
            raise TypeError(f"Scope.parts must be a tuple of str, not {type(self.parts).__name__}")
        for part in self.parts:
            if not isinstance(part, str) or not part or "/" in part:
                raise ValueError(f"Scope.parts items must be non-empty str without '/': {part!r}")

    @property
    def path(self) -> str:
        """The scope's path: ``<hex entity key>[/<part>...]``."""
        return "/".join((self.entity_key.hex(), *self.parts))

    def covers(self, other: Scope) -> bool:
        """Whether ``other`` is this scope or lies below it."""
        return other.path == self.path or other.path.startswith(self.path + "/")


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteRequest:
    """Records to stage for one scope; each record's id is its key."""

    scope: Scope
    records: tuple[LongtermRecord, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.scope, Scope):
            raise TypeError(f"WriteRequest.scope must be a Scope, not {type(self.scope).__name__}")
        records = tuple(self.records)
        for bad in (r for r in records if not isinstance(r, LongtermRecord)):
            raise TypeError(f"WriteRequest.records takes LongtermRecords, not {type(bad).__name__}")
        object.__setattr__(self, "records", records)


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteReceipt:
    """What one write staged: accepted ids, rejected ``(id, reason)`` pairs, both sorted.

    ``degraded`` means the store was unreachable and every record was rejected.
    """

    accepted: tuple[str, ...] = ()
    rejected: tuple[tuple[str, str], ...] = ()
    degraded: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteOutcome:
    """How one background write ended: exactly one of ``receipt`` and ``error`` is set."""

    request: WriteRequest
    receipt: WriteReceipt | None = None
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        """Whether the write returned a receipt (which may still be degraded)."""
        return self.error is None


class BackgroundWork(Protocol):
    """An owned background-work registry: every task has an owner and a purpose.

    Contract: ``spawn`` schedules ``work`` on the running event loop and returns
    its task, or raises `MemoryContractError` (closing ``work``) when the work
    has no owner or the registry is closed. Whoever created the registry closes
    it, and closing reports and cancels whatever is still running.
    """

    def spawn(self, work: Coroutine[Any, Any, T], *, owner: str, purpose: str,
              deadline_s: float | None = None) -> asyncio.Task[T]:
        """Run ``work`` as a task owned by ``owner``; ``deadline_s`` bounds its run time."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class OwnedWork:
    """A registry entry: who spawned a task and why."""

    owner: str
    purpose: str


class TaskRegistry:
    """The default `BackgroundWork`: refuses unowned work, reports and cancels on close."""

    def __init__(self) -> None:
        self._running: dict[asyncio.Task[Any], OwnedWork] = {}
        self._closed = False

    @property
    def running(self) -> tuple[OwnedWork, ...]:
        """The work spawned here that has not finished, in spawn order."""
        return tuple(self._running.values())

    def spawn(self, work: Coroutine[Any, Any, T], *, owner: str, purpose: str,
              deadline_s: float | None = None) -> asyncio.Task[T]:
        """Schedule ``work`` under ``owner``; see `BackgroundWork.spawn`.

        Raises:
            MemoryContractError: ``owner`` is empty or the registry is closed.
            RuntimeError: No event loop is running in this thread.
        """
        if not isinstance(owner, str) or not owner.strip() or self._closed:
            work.close()
            raise MemoryContractError(
                f"the registry is closed; {owner} cannot spawn {purpose!r}" if self._closed
                else f"background work {purpose!r} names no owner; work nobody owns is "
                "work no activation waits for. Pass owner=..."
            )
        task = asyncio.get_running_loop().create_task(
            _bounded(work, deadline_s), name=f"{owner}:{purpose}"
        )
        self._running[task] = OwnedWork(owner=owner, purpose=purpose)
        task.add_done_callback(functools.partial(self._finished, work))
        return task

    def _finished(self, work: Coroutine[Any, Any, Any], task: asyncio.Task[Any]) -> None:
        self._running.pop(task, None)
        # A task cancelled before its first step never awaited ``work``; close
        # it so no coroutine is left un-awaited (a no-op once it ran).
        work.close()

    async def close(self) -> tuple[OwnedWork, ...]:
        """Refuse further work; cancel and await what still runs, and return it.

        Idempotent. The returned entries name work that did not finish on its
        own, so a caller can log what an activation left behind.
        """
        self._closed = True
        leftover = dict(self._running)
        for task in leftover:
            task.cancel()
        if leftover:
            await asyncio.wait(leftover)
        return tuple(leftover.values())


def _outcome(request: WriteRequest, task: asyncio.Task[WriteReceipt]) -> WriteOutcome:
    if task.cancelled():
        return WriteOutcome(request=request, error=asyncio.CancelledError("write cancelled"))
    error = task.exception()
    if error is not None:
        return WriteOutcome(request=request, error=error)
    return WriteOutcome(request=request, receipt=task.result())


async def _bounded(work: Coroutine[Any, Any, T], deadline_s: float | None) -> T:
    if deadline_s is None:
        return await work
    async with asyncio.timeout(deadline_s):
        return await work


@dataclass(slots=True)
class _Pending:
    scope: Scope
    ids: set[str] = field(default_factory=set)


class WriteCoordinator:
    """Owns the write side of an activation: foreground, background, flush and abandon."""

    def __init__(self, *, store: LongtermStore, background: BackgroundWork | None = None,
                 deadline_s: float | None = None) -> None:
        self._store = store
        self._background = background
        self._deadline_s = deadline_s
        self._pending: dict[str, _Pending] = {}
        self._spawned: list[tuple[WriteRequest, asyncio.Task[WriteReceipt]]] = []

    @property
    def pending_ids(self) -> tuple[str, ...]:
        """Every record id written through here and not yet committed or abandoned, sorted."""
        return tuple(sorted({i for pending in self._pending.values() for i in pending.ids}))

    @property
    def pending_scopes(self) -> tuple[str, ...]:
        """Paths of the scopes holding written-but-uncommitted records, sorted."""
        return tuple(sorted(self._pending))

    @property
    def in_flight(self) -> int:
        """Background writes spawned and not yet joined (W12)."""
        return len(self._spawned)

    async def write(self, request: WriteRequest) -> WriteReceipt:
        """Stage ``request`` now; an unreachable store degrades the receipt (W07).

        Raises:
            ScopeViolation: A record belongs to another entity. Never reported
                as degraded: a tenant boundary crossing is the one failure
                isolation exists to surface (invariant 7, W08).
        """
        scope = request.scope
        for record in request.records:
            check_scope(scope.entity_key, record)
        try:
            accepted = await self._store.stage(scope.entity_key, request.records)
        except MemoryUnavailable as exc:
            reason = f"long-term store unreachable: {exc}"
            return WriteReceipt(
                rejected=tuple(sorted((r.key, reason) for r in request.records)), degraded=True
            )
        taken = set(accepted)
        if taken:
            self._pending.setdefault(scope.path, _Pending(scope)).ids.update(taken)
        rejected = {r.key for r in request.records} - taken
        return WriteReceipt(
            accepted=tuple(sorted(taken)),
            rejected=tuple((key, "the store did not accept it") for key in sorted(rejected)),
        )

    def write_in_background(self, request: WriteRequest) -> asyncio.Task[WriteReceipt]:
        """Spawn ``request`` as owned work, or refuse and spawn nothing (W01).

        There is no third path: falling back to a bare task would recreate the
        detached writes the registry exists to end, invisibly.

        Raises:
            MemoryContractError: No background-work registry is bound.
            ScopeViolation: A record belongs to another entity (checked first).
        """
        if self._background is None:
            raise MemoryContractError(
                "a background long-term write needs a background-work registry to own it, "
                "and this WriteCoordinator has none; bind one (background=TaskRegistry()) "
                "or write in the foreground"
            )
        for record in request.records:
            check_scope(request.scope.entity_key, record)
        task = self._background.spawn(
            self.write(request),
            owner=WRITE_OWNER,
            purpose=f"longterm-write:{request.scope.path}",
            deadline_s=self._deadline_s,
        )
        self._spawned.append((request, task))
        return task

    async def join(self) -> tuple[WriteOutcome, ...]:
        """Await every background write spawned since the last join, in spawn order.

        A write that raised is reported as an outcome, not re-raised (W03): the
        failure belongs to that write, and the caller decides what it means.
        """
        spawned, self._spawned = self._spawned, []
        if spawned:
            # wait() never raises the tasks' errors but does propagate our own
            # cancellation, which awaiting each task in a try block would swallow.
            try:
                await asyncio.wait([task for _, task in spawned])
            except asyncio.CancelledError:
                self._spawned[:0] = spawned  # still ours to join
                raise
        return tuple(_outcome(request, task) for request, task in spawned)

    async def flush(
        self, scope: Scope, *, join: bool = True, required_ids: tuple[str, ...] = ()
    ) -> FlushReceipt:
        """Commit ``scope``'s entity, forgetting the bookkeeping of ``scope`` and below.

        ``join`` first awaits in-flight background writes, because a flush that
        overtakes its own write publishes half an activation (W02). A store that
        is unreachable gives a degraded receipt and the bookkeeping stays (W04).
        Superseded ids (the store held a newer seq, invariant 5) count as
        published for ``required_ids``.

        Raises:
            MemoryContractError: A required id was neither committed nor
                superseded; bookkeeping is kept so the caller can abandon (W05).
        """
        if join:
            await self.join()
        try:
            receipt = await self._store.flush(scope.entity_key)
        except MemoryUnavailable as exc:
            return FlushReceipt(entity_key=scope.entity_key, degraded=True, reason=str(exc))
        if receipt.degraded:
            return receipt
        published = set(receipt.committed) | set(receipt.superseded)
        missing = sorted(set(required_ids) - published)
        if missing:
            raise MemoryContractError(
                f"flush of scope {scope.path} did not publish required record ids {missing}; "
                "the pending bookkeeping is kept so the caller can abandon the scope"
            )
        self._forget(scope, published)
        return receipt

    async def abandon(self, scope: Scope) -> DiscardReceipt:
        """Give up on ``scope``'s uncommitted records; committed rows are never touched.

        With a `DiscardingLongtermStore` the pending buffer is dropped at the
        store and the rollback is real (W09). Without one, or with the store
        unreachable, the receipt is degraded and lists the abandoned ids: this
        coordinator will not commit them, but another flush could (W10, W11).
        """
        await self.join()
        mine = tuple(sorted({i for p in self._covered(scope) for i in p.ids}))
        self._forget(scope, set())
        degraded = DiscardReceipt(entity_key=scope.entity_key, discarded=mine, degraded=True)
        if not isinstance(self._store, DiscardingLongtermStore):
            return degraded
        try:
            receipt = await self._store.discard(scope.entity_key)
        except MemoryUnavailable:
            return degraded
        self._forget(scope, set(receipt.discarded))
        return receipt

    def _covered(self, scope: Scope) -> list[_Pending]:
        return [pending for pending in self._pending.values() if scope.covers(pending.scope)]

    def _forget(self, scope: Scope, handled: set[str]) -> None:
        """Drop ``scope`` and below; drop ``handled`` ids from the entity's other scopes."""
        for path, pending in list(self._pending.items()):
            if scope.covers(pending.scope):
                del self._pending[path]
            elif pending.scope.entity_key == scope.entity_key:
                pending.ids -= handled
                if not pending.ids:
                    del self._pending[path]
