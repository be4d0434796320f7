"""AgentKeyedProcessFunction: the activation core hosted by a PyFlink keyed operator.

The Flink twin of `AgentDoFn`, and just as thin: keyed ``ValueState`` in,
`activate_keyed`, lines out. A committed outcome updates the
dirty cells and the seq and emits intents; a failed one emits its error record
on the `ERRORS` side output and leaves state untouched, so a corrupt blob is
never overwritten (invariants 1, 8). Checkpoints snapshot the three cells
together; after a failover Flink restores them and replays the events since,
and the long-term store's seq guard makes the replayed flushes no-ops
(invariant 5).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyflink.common import Types
from pyflink.datastream import KeyedProcessFunction, OutputTag, RuntimeContext
from pyflink.datastream.state import ValueStateDescriptor

from beam_agents.flink._metrics import FlinkMetrics
from beam_agents.hosting import start_runtime
from beam_agents.runtime import CELLS, ActivationRuntime, AgentConfig, StateCells, activate_keyed

__all__ = ["ERRORS", "AgentKeyedProcessFunction"]

#: The errors (dead-letter) side output: error records as canonical JSON lines.
ERRORS = OutputTag("errors", Types.STRING())

_BYTES = Types.PRIMITIVE_ARRAY(Types.BYTE())


class AgentKeyedProcessFunction(KeyedProcessFunction):
    """Runs one activation per ``(key, AgentEvent bytes)`` element of a keyed stream.

    Emits intents as canonical JSON lines (the same bytes the Beam pipeline
    writes) and error records on `ERRORS`. The provider and store clients
    open in `open` and close in `close`, once per parallel instance.
    """

    def __init__(self, config: AgentConfig) -> None:
        self._config = config
        self._runtime: ActivationRuntime | None = None

    def open(self, runtime_context: RuntimeContext) -> None:
        """Bind the state cells and the metric group, and build the clients."""
        memory, llm_cache, seq = CELLS
        self._cells = StateCells(
            _Cell(runtime_context.get_state(ValueStateDescriptor(memory, _BYTES))),
            _Cell(runtime_context.get_state(ValueStateDescriptor(llm_cache, _BYTES))),
            _Cell(runtime_context.get_state(ValueStateDescriptor(seq, Types.LONG()))))
        self._metrics = FlinkMetrics(runtime_context.get_metrics_group())
        self._runtime = start_runtime(self._config, metrics=self._metrics)

    def process_element(self, value: tuple[str, bytes], ctx: Any) -> Iterator[Any]:
        """Activate for one event and apply the outcome to state and outputs."""
        assert self._runtime is not None, "open() was not called"
        lines = list(activate_keyed(self._runtime, self._cells, value[1]))
        self._metrics.flush()
        for channel, line in lines:
            yield line.decode() if channel == "intents" else (ERRORS, line.decode())

    def close(self) -> None:
        """Close the clients."""
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None


class _Cell:
    """A Flink ``ValueState`` as the core's `StateCell`."""

    __slots__ = ("_state",)

    def __init__(self, state: Any) -> None:
        self._state = state

    def read(self) -> Any:
        return self._state.value()

    def write(self, value: Any) -> None:
        self._state.update(value)
