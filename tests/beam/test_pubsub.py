"""Pub/Sub end to end on the official emulator: input topic -> streaming pipeline -> output topics.

`beam-agents run` runs as a user runs it, in its own process, on the local
runner, against the Cloud SDK's Pub/Sub emulator. Every message published
must come out as an intent or a dead letter, with the attributes a
subscriber filters on; a run stopped with SIGINT mid-stream must end every
message it pulled and leave the rest in the subscription; and `beam-agents
errors redrive` must put dead letters back on the input topic.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from google.api_core.exceptions import DeadlineExceeded

from beam_agents.beam._pubsub import ATTRIBUTE_VALUE_BYTES, attributes_of
from beam_agents.cli import main
from beam_agents.hosting import error_from_json
from tests._emulators import PUBSUB, Emulator, EmulatorError

pytestmark = pytest.mark.timeout(240)

pubsub_v1 = pytest.importorskip("google.cloud.pubsub_v1", reason="needs the gcp extra")

PROJECT = "beam-agents-test"
REPO = Path(__file__).resolve().parents[2]

#: Lines that must each become one DECODE dead letter (an empty body cannot be
#: published without attributes, so it goes with one).
HOSTILE = [b"\xff\xfe{}", b"not json at all", b'{"entity_key": "c1", "event_time_ms": "soon"}',
           b"[1, 2, 3]", b'{"entity_key": "c1", "event_time_ms": 5, "colour": "red"}',
           b"x" * (1024 * 1024 + 10)]


@pytest.fixture(scope="module")
def emulator() -> Iterator[str]:
    """The official Pub/Sub emulator; these tests fail, never skip, when it cannot start."""
    server = Emulator(PUBSUB)
    try:
        host = server.start()
    except EmulatorError as exc:
        pytest.fail(f"the Pub/Sub emulator is required and could not start: {exc}",
                    pytrace=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(PUBSUB.host_env, host)
        yield host
    server.stop()


@dataclass
class Route:
    """An input topic with its subscription, and the two output topics with theirs."""

    host: str
    name: str = field(default_factory=lambda: uuid.uuid4().hex[:8])

    def __post_init__(self) -> None:
        self.publisher = pubsub_v1.PublisherClient()
        self.subscriber = pubsub_v1.SubscriberClient()
        for part in ("input", "intents", "errors"):
            topic = self.topic(part)
            self.publisher.create_topic(name=topic)
            self.subscriber.create_subscription(name=self.subscription(part), topic=topic)

    def topic(self, part: str) -> str:
        return f"projects/{PROJECT}/topics/{part}-{self.name}"

    def subscription(self, part: str) -> str:
        return f"projects/{PROJECT}/subscriptions/{part}-{self.name}"

    def publish(self, data: bytes, **attributes: str) -> None:
        self.publisher.publish(self.topic("input"), data, **attributes).result()

    def pull(self, part: str, *, timeout_s: float = 2.0) -> list[pubsub_v1.types.PubsubMessage]:
        """Everything in `part`'s subscription now, acknowledged."""
        out: list[pubsub_v1.types.PubsubMessage] = []
        while True:
            try:
                response = self.subscriber.pull(subscription=self.subscription(part),
                                                max_messages=100, timeout=timeout_s)
            except DeadlineExceeded:  # an empty subscription
                return out
            if not response.received_messages:
                return out
            out.extend(item.message for item in response.received_messages)
            self.subscriber.acknowledge(subscription=self.subscription(part),
                                        ack_ids=[item.ack_id for item in
                                                 response.received_messages])

    def run_flags(self, *extra: str) -> list[str]:
        return ["--input_subscription", self.subscription("input"),
                "--output_topic", self.topic("intents"), "--errors_topic", self.topic("errors"),
                "--agent", "tests.agents:reply_once", *extra]


def _event(key: str, n: int) -> bytes:
    return json.dumps({"entity_key": key, "event_id": f"{key}-e{n:02d}",
                       "event_time_ms": 1_000_000 + 1_000 * n,
                       "payload": {"text": f"note {n} of {key}"}}).encode()


