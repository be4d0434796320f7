"""Every line of a hostile events file is accounted for on the DirectRunner (invariant 8).

`beam-agents run` over good lines mixed with every kind of bad one, a line
that is not UTF-8 and a line of 50 MB: the run finishes, lines read equal
intents plus dead letters, and each bad line's dead letter is the DECODE
record the decoder makes of it. The run's peak RSS is printed beside a run
of the same file without the huge line: the limit keeps it flat.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from beam_agents._canonical import canonical_json
from beam_agents.runtime import AgentConfig
from tests._hostile import (
    BAD_LINES,
    HUGE_LINE_BYTES,
    expected_dead_letters,
    write_hostile_file,
)

pytestmark = pytest.mark.timeout(240)

REPO = Path(__file__).resolve().parents[2]


def _run(events: Path, out: Path) -> tuple[list[bytes], list[bytes], int]:
    """Run the CLI in a child; returns its intents, its dead letters and its peak RSS in MB."""
    out.mkdir()
    command = [sys.executable, "-m", "beam_agents", "run", "--input_files", str(events),
               "--output_path", str(out / "intents.jsonl"),
               "--errors_path", str(out / "errors.jsonl"), "--agent", "tests.agents:counter"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
    assert child.stdout is not None
    output = child.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    assert child.returncode == 0, output[-3000:]
    return ((out / "intents.jsonl").read_bytes().splitlines(),
            (out / "errors.jsonl").read_bytes().splitlines(), usage.ru_maxrss // 1024)


def test_a_hostile_file_runs_to_the_end_and_every_line_is_accounted_for(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    bad = write_hostile_file(events)
    lines = events.read_bytes().count(b"\n")
    assert max(len(line) for line in bad) >= HUGE_LINE_BYTES

    intents, dead_letters, peak_mb = _run(events, tmp_path / "hostile")

    assert len(intents) + len(dead_letters) == lines
    assert len(intents) == lines - len(bad)  # every good line committed
    assert sorted(dead_letters) == expected_dead_letters(bad)

    calm = tmp_path / "calm.jsonl"
    write_hostile_file(calm, huge=False)
    _, _, calm_mb = _run(calm, tmp_path / "calm")
    print(f"peak RSS: {peak_mb} MB with a {HUGE_LINE_BYTES >> 20} MB line, {calm_mb} MB "
          f"without it ({peak_mb / calm_mb:.2f}x)")


def test_hostile_messages_on_the_streaming_path_are_each_accounted_for() -> None:
    """As from Pub/Sub: raw message bytes, one of 3 MB, on the streaming DirectRunner."""
    from tests.beam.test_streaming import line, run_stream, stream_of  # noqa: PLC0415

    bad = [*BAD_LINES, b'{"entity_key": "a", "payload": "' + b"z" * (3 << 20) + b'"}']
    good = [line("a", 0), line("b", 0), line("a", 1)]
    stream = stream_of([good[:2], bad[: len(bad) // 2], [good[2]], bad[len(bad) // 2:]],
                       pump_by_timer=False)

    intents, dead_letters = run_stream(stream, AgentConfig(agent="tests.agents:counter"))

    assert len(intents) == len(good)
    assert len(intents) + len(dead_letters) == len(good) + len(bad)
    assert sorted(canonical_json(letter) for letter in dead_letters) == (
        expected_dead_letters(bad))
