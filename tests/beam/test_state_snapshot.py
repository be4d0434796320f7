"""``--state_snapshot`` on the batch path: runs that remember, on the DirectRunner over files.

Each test runs the real pipeline (`build_pipeline`) as `beam-agents run` does,
reads the outputs and the snapshot folder, and checks what a daily batch user
relies on: the second run continues every key's seq and memory, a redrive
runs in its key's context, and a failed run keeps the last good snapshot.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline

from beam_agents.beam import build_pipeline
from beam_agents.cli import redrive_lines
from beam_agents.errors import StateCorruptError
from beam_agents.hosting import KeyStateSnapshot, Manifest, error_from_json
from tests import agents

pytestmark = pytest.mark.timeout(300)


def line(key: str, event_id: str, time_ms: int, payload: str = "hi") -> str:
    return json.dumps({"entity_key": key, "event_id": event_id, "event_time_ms": time_ms,
                       "payload": payload})


def run(out: Path, lines: list[str], *, snapshot: Path | None, agent: str = "tests.agents:counter",
        extra: tuple[str, ...] = ()) -> tuple[list[dict], list[dict]]:
    """One batch run over `lines` into folder `out`; returns its intents and dead letters."""
    out.mkdir(parents=True, exist_ok=True)
    source = out / "events.jsonl"
    source.write_text("\n".join(lines) + "\n")
    argv = ["--runner=DirectRunner", f"--input_files={source}",
            f"--output_path={out / 'intents.jsonl'}", f"--errors_path={out / 'errors.jsonl'}",
            f"--agent={agent}", *extra]
    if snapshot is not None:
        argv.append(f"--state_snapshot={snapshot}")
    options = PipelineOptions(argv)
    pipeline = TestPipeline(options=options)
    build_pipeline(pipeline, options)
    pipeline.run().wait_until_finish()
    read = lambda name: [json.loads(x) for x in (out / name).read_text().splitlines()]  # noqa: E731
    return read("intents.jsonl"), read("errors.jsonl")


def manifest(snapshot: Path) -> Manifest:
    return Manifest.from_bytes((snapshot / "MANIFEST").read_bytes(), where="test")


def test_two_runs_with_a_snapshot_equal_one_run_over_both_inputs(tmp_path: Path) -> None:
    """The second run continues each key's seq and memory: its intents are those of one run."""
    first = [line(f"k{k}", f"a{n}", 1_000 + n) for k in range(6) for n in range(3)]
    second = [line(f"k{k}", f"b{n}", 5_000 + n) for k in range(0, 6, 2) for n in range(2)]
    snapshot = tmp_path / "state"

    one, _ = run(tmp_path / "one", first, snapshot=snapshot)
    assert manifest(snapshot).keys == 6
    two, errors = run(tmp_path / "two", second, snapshot=snapshot)
    whole, _ = run(tmp_path / "whole", first + second, snapshot=None)

    assert errors == []
    assert sorted(map(json.dumps, one + two)) == sorted(map(json.dumps, whole))
    later = {(row["entity_key"], row["event_id"]): json.loads(row["payload"]) for row in two}
    assert later[("k0", "b1")] == {"count": 5, "seq": 5, "seen": 3}
    # Keys without events in the second run are carried on, and a third run sees them.
    assert manifest(snapshot).keys == 6
    three, _ = run(tmp_path / "three", [line("k1", "c0", 9_000)], snapshot=snapshot)
    assert json.loads(three[0]["payload"]) == {"count": 4, "seq": 4, "seen": 3}


def test_without_a_snapshot_every_run_starts_empty(tmp_path: Path) -> None:
    """No flag, no memory: the control for the test above."""
    run(tmp_path / "one", [line("k", "a", 1)], snapshot=None)
    again, _ = run(tmp_path / "two", [line("k", "b", 2)], snapshot=None)
    assert json.loads(again[0]["payload"]) == {"count": 1, "seq": 1, "seen": 1}


