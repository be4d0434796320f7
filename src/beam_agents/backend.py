"""What a store backend builds on: the ports it implements and the checks it shares.

A backend keeps something an agent needs to outlive a worker: a long-term
store keeps an entity's records between activations, a call journal keeps
the model calls an activation paid for (so a retry or a replay does not pay
again), and a snapshot store keeps the keyed state of a batch run for the
next one. The library's own backends (`beam_agents.stores`) are built on
exactly these names, so one for another database needs nothing else.

The ports, which a backend implements:

* `LongtermStore` and `BufferedLongtermStore`: load, search, stage and flush
  an entity's records; the buffered form exposes its pending buffer so an
  activation stages straight into it.
* `CallJournal`: read an activation's paid calls and write each new one once.
* `SnapshotStore`: the manifest and the parts of a keyed-state snapshot, each
  part described by a `PartInfo`.

The kit, which keeps every backend's behaviour the same:

* The checks of what a caller hands a store (`validate_entity_key`,
  `validate_key`, `validate_value`, `validate_record`, `validate_search`,
  `check_scope`, `as_batch`), each raising the error the core expects.
* `PendingUpserts`, the buffer between stage and flush, with the backend's own
  size limit (a `LimitCheck`); `copy_record` for what a store hands out.
* `seq_guard_allows`: whether a record may overwrite a stored row, so an older
  activation's write never replaces a newer one's and a replay converges.
* The journal's entry (`JournalEntry`, `journal_entry`), its key
  (`journal_key`), what one write found (`JournalWrite`) and the largest
  response kept in full (`MAX_JOURNAL_RESPONSE_BYTES`).

This module is pure: it loads no runner, database driver or cloud client. A
backend imports its own driver when it opens a connection.
"""

from __future__ import annotations

from beam_agents.memory._store import (
    BufferedLongtermStore,
    LimitCheck,
    LongtermStore,
    PendingUpserts,
    as_batch,
    check_scope,
    copy_record,
    seq_guard_allows,
    validate_entity_key,
    validate_key,
    validate_record,
    validate_search,
    validate_value,
)
from beam_agents.model._journal import (
    MAX_JOURNAL_RESPONSE_BYTES,
    CallJournal,
    JournalEntry,
    JournalWrite,
    journal_entry,
    journal_key,
)
from beam_agents.runtime._snapshot_parts import PartInfo, SnapshotStore

__all__ = [
    "MAX_JOURNAL_RESPONSE_BYTES",
    "BufferedLongtermStore",
    "CallJournal",
    "JournalEntry",
    "JournalWrite",
    "LimitCheck",
    "LongtermStore",
    "PartInfo",
    "PendingUpserts",
    "SnapshotStore",
    "as_batch",
    "check_scope",
    "copy_record",
    "journal_entry",
    "journal_key",
    "seq_guard_allows",
    "validate_entity_key",
    "validate_key",
    "validate_record",
    "validate_search",
    "validate_value",
]
