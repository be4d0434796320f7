"""The Cloud Firestore backends (google-cloud-firestore): store, journal and snapshots.

* `FirestoreLongtermStore` / `FirestoreLongtermConfig`: the production long-term store.
* `FirestoreCallJournal` / `FirestoreCallJournalConfig`: the production call journal.
* `FirestoreSnapshotStore` / `FirestoreSnapshotConfig`: state snapshots in a collection.

They share one client's plumbing (`beam_agents.stores.firestore._client`).
The document ids, fields and Firestore's limits are pure rules
(`beam_agents.stores.firestore._rules`), of which the long-term store's are
re-exported here; the configs and the journal's rules read them too.

Names resolve lazily, so the configs and those rules, importing this package
on their way, load no ``google.cloud``; a backend's SDK is imported when its
name is first used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from beam_agents.stores._config import FirestoreLongtermConfig
    from beam_agents.stores._journal_config import FirestoreCallJournalConfig
    from beam_agents.stores._snapshot_config import FirestoreSnapshotConfig
    from beam_agents.stores.firestore._journal import FirestoreCallJournal
    from beam_agents.stores.firestore._longterm import FirestoreLongtermStore
    from beam_agents.stores.firestore._rules import (
        MAX_DOCUMENT_BYTES,
        MAX_REQUEST_BYTES,
        MAX_WRITES_PER_COMMIT,
        decode_document_id,
        document_size,
        encode_document_id,
        entity_document_id,
    )
    from beam_agents.stores.firestore._snapshot import FirestoreSnapshotStore

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "MAX_REQUEST_BYTES",
    "MAX_WRITES_PER_COMMIT",
    "FirestoreCallJournal",
    "FirestoreCallJournalConfig",
    "FirestoreLongtermConfig",
    "FirestoreLongtermStore",
    "FirestoreSnapshotConfig",
    "FirestoreSnapshotStore",
    "decode_document_id",
    "document_size",
    "encode_document_id",
    "entity_document_id",
]

_RULES = "beam_agents.stores.firestore._rules"
_HOMES = {
    "MAX_DOCUMENT_BYTES": _RULES,
    "MAX_REQUEST_BYTES": _RULES,
    "MAX_WRITES_PER_COMMIT": _RULES,
    "decode_document_id": _RULES,
    "document_size": _RULES,
    "encode_document_id": _RULES,
    "entity_document_id": _RULES,
    "FirestoreCallJournal": "beam_agents.stores.firestore._journal",
    "FirestoreCallJournalConfig": "beam_agents.stores._journal_config",
    "FirestoreLongtermConfig": "beam_agents.stores._config",
    "FirestoreLongtermStore": "beam_agents.stores.firestore._longterm",
    "FirestoreSnapshotConfig": "beam_agents.stores._snapshot_config",
    "FirestoreSnapshotStore": "beam_agents.stores.firestore._snapshot",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
