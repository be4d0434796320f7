"""Runs one benchmark in a fresh interpreter and prints its result as one JSON line.

Each benchmark gets its own process so that none inherits another's heap,
imports or threads: B2 loads Beam, B6 leaves event loops behind, and B1's
microsecond timings must not share an allocator with them. The parent
(`benchmarks.__main__`) decides the environment, in particular the glibc
malloc settings (see `benchmarks.__main__.PINNED_MALLOC`).

Usage: ``python -m benchmarks._child B1 [--quick]``
"""

from __future__ import annotations

import importlib
import json
import sys

from benchmarks._harness import Profile

__all__ = ["MODULES", "main"]

#: Benchmark id -> module with ``run(profile) -> dict``; imported only when run.
MODULES = {
    "B1": "benchmarks.b1_activation",
    "B2": "benchmarks.b2_pipeline",
    "B3": "benchmarks.b3_scaling",
    "B4": "benchmarks.b4_soak",
    "B5": "benchmarks.b5_cache_key",
    "B6": "benchmarks.b6_latency",
    "B7": "benchmarks.b7_journal",
    "B8": "benchmarks.b8_paid_calls",
    "B9": "benchmarks.b9_quota",
    "B10": "benchmarks.b10_hot_key",
    "B11": "benchmarks.b11_zipf",
    "B12": "benchmarks.b12_portable",
    "B13": "benchmarks.b13_snapshot",
    "B14": "benchmarks.b14_tracing",
    "B15": "benchmarks.b15_flink_kafka",
}


def main(argv: list[str]) -> int:
    """Run the benchmark named in `argv` and print its JSON result on stdout."""
    if not argv or argv[0] not in MODULES:
        print(f"usage: python -m benchmarks._child {{{','.join(MODULES)}}} [--quick]",
              file=sys.stderr)
        return 2
    module = importlib.import_module(MODULES[argv[0]])
    result = module.run(Profile(quick="--quick" in argv[1:]))
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
