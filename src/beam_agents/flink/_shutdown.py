"""Keep the Python worker's normal shutdown off the user's terminal.

When a task ends, Flink closes the Python worker's gRPC data stream with
status CANCELLED, "Multiplexer hanging up". Beam's worker reads that stream on
a thread (``read_grpc_client_inputs``) that, if the close reaches it before it
has marked the channel closed, re-raises it; the thread's exception then goes
to the worker's stderr, which in a local run is the terminal of the job that
just succeeded. Nothing is lost by the close (the task has ended, and a task
that failed is reported by Flink with its own cause), so exactly that one
exception on that one thread is dropped; every other thread exception goes on
to the hook that was there before.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["is_worker_hang_up", "quiet_worker_shutdown"]

#: The thread Beam's worker reads its gRPC data stream on, and what Flink says closing it.
_READER_THREAD = "read_grpc_client_inputs"
_HANG_UP = "Multiplexer hanging up"


def is_worker_hang_up(args: Any) -> bool:
    """Whether a thread's exception is Flink closing the worker's data stream, and only that."""
    thread, exc = getattr(args, "thread", None), getattr(args, "exc_value", None)
    code, details = getattr(exc, "code", None), getattr(exc, "details", None)
    if getattr(thread, "name", None) != _READER_THREAD or not (callable(code)
                                                               and callable(details)):
        return False
    return getattr(code(), "name", None) == "CANCELLED" and details() == _HANG_UP


def quiet_worker_shutdown() -> None:
    """Install the filter once per process, in front of whatever thread hook is there."""
    previous = threading.excepthook
    if getattr(previous, "_beam_agents_quiet", False):
        return

    def hook(args: Any) -> None:
        if not is_worker_hang_up(args):
            previous(args)

    hook._beam_agents_quiet = True  # type: ignore[attr-defined]
    threading.excepthook = hook
