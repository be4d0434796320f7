"""One agent, two engines: the native Flink job and the Beam pipeline agree byte for byte."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from beam_agents.beam import run as run_beam
from beam_agents.hosting import decode_event_json
from beam_agents.stores import SqliteLongtermConfig
from tests.flink.conftest import REPO, part_lines, run_job, store_rows

pytestmark = pytest.mark.timeout(300)

EVENTS = REPO / "examples" / "events.jsonl"
AGENT = ["--agent", "examples.support_agent:agent", "--longterm_store", "sqlite"]


def _entities() -> list[bytes]:
    keys = set()
    for line in EVENTS.read_bytes().splitlines():
        try:
            keys.add(decode_event_json(line).entity_key)
        except ValueError:
            continue  # the sample's deliberately undecodable lines
    return sorted(keys)


def _shuffled(tmp_path: Path, name: str, seed: int | None) -> Path:
    """The sample's lines in another order: reversed (no seed) or shuffled."""
    lines = EVENTS.read_bytes().splitlines(keepends=True)
    if seed is None:
        lines.reverse()
    else:
        random.Random(seed).shuffle(lines)
    path = tmp_path / name
    path.write_bytes(b"".join(line if line.endswith(b"\n") else line + b"\n" for line in lines))
    return path


def test_flink_and_beam_emit_byte_identical_intents_errors_and_rows(tmp_path: Path) -> None:
    """The example agent over the sample events, in four line orders: the same bytes out.

    Invariant 10 on both engines: each key's events run in event-time order
    over the whole input, so neither the line order, the engine nor Flink's
    Python execution mode changes an intent, a dead letter or a long-term row.
    The thread-mode job runs with ``PYTHONFAULTHANDLER`` set, as every job of
    these tests does, which the embedded interpreter must hand back to the JVM.
    """
    beam_dir = tmp_path / "beam"
    run_beam(["--input_files", str(_shuffled(tmp_path, "shuffled.jsonl", 20)),
              "--output_path", str(beam_dir / "intents.jsonl"),
              "--errors_path", str(beam_dir / "errors.jsonl"), *AGENT,
              "--sqlite_path", str(beam_dir / "longterm.sqlite")])
    flink_dirs = {"process": tmp_path / "flink", "thread": tmp_path / "flink-thread"}
    for (mode, flink_dir), lines in zip(flink_dirs.items(), (
            _shuffled(tmp_path, "reversed.jsonl", None),
            _shuffled(tmp_path, "shuffled-7.jsonl", 7)), strict=True):
        run_job(["templates/flink/agent_job.py", "--input_files", str(lines),
                 "--output_path", str(flink_dir / "intents"),
                 "--errors_path", str(flink_dir / "errors"), *AGENT,
                 "--sqlite_path", str(flink_dir / "longterm.sqlite"),
                 "--python_executable", sys.executable, "--parallelism", "2",
                 "--checkpointing_interval_ms", "1000", "--python_execution_mode", mode])
    sorted_dir = tmp_path / "sorted"
    run_beam(["--input_files", str(EVENTS), "--output_path", str(sorted_dir / "intents.jsonl"),
              "--errors_path", str(sorted_dir / "errors.jsonl"), *AGENT,
              "--sqlite_path", str(sorted_dir / "longterm.sqlite")])

    beam_intents = sorted((beam_dir / "intents.jsonl").read_bytes().splitlines())
    beam_errors = sorted((beam_dir / "errors.jsonl").read_bytes().splitlines())
    assert len(beam_intents) > 900 and len(beam_errors) >= 5  # the sample's known mix
    assert (sorted_dir / "intents.jsonl").read_bytes() == (beam_dir / "intents.jsonl").read_bytes()
    entities = _entities()
    beam_rows = store_rows(SqliteLongtermConfig(path=str(beam_dir / "longterm.sqlite")), entities)
    assert beam_rows  # the example agent keeps a long-term profile
    for mode, flink_dir in flink_dirs.items():
        assert part_lines(flink_dir / "intents") == beam_intents, mode
        assert part_lines(flink_dir / "errors") == beam_errors, mode
        assert store_rows(SqliteLongtermConfig(path=str(flink_dir / "longterm.sqlite")),
                          entities) == beam_rows, mode
