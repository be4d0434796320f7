"""``beam-agents run`` end to end on the DirectRunner: the summary a user reads after a run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from beam_agents.cli import main
from beam_agents.runtime import error_from_json

pytestmark = pytest.mark.timeout(180)


def _events(path: Path, *, keys: int, per_key: int) -> int:
    lines = [json.dumps({"entity_key": f"c{k}", "event_id": f"e{n:02d}",
                         "event_time_ms": 1_000 * n + k, "payload": {"text": f"hi {n}"}})
             for n in range(per_key) for k in range(keys)]
    path.write_text("\n".join([*lines, "not json"]) + "\n", encoding="utf-8")
    return len(lines)


def _run(tmp_path: Path, *flags: str) -> tuple[list[str], list[str]]:
    events = tmp_path / "events.jsonl"
    _events(events, keys=6, per_key=4)
    out, errors = tmp_path / "out" / "intents.jsonl", tmp_path / "out" / "errors.jsonl"
    status = main(["run", "--input_files", str(events), "--output_path", str(out),
                   "--errors_path", str(errors), "--agent", "examples.support_agent:agent",
                   "--model_latency_ms", "20", *flags])
    assert status == 0
    return out.read_text().splitlines(), errors.read_text().splitlines()


def test_a_transient_outage_is_ridden_out_and_the_summary_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    intents, errors = _run(tmp_path, "--model_outage", "3:2", "--retry_initial_ms", "5",
                           "--retry_max_ms", "10")
    summary = capsys.readouterr().out
    assert len(intents) == 24
    assert [error_from_json(line).stage for line in errors] == [1]  # the one undecodable line
    assert "suspensions                        2" in summary
    assert "retries exhausted                  0" in summary
    assert "model calls failed                 2" in summary
    assert "no event was dead-lettered for the outage" in summary
    peak = next(line for line in summary.splitlines() if "peak activations in flight" in line)
    assert 1 < int(peak.split()[-1]) <= 6


def test_an_outage_longer_than_the_retries_dead_letters_with_the_attempt_count(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    intents, errors = _run(tmp_path, "--model_outage", "1:1000", "--retry_initial_ms", "1",
                           "--retry_max_ms", "2", "--max_attempts", "2", "--max_in_flight", "2")
    summary = capsys.readouterr().out
    records = [error_from_json(line) for line in errors]
    assert intents == []
    assert sorted(r.attempts for r in records if r.retriable) == [2] * 24
    assert "retries exhausted                 24" in summary
    assert "dead-lettered after their last retry" in summary