def test_a_redrive_with_a_snapshot_commits_at_the_next_seq_and_its_longterm_writes_land(
        tmp_path: Path) -> None:
    """Repaired dead letters redriven alone continue the seq; the seq guard keeps their rows."""
    snapshot, db = tmp_path / "state", tmp_path / "longterm.sqlite"
    store = ("--longterm_store=sqlite", f"--sqlite_path={db}")
    events = [line("cust", f"e{n}", 1_000 + n, "fail" if n == 3 else f"note {n}")
              for n in range(6)]
    _, errors = run(tmp_path / "day1", events, snapshot=snapshot,
                    agent="tests.agents:journal_or_fail", extra=store)
    assert [error["event_id"] for error in errors] == ["e3"]
    repaired = [json.loads(text) for text in redrive_lines(
        [error_from_json(json.dumps(error)) for error in errors])]
    repaired[0]["payload"] = "note 3, repaired"
    intents, errors = run(tmp_path / "redrive", [json.dumps(repaired[0])], snapshot=snapshot,
                          agent="tests.agents:journal_or_fail", extra=store)

    assert errors == []
    assert intents[0]["seq"] == 6  # five committed before it
    rows = dict(sqlite3.connect(db).execute(
        "SELECT key, seq FROM longterm_records WHERE key = 'profile'").fetchall())
    assert rows == {"profile": 6}


def test_a_failed_run_keeps_the_last_good_snapshot(tmp_path: Path) -> None:
    """A run that dies before its commit leaves the manifest and parts as they were."""
    snapshot = tmp_path / "state"
    run(tmp_path / "one", [line("k", "a", 1)], snapshot=snapshot)
    before = (snapshot / "MANIFEST").read_bytes()
    with pytest.raises(agents.Crash, match="asked to crash"):
        run(tmp_path / "two", [line("k", "b", 2, "crash")], snapshot=snapshot,
            agent="tests.agents:crash_the_bundle")
    assert (snapshot / "MANIFEST").read_bytes() == before
    again, _ = run(tmp_path / "three", [line("k", "c", 3)], snapshot=snapshot)
    assert json.loads(again[0]["payload"])["seq"] == 2


def test_a_corrupt_record_dead_letters_its_keys_events_and_is_kept(tmp_path: Path) -> None:
    """Bad state never runs events and is never overwritten (invariant 8); other keys go on."""
    snapshot = tmp_path / "state"
    run(tmp_path / "one", [line("good", "a", 1), line("bad", "a", 1)], snapshot=snapshot)
    current = manifest(snapshot)
    part = snapshot / current.generation / current.parts[0].name
    lines = part.read_bytes().splitlines()
    def spoil(text: bytes) -> bytes:
        record = KeyStateSnapshot.FromString(base64.b64decode(text))
        if record.entity_key == b"bad":  # a cell from a later version, unknown here
            record.cells.add(name="pending_waits_v9", blob=b"?")
        return base64.b64encode(record.SerializeToString())

    spoiled = [spoil(ln) for ln in lines]
    data = b"".join(ln + b"\n" for ln in spoiled)
    part.write_bytes(data)
    doc = json.loads((snapshot / "MANIFEST").read_text())
    doc["parts"][0].update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    (snapshot / "MANIFEST").write_text(json.dumps(doc))

    intents, errors = run(tmp_path / "two", [line("good", "b", 2), line("bad", "b", 2)],
                          snapshot=snapshot)
    assert [json.loads(row["payload"])["seq"] for row in intents] == [2]
    assert [(e["stage"], e["event_id"]) for e in errors] == [("STAGE_STATE_CORRUPT", "b")]
    assert manifest(snapshot).keys == 2  # the bad record goes on, for a person to repair
    assert "pending_waits_v9" in errors[0]["message"]


def test_a_part_cut_short_stops_the_run_naming_it(tmp_path: Path) -> None:
    """A part that is not what the manifest lists is refused before anything changes."""
    snapshot = tmp_path / "state"
    run(tmp_path / "one", [line("k", "a", 1)], snapshot=snapshot)
    current = manifest(snapshot)
    part = snapshot / current.generation / current.parts[0].name
    part.write_bytes(part.read_bytes()[:-5])
    with pytest.raises(Exception, match=r"cut short|bytes"):
        run(tmp_path / "two", [line("k", "b", 2)], snapshot=snapshot)
    assert manifest(snapshot) == current


