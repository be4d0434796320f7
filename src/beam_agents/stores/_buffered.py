"""What the durable backends share around their I/O: the pending buffer and the closed flag.

SQLite and Firestore keep staged upserts in this object until flush, refuse
work once closed, and settle the buffer the same way after a transaction;
only the transaction itself is backend-specific.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from beam_agents._proto.longterm_pb2 import LongtermRecord
from beam_agents.errors import MemoryContractError
from beam_agents.memory._store import (
    DiscardReceipt,
    FlushReceipt,
    PendingUpserts,
    validate_entity_key,
)

__all__ = ["BufferedStore"]


class BufferedStore:
    """Base of the durable stores: the pending buffer, `discard`, and the closed check."""

    def __init__(self) -> None:
        self._pending = PendingUpserts()
        self._closed = False

    def _require_open(self, what: str) -> None:
        """Raise `MemoryContractError` naming `what` once the store is closed."""
        if self._closed:
            raise MemoryContractError(f"{what} on a closed {type(self).__name__}")

    async def discard(self, entity_key: bytes) -> DiscardReceipt:
        """Drop the entity's pending buffer; committed rows stay. No I/O."""
        validate_entity_key(entity_key)
        self._require_open("discard")
        return DiscardReceipt(entity_key=entity_key, discarded=self._pending.discard(entity_key))

    def _settled(self, entity_key: bytes, batch: Mapping[str, LongtermRecord],
                 committed: Sequence[str], superseded: Sequence[str]) -> FlushReceipt:
        """Forget the flushed `batch` and describe what the transaction did."""
        self._pending.settle(entity_key, batch)
        return FlushReceipt(entity_key=entity_key, committed=tuple(committed),
                            superseded=tuple(superseded))
