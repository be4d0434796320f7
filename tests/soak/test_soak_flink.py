"""`make soak ENGINE=flink` in 60 s: faults, a TaskManager lost, nothing lost or doubled."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(660)

REPO = Path(__file__).resolve().parents[2]

FIGURES = ["published", "with_outcome", "intents", "dead_letters", "lost", "duplicated_intents",
           "kill", "restored_checkpoint", "job_counters", "latency_ms", "rss",
           "cpu_s_per_event", "faults", "checks", "passed"]


def test_a_60s_flink_soak_with_a_task_manager_killed_loses_and_doubles_nothing(
        tmp_path: Path) -> None:
    """THEN every event has its intent or dead letter once in the committed output."""
    report_path, png = tmp_path / "soak.json", tmp_path / "soak.png"
    done = subprocess.run(
        [sys.executable, "-m", "tools.streaming.flink_soak", "--duration_s", "60", "--rate",
         "10", "--keys", "100", "--drain_s", "300", "--json", str(report_path),
         "--png", str(png), "--out", str(tmp_path / "out")],
        cwd=REPO, capture_output=True, text=True, timeout=630, check=False)
    output = done.stdout + done.stderr[-3000:]
    assert report_path.exists(), output
    report = json.loads(report_path.read_text())
    assert [name for name in FIGURES if name not in report] == [], output
    faults = " ".join(fault["fault"] for fault in report["faults"])
    assert "SIGKILLed" in faults and "Firestore emulator stopped" in faults, faults
    assert report["kill"]["task_managers"] >= 1, report["kill"]
    assert report["restored_checkpoint"] is not None, output
    assert report["published"] == 600
    assert report["lost"] == 0 and report["with_outcome"] == 600, output
    assert report["duplicated_intents"] == 0, output
    assert report["intents"] >= 600 - report["dead_letters"], output
    assert report["job_counters"].get("beam_agents.model:paid_calls", 0) > 0, output
    assert report["latency_ms"]["p50"] is not None and report["latency_ms"]["p99"] is not None
    assert report["rss"]["series_t_run_mib"], "no RSS samples"
    assert report["cpu_s_per_event"] > 0
    assert png.stat().st_size > 0
    assert report["passed"] is True and done.returncode == 0, output
