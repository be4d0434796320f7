"""The bridge from sync agent code to the runtime's event loop, typed once.

Sync agents run on a worker thread so that their timeout is real (DESIGN's
activation protocol), while providers and stores run on the runtime's loop.
`ctx.model.complete` and ``ctx.memory.longterm.load`` therefore hand their
coroutine to a `RunSync` that the runtime injects.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, Protocol, TypeVar

__all__ = ["RunSync"]

T = TypeVar("T")


class RunSync(Protocol):
    """Runs a coroutine to completion on the runtime's event loop, from another thread."""

    def __call__(self, coro: Coroutine[Any, Any, T], /) -> T:
        """Return the coroutine's result, or raise its error."""
        ...
