"""The tallies the Activate subtasks leave, summed for the summary: each subtask's last attempt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from beam_agents.flink import FlinkMetrics
from beam_agents.flink._metrics import read_tallies

pytestmark = pytest.mark.timeout(30)

RUNTIME = "beam_agents.runtime"


class _Group:
    """A metric group whose counters, gauges and distributions accept anything."""

    def add_group(self, name: str) -> _Group:
        return self

    def counter(self, name: str) -> Any:
        return type("Counter", (), {"inc": lambda self, value: None})()

    def gauge(self, name: str, read: Any) -> None:
        return None


def _tally(folder: Path, name: str, committed: int, *, peak: int = 1) -> None:
    metrics = FlinkMetrics(_Group())
    metrics.inc(RUNTIME, "committed", committed)
    metrics.peak(RUNTIME, "in_flight_peak", peak)
    metrics.flush()
    metrics.write_tally(str(folder), name)


def test_subtasks_add_up_and_a_restarted_one_counts_from_its_last_attempt(
        tmp_path: Path) -> None:
    """THEN counts add across subtasks, peaks take the highest, and restarts are named."""
    _tally(tmp_path, "activate-0-0", 5, peak=3)
    _tally(tmp_path, "activate-1-0", 9, peak=2)  # restarted: attempt 1 counts, not 0
    _tally(tmp_path, "activate-1-1", 4, peak=7)

    counters, peaks, _, restarted = read_tallies(tmp_path)

    assert counters[(RUNTIME, "committed")] == 9
    assert peaks[(RUNTIME, "in_flight_peak")] == 7
    assert restarted == 1


def test_a_tally_written_again_replaces_the_last_whole(tmp_path: Path) -> None:
    """THEN each report rewrites the subtask's file, leaving no scratch file behind."""
    metrics = FlinkMetrics(_Group())
    for _ in range(3):
        metrics.inc(RUNTIME, "committed", 2)
        metrics.flush()
        metrics.write_tally(str(tmp_path), "activate-0-0")

    assert read_tallies(tmp_path)[0][(RUNTIME, "committed")] == 6
    assert [path.name for path in tmp_path.iterdir()] == ["activate-0-0.json"]
