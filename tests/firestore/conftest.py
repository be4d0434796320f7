"""Fixtures for the Firestore backend tests: the session's test server and fresh stores."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from beam_agents.stores.firestore import FirestoreLongtermConfig, FirestoreLongtermStore
from tests._firestore_server import firestore_host

__all__ = ["config", "firestore_host", "run", "store"]

T = TypeVar("T")
Run = Callable[[Coroutine[Any, Any, T]], T]


@pytest.fixture
def run() -> Iterator[Run[Any]]:
    """Run coroutines on one event loop for the whole test (clients bind to their loop)."""
    with asyncio.Runner() as runner:
        yield runner.run


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
