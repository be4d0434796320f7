"""Coverage-guided fuzzing of every decoder of stored state and of pipeline input.

Keyed state outlives the code that wrote it, and input lines come from
producers the library does not control, so every decoder of either must
fail in a way its caller can route: it returns a value, or raises an error
from `beam_agents.errors` (the DECODE path returns an ``ErrorRecord`` and
raises nothing). Any other exception escapes the activation core's error
handling and takes the worker down instead of producing a dead letter; that,
a broken round-trip, and an input that runs past the per-input timeout are
what these targets report as crashes.

Each module is one libFuzzer target run by atheris::

    python -m fuzz --runs 10000                  # every target, in subprocesses
    python -m fuzz.ring -runs=1000 DIR           # one target, libFuzzer flags as given
    python -m fuzz.ring CRASH_FILE               # replay one input

The seed corpora in ``fuzz/corpus/`` are valid inputs written by the
library's own encoders (``python -m fuzz.seeds`` rebuilds them).
"""

from __future__ import annotations

__all__ = ["TARGETS"]

#: Every target, by module name, in the order the runner reports them.
TARGETS = (
    "wire_scan",
    "memory_blob",
    "ring",
    "replay_cache",
    "event_json",
    "event_proto",
    "error_json",
    "redrive",
)
