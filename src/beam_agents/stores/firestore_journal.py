"""Deprecated: the Firestore call journal is in `beam_agents.stores.firestore`."""

from __future__ import annotations

from beam_agents.stores._journal_config import FirestoreCallJournalConfig
from beam_agents.stores._moved import warn_moved
from beam_agents.stores.firestore._journal import FirestoreCallJournal

__all__ = ["FirestoreCallJournal", "FirestoreCallJournalConfig"]

warn_moved(__name__, "beam_agents.stores.firestore")
