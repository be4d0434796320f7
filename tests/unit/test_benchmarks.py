"""The benchmark suite runs end to end in quick mode and writes every field it promises.

No timing is asserted here: benchmarks report ratios measured side by side,
and a test that failed on a slow machine would measure the machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(540)

TARGETED = ("B1", "B2", "B4", "B6", "B7", "B8", "B9", "B10", "B11", "B14", "B15")
B6_PATH_FIELDS = ("events_per_s", "ratio_to_serial", "ratio_to_ideal", "cpu_ms_per_event",
                  "cpu_cores_busy")
B7_BACKEND_STATS = ("journaled_ms", "unjournaled_ms", "ratio_journaled_to_unjournaled",
                    "added_ms_per_call", "added_percent_of_model_call")
B7_BACKEND_COUNTS = ("activations", "paid_calls", "journal_reads", "journal_writes",
                     "reads_per_activation", "writes_per_paid_call")
B8_CASES = ("bundle_retry", "crash_restore", "rerun", "transient_outage")


def _is_stat(value: object) -> bool:
    return (isinstance(value, dict) and set(value) == {"median", "min", "max"}
            and all(isinstance(x, int | float) for x in value.values()))


def test_quick_mode_writes_every_benchmark_with_its_fields(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=520, check=False)
    assert done.returncode == 0, done.stderr[-3000:]

    document = json.loads((tmp_path / "latest.json").read_text())
    assert document["environment"]["quick"] is True
    for name in ("B1", "B2", "B3", "B4", "B5", "B6", "B7", "B8", "B9", "B10", "B11", "B12",
                 "B13", "B14", "B15"):
        result = document[name]
        assert result["name"] and result["note"], name
        assert isinstance(result["ratio"], int | float), name
        if name in TARGETED:
            assert isinstance(result["met"], bool), name
            assert isinstance(result["target"], int | float), name
    for stat in ("floor_us", "facade_us", "naive_us"):
        assert set(document["B1"][stat]) == {"median", "min", "max"}
    assert {"median", "min", "max"} <= set(document["B1"]["ratio_default_malloc"])
    assert document["B4"]["max_state_bytes"] > 0
    assert document["B4"]["failed_activations"] == 0
    assert document["B5"]["check_passed"] is True
    b6 = document["B6"]
    assert _is_stat(b6["serial_events_per_s"]) and _is_stat(b6["serial_cpu_ms_per_event"])
    assert isinstance(b6["ideal_ratio"], int | float)
    for path in ("batch", "streaming", "flink", "flink_thread"):
        result = b6[path]
        if path.startswith("flink") and isinstance(result, str):
            # The Flink job needs a JVM; a run that could not start one says why.
            assert result.startswith("not measured: ") and len(result) > 14, result
            continue
        assert all(_is_stat(result[field]) for field in B6_PATH_FIELDS), (path, result)
        assert isinstance(result["ideal_events_per_s"], int | float), path
        assert isinstance(result["met"], bool), path
    streaming = b6["streaming"]
    assert all(_is_stat(streaming["runner_floor"][field]) for field in B6_PATH_FIELDS)
    assert _is_stat(streaming["library_cpu_ms_per_event"]) and _is_stat(streaming["ratio_to_floor"])
    b7 = document["B7"]
    for backend in ("sqlite", "firestore"):
        result = b7[backend]
        if backend == "firestore" and isinstance(result, str):
            # The Firestore test server is a Node package; a run without it says why.
            assert result.startswith("not measured: ") and len(result) > 14, result
            continue
        assert all(_is_stat(result[field]) for field in B7_BACKEND_STATS), (backend, result)
        assert all(isinstance(result[field], int | float) for field in B7_BACKEND_COUNTS)
        assert isinstance(result["met"], bool), backend
    b12 = document["B12"]
    for runner in ("direct", "prism"):
        assert _is_stat(b12["batch"][runner]["ratio_agent_to_bare"]), (runner, b12["batch"])
    assert b12["start_up"]["prism_first_pipeline_s"] > 0
    if isinstance(b12["streaming"], str):
        assert b12["streaming"].startswith("not measured: "), b12["streaming"]
    for case in document["B9"]["cases"].values():
        assert case["dead_letters"] == 0 and case["early"] == 0, case
        # The quota's view of the job is inside the processes' wall time.
        assert 0 < case["run_share"] <= case["whole_run_share"], case
        assert set(case["ends_s"]) == {f"w{i}" for i in range(case["workers"])}, case
    b8 = document["B8"]
    for case in B8_CASES:
        for side in ("journal_on", "journal_off"):
            counts = b8[case][side]
            assert all(isinstance(counts[field], int | float) for field in (
                "committed_activations", "paid_calls", "provider_attempts",
                "paid_per_committed")), (case, side, counts)
        # A count, not a timing: with the journal no call is paid twice.
        assert b8[case]["journal_on"]["paid_per_committed"] == 1.0, case
    b10 = document["B10"]["beam_agents_run"]
    assert all(_is_stat(b10[field]) for field in (
        "hot_ms_per_event", "spread_ms_per_event", "ratio_hot_to_spread")), b10
    assert all(_is_stat(value) for value in b10["one_key_ms_per_event"].values()), b10
    assert len(b10["one_key_ms_per_event"]) >= 2, b10
    b13 = document["B13"]
    assert all(_is_stat(b13[field]) for field in (
        "write_ms_per_10k_keys", "read_ms_per_10k_keys", "ratio_write_to_plain_file",
        "ratio_read_to_plain_file")), b13
    assert all(_is_stat(b13["batch"][field]) for field in (
        "with_snapshot_s", "without_snapshot_s", "share_percent")), b13
    assert b13["keys_measured"] > 0 and b13["record_bytes_mean"] > 0, b13
    b15 = document["B15"]
    assert all(_is_stat(b15[field]) for field in (
        "events_per_s", "ratio_to_ideal", "cpu_ms_per_event")), b15
    assert b15["latency_at_half_capacity"]["events"] > 0, b15
    assert b15["latency_at_half_capacity"]["p99_ms"] >= b15["latency_at_half_capacity"]["p50_ms"]
    b11 = document["B11"]
    assert b11["ideal_s"] == max(b11["bounds_s"].values()), b11
    assert b11["hottest_key_events"] < b11["events"], b11
    assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted([
        "b1_activation.png", "b2_pipeline.png", "b3_scaling.png", "b4_soak.png",
        "b5_cache_key.png", "b6_latency.png", "b7_journal.png", "b8_paid_calls.png",
        "b9_quota.png", "b10_hot_key.png", "b11_zipf.png"])
    assert "B1" in done.stdout and "met" in done.stdout  # the table was printed
