"""Every fuzz target survives a seeded slice of 10^4 inputs: no untyped exception, no hang.

The same runner as ``python -m fuzz`` (and ``make fuzz``, the long
campaign) runs each target in its own libFuzzer process. The seed is fixed,
so a failure here reproduces with ``python -m fuzz --target NAME --runs 10000
--seed 1``; the crashing input is in the failure message.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fuzz import TARGETS
from fuzz.__main__ import run_target

SLICE_RUNS = 10_000
pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("target", TARGETS)
def test_target_survives_a_seeded_slice(target: str, tmp_path: Path) -> None:
    """The decoder raises only typed errors and keeps its round-trips, for every input run."""
    result = run_target(target, runs=SLICE_RUNS, seed=1, results=tmp_path)
    log_tail = "\n".join(Path(result.log).read_text().splitlines()[-40:])
    assert result.crashes == 0, (f"{target}: {result.problem}\ninputs: {result.artifacts}\n"
                                 f"{log_tail}")
    assert result.inputs == SLICE_RUNS, log_tail
