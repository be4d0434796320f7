"""``beam-agents inspect`` on what a real run left: SQLite rows, the SQLite journal, a snapshot."""

from __future__ import annotations

import io
import json
import re
import sqlite3
from pathlib import Path

import pytest

from beam_agents import inspection
from beam_agents.cli import main
from beam_agents.errors import ConfigError

pytestmark = pytest.mark.timeout(180)

KEY = "customer-01"


def _run(tmp_path: Path, texts: list[str] | None = None) -> list[str]:
    """Three messages of one customer, one naming an order; returns the inspect flags."""
    texts = texts or ["hi, I am new here", "where is my order A1001?", "thanks"]
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps(
        {"entity_key": KEY, "event_id": f"e{n}", "event_time_ms": 1_000 * (n + 1),
         "payload": {"text": text, "name": "Ada"}}) + "\n" for n, text in enumerate(texts)))
    stores = ["--longterm_store", "sqlite", "--sqlite_path", str(tmp_path / "rows.sqlite"),
              "--call_journal", "sqlite", "--call_journal_path", str(tmp_path / "calls.sqlite")]
    status = main(["run", "--input_files", str(events),
                   "--output_path", str(tmp_path / "out" / "intents.jsonl"),
                   "--errors_path", str(tmp_path / "out" / "errors.jsonl"),
                   "--agent", "examples.support_agent:agent",
                   "--state_snapshot", str(tmp_path / "snapshot"), *stores])
    assert status == 0
    return [*stores, "--state_snapshot", str(tmp_path / "snapshot")]


def _inspect(*flags: str) -> str:
    out = io.StringIO()
    assert inspection.main(["--entity_key", KEY, *flags], out=out) == 0
    return out.getvalue()


def test_inspect_shows_an_entitys_rows_journal_and_working_memory(tmp_path: Path) -> None:
    shown = _inspect(*_run(tmp_path), "--max_chars", "0")

    assert "long-term rows: 1" in shown
    assert '"name": "Ada"' in shown.replace('\\"', '"')  # the profile the agent saved
    # One model call per message, and the order lookup's recorded result.
    assert "call journal entries: 4" in shown
    assert shown.count("model call") == 3
    tool = next(line for line in shown.splitlines() if "tool result" in line)
    assert "A1001" in tool and "seq 2" in tool
    snapshot = shown[shown.index("state snapshot"):]
    assert "seq 3, working memory" in snapshot
    assert '  profile = "{' in snapshot  # the scalar the agent keeps in working memory
    assert "conversation: a ring of 6" in snapshot  # three turns, each question and answer
    assert snapshot.count('"role\\": \\"user') == 3


def test_inspect_shows_each_journal_entrys_request_digest(tmp_path: Path) -> None:
    """THEN each entry names, whole, the request digest the journal keys it by."""
    flags = _run(tmp_path)
    shown = _inspect(*flags)

    digests = re.findall(r"^ +request digest ([0-9a-f]{64})$", shown, re.MULTILINE)
    with sqlite3.connect(tmp_path / "calls.sqlite") as journal:
        tables = [name for (name,) in journal.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")]
        held = {str(value) for table in tables
                for row in journal.execute(f"SELECT * FROM {table}") for value in row}
    assert len(digests) == 4 and len(set(digests)) == 4
    assert set(digests) <= held


def test_inspect_decodes_a_snapshots_pending_waits_and_queued_events(tmp_path: Path) -> None:
    """THEN a wait shows its name, deadline and request, and its queued timeout its id and time."""
    flags = _run(tmp_path, ["hi", "please refund my order A1008, it broke"])
    shown = _inspect(*flags, "--max_chars", "0")
    snapshot = shown[shown.index("state snapshot"):]

    # The refund of order A1008 ($399) waits an hour (event time) for a person.
    assert "  pending waits: 1\n" in snapshot
    wait = next(line for line in snapshot.splitlines() if "refund-A1008" in line
                and "deadline" in line)
    assert "(recorded at seq 2), deadline 1970-01-01T01:00:02.000+00:00" in wait
    assert '\\"amount_cents\\":39900' in wait  # the request, decoded
    # Its timeout is queued past the input's end, for a later run.
    assert "  queued events: 1\n" in snapshot
    queued = snapshot.splitlines()[snapshot.splitlines().index("  queued events: 1") + 1]
    assert queued.startswith("    wait-timeout/refund-A1008/2 at 1970-01-01T01:00:02.000+00:00")
    assert "(timeout of wait refund-A1008)" in queued
    assert "bytes of wait state" not in shown


def test_inspect_cuts_long_values_and_says_how_long_they_were(tmp_path: Path) -> None:
    flags = _run(tmp_path)
    shown = _inspect(*flags, "--max_chars", "30")

    assert "... (" in shown and " bytes)" in shown
    assert all(len(line) < 200 for line in shown.splitlines())


def test_inspect_with_nothing_to_read_names_the_flags(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--longterm_store, --call_journal or --state_snapshot"):
        inspection.main(["--entity_key", KEY], out=io.StringIO())


def test_inspect_of_an_unknown_entity_shows_nothing_held(tmp_path: Path) -> None:
    flags = _run(tmp_path)
    out = io.StringIO()
    inspection.main(["--entity_key", "nobody", *flags], out=out)

    assert "long-term rows: 0" in out.getvalue()
    assert "call journal entries: 0" in out.getvalue()
    assert "no state for this entity" in out.getvalue()
