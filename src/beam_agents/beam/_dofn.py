"""AgentDoFn: the stateful DoFn that hosts the activation core on Beam.

It only translates: three ReadModifyWriteState cells in, `activate_keyed`,
lines out. A committed outcome writes the dirty blobs and the new seq and
emits intents on the main output; a failed one emits its error record on the
``errors`` output and writes nothing, so a corrupt blob is never overwritten
(invariants 1, 8).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.coders import BytesCoder, VarIntCoder
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec

from beam_agents.beam._metrics import BeamMetrics
from beam_agents.hosting import start_runtime
from beam_agents.runtime import CELLS, ActivationRuntime, AgentConfig, StateCells, activate_keyed

__all__ = ["ERRORS", "AgentDoFn"]

#: The tag of the errors (dead-letter) output.
ERRORS = "errors"

_MEMORY, _LLM_CACHE, _SEQ = CELLS


class AgentDoFn(beam.DoFn):
    """Runs one activation per ``(entity_key, AgentEvent bytes)`` element.

    Outputs canonical JSON lines: intents on the main output, error records on
    the ``errors`` tagged output. The provider and store clients are built in
    `setup` and closed in `teardown`, once per DoFn instance.
    """

    MEMORY = ReadModifyWriteStateSpec(_MEMORY, BytesCoder())
    LLM_CACHE = ReadModifyWriteStateSpec(_LLM_CACHE, BytesCoder())
    SEQ = ReadModifyWriteStateSpec(_SEQ, VarIntCoder())

    def __init__(self, config: AgentConfig) -> None:
        super().__init__()
        self._config = config
        self._runtime: ActivationRuntime | None = None
        self._metrics = BeamMetrics()

    def setup(self) -> None:
        """Build the clients once per DoFn instance."""
        self._metrics = BeamMetrics()
        self._runtime = start_runtime(self._config, metrics=self._metrics)

    def process(
        self,
        element: tuple[bytes, bytes],
        memory: Any = beam.DoFn.StateParam(MEMORY),
        llm_cache: Any = beam.DoFn.StateParam(LLM_CACHE),
        seq: Any = beam.DoFn.StateParam(SEQ),
    ) -> Iterator[Any]:
        """Activate for one event and apply the outcome to state and outputs."""
        assert self._runtime is not None, "setup() was not called"
        lines = list(activate_keyed(self._runtime, StateCells(memory, llm_cache, seq), element[1]))
        self._metrics.flush()  # on the bundle thread, which Beam attributes counters to
        for channel, line in lines:
            yield line if channel == "intents" else beam.pvalue.TaggedOutput(ERRORS, line)

    def teardown(self) -> None:
        """Close the clients."""
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None