def _start(route: Route, *flags: str) -> subprocess.Popen[str]:
    env = {**os.environ, PUBSUB.host_env: route.host, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "beam_agents", "run", *route.run_flags(*flags)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)


def _stop(process: subprocess.Popen[str], *, timeout_s: float = 90) -> str:
    """SIGINT, as Ctrl-C sends it; returns the output once the run has ended."""
    process.send_signal(signal.SIGINT)
    try:
        output, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"the run did not end within {timeout_s}s of SIGINT:\n{output[-3000:]}")
    assert process.returncode == 0, output[-3000:]
    return output


@dataclass
class Outcomes:
    intents: list[pubsub_v1.types.PubsubMessage] = field(default_factory=list)
    errors: list[pubsub_v1.types.PubsubMessage] = field(default_factory=list)

    def collect(self, route: Route) -> None:
        self.intents += route.pull("intents", timeout_s=0.5)
        self.errors += route.pull("errors", timeout_s=0.5)

    @property
    def count(self) -> int:
        return len(self.intents) + len(self.errors)


def _await_outcomes(route: Route, process: subprocess.Popen[str], expected: int, *,
                    timeout_s: float = 120, outcomes: Outcomes | None = None) -> Outcomes:
    outcomes = outcomes or Outcomes()
    goal = outcomes.count + expected
    deadline = time.monotonic() + timeout_s
    while outcomes.count < goal and time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[0][-3000:]
        outcomes.collect(route)
    return outcomes


def test_every_published_message_comes_out_as_an_intent_or_a_dead_letter_with_attributes(
        emulator: str, tmp_path: Path) -> None:
    route = Route(emulator)
    keys = [f"c{k}" for k in range(4)]
    good = [_event(key, n) for n in range(5) for key in keys]  # each key in event-time order
    process = _start(route, "--model_latency_ms", "20", "--model_outage", "2:2",
                     "--retry_initial_ms", "5", "--retry_max_ms", "10")
    for line in good[:10]:
        route.publish(line)
    outcomes = _await_outcomes(route, process, 10)
    time.sleep(2)  # the run goes quiet: the local runner tears its DoFns down
    for line in HOSTILE + good[10:]:
        route.publish(line)
    route.publish(b"", note="an empty body")
    published = len(good) + len(HOSTILE) + 1
    outcomes = _await_outcomes(route, process, published - outcomes.count, outcomes=outcomes)
    output = _stop(process)
    outcomes.collect(route)
    # One runtime for the whole run: the outage (calls 2 and 3) happened once.
    failed = next(line for line in output.splitlines() if "model calls failed" in line)
    assert failed.split()[-1] == "2", output[-3000:]

    assert outcomes.count == published, output[-3000:]
    assert len(outcomes.intents) == len(good)
    decode = [m for m in outcomes.errors if m.attributes["stage"] == "STAGE_DECODE"]
    assert len(decode) == len(outcomes.errors) == len(HOSTILE) + 1
    for message in outcomes.errors:
        assert message.attributes == attributes_of(message.data, "errors")
        assert message.attributes["retriable"] == "false"
    seqs: defaultdict[str, list[tuple[int, str]]] = defaultdict(list)
    for message in outcomes.intents:
        body = json.loads(message.data)
        assert message.attributes == {"entity_key": body["entity_key"],
                                      "event_id": body["event_id"], "seq": str(body["seq"])}
        seqs[body["entity_key"]].append((body["seq"], body["event_id"]))
    for key in keys:  # seqs per key follow event time
        assert [event for _, event in sorted(seqs[key])] == [
            f"{key}-e{n:02d}" for n in range(5)]
    # The same events through the batch path give the same intents, byte for byte.
    events = tmp_path / "events.jsonl"
    events.write_bytes(b"\n".join(good) + b"\n")
    out = tmp_path / "intents.jsonl"
    assert main(["run", "--input_files", str(events), "--output_path", str(out),
                 "--errors_path", str(tmp_path / "errors.jsonl"),
                 "--agent", "tests.agents:reply_once", "--model_latency_ms", "1"]) == 0
    assert sorted(m.data for m in outcomes.intents) == out.read_bytes().splitlines()