def test_a_snapshot_written_by_a_newer_format_is_refused(tmp_path: Path) -> None:
    """A manifest of another format version is never half read."""
    snapshot = tmp_path / "state"
    run(tmp_path / "one", [line("k", "a", 1)], snapshot=snapshot)
    doc = json.loads((snapshot / "MANIFEST").read_text())
    doc["format_version"] = 2
    (snapshot / "MANIFEST").write_text(json.dumps(doc))
    with pytest.raises(Exception, match="state_schema_version 2"):
        run(tmp_path / "two", [line("k", "b", 2)], snapshot=snapshot)


def test_unknown_state_in_a_manifest_is_a_clear_error() -> None:
    with pytest.raises(StateCorruptError, match="not a beam-agents state snapshot"):
        Manifest.from_bytes(b'{"format": "other"}', where="x")


def refund(key: str, at_s: int, amount: int) -> str:
    return json.dumps({"entity_key": key, "event_id": f"r{at_s}", "event_time_ms": at_s * 1000,
                       "payload": str(amount)})


def approve(key: str, at_s: int) -> str:
    return json.dumps({"entity_key": key, "event_id": f"a{at_s}", "event_time_ms": at_s * 1000,
                       "answers": "approval", "payload": {"approved": True}})


def outputs(intents: list[dict]) -> dict[str, list[tuple[str, object]]]:
    by_key: dict[str, list[tuple[str, object]]] = {}
    for row in intents:
        by_key.setdefault(row["entity_key"], []).append((row["kind"], json.loads(row["payload"])))
    return by_key


def test_a_pending_wait_survives_the_snapshot_into_the_next_run(tmp_path: Path) -> None:
    """A wait due past the input's last event time stays pending in the snapshot (cell 'waits').

    Day one ends at 5 s, before either deadline (11 s, 12 s): no timeout runs.
    Day two answers one wait in time and passes the other's deadline, so that
    key, with no event of its own, times out. Both equal one run over both days.
    Before the 'waits' cell and its queued timeout travelled, day two saw no wait.
    """
    agent, snapshot = "tests.agents:approval_agent", tmp_path / "state"
    day1 = [refund("ann", 1, 50), refund("bob", 2, 70), refund("cy", 5, 1)]
    day2 = [approve("ann", 8), refund("cy", 20, 2)]

    one, _ = run(tmp_path / "one", day1, snapshot=snapshot, agent=agent)
    assert {row["kind"] for row in one} == {"wait"}
    current = manifest(snapshot)
    part = snapshot / current.generation / current.parts[0].name
    records = {r.entity_key: r for r in (KeyStateSnapshot.FromString(base64.b64decode(text))
                                         for text in part.read_bytes().splitlines())}
    assert {cell.name for cell in records[b"ann"].cells} >= {"waits", "queue", "seq"}

    two, errors = run(tmp_path / "two", day2, snapshot=snapshot, agent=agent)
    assert errors == []
    got = outputs(two)
    assert got["ann"] == [("refund", {"approved": True, "request": {"amount": 50}})]
    assert got["bob"] == [("refund", {"approved": False, "why": "no answer",
                                      "request": {"amount": 70}})]
    # cy's second wait (due at 30 s) is pending after both: one run that carries
    # state on decides every wait as the two did.
    whole, _ = run(tmp_path / "whole", day1 + day2, snapshot=tmp_path / "fresh", agent=agent)
    assert sorted(map(json.dumps, one + two)) == sorted(map(json.dumps, whole))


def test_without_a_snapshot_every_wait_times_out_by_the_end_of_the_run(tmp_path: Path) -> None:
    """The control: with nothing to carry the wait on, the input is all there is."""
    intents, _ = run(tmp_path / "one", [refund("ann", 1, 50), refund("cy", 5, 1)],
                     snapshot=None, agent="tests.agents:approval_agent")
    assert [kind for kind, _ in outputs(intents)["ann"]] == ["wait", "refund"]
