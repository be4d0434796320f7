"""The Python worker's normal shutdown stays off the terminal; every other thread error does not."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from beam_agents.flink._shutdown import is_worker_hang_up, quiet_worker_shutdown

pytestmark = pytest.mark.timeout(30)


class _Rpc(grpc.RpcError):
    """What grpc raises on the worker's reader thread when Flink closes the stream."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


def _args(thread: str, exc: BaseException) -> Any:
    return SimpleNamespace(exc_type=type(exc), exc_value=exc, exc_traceback=None,
                           thread=SimpleNamespace(name=thread))


@pytest.fixture
def seen() -> Iterator[list[Any]]:
    """The thread hook in place before ours: it records what reaches it."""
    reached: list[Any] = []
    before = threading.excepthook
    threading.excepthook = reached.append
    try:
        quiet_worker_shutdown()
        yield reached
    finally:
        threading.excepthook = before


def test_flink_closing_the_data_stream_is_dropped(seen: list[Any]) -> None:
    """THEN CANCELLED "Multiplexer hanging up" on the reader thread reaches no one."""
    threading.excepthook(_args("read_grpc_client_inputs",
                               _Rpc(grpc.StatusCode.CANCELLED, "Multiplexer hanging up")))
    assert seen == []


@pytest.mark.parametrize("thread, exc", [
    ("read_grpc_client_inputs", _Rpc(grpc.StatusCode.UNAVAILABLE, "Multiplexer hanging up")),
    ("read_grpc_client_inputs", _Rpc(grpc.StatusCode.CANCELLED, "the worker was killed")),
    ("read_grpc_client_inputs", RuntimeError("Multiplexer hanging up")),
    ("agent-pool-0", _Rpc(grpc.StatusCode.CANCELLED, "Multiplexer hanging up")),
])
def test_every_other_thread_error_goes_on_to_the_hook_before(
        seen: list[Any], thread: str, exc: BaseException) -> None:
    """THEN a real error, on any thread, is printed as before."""
    args = _args(thread, exc)
    threading.excepthook(args)
    assert seen == [args]
    assert not is_worker_hang_up(args)


def test_installing_twice_filters_once(seen: list[Any]) -> None:
    """THEN each function's open() may install it; the hooks do not stack."""
    hook = threading.excepthook
    quiet_worker_shutdown()
    assert threading.excepthook is hook
