# mypy: disable-error-code="attr-defined,no-untyped-call"
"""B12's runner floor on the FlinkRunner, run as its own process in the FlinkRunner line's venv.

``python -m benchmarks._flink_floor --input_files F --output_path O
--latency_ms N [runner flags]``: the JSON lines of `F`, keyed by their
``entity_key``, through `benchmarks._beam.BoundedFloorDoFn` (one "activation"
of `N` ms per key per end-of-input round, `AgentDoFn`'s protocol with no
library code) into `O`, one line per event. With the runner flags of
`beam-agents run` in B12, it is what the runner spends on any DoFn of
`AgentDoFn`'s shape over the same file.
"""

from __future__ import annotations

import argparse
import json
import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from beam_agents.beam._pipeline import WriteShardedLines
from benchmarks._beam import BoundedFloorDoFn


def _keyed(line: str) -> tuple[bytes, bytes]:
    return json.loads(line)["entity_key"].encode(), line.encode()


def main(argv: list[str]) -> int:
    """Run the floor pipeline; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks._flink_floor")
    parser.add_argument("--input_files", required=True)
    parser.add_argument("--output_path", required=True)
    parser.add_argument("--latency_ms", type=int, required=True)
    known, runner = parser.parse_known_args(argv)
    with beam.Pipeline(options=PipelineOptions(runner)) as pipeline:
        _ = (pipeline
             | "Read" >> beam.io.ReadFromText(known.input_files)
             | "Key" >> beam.Map(_keyed)
             | "Floor" >> beam.ParDo(BoundedFloorDoFn(known.latency_ms))
             | "Line" >> beam.Map(lambda key: json.dumps({"entity_key": key.decode()}).encode())
             # The sink `beam-agents run` writes its files with, for the same shape after it.
             | "Write" >> WriteShardedLines(known.output_path, 1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
