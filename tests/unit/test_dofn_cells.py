"""`AgentDoFn`'s cells: each value cell asks the runner at most once per callback."""

from __future__ import annotations

from typing import Any

from beam_agents.beam._dofn import _cells
from beam_agents.hosting import ReadOnceCell


class _RunnerCell:
    """A state cell that counts the reads a runner without a state cache would serve."""

    def __init__(self, value: Any = None) -> None:
        self.value = value
        self.reads = 0

    def read(self) -> Any:
        self.reads += 1
        return self.value

    def write(self, value: Any) -> None:
        self.value = value

    def clear(self) -> None:
        self.value = None


def test_a_cell_is_read_once_and_then_holds_what_the_callback_wrote() -> None:
    inner = _RunnerCell(b"meta-1")
    cell = ReadOnceCell(inner)
    assert (cell.read(), cell.read(), cell.read()) == (b"meta-1",) * 3
    assert inner.reads == 1
    cell.write(b"meta-2")
    assert cell.read() == b"meta-2" and inner.value == b"meta-2"
    cell.clear()
    assert cell.read() is None and inner.value is None
    assert inner.reads == 1


def test_a_cell_written_before_any_read_never_asks_the_runner() -> None:
    inner = _RunnerCell(7)
    cell = ReadOnceCell(inner)
    cell.write(8)
    assert cell.read() == 8 and inner.reads == 0


def test_every_value_cell_of_a_callback_is_wrapped_and_the_bags_are_not() -> None:
    value_cells = [_RunnerCell(index) for index in range(8)]
    queue, dequeued = _RunnerCell([]), _RunnerCell([])
    memory, llm_cache, seq, budget, waits, meta, attempt, retry_at = value_cells
    cells = _cells(memory, llm_cache, seq, budget, waits, queue, dequeued, meta, attempt,
                   retry_at)
    for _ in range(3):
        cells.state.read()
        cells.queue_meta.read()
        cells.attempt.read()
        cells.retry_at_ms.read()
    assert [cell.reads for cell in value_cells] == [1] * 8
    assert cells.queue is queue and cells.dequeued is dequeued
