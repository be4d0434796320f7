"""The SQLite backends (stdlib sqlite3): the long-term store and the call journal.

* `SqliteLongtermStore` / `SqliteLongtermConfig`: the embedded default long-term store.
* `SqliteCallJournal` / `SqliteCallJournalConfig`: the embedded call journal.

Both keep one file in WAL mode and share its connection plumbing
(`beam_agents.stores.sqlite._base`). The configs live with the other
backends' in `beam_agents.stores` and are re-exported here.
"""

from __future__ import annotations

from beam_agents.stores._config import SqliteLongtermConfig
from beam_agents.stores._journal_config import SqliteCallJournalConfig
from beam_agents.stores.sqlite._journal import SqliteCallJournal
from beam_agents.stores.sqlite._longterm import SqliteLongtermStore

__all__ = ["SqliteCallJournal", "SqliteCallJournalConfig", "SqliteLongtermConfig",
           "SqliteLongtermStore"]
