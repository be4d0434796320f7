from __future__ import annotations

from collections.abc import Iterator

import pytest

from tools.jaeger.server import Jaeger, start_jaeger, stop_jaeger


@pytest.fixture(scope="session")
def jaeger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jaeger]:
    """One Jaeger for the suite; tests tell their spans apart by service name and trace id."""
    started = start_jaeger(tmp_path_factory.mktemp("jaeger") / "jaeger.log")
    yield started
    stop_jaeger(started)
