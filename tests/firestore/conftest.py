"""Fixtures for the Firestore backend tests: the session's test server and fresh stores."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from beam_agents.stores.firestore import FirestoreLongtermConfig, FirestoreLongtermStore
from tests._firestore_server import (
    firestore_host,
    private_firestore_process,
    private_firestore_server,
)
from tests.conftest import Run

__all__ = ["config", "firestore_host", "private_firestore_process", "private_firestore_server",
           "store"]



@pytest.fixture
def config(firestore_host: str) -> FirestoreLongtermConfig:
    """A config in a project no other test uses."""
    return FirestoreLongtermConfig(project=f"fs-{uuid.uuid4().hex[:12]}", timeout_ms=10_000)


@pytest.fixture
def store(config: FirestoreLongtermConfig, run: Run[Any]) -> Iterator[FirestoreLongtermStore]:
    """A fresh store on the session's server, closed after the test."""
    store = config.open()
    yield store
    run(store.close())