def test_a_run_stopped_mid_stream_ends_what_it_pulled_and_leaves_the_rest(emulator: str) -> None:
    route = Route(emulator)
    events = [_event(f"k{n % 8}", n) for n in range(80)]
    process = _start(route, "--model_latency_ms", "200", "--max_in_flight", "4")
    for line in events[:40]:
        route.publish(line)
    outcomes = _await_outcomes(route, process, 8)  # the run is under way
    for line in events[40:]:
        route.publish(line)
    output = _stop(process)
    outcomes.collect(route)
    left = route.pull("input")

    ended = Counter(json.loads(m.data)["event_id"] for m in outcomes.intents)
    assert outcomes.errors == [], output[-3000:]
    assert max(ended.values()) == 1
    assert len(left) > 0, "the stop came after the whole stream was pulled: nothing was tested"
    assert len(ended) + len(left) == len(events), output[-3000:]
    assert {json.loads(m.data)["event_id"] for m in left}.isdisjoint(ended)
    assert "no more pulls" in output
    last = [line for line in output.splitlines() if line.startswith("progress ")][-1]
    figures = dict(part.split("=") for part in last.split()[1:])
    assert int(figures["pulled"]) == int(figures["ended"]) == len(ended), last
    assert figures["in_flight"] == figures["queued"] == "0", last
    committed = next(line for line in output.splitlines() if "activations committed" in line)
    assert int(committed.split()[-1]) == len(ended), committed  # timers' counts included


def test_redrive_puts_dead_letters_back_on_the_input_topic_and_dry_run_counts_them(
        emulator: str, capsys: pytest.CaptureFixture[str]) -> None:
    route = Route(emulator)
    dead = [_event("r1", 1), b"not json", b'{"entity_key": "r2"}']
    from beam_agents.hosting import decode_input, error_to_json  # noqa: PLC0415
    records = [error_to_json(decode_input(line, "json", max_event_bytes=1 << 20))
               for line in dead[1:]]
    for record in records:
        route.publisher.publish(route.topic("errors"), record).result()
    flags = ["errors", "redrive", "--subscription", route.subscription("errors"),
             "--topic", route.topic("input")]

    assert main([*flags, "--dry_run"]) == 0
    assert "would redrive 2 dead letter(s)" in capsys.readouterr().err
    assert route.pull("input", timeout_s=0.5) == []

    assert main(flags) == 0
    assert "redrove 2 dead letter(s)" in capsys.readouterr().err
    assert sorted(m.data for m in route.pull("input")) == sorted(dead[1:])
    assert route.pull("errors", timeout_s=0.5) == []


def test_attributes_name_a_long_key_by_its_digest() -> None:
    key = "k" * (ATTRIBUTE_VALUE_BYTES + 1)
    line = json.dumps({"entity_key": key, "event_id": "e1", "seq": 3}).encode()
    attributes = attributes_of(line, "intents")
    assert "entity_key" not in attributes
    assert len(attributes["entity_key_sha256"]) == 64
    record = error_from_json(json.dumps({
        "stage": "STAGE_MODEL", "error_type": "x", "message": "m", "traceback": "",
        "retriable": True, "seq": 1, "event_id": "e", "entity_key_b64": "/w=="}))
    assert record.entity_key == b"\xff"
    assert attributes_of(json.dumps({"stage": "STAGE_MODEL", "retriable": True, "event_id": "e",
                                     "entity_key_b64": "/w=="}).encode(), "errors") == {
        "stage": "STAGE_MODEL", "retriable": "true", "event_id": "e", "entity_key_b64": "/w=="}
