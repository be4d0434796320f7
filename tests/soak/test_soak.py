"""`make soak` compressed into 60 s: faults on a schedule, and the figures it must report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(330)

REPO = Path(__file__).resolve().parents[2]

FIGURES = ["published", "with_outcome", "intents", "dead_letters", "lost",
           "pulled_not_ended_at_kill", "left_in_subscription", "duplicates", "calls",
           "latency_ms", "rss", "cpu_s_per_event", "faults", "checks", "passed"]


def test_a_60s_soak_with_faults_loses_only_what_the_killed_run_held(tmp_path: Path) -> None:
    report_path, png = tmp_path / "soak.json", tmp_path / "soak.png"
    done = subprocess.run(
        [sys.executable, "-m", "tools.streaming.soak", "--duration_s", "60", "--rate", "10",
         "--keys", "200", "--max_in_flight", "32", "--retry_max_ms", "2000", "--quota", "25",
         "--drain_s", "45",
         "--json", str(report_path), "--png", str(png), "--out", str(tmp_path / "out")],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    output = done.stdout + done.stderr[-3000:]
    assert report_path.exists(), output
    report = json.loads(report_path.read_text())
    assert [name for name in FIGURES if name not in report] == [], output
    faults = " ".join(fault["fault"] for fault in report["faults"])
    assert "SIGKILL" in faults and "Firestore emulator stopped" in faults, faults
    assert report["pulled_not_ended_at_kill"] is not None, "no progress line from the run"
    assert report["lost"] <= report["pulled_not_ended_at_kill"], output
    # The 503 burst is 3 s, well inside the retry window: the open breaker holds
    # keys instead of starting them into it, so none is dead-lettered for it.
    assert report["errors_by_stage"].get("model", 0) == 0, report["errors_by_stage"]
    assert report["duplicates"]["deduplicable"] is True
    assert report["calls"]["re_paid"] is not None
    assert report["calls"]["re_paid"] <= report["max_in_flight"]
    assert report["latency_ms"]["p50"] is not None and report["latency_ms"]["p99"] is not None
    assert report["rss"]["series_t_run_mib"], "no RSS samples"
    assert report["cpu_s_per_event"] > 0
    assert png.stat().st_size > 0
    assert report["passed"] is True and done.returncode == 0, output
