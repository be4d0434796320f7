"""Deprecated: the SQLite call journal is in `beam_agents.stores.sqlite`."""

from __future__ import annotations

from beam_agents.stores._moved import warn_moved
from beam_agents.stores.sqlite import SqliteCallJournal, SqliteCallJournalConfig

__all__ = ["SqliteCallJournal", "SqliteCallJournalConfig"]

warn_moved(__name__, "beam_agents.stores.sqlite")
