"""Long-term store backends behind the `beam_agents.memory` store port.

* `InMemoryLongtermStore` / `InMemoryLongtermConfig`: in-process, for tests.
* `SqliteLongtermStore` / `SqliteLongtermConfig`: embedded default (stdlib sqlite3).
* `FirestoreLongtermStore` / `FirestoreLongtermConfig`: production (google-cloud-firestore).

Call-journal backends behind the `beam_agents.model` journal port (invariant 9):

* `SqliteCallJournal` / `SqliteCallJournalConfig`: embedded (stdlib sqlite3).
* `FirestoreCallJournal` / `FirestoreCallJournalConfig`: production (google-cloud-firestore).

State snapshot stores behind the snapshot port, `SnapshotStore` (batch
runs that remember): `FileSnapshotConfig` (a folder, through `LocalFiles` or
another `Files`) and `FirestoreSnapshotConfig`; `snapshot_config_from_uri`
maps ``--state_snapshot URI`` onto one.

`longterm_config_from_mapping` and `call_journal_config_from_mapping` turn
plain data (a JSON config's ``longterm_memory`` and ``call_journal``) into
these configs; `beam_agents.hosting` re-exports the second for hosts.

The backends are grouped by technology, each a package of its own:
`beam_agents.stores.sqlite` (store, journal), `beam_agents.stores.firestore`
(store, journal, snapshots), `beam_agents.stores.memory` (the in-process
store) and `beam_agents.stores.files` (snapshots in a folder). What they share
stays here: the configs, the buffered store's base (`_buffered`) and the
rules every journal backend checks (`_journal_rules`). Every backend is built
on the ports and the kit `beam_agents.backend` exports, as one outside the
library would be.

Names resolve lazily, so importing this package (or a config) loads neither
sqlite3 nor google.cloud; a backend's SDK is imported when its store is built.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from beam_agents.stores._config import (
        FirestoreLongtermConfig,
        SqliteLongtermConfig,
        longterm_config_from_mapping,
    )
    from beam_agents.stores._journal_config import (
        FirestoreCallJournalConfig,
        SqliteCallJournalConfig,
        call_journal_config_from_mapping,
    )
    from beam_agents.stores._snapshot_config import (
        Files,
        FileSnapshotConfig,
        FirestoreSnapshotConfig,
        LocalFiles,
        snapshot_config_from_uri,
    )
    from beam_agents.stores.firestore._journal import FirestoreCallJournal
    from beam_agents.stores.firestore._longterm import FirestoreLongtermStore
    from beam_agents.stores.memory._longterm import InMemoryLongtermConfig, InMemoryLongtermStore
    from beam_agents.stores.sqlite._journal import SqliteCallJournal
    from beam_agents.stores.sqlite._longterm import SqliteLongtermStore

__all__ = [
    "FileSnapshotConfig",
    "Files",
    "FirestoreCallJournal",
    "FirestoreCallJournalConfig",
    "FirestoreLongtermConfig",
    "FirestoreLongtermStore",
    "FirestoreSnapshotConfig",
    "InMemoryLongtermConfig",
    "InMemoryLongtermStore",
    "LocalFiles",
    "SqliteCallJournal",
    "SqliteCallJournalConfig",
    "SqliteLongtermConfig",
    "SqliteLongtermStore",
    "call_journal_config_from_mapping",
    "longterm_config_from_mapping",
    "snapshot_config_from_uri",
]

_HOMES = {
    "FileSnapshotConfig": "beam_agents.stores._snapshot_config",
    "Files": "beam_agents.stores._snapshot_config",
    "FirestoreSnapshotConfig": "beam_agents.stores._snapshot_config",
    "LocalFiles": "beam_agents.stores._snapshot_config",
    "snapshot_config_from_uri": "beam_agents.stores._snapshot_config",
    "FirestoreCallJournal": "beam_agents.stores.firestore._journal",
    "FirestoreCallJournalConfig": "beam_agents.stores._journal_config",
    "FirestoreLongtermConfig": "beam_agents.stores._config",
    "FirestoreLongtermStore": "beam_agents.stores.firestore._longterm",
    "InMemoryLongtermConfig": "beam_agents.stores.memory._longterm",
    "InMemoryLongtermStore": "beam_agents.stores.memory._longterm",
    "SqliteCallJournal": "beam_agents.stores.sqlite._journal",
    "SqliteCallJournalConfig": "beam_agents.stores._journal_config",
    "SqliteLongtermConfig": "beam_agents.stores._config",
    "SqliteLongtermStore": "beam_agents.stores.sqlite._longterm",
    "call_journal_config_from_mapping": "beam_agents.stores._journal_config",
    "longterm_config_from_mapping": "beam_agents.stores._config",
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
