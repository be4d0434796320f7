"""Picklable configs for the call-journal backends (SQLite embedded, Firestore in production).

A config travels with the pickled DoFn or Flink function and holds settings
only, never a client or a connection; its :meth:`open` imports the backend
module (and so its SDK) on the worker, in ``setup()``/``open()``. Importing
this module imports neither sqlite3 nor ``google.cloud``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from beam_agents._checks import require_int
from beam_agents.errors import ConfigError
from beam_agents.stores._firestore_rules import require_collection_id

if TYPE_CHECKING:
    from beam_agents.stores.firestore_journal import FirestoreCallJournal
    from beam_agents.stores.sqlite_journal import SqliteCallJournal

__all__ = ["FirestoreCallJournalConfig", "SqliteCallJournalConfig"]


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
        if not isinstance(self.path, str) or not self.path:
            raise ConfigError(
                f"SqliteCallJournalConfig.path must be a non-empty file path, got {self.path!r}",
                field="path",
            )
        if "\x00" in self.path:
            raise ConfigError("SqliteCallJournalConfig.path must not contain NUL", field="path")
        require_int(self.busy_timeout_ms, name="SqliteCallJournalConfig.busy_timeout_ms", low=0,
                    field="busy_timeout_ms")

    def open(self) -> SqliteCallJournal:
        """Build the journal; the database is opened lazily on first use."""
        from beam_agents.stores.sqlite_journal import SqliteCallJournal  # noqa: PLC0415 - lazy

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
        for name in ("project", "database"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value or "/" in value:
                raise ConfigError(
                    f"FirestoreCallJournalConfig.{name} must be a non-empty id without '/', "
                    f"got {value!r}",
                    field=name,
                )
        try:
            require_collection_id(self.collection)
        except ConfigError as exc:
            # The rule is shared with the long-term store; the message names this config.
            raise ConfigError(
                str(exc).replace("FirestoreLongtermConfig", "FirestoreCallJournalConfig", 1),
                field="collection",
            ) from None
        require_int(self.timeout_ms, name="FirestoreCallJournalConfig.timeout_ms", low=1,
                    field="timeout_ms")

    def open(self) -> FirestoreCallJournal:
        """Build the journal; the Firestore client is created on first use."""
        from beam_agents.stores.firestore_journal import (  # noqa: PLC0415 - lazy
            FirestoreCallJournal,
        )

        return FirestoreCallJournal(self)
