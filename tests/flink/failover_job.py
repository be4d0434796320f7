"""The native Flink job with a crash injected after one flush (see ``_faults``).

Run as ``python -m tests.flink.failover_job --crash_entity E --crash_seq N
--marker M --flush_log L [--flush_delay_ms D] [--min_in_flight K] --
<agent_job flags>``. It builds the job through the public API (`parse_args`,
`environment`, `build_job`), wrapping the configured long-term store;
``--crash_seq 0`` runs the same job without a fault. The crash waits until a
committed intent of the entity shows a completed checkpoint covering it, and
until K other entities' activations are in flight beside it.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from beam_agents.flink import build_job, environment, parse_args
from tests.flink._faults import CrashAfterFlushConfig


def main(argv: list[str]) -> None:
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="failover_job")
    parser.add_argument("--crash_entity", required=True)
    parser.add_argument("--crash_seq", type=int, required=True)
    parser.add_argument("--marker", required=True)
    parser.add_argument("--flush_log", required=True)
    parser.add_argument("--flush_delay_ms", type=int, default=0)
    parser.add_argument("--kill_process", action="store_true")
    parser.add_argument("--min_in_flight", type=int, default=0)
    fault = parser.parse_args(argv[:split])
    options, config = parse_args(argv[split + 1:])
    assert config.longterm_memory is not None, "the failover job needs --longterm_store"
    config = dataclasses.replace(config, longterm_memory=CrashAfterFlushConfig(
        inner=config.longterm_memory, entity_key=fault.crash_entity.encode(),
        crash_seq=fault.crash_seq, committed_dir=options.output_path, marker=fault.marker,
        flush_log=fault.flush_log, flush_delay_ms=fault.flush_delay_ms,
        kill_process=fault.kill_process, min_in_flight=fault.min_in_flight))
    env = environment(options)
    build_job(env, options, config)
    env.execute(options.job_name)


if __name__ == "__main__":
    main(sys.argv[1:])
