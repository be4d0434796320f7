"""The beam-agents command: errors show and errors redrive."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from beam_agents.cli import main
from beam_agents.hosting import decode_event_json, error_to_json, event_to_json
from beam_agents.runtime import AgentEvent, ErrorRecord


def dead_letters(path: Path) -> tuple[AgentEvent, bytes]:
    event = AgentEvent(entity_key=b"u1", event_id="e7", event_time_ms=9, payload=b'{"t":1}',
                       attributes={"a": "b"})
    failed = ErrorRecord(stage=ErrorRecord.STAGE_AGENT, error_type="builtins.RuntimeError",
                         message="boom", entity_key=b"u1", seq=3, event_id="e7",
                         event=event.SerializeToString())
    raw = b"this was never json"
    undecodable = ErrorRecord(stage=ErrorRecord.STAGE_DECODE, error_type="x.EventDecodeError",
                              message="input is not JSON", event=raw)
    path.write_bytes(error_to_json(failed) + b"\n" + error_to_json(undecodable) + b"\n")
    return event, raw


def test_errors_redrive_round_trips_a_dead_letter_file(tmp_path: Path) -> None:
    source, out = tmp_path / "errors.jsonl", tmp_path / "redrive.jsonl"
    event, raw = dead_letters(source)

    assert main(["errors", "redrive", str(source), "-o", str(out)]) == 0

    first, second = out.read_bytes().splitlines()
    assert decode_event_json(first) == event  # back to an input line that decodes identically
    assert second == raw  # undecodable input comes back verbatim for repair


def test_errors_show_renders_each_record_and_a_summary(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "errors.jsonl"
    dead_letters(source)

    assert main(["errors", "show", str(source)]) == 0

    out = capsys.readouterr().out
    assert "AGENT" in out and "u1" in out and "seq=3" in out and "boom" in out
    assert "2 dead letter(s): AGENT 1, DECODE 1" in out


def test_a_file_that_is_not_dead_letters_is_a_clear_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "x.jsonl"
    source.write_text('{"hello": 1}\n')
    assert main(["errors", "show", str(source)]) == 2
    assert f"{source}:1" in capsys.readouterr().err


def test_redrive_keeps_a_payload_object_an_object(tmp_path: Path) -> None:
    """A JSON payload comes back as the object it was, not an escaped string; text stays text."""
    source, out = tmp_path / "errors.jsonl", tmp_path / "redrive.jsonl"
    dead_letters(source)
    assert main(["errors", "redrive", str(source), "-o", str(out)]) == 0
    line = json.loads(out.read_bytes().splitlines()[0])
    assert line["payload"] == {"t": 1}

    spaced = AgentEvent(entity_key=b"u1", event_time_ms=1, payload=b'{ "t": 1 }')
    assert json.loads(event_to_json(spaced))["payload"] == '{ "t": 1 }'  # text that looks like JSON
    assert decode_event_json(event_to_json(spaced)) == spaced
