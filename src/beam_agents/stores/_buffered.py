"""What every backend shares around its I/O: the pending buffer, staging, discard, closed.

SQLite, Firestore and the in-memory store keep staged upserts in one
`PendingUpserts` (exposed as `pending_upserts`, so an activation's handle
stages into it directly), refuse work once closed, and settle the buffer the
same way after a transaction; only the transaction itself is backend-specific.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from beam_agents._proto.longterm_pb2 import LongtermRecord
from beam_agents.backend import LimitCheck, PendingUpserts, validate_entity_key
from beam_agents.errors import MemoryContractError
from beam_agents.memory import DiscardReceipt, FlushReceipt

__all__ = ["StoreBase"]


class StoreBase:
    """Base of the stores: the pending buffer, `stage`, `discard`, and the closed check.

    Args:
        check: The backend's limit check, bound into the buffer so that every
            way of staging applies it before anything is buffered.
    """

    def __init__(self, check: LimitCheck | None = None) -> None:
        self._pending = PendingUpserts(check)
        self._closed = False

    @property
    def pending_upserts(self) -> PendingUpserts:
        """The one pending buffer; staging into it does no I/O."""
        return self._pending

    def _require_open(self, what: str) -> None:
        """Raise `MemoryContractError` naming `what` once the store is closed."""
        if self._closed:
            raise MemoryContractError(f"{what} on a closed {type(self).__name__}")

    async def stage(
        self, entity_key: bytes, records: Sequence[LongtermRecord]
    ) -> tuple[str, ...]:
        """Buffer upserts in this object until flush; limits are checked here. No I/O."""
        self._require_open("stage")
        return self._pending.stage(entity_key, records)

    async def discard(self, entity_key: bytes) -> DiscardReceipt:
        """Drop the entity's pending buffer; committed rows stay. No I/O."""
        validate_entity_key(entity_key)
        self._require_open("discard")
        return DiscardReceipt(entity_key=entity_key, discarded=self._pending.discard(entity_key))

    def _settled(self, entity_key: bytes, batch: Mapping[str, LongtermRecord],
                 committed: Sequence[str], superseded: Sequence[str]) -> FlushReceipt:
        """Forget the flushed `batch` and describe what the transaction did."""
        self._pending.settle(entity_key, batch)
        return FlushReceipt(entity_key=entity_key, committed=tuple(sorted(committed)),
                            superseded=tuple(sorted(superseded)))
