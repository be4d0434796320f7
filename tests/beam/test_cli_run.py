"""``beam-agents run`` end to end on the DirectRunner: the summary a user reads after a run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from beam_agents.cli import main
from beam_agents.hosting import error_from_json

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


def _lines(path: Path, rows: list[tuple[str, str, int, str]]) -> Path:
    path.write_text("".join(json.dumps({"entity_key": key, "event_id": event, "event_time_ms": t,
                                        "payload": text}) + "\n"
                            for key, event, t, text in rows))
    return path


def _cli(tmp_path: Path, name: str, source: Path, *flags: str) -> int:
    return main(["run", "--input_files", str(source),
                 "--output_path", str(tmp_path / name / "intents.jsonl"),
                 "--errors_path", str(tmp_path / name / "errors.jsonl"), *flags])


def test_a_redrive_without_a_snapshot_counts_its_superseded_writes_and_warns_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No silent drop: the seq guard's refusals are counted, the first entity named, warned once."""
    store = ("--agent", "tests.agents:journal_or_fail", "--longterm_store", "sqlite",
             "--sqlite_path", str(tmp_path / "longterm.sqlite"))
    day = [(key, f"e{n}", 1_000 + n, "fail" if n == 3 else f"note {n}")
           for key in ("ann", "bob") for n in range(6)]
    assert _cli(tmp_path, "day", _lines(tmp_path / "day.jsonl", day), *store) == 0
    first = capsys.readouterr()
    assert "keyed state starts empty: without --state_snapshot" in first.err
    assert "long-term writes superseded        0" in first.out

    redrive = [(key, "e3", 1_003, "note 3, repaired") for key in ("ann", "bob")]
    assert _cli(tmp_path, "redrive", _lines(tmp_path / "redo.jsonl", redrive), *store) == 0
    out = capsys.readouterr()
    assert "activations committed              2" in out.out
    assert "long-term writes superseded        2   (first: entity " in out.out
    assert "Run with --state_snapshot" in out.out
    assert out.err.count("were superseded: the store holds a newer seq") == 1


def test_a_run_with_a_snapshot_says_where_its_state_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The first run says the snapshot is empty; the next names its keys and generation."""
    snapshot = ("--agent", "tests.agents:counter", "--state_snapshot", str(tmp_path / "state"))
    source = _lines(tmp_path / "a.jsonl", [("k", "a", 1, "x"), ("j", "a", 1, "x")])
    assert _cli(tmp_path, "one", source, *snapshot) == 0
    assert "holds no snapshot yet; this run writes the first" in capsys.readouterr().err
    assert _cli(tmp_path, "two", source, *snapshot) == 0
    err = capsys.readouterr().err
    assert f"keyed state from {tmp_path / 'state'}: 2 key(s), generation g-" in err


def test_a_failed_run_leaves_no_outputs_of_an_earlier_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The earlier run's intents are removed first, so a failed run leaves nothing current."""
    source = _lines(tmp_path / "a.jsonl", [("k", "a", 1, "x")])
    assert _cli(tmp_path, "out", source, "--agent", "tests.agents:counter") == 0
    assert (tmp_path / "out" / "intents.jsonl").exists()
    crash = _lines(tmp_path / "b.jsonl", [("k", "b", 2, "crash")])
    with pytest.raises(BaseException, match="asked to crash"):
        _cli(tmp_path, "out", crash, "--agent", "tests.agents:crash_the_bundle")
    assert "removing 2 output file(s) an earlier run left" in capsys.readouterr().err
    assert not (tmp_path / "out" / "intents.jsonl").exists()
    assert not (tmp_path / "out" / "errors.jsonl").exists()


def _count(summary: str, label: str) -> int:
    line = next(line for line in summary.splitlines() if line.strip().startswith(label))
    return int(line[2 + 28:].split()[0])


def test_an_outage_holds_starts_so_suspensions_stay_within_failed_calls_and_in_flight(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 1.5 s outage at call 40, 8 in flight: suspensions <= failed calls + 8, none lost."""
    events = tmp_path / "events.jsonl"
    count = _events(events, keys=40, per_key=4)
    out, errors = tmp_path / "out" / "intents.jsonl", tmp_path / "out" / "errors.jsonl"
    assert main(["run", "--input_files", str(events), "--output_path", str(out),
                 "--errors_path", str(errors), "--agent", "examples.support_agent:agent",
                 "--model_latency_ms", "30", "--model_outage", "40:1500ms",
                 "--max_in_flight", "8", "--retry_initial_ms", "200", "--retry_max_ms", "2000",
                 "--max_attempts", "10"]) == 0
    summary = capsys.readouterr().out
    assert len(out.read_text().splitlines()) == count
    failed = _count(summary, "model calls failed")
    assert failed > 0
    assert _count(summary, "suspensions") <= failed + 8, summary
    assert _count(summary, "held by an open breaker") > 0
    assert _count(summary, "retries exhausted") == 0


def test_the_summary_counts_tool_calls_run_once_through_an_outage(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The example agent looks orders up with its tool; an outage replays, never reruns, them."""
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(json.dumps(
        {"entity_key": f"c{k}", "event_id": f"o{k}", "event_time_ms": 1_000 + k,
         "payload": {"text": f"where is my order A10{k:02d}?"}}) for k in range(8)) + "\n")
    out = tmp_path / "out" / "intents.jsonl"
    status = main(["run", "--input_files", str(events), "--output_path", str(out),
                   "--errors_path", str(tmp_path / "out" / "errors.jsonl"),
                   "--agent", "examples.support_agent:agent", "--model_latency_ms", "20",
                   "--model_outage", "1:4", "--retry_initial_ms", "5", "--retry_max_ms", "10"])
    summary = capsys.readouterr().out

    assert status == 0
    assert len(out.read_text().splitlines()) == 8
    assert _count(summary, "tool calls run") == 8
    assert _count(summary, "tool results replayed") == _count(summary, "suspensions") > 0
    assert _count(summary, "tool errors") == 0


@pytest.mark.parametrize(("agent", "named"), [("no_such_module:agent", "cannot import"),
                                              ("examples.support_agent:nobody", "has no")])
def test_an_agent_that_does_not_load_is_one_line_before_the_pipeline_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], agent: str, named: str) -> None:
    """Found before the run, not as a traceback from each worker's setup once it started."""
    events = tmp_path / "events.jsonl"
    _events(events, keys=2, per_key=1)
    out = tmp_path / "out" / "intents.jsonl"
    assert main(["run", "--input_files", str(events), "--output_path", str(out),
                 "--errors_path", str(tmp_path / "out" / "errors.jsonl"),
                 "--agent", agent]) == 2
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.strip()] == [
        line for line in err.splitlines() if line.startswith("beam-agents:")], err
    assert named in err and "AgentConfig.agent" in err
    assert "Traceback" not in err and "running the agent pipeline" not in err
    assert not out.exists()
