"""One SDK client per event loop: the cache both HTTP providers keep.

An httpx-based client cannot move between event loops, and a provider may be
awaited from more than one (the runtime's loop, or ``asyncio.run`` in a sync
agent's thread). Each loop therefore gets its own client, built on first use;
clients of loops that are gone are dropped with them (weak keys).
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

__all__ = ["LoopClients"]

C = TypeVar("C")


class LoopClients(Generic[C]):
    """Builds a client per running loop with `build` and closes them with `close`; thread-safe."""

    def __init__(self, build: Callable[[], C], close: Callable[[C], Awaitable[object]]) -> None:
        self._build = build
        self._close = close
        self._lock = threading.Lock()
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, C] = (
            weakref.WeakKeyDictionary())

    def current(self) -> C:
        """The running loop's client, built on first use."""
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._clients.get(loop)
            if client is None:
                client = self._clients[loop] = self._build()
            return client

    async def aclose(self) -> None:
        """Close the running loop's client and forget the others; safe to call twice."""
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._clients.pop(loop, None)
            # Clients of other loops cannot be awaited from here; dropping
            # them releases their sockets with the garbage.
            self._clients.clear()
        if client is not None:
            await self._close(client)
