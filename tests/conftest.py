"""Suite-wide settings and fixtures: a derandomised hypothesis profile for CI, `run`, a broker.

The terminal summary ends with one line naming the Firestore server the run
used (official Cloud SDK emulator or the npm fallback, and why), when it used one.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings

from tests._firestore_server import usage_line

T = TypeVar("T")
Run = Callable[[Coroutine[Any, Any, T]], T]

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say which Firestore server the run used, if it used one."""
    line = usage_line()
    if line is not None:
        terminalreporter.write_line(line)


@pytest.fixture
def run() -> Iterator[Run[Any]]:
    """Run coroutines on one event loop for the whole test (stores and clients bind to it)."""
    with asyncio.Runner() as runner:
        yield runner.run


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[str]:
    """A real Kafka broker (tests/_kafka.py) for the session: yields ``bootstrap.servers``.

    Here for every suite that streams through Kafka: the native Flink job's
    (tests/flink) and the Beam pipeline's on the FlinkRunner (tests/portable).
    Each test makes topics of its own (`kafka_topics`), so tests never read
    each other's records.
    """
    from tests._kafka import KafkaBroker  # noqa: PLC0415

    broker = KafkaBroker()
    broker.start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()
