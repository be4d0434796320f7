"""Chaos fixtures: long-term stores on every backend, Firestore on the session's server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from beam_agents.memory import LongtermStoreConfig
from beam_agents.stores import FirestoreLongtermConfig, InMemoryLongtermConfig, SqliteLongtermConfig
from tests._firestore_server import firestore_host

__all__ = ["firestore_host", "store_config"]


@pytest.fixture(params=["sqlite", "firestore"])
def store_config(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LongtermStoreConfig]:
    """A fresh store config of each durable backend."""
    if request.param == "firestore":
        request.getfixturevalue("firestore_host")
        yield FirestoreLongtermConfig(project=f"chaos-{uuid.uuid4().hex[:12]}", timeout_ms=10_000)
    else:
        yield SqliteLongtermConfig(path=str(tmp_path / "longterm.db"))


@pytest.fixture
def memory_store_config() -> Iterator[InMemoryLongtermConfig]:
    """An in-memory store shared by name, so the test can inspect what reached it."""
    config = InMemoryLongtermConfig(name=f"chaos-{uuid.uuid4().hex}")
    yield config
    config.reset()
