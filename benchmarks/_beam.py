"""The one Beam pipeline shape the benchmarks run: ``Create -> ParDo(dofn) -> Count``.

Beam's Python API is untyped, so this module is the only benchmark code that
calls it directly (and the only one that relaxes mypy for it).
"""

# mypy: disable-error-code="no-untyped-call,attr-defined"

from __future__ import annotations

import time
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from beam_agents.beam import ERRORS

__all__ = ["run_pipeline"]


def run_pipeline(dofn: Any, elements: list[tuple[bytes, bytes]]) -> float:
    """Wall seconds to run ``Create -> ParDo(dofn) -> Count`` on the DirectRunner.

    One worker, in memory: the per-worker figure the benchmarks report. The
    key type hint gives the stateful DoFn a deterministic key coder, as the
    library's own pipeline does.
    """
    options = PipelineOptions(["--runner=DirectRunner", "--direct_num_workers=1",
                               "--direct_running_mode=in_memory"])
    pipeline = beam.Pipeline(options=options)
    outputs = (pipeline
               | "Create" >> beam.Create(elements).with_output_types(
                   beam.typehints.Tuple[bytes, bytes])
               | "Activate" >> beam.ParDo(dofn).with_input_types(
                   beam.typehints.Tuple[bytes, bytes]).with_outputs(ERRORS, main="out"))
    _ = outputs.out | "Count" >> beam.combiners.Count.Globally()
    start = time.perf_counter()
    pipeline.run().wait_until_finish()
    return time.perf_counter() - start
