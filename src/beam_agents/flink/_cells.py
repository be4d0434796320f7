"""Flink keyed state as the engine's cells: ``ValueState`` and ``ListState`` behind its ports.

A ``ValueState`` read crosses into the JVM, so a `FlinkValueCell` is a
`ReadOnceCell`: the host keeps it across callbacks and calls
`ReadOnceCell.forget` when one starts, as the key in scope, and so the state
behind the cell, only changes between callbacks.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from beam_agents.hosting import ReadOnceCell

__all__ = ["FlinkBagCell", "FlinkValueCell"]


class FlinkValueCell(ReadOnceCell):
    """A Flink ``ValueState`` as the core's `StateCell`, read at most once per callback."""

    __slots__ = ()

    def _load(self) -> Any:
        return self._cell.value()

    def _store(self, value: Any) -> None:
        self._cell.update(value)


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
