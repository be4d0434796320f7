"""Flink keyed state as the engine's cells: ``ValueState`` and ``ListState`` behind its ports.

Each engine callback asks the same small cells several times (a key's queue
fingerprint alone, once per question about its queue), and each ask of a
``ValueState`` crosses into the JVM. A `FlinkValueCell` therefore keeps what it
read or wrote until the host calls `FlinkValueCell.forget`, which it does when a
callback starts: the key in scope, and so the state behind the cell, only
changes between callbacks.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["FlinkBagCell", "FlinkValueCell"]

_UNREAD = object()


class FlinkValueCell:
    """A Flink ``ValueState`` as the core's `StateCell`, read at most once per callback."""

    __slots__ = ("_state", "_value")

    def __init__(self, state: Any) -> None:
        self._state = state
        self._value: Any = _UNREAD

    def forget(self) -> None:
        """Drop what was read: the next callback may be for another key."""
        self._value = _UNREAD

    def read(self) -> Any:
        if self._value is _UNREAD:
            self._value = self._state.value()
        return self._value

    def write(self, value: Any) -> None:
        self._state.update(value)
        self._value = value

    def clear(self) -> None:
        """Empty the cell (a snapshot record replaces what a key queued before it came)."""
        self._state.clear()
        self._value = None


class FlinkBagCell:
    """A Flink ``ListState`` of bytes as the engine's `QueueCell`; read through every time."""

    __slots__ = ("_state",)

    def __init__(self, state: Any) -> None:
        self._state = state

    def read(self) -> Iterable[Any]:
        return self._state.get() or ()

    def add(self, value: bytes) -> None:
        self._state.add(value)

    def clear(self) -> None:
        self._state.clear()
