"""``--state_snapshot`` on the native Flink job: the batch snapshot, read and written by Flink.

The snapshot is the one ``beam-agents run`` reads and writes, so each test
hands it between the hosts: a run on one continues every key's seq, memory
and pending waits where a run on the other stopped, and the runs together
emit exactly what one Beam run over all the input emits. The helpers and
the agents are the Beam suite's (`tests.beam.test_state_snapshot`).

The Beam runs are ``beam-agents run`` in a process of their own, as a user
runs them: a process that has built a Flink job has imported PyFlink's worker,
which registers its own factory for Beam's ParDo and so breaks any DirectRunner
pipeline run in that process afterwards.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from beam_agents.errors import ConfigError
from beam_agents.flink import parse_args
from beam_agents.flink._snapshot import committed_parts, part_prefix
from beam_agents.hosting import KeyStateSnapshot, PartInfo
from tests.beam.test_state_snapshot import approve, line, manifest, outputs, refund
from tests.flink.conftest import REPO, part_lines, run_job

pytestmark = pytest.mark.timeout(400)


def beam_run(out: Path, lines: list[str], *, snapshot: Path | None,
             agent: str = "tests.agents:counter") -> tuple[list[dict], list[dict]]:
    """One ``beam-agents run`` over `lines` on the DirectRunner; its intents and dead letters."""
    out.mkdir(parents=True, exist_ok=True)
    source = out / "events.jsonl"
    source.write_text("\n".join(lines) + "\n")
    argv = [sys.executable, "-m", "beam_agents", "run", "--input_files", str(source),
            "--output_path", str(out / "intents.jsonl"), "--errors_path", str(out / "errors.jsonl"),
            "--agent", agent]
    if snapshot is not None:
        argv += ["--state_snapshot", str(snapshot)]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, f"beam-agents run exited {done.returncode}:\n{done.stderr[-3000:]}"
    read = lambda name: [json.loads(x) for x in (out / name).read_text().splitlines()]  # noqa: E731
    return read("intents.jsonl"), read("errors.jsonl")


def flink_run(out: Path, lines: list[str], *, snapshot: Path,
              agent: str = "tests.agents:counter") -> tuple[list[dict], list[dict], str]:
    """One run of the native Flink job over `lines`; its intents, dead letters and output."""
    out.mkdir(parents=True, exist_ok=True)
    source = out / "events.jsonl"
    source.write_text("\n".join(lines) + "\n")
    output = run_job(["templates/flink/agent_job.py", "--input_files", str(source),
                      "--output_path", str(out / "intents"), "--errors_path", str(out / "errors"),
                      "--agent", agent, "--state_snapshot", str(snapshot),
                      "--python_executable", sys.executable, "--parallelism", "2",
                      "--checkpointing_interval_ms", "1000"], log_dir=out / "flink-log")
    return ([json.loads(row) for row in part_lines(out / "intents")],
            [json.loads(row) for row in part_lines(out / "errors")], output)


def test_a_snapshot_carries_each_keys_state_from_beam_to_flink_and_back(tmp_path: Path) -> None:
    """Beam, then Flink, then Beam again over one snapshot emit what one Beam run emits.

    Flink reads the generation Beam wrote (continuing every key's seq and
    memory), carries on the keys it has no event for, and writes one that
    Beam continues in turn.
    """
    first = [line(f"k{k}", f"a{n}", 1_000 + n) for k in range(6) for n in range(3)]
    second = [line(f"k{k}", f"b{n}", 5_000 + n) for k in range(0, 6, 2) for n in range(2)]
    third = [line("k1", "c0", 9_000), line("k0", "c1", 9_001)]
    snapshot = tmp_path / "state"

    one, _ = beam_run(tmp_path / "one", first, snapshot=snapshot)
    two, errors, output = flink_run(tmp_path / "two", second, snapshot=snapshot)
    assert errors == []
    assert "keyed state from" in output and "6 key(s)" in output
    written = manifest(snapshot)
    assert (written.writer, written.keys) == ("flink", 6)
    assert all(part.name.startswith("part-s") for part in written.parts)
    later = {(row["entity_key"], row["event_id"]): json.loads(row["payload"]) for row in two}
    assert later[("k0", "b1")] == {"count": 5, "seq": 5, "seen": 3}
    three, _ = beam_run(tmp_path / "three", third, snapshot=snapshot)
    whole, _ = beam_run(tmp_path / "whole", first + second + third, snapshot=None)

    assert sorted(map(json.dumps, one + two + three)) == sorted(map(json.dumps, whole))
    assert manifest(snapshot).keys == 6


def test_a_pending_wait_outlives_a_flink_run_into_the_next(tmp_path: Path) -> None:
    """A wait due past the input's latest event time stays pending on Flink as on Beam.

    Day one ends at 5 s, before either deadline (11 s, 12 s): Flink runs no
    timeout, though its end of input is the end of its keyed state's time.
    Day two, on Beam, answers one wait and passes the other's deadline. The
    two equal one Beam run over both days.
    """
    agent, snapshot = "tests.agents:approval_agent", tmp_path / "state"
    day1 = [refund("ann", 1, 50), refund("bob", 2, 70), refund("cy", 5, 1)]
    day2 = [approve("ann", 8), refund("cy", 20, 2)]

    one, errors, _ = flink_run(tmp_path / "one", day1, snapshot=snapshot, agent=agent)
    assert errors == []
    assert {row["kind"] for row in one} == {"wait"}
    two, errors = beam_run(tmp_path / "two", day2, snapshot=snapshot, agent=agent)
    assert errors == []
    got = outputs(two)
    assert got["ann"] == [("refund", {"approved": True, "request": {"amount": 50}})]
    assert got["bob"] == [("refund", {"approved": False, "why": "no answer",
                                      "request": {"amount": 70}})]
    whole, _ = beam_run(tmp_path / "whole", day1 + day2, snapshot=tmp_path / "fresh", agent=agent)
    assert sorted(map(json.dumps, one + two)) == sorted(map(json.dumps, whole))


def test_a_corrupt_record_dead_letters_its_keys_events_on_flink_and_is_kept(
        tmp_path: Path) -> None:
    """Bad state never runs events and is never overwritten (invariant 8); other keys go on."""
    snapshot = tmp_path / "state"
    beam_run(tmp_path / "one", [line("good", "a", 1), line("bad", "a", 1)], snapshot=snapshot)
    current = manifest(snapshot)
    part = snapshot / current.generation / current.parts[0].name

    def spoil(text: bytes) -> bytes:
        record = KeyStateSnapshot.FromString(base64.b64decode(text))
        if record.entity_key == b"bad":  # a cell from a later version, unknown here
            record.cells.add(name="pending_waits_v9", blob=b"?")
        return base64.b64encode(record.SerializeToString())

    data = b"".join(spoil(text) + b"\n" for text in part.read_bytes().splitlines())
    part.write_bytes(data)
    doc = json.loads((snapshot / "MANIFEST").read_text())
    doc["parts"][0].update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    (snapshot / "MANIFEST").write_text(json.dumps(doc))

    intents, errors, _ = flink_run(
        tmp_path / "two", [line("good", "b", 2), line("bad", "b", 2), line("bad", "c", 3)],
        snapshot=snapshot)
    assert [json.loads(row["payload"])["seq"] for row in intents] == [2]
    assert sorted((e["stage"], e["event_id"]) for e in errors) == [
        ("STAGE_STATE_CORRUPT", "b"), ("STAGE_STATE_CORRUPT", "c")]
    assert all("pending_waits_v9" in e["message"] for e in errors)
    # The bad record goes on as it was, for a person to repair.
    kept = manifest(snapshot)
    assert kept.keys == 2
    records = [KeyStateSnapshot.FromString(base64.b64decode(text))
               for part_info in kept.parts
               for text in (snapshot / kept.generation / part_info.name).read_bytes().split()]
    assert any(cell.name == "pending_waits_v9" for record in records
               if record.entity_key == b"bad" for cell in record.cells)


def _info(name: str) -> PartInfo:
    return PartInfo(name=name, keys=1, size_bytes=1, sha256="0" * 64)


def test_a_commit_lists_each_subtasks_latest_attempt_only() -> None:
    """A failover rewrites a subtask's keys under a new attempt; its earlier parts are dropped.

    A subtask restored as finished writes nothing new, so its parts stay.
    """
    names = [f"{part_prefix(0, 0)}-x", f"{part_prefix(0, 1)}-y", f"{part_prefix(0, 1)}-z",
             f"{part_prefix(1, 0)}-w", "part-stray"]
    kept = [info.name for info in committed_parts(map(_info, names))]
    assert kept == [f"{part_prefix(0, 1)}-y", f"{part_prefix(0, 1)}-z", f"{part_prefix(1, 0)}-w"]


@pytest.mark.parametrize(("flags", "why"), [
    (["--event_order", "arrival"], "event_order event_time"),
    (["--input_kafka_topic", "t", "--kafka_bootstrap_servers", "localhost:1"], "input_files"),
])
def test_a_snapshot_the_job_could_not_keep_is_refused_naming_the_flag(
        tmp_path: Path, flags: list[str], why: str) -> None:
    """A snapshot needs a bounded input in event-time order: anything else is refused up front."""
    inputs = [] if "--input_kafka_topic" in flags else ["--input_files", str(tmp_path)]
    with pytest.raises(ConfigError, match=why) as raised:
        parse_args([*inputs, *flags, "--output_path", str(tmp_path / "o"), "--errors_path",
                    str(tmp_path / "e"), "--agent", "tests.agents:counter",
                    "--state_snapshot", str(tmp_path / "s")])
    assert raised.value.field == "state_snapshot"
