"""The end of a bounded input on a MiniCluster: every key's queue runs out, nothing is left.

The model answers after two seconds, so when the file ends every key still
holds both of its events, one running and one queued, and the end-of-input
timers run them out in rounds. PyFlink fires a timer set while the final
watermark's timers fire only if a bundle is still open once they have all
been handed over; with bundles of one element none ever is. The rounds'
timers are set with the events for that reason, and this test fails if they
are set from a round (invariant 8: every event ends as committed effects or
an error record).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from tests.flink.conftest import part_lines, run_job

pytestmark = pytest.mark.timeout(300)

KEYS = 64
BUNDLE_SIZE = 1  # every timer closes its bundle
EVENTS_PER_KEY = 2
LATENCY_MS = 2_000  # far longer than the file takes to read


def _write_events(path: Path) -> None:
    with path.open("w", encoding="utf-8") as out:
        for n in range(EVENTS_PER_KEY):
            for k in range(KEYS):
                out.write(json.dumps({"entity_key": f"key-{k:02d}", "event_id": f"e{n}",
                                      "event_time_ms": 1_700_000_000_000 + n,
                                      "payload": f"m{n}"}) + "\n")


def test_every_queued_event_of_every_key_commits_when_the_input_ends(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    _write_events(events)
    started = time.monotonic()
    run_job(["templates/flink/agent_job.py", "--input_files", str(events),
             "--output_path", str(tmp_path / "intents"),
             "--errors_path", str(tmp_path / "errors"),
             "--agent", "tests.agents:ask", "--model_latency_ms", str(LATENCY_MS),
             "--bundle_size", str(BUNDLE_SIZE),
             "--python_executable", sys.executable, "--parallelism", "1",
             "--checkpointing_interval_ms", "1000"],
            log_dir=tmp_path / "flink-log")
    print(f"{KEYS * EVENTS_PER_KEY} events in {time.monotonic() - started:.1f} s")

    assert part_lines(tmp_path / "errors") == []
    seqs: dict[str, list[int]] = {}
    for line in part_lines(tmp_path / "intents"):
        intent = json.loads(line)
        seqs.setdefault(intent["entity_key"], []).append(json.loads(intent["payload"])["seq"])
    assert {key: sorted(got) for key, got in seqs.items()} == {
        f"key-{k:02d}": list(range(1, EVENTS_PER_KEY + 1)) for k in range(KEYS)}
