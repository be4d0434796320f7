"""Flink's state behind the engine's cells: a value is read from the JVM once per callback."""

from __future__ import annotations

from typing import Any

from beam_agents.flink._cells import FlinkValueCell


class _ValueState:
    """A ``ValueState`` that counts its reads, as PyFlink's crosses into the JVM for each."""

    def __init__(self, value: Any = None) -> None:
        self.stored, self.reads = value, 0

    def value(self) -> Any:
        self.reads += 1
        return self.stored

    def update(self, value: Any) -> None:
        self.stored = value


def test_a_value_cell_reads_its_state_once_until_forgotten() -> None:
    state = _ValueState(b"v1")
    cell = FlinkValueCell(state)
    assert [cell.read() for _ in range(3)] == [b"v1"] * 3
    assert state.reads == 1
    state.stored = b"another key's"  # what the next callback's key holds
    cell.forget()
    assert cell.read() == b"another key's"
    assert state.reads == 2


def test_a_value_cell_reads_back_what_it_wrote_and_writes_through() -> None:
    state = _ValueState()
    cell = FlinkValueCell(state)
    assert cell.read() is None
    cell.write(7)
    assert (cell.read(), state.stored, state.reads) == (7, 7, 1)
    cell.write(None)
    assert (cell.read(), state.stored) == (None, None)
    cell.forget()
    assert cell.read() is None and state.reads == 2
