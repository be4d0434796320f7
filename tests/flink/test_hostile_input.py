"""Every line of a hostile events file is accounted for on a Flink MiniCluster (invariant 8).

The same file as the DirectRunner's test: good lines, every kind of bad one,
a line that is not UTF-8 and a line of 50 MB. The native job runs to the
end; lines read equal intents plus dead letters, and the dead letters are
byte for byte the DECODE records the decoder makes of the bad lines, so
both engines hand the same bytes to redrive.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests._hostile import expected_dead_letters, write_hostile_file
from tests.flink.conftest import part_lines, run_job

pytestmark = pytest.mark.timeout(300)


def test_a_hostile_file_runs_to_the_end_and_every_line_is_accounted_for_on_flink(
        tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    bad = write_hostile_file(events)
    lines = events.read_bytes().count(b"\n")

    run_job(["templates/flink/agent_job.py", "--input_files", str(events),
             "--output_path", str(tmp_path / "intents"),
             "--errors_path", str(tmp_path / "errors"), "--agent", "tests.agents:counter",
             "--python_executable", sys.executable, "--parallelism", "2"])

    intents, dead_letters = part_lines(tmp_path / "intents"), part_lines(tmp_path / "errors")
    assert len(intents) + len(dead_letters) == lines
    assert len(intents) == lines - len(bad)
    assert dead_letters == expected_dead_letters(bad)
