"""Picklable configs for the call-journal backends (SQLite embedded, Firestore in production).

A config travels with the pickled DoFn or Flink function and holds settings
only, never a client or a connection; its :meth:`open` imports the backend
module (and so its SDK) on the worker, in ``setup()``/``open()``. Importing
this module imports neither sqlite3 nor ``google.cloud``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from beam_agents.stores._config import (
    check_firestore_settings,
    check_sqlite_settings,
    config_from_mapping,
)

if TYPE_CHECKING:
    from beam_agents.stores.firestore._journal import FirestoreCallJournal
    from beam_agents.stores.sqlite._journal import SqliteCallJournal

__all__ = [
    "FirestoreCallJournalConfig",
    "SqliteCallJournalConfig",
    "call_journal_config_from_mapping",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class SqliteCallJournalConfig:
    """Settings for `SqliteCallJournal`, the embedded journal.

    Attributes:
        path: Database file; created with its folder and table on first use.
            ``:memory:`` gives a private database that a restart loses, so it
            cannot keep invariant 9 across crashes (tests only).
        busy_timeout_ms: How long a call waits for another connection's lock
            before it fails with `JournalUnavailable` (and the activation
            suspends).
    """

    path: str
    busy_timeout_ms: int = 5_000

    def __post_init__(self) -> None:
        check_sqlite_settings("SqliteCallJournalConfig", path=self.path,
                              busy_timeout_ms=self.busy_timeout_ms)

    def open(self) -> SqliteCallJournal:
        """Build the journal; the database is opened lazily on first use."""
        from beam_agents.stores.sqlite._journal import SqliteCallJournal  # noqa: PLC0415 - lazy

        return SqliteCallJournal(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class FirestoreCallJournalConfig:
    """Settings for `FirestoreCallJournal`.

    Entries live at ``{collection}/{cache key}`` in the given project and
    database. Credentials come from the environment the Google client reads
    (Application Default Credentials, or ``FIRESTORE_EMULATOR_HOST`` for an
    emulator); the library reads none. A TTL policy on the collection's
    ``expire_at`` field lets Firestore delete expired entries.

    Attributes:
        project: Google Cloud project id.
        database: Firestore database id.
        collection: Top-level collection holding one document per paid call.
        timeout_ms: Deadline for one journal call (a read, or a write with
            the read of a stored entry it lost to, including the SDK's own
            retries); past it the call raises `JournalUnavailable`.
    """

    project: str
    database: str = "(default)"
    collection: str = "beam_agents_calls"
    timeout_ms: int = 30_000

    def __post_init__(self) -> None:
        check_firestore_settings("FirestoreCallJournalConfig", project=self.project,
                                 database=self.database, collection=self.collection,
                                 timeout_ms=self.timeout_ms)

    def open(self) -> FirestoreCallJournal:
        """Build the journal; the Firestore client is created on first use."""
        from beam_agents.stores.firestore._journal import (  # noqa: PLC0415 - lazy
            FirestoreCallJournal,
        )

        return FirestoreCallJournal(self)


def call_journal_config_from_mapping(
        data: Mapping[str, Any]) -> SqliteCallJournalConfig | FirestoreCallJournalConfig:
    """A journal config from plain data: ``{"backend": "sqlite"|"firestore", ...fields}``.

    Raises:
        ConfigError: unknown backend or field, named as ``call_journal.<field>``.
    """
    classes: dict[str, type[SqliteCallJournalConfig] | type[FirestoreCallJournalConfig]] = {
        "sqlite": SqliteCallJournalConfig, "firestore": FirestoreCallJournalConfig}
    return config_from_mapping(classes, data, "call_journal")
