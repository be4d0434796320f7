"""The call journal on the DirectRunner: no model call is paid twice (invariant 9).

The agent is `examples.support_agent:agent` asking an OpenAI-compatible server
that runs in the test process and counts what it answers per request body.
Its conversation history carries earlier replies into later requests, so a
call paid twice (and answered differently the second time) changes every
later request and intent of that customer: byte-identical outputs are the
evidence that nothing was re-paid. The journal is a real SQLite file.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from apache_beam.metrics.metric import MetricsFilter

from beam_agents.beam import run
from beam_agents.hosting import error_from_json
from tests._http import LocalServer, chat_completion, send_json

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
LATENCY_S = 0.02  # per answer, so activations overlap and a kill lands mid-run


class _Provider:
    """An OpenAI-compatible server that counts the calls it answered per request body.

    ``per_body`` replies depend only on the body and how often that body was
    answered (``#1`` the first time): a clean run and a killed-then-rerun job
    write the same bytes exactly when no call was answered twice. Otherwise
    every reply carries a global call number, a provider that never answers
    the same way twice. Once `hold_after` calls are answered, later requests
    are held unanswered (not counted) until the server shuts down. Servers given
    one `answered` counter count as one provider.
    """

    def __init__(self, *, per_body: bool, answered: Counter[str] | None = None) -> None:
        self.per_body = per_body
        self.answered: Counter[str] = answered if answered is not None else Counter()
        self.hold_after: int | None = None
        self._changed = threading.Condition()
        self._release = threading.Event()
        self._server = LocalServer(self._handle, on_exit=self._release.set)
        self.url = self._server.url

    def _handle(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        text = self._answer(json.dumps(json.loads(body), sort_keys=True))
        if text is None:
            self._release.wait()
            handler.close_connection = True
            return
        time.sleep(LATENCY_S)
        send_json(handler, chat_completion(text))

    def _answer(self, body: str) -> str | None:
        with self._changed:
            total = self.total
            if self.hold_after is not None and total >= self.hold_after:
                return None
            self.answered[body] += 1
            self._changed.notify_all()
            if self.per_body:
                digest = hashlib.sha256(body.encode()).hexdigest()[:12]
                return f"answer {digest} #{self.answered[body]}"
            return f"answer #{total + 1}"

    @property
    def total(self) -> int:
        """Calls answered so far."""
        return sum(self.answered.values())

    def wait_for(self, calls: int, timeout_s: float) -> None:
        """Block until `calls` calls have been answered."""
        with self._changed:
            assert self._changed.wait_for(lambda: self.total >= calls, timeout_s), (
                f"the provider answered {self.total} call(s), never {calls}")

    def __enter__(self) -> _Provider:
        self._server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.__exit__(*exc)


@pytest.fixture
def every_call() -> Iterator[_Provider]:
    with _Provider(per_body=False) as provider:
        yield provider


def _events(path: Path, *, keys: int, per_key: int) -> int:
    # The customer is in the text, so no two customers send the same request body.
    lines = [json.dumps({"entity_key": f"cust-{k:02d}", "event_id": f"e{n:03d}",
                         "event_time_ms": 1_000 * n + k,
                         "payload": {"text": f"cust-{k:02d} asks question {n}"}})
             for n in range(per_key) for k in range(keys)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)


def _flags(out: Path, events: Path, provider: _Provider, journal: Path, *extra: str) -> list[str]:
    return ["--input_files", str(events), "--output_path", str(out / "intents.jsonl"),
            "--errors_path", str(out / "errors.jsonl"), "--agent", "examples.support_agent:agent",
            "--model_provider", "openai", "--model_base_url", provider.url, "--model_id", "m",
            "--call_journal", "sqlite", "--call_journal_path", str(journal), *extra]


def _cli(flags: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "beam_agents", "run", *flags], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _finish(job: subprocess.Popen[str]) -> str:
    stdout, stderr = job.communicate(timeout=240)
    assert job.returncode == 0, stderr[-4000:]
    return stdout


def _summary(stdout: str, label: str) -> int:
    line = next(line for line in stdout.splitlines() if line.strip().startswith(label))
    return int(line.split()[-1])


def _journal_rows(journal: Path) -> int:
    if not journal.exists():
        return 0
    connection = sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=5)
    try:
        return int(connection.execute("SELECT COUNT(*) FROM call_journal").fetchone()[0])
    except sqlite3.OperationalError:  # the table is not created yet
        return 0
    finally:
        connection.close()


def _wait_for_rows(journal: Path, rows: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while _journal_rows(journal) < rows:
        assert time.monotonic() < deadline, f"the journal never held {rows} row(s)"
        time.sleep(0.01)


def _outputs(out: Path) -> tuple[bytes, bytes]:
    return (out / "intents.jsonl").read_bytes(), (out / "errors.jsonl").read_bytes()


def _counters(result: Any) -> Counter[str]:
    counters: Counter[str] = Counter()
    for item in result.metrics().query(MetricsFilter())["counters"]:
        counters[f"{item.key.metric.namespace}:{item.key.metric.name}"] += item.committed or 0
    return counters


def test_a_rerun_after_sigkill_pays_no_journaled_call_and_writes_the_clean_bytes(
        tmp_path: Path) -> None:
    """Calls answered over both runs == distinct requests; the rerun's outputs == a clean run's."""
    events = tmp_path / "events.jsonl"
    count = _events(events, keys=20, per_key=15)

    with _Provider(per_body=True) as clean:
        stdout = _finish(_cli(_flags(tmp_path / "clean", events, clean,
                                     tmp_path / "clean.sqlite")))
        distinct = len(clean.answered)
        assert clean.total == distinct == count  # one call per event, none repeated
        assert _summary(stdout, "model calls paid") == distinct
    clean_outputs = _outputs(tmp_path / "clean")
    assert clean_outputs[0].count(b"\n") == count and clean_outputs[1] == b""

    journal = tmp_path / "calls.sqlite"
    with _Provider(per_body=True) as killed:
        # Half the calls are answered; later requests are held, and the job is
        # killed once every answered call is in the journal. A call answered
        # but not yet journaled when a process dies is paid again by design:
        # no journal can record a response its writer never received.
        killed.hold_after = distinct // 2
        job = _cli(_flags(tmp_path / "killed", events, killed, journal))
        try:
            killed.wait_for(killed.hold_after, timeout_s=180)
            _wait_for_rows(journal, killed.hold_after, timeout_s=60)
        finally:
            os.killpg(job.pid, signal.SIGKILL)
            job.communicate(timeout=30)
        assert job.returncode == -signal.SIGKILL
        paid_before_kill = killed.total
        assert paid_before_kill == distinct // 2
        assert not (tmp_path / "killed" / "intents.jsonl").exists()

    # The rerun asks a server of its own that counts into the same tally, so
    # requests of the dead job still queued at the first one stay held there:
    # none is answered, to nobody, once the hold would have lifted.
    with _Provider(per_body=True, answered=killed.answered) as provider:
        stdout = _finish(_cli(_flags(tmp_path / "rerun", events, provider, journal)))
        assert provider.total == distinct
        assert set(provider.answered) == set(clean.answered)
        assert set(provider.answered.values()) == {1}
    assert _summary(stdout, "model calls paid") == distinct - paid_before_kill
    assert _summary(stdout, "replayed from journal") == paid_before_kill
    assert _outputs(tmp_path / "rerun") == clean_outputs


def test_a_rerun_over_the_journal_replays_a_nondeterministic_provider_byte_identically(
        every_call: _Provider, tmp_path: Path) -> None:
    """The second run pays 0 calls, replays every one, diverges 0 times; intents are identical."""
    events = tmp_path / "events.jsonl"
    count = _events(events, keys=6, per_key=5)
    journal = tmp_path / "calls.sqlite"

    first = _counters(run(_flags(tmp_path / "first", events, every_call, journal)))
    assert every_call.total == first["beam_agents.model:provider_calls"] == count
    # A second run starts from empty keyed state: the replay cache is gone, as
    # after a restore that lost it; only the journal remembers the answers.
    second = _counters(run(_flags(tmp_path / "second", events, every_call, journal)))
    assert every_call.total == count
    assert second["beam_agents.model:provider_calls"] == 0
    assert second["beam_agents.model:journal_hits"] == count
    assert second["beam_agents.model:replay_divergence"] == 0
    assert _outputs(tmp_path / "second") == _outputs(tmp_path / "first")

    # The control: without the journal this provider does change the bytes.
    _ = run(_flags(tmp_path / "unjournaled", events, every_call, journal)[:-4])
    assert every_call.total == 2 * count
    assert _outputs(tmp_path / "unjournaled")[0] != _outputs(tmp_path / "first")[0]


def test_an_unreachable_journal_dead_letters_retriable_and_the_pipeline_finishes(
        tmp_path: Path) -> None:
    """Every event ends as a retriable STAGE_JOURNAL dead letter after max_attempts."""
    events = tmp_path / "events.jsonl"
    count = _events(events, keys=5, per_key=3)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    out = tmp_path / "out"
    result = run(["--input_files", str(events), "--output_path", str(out / "intents.jsonl"),
                  "--errors_path", str(out / "errors.jsonl"),
                  "--agent", "examples.support_agent:agent",
                  "--call_journal", "sqlite",
                  "--call_journal_path", str(blocker / "journal" / "calls.sqlite"),
                  "--max_attempts", "2", "--retry_initial_ms", "1", "--retry_max_ms", "2"])

    intents, errors = _outputs(out)
    lines = errors.decode().splitlines()
    assert intents.count(b"\n") + len(lines) == count
    assert intents == b""
    for line in lines:
        record = json.loads(line)
        assert record["retriable"] is True
        assert record["stage"] == "STAGE_JOURNAL"
        assert error_from_json(line.encode()).attempts == 2
    assert _counters(result)["beam_agents.model:provider_calls"] == 0
