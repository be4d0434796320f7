"""A runner or configuration error ends the command with one clear line and exit status 2.

A user who mistypes ``--runner`` or a flag value needs to read what is wrong,
not a Beam traceback; ``--debug`` brings the traceback back for a bug report.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from beam_agents.cli import _one_line, main
from beam_agents.hosting import error_to_json
from beam_agents.runtime import ErrorRecord

ROOT = Path(__file__).resolve().parents[3]


def run_args(tmp_path: Path, *extra: str) -> list[str]:
    return ["run", "--input_files", str(ROOT / "examples" / "events.jsonl"),
            "--output_path", str(tmp_path / "intents.jsonl"),
            "--errors_path", str(tmp_path / "errors.jsonl"),
            "--agent", "examples.support_agent:agent", *extra]


def error_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines()
            if line.startswith("beam-agents:") or "Traceback" in line]


def test_an_unknown_runner_is_one_line_and_exit_2(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(run_args(tmp_path, "--runner", "NoSuchRunner")) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    [line] = [line for line in err.splitlines() if line.startswith("beam-agents:")]
    assert "Unexpected pipeline runner: NoSuchRunner" in line
    assert line.endswith("(--debug shows the traceback)")


def test_a_missing_job_server_jar_is_one_line_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    jar = tmp_path / "missing" / "job-server.jar"
    assert main(run_args(tmp_path, "--runner", "FlinkRunner", "--flink_master", "localhost:1",
                         "--flink_job_server_jar", str(jar))) == 2
    [line] = error_lines(capsys)
    assert str(jar) in line


def test_a_bad_flag_value_names_the_flag_without_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(run_args(tmp_path, "--max_in_flight", "0")) == 2
    [line] = error_lines(capsys)
    assert line.startswith("beam-agents: AgentConfig.max_in_flight (--max_in_flight)")


@pytest.mark.parametrize(("flag", "value"), [
    ("--model_max_rps", "0"),
    ("--model_max_rps", "-5"),
    ("--model_max_tpm", "0"),
    ("--model_max_tpm", "-1000"),
    ("--model_price_in_per_mtok", "cheap"),
    ("--model_price_out_per_mtok", "-1"),
    ("--model_quota", "0"),
    ("--max_tokens_per_entity", "0"),
    ("--max_tokens_per_entity", "lots"),
    ("--budget_window_ms", "5"),
])
def test_a_bad_limit_or_price_is_one_line_naming_the_flag(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    """A zero or negative limit, or a price that is not a number, fails before anything runs."""
    assert main(run_args(tmp_path, flag, value)) == 2
    [line] = error_lines(capsys)
    assert f"({flag})" in line or f"{flag} " in line, line
    assert not (tmp_path / "intents.jsonl").exists()


def test_debug_shows_the_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--debug", *run_args(tmp_path, "--runner", "NoSuchRunner")]) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert "Unexpected pipeline runner: NoSuchRunner" in err


def test_a_corrupt_error_record_in_redrive_is_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "errors.jsonl"
    bogus = ErrorRecord(stage=ErrorRecord.STAGE_AGENT, seq=4, event=b"\xff\xff\xff")
    source.write_bytes(error_to_json(bogus) + b"\n")
    assert main(["errors", "redrive", str(source)]) == 2
    [line] = error_lines(capsys)
    assert "STAGE_AGENT record of seq 4 holds no AgentEvent" in line


def test_redrive_names_what_it_left_out(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    source, out = tmp_path / "errors.jsonl", tmp_path / "redrive.jsonl"
    cut = ErrorRecord(stage=ErrorRecord.STAGE_DECODE, event=b"{", event_bytes=70_000_000,
                      event_sha256=bytes(range(32)))
    whole = ErrorRecord(stage=ErrorRecord.STAGE_DECODE, event=b"not json")
    source.write_bytes(error_to_json(cut) + b"\n" + error_to_json(whole) + b"\n")
    assert main(["errors", "redrive", str(source), "-o", str(out)]) == 0
    assert out.read_bytes() == b"not json\n"
    err = capsys.readouterr().err
    assert f"event of 70000000 bytes over the size limit; find it at the source by its sha256 " \
           f"{bytes(range(32)).hex()}" in err


def test_an_empty_job_server_jar_flag_is_refused(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Beam would read "" as unset and try a download; the flag is named instead."""
    assert main(run_args(tmp_path, "--runner", "FlinkRunner", "--flink_master", "localhost:1",
                         "--flink_job_server_jar=")) == 2
    [line] = error_lines(capsys)
    assert line.startswith("beam-agents: --flink_job_server_jar is empty")


def test_a_long_error_keeps_the_path_it_asks_the_user_to_stage_at() -> None:
    """Beam's download failure ends with the path to stage the jar at: it is printed whole."""
    path = "/root/.apache_beam/cache/jars/beam-runners-flink-1.19-job-server-2.61.0.jar"
    error = RuntimeError("Unable to fetch remote job server jar at https://repo/x.jar: "
                         f"<urlopen error {'x' * 600}>. If no Internet access at runtime, "
                         f"stage the jar at {path}")
    line = _one_line(error)
    assert line.startswith("beam-agents: RuntimeError: Unable to fetch")
    assert f"stage the jar at {path} (--debug" in line
    assert len(line) < 500


def test_an_empty_match_in_a_model_script_is_one_line_before_the_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A script error is found before any worker starts: one line naming the line, no trace."""
    script = tmp_path / "script.jsonl"
    script.write_text('{"match": "refund", "text": "ok"}\n{"match": "", "text": "all"}\n')
    assert main(run_args(tmp_path, "--model_script", str(script))) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    [line] = [line for line in err.splitlines() if line.startswith("beam-agents:")]
    assert f"{script}:2: bad LocalModel script line: 'match' is empty" in line
    assert not (tmp_path / "intents.jsonl").exists()
