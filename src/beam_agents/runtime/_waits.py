"""Waiting for an answer: a person's approval, another system's reply (invariant 14).

An agent records a wait (``ctx.wait_for("refund-approval", deadline_ms=...,
request={...})``); the request goes out as a ``wait`` intent for whoever
answers, and the wait is kept in the entity's ``waits`` cell, bounded by
``--max_pending_waits`` (invariant 4). Nothing blocks: the key's other events
go on. Then, whichever comes first in event time:

* **an answer**, an input event whose ``answers`` names the wait: the agent
  sees it as ``ctx.answer``, with the request it made, and the wait is gone
  once that activation commits;
* **the deadline**: when the wait is recorded, the engine queues a timeout
  event for it at its deadline (event time), which runs once the watermark
  has passed it, in the key's event-time order, as ``ctx.timed_out``. A
  timeout whose wait was answered first is moot and runs nothing.

An answer that comes after its wait timed out (or names no wait) still runs,
with ``ctx.answer.late`` set, so nothing is lost (invariant 8).

Pure: the blob, its bounds and the events it implies; hosts only keep the cell.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from google.protobuf.message import DecodeError

from beam_agents._proto.event_pb2 import AgentEvent
from beam_agents._proto.waits_pb2 import PendingWait, PendingWaitsBlob
from beam_agents.errors import (
    StateCorruptError,
    TooManyWaitsError,
    UnsupportedSchemaVersionError,
    WaitError,
)

__all__ = ["STATE_SCHEMA_VERSION", "PendingWaits", "WaitAnswer", "WaitTimeout", "timeout_event"]

#: The only ``PendingWaitsBlob.state_schema_version`` this library reads or writes.
STATE_SCHEMA_VERSION: Final = 1
#: The largest request a wait keeps, in bytes (it stays in keyed state until answered).
MAX_REQUEST_BYTES: Final = 65_536
_CELL = "waits"


@dataclass(frozen=True, slots=True)
class WaitAnswer:
    """The answer an event brings to a wait the agent recorded (``ctx.answer``).

    Attributes:
        name: The wait's name.
        payload: The answering event's payload.
        request: What the agent asked when it recorded the wait; empty when late.
        late: True when no such wait was pending: it timed out first, or was
            never recorded (the answer still runs, so nothing is lost).
    """

    name: str
    payload: bytes
    request: bytes
    late: bool

    def payload_json(self) -> Any:
        """The answer's payload parsed as JSON."""
        return json.loads(self.payload)

    def request_json(self) -> Any:
        """The request parsed as JSON."""
        return json.loads(self.request) if self.request else None


@dataclass(frozen=True, slots=True)
class WaitTimeout:
    """A wait that passed its deadline unanswered (``ctx.timed_out``)."""

    name: str
    request: bytes
    deadline_ms: int

    def request_json(self) -> Any:
        """The request parsed as JSON."""
        return json.loads(self.request) if self.request else None


def timeout_event(entity_key: bytes, wait: PendingWait) -> AgentEvent:
    """The event that delivers `wait`'s timeout, at its deadline in event time."""
    return AgentEvent(entity_key=entity_key, event_id=f"wait-timeout/{wait.name}/{wait.seq}",
                      event_time_ms=wait.deadline_ms, wait_timed_out=wait.name)


class PendingWaits:
    """An entity's pending waits, staged by one activation; written only if it commits."""

    __slots__ = ("_added", "_dirty", "_limit", "_waits")

    def __init__(self, blob: bytes | None, *, limit: int) -> None:
        self._waits: list[PendingWait] = list(_decode(blob).waits) if blob else []
        self._limit = limit
        self._added: list[PendingWait] = []
        self._dirty = False

    def __len__(self) -> int:
        return len(self._waits)

    @property
    def dirty(self) -> bool:
        """Whether this activation recorded or consumed a wait."""
        return self._dirty

    @property
    def added(self) -> tuple[PendingWait, ...]:
        """The waits this activation recorded, whose timeouts the engine must queue."""
        return tuple(self._added)

    @property
    def pending(self) -> tuple[PendingWait, ...]:
        """The pending waits, oldest first."""
        return tuple(self._waits)

    def names(self) -> tuple[str, ...]:
        """The pending waits' names, oldest first."""
        return tuple(wait.name for wait in self._waits)

    def add(self, *, entity_key: bytes, name: str, deadline_ms: int, request: bytes,
            seq: int) -> PendingWait:
        """Record a wait.

        Raises:
            ValueError: The name is empty, or the deadline is not an int.
            WaitError: A wait of that name is pending, or the request is too large.
            TooManyWaitsError: ``--max_pending_waits`` are pending.
        """
        if not isinstance(name, str) or not name or len(name) > 200:
            raise ValueError(f"a wait needs a name of 1-200 characters, got {name!r}")
        if isinstance(deadline_ms, bool) or not isinstance(deadline_ms, int):
            raise ValueError(f"deadline_ms must be an int (event time), got {deadline_ms!r}")
        if any(wait.name == name for wait in self._waits):
            raise WaitError(f"a wait named {name!r} is already pending; answer it or let it "
                            "time out, or give this one another name")
        if len(request) > MAX_REQUEST_BYTES:
            raise WaitError(f"the request of wait {name!r} is {len(request)} bytes, over the "
                            f"{MAX_REQUEST_BYTES} a pending wait may keep in keyed state")
        if len(self._waits) >= self._limit:
            raise TooManyWaitsError(entity_key=entity_key, name=name, limit=self._limit)
        wait = PendingWait(name=name, deadline_ms=deadline_ms, request=request, seq=seq)
        self._waits.append(wait)
        self._added.append(wait)
        self._dirty = True
        return wait

    def take(self, name: str, *, deadline_ms: int | None = None) -> PendingWait | None:
        """Consume the pending wait `name` (with that deadline, for a timeout); None if none."""
        for index, wait in enumerate(self._waits):
            if wait.name == name and (deadline_ms is None or wait.deadline_ms == deadline_ms):
                del self._waits[index]
                self._dirty = True
                return wait
        return None

    def to_bytes(self) -> bytes:
        """The cell's new bytes (deterministic)."""
        blob = PendingWaitsBlob(state_schema_version=STATE_SCHEMA_VERSION, waits=self._waits)
        return blob.SerializeToString(deterministic=True)


def _decode(blob: bytes) -> PendingWaitsBlob:
    try:
        parsed = PendingWaitsBlob.FromString(blob)
    except DecodeError as exc:
        raise StateCorruptError(f"waits blob does not decode: {exc}", cell=_CELL) from exc
    if parsed.state_schema_version != STATE_SCHEMA_VERSION:
        raise UnsupportedSchemaVersionError(cell=_CELL, version=parsed.state_schema_version,
                                            supported=(STATE_SCHEMA_VERSION,))
    return parsed
