"""The Beam pipeline from Kafka to Kafka on Beam's FlinkRunner: `beam-agents run`, for real.

The commands are docs/streaming.md's ("Beam on Kafka"): the job server with
Beam's KafkaIO on its classpath and its embedded Flink, a standalone
expansion service on the same classpath (EMBEDDED environment, the read as an
unbounded source), a real broker (tests/_kafka.py), and ``beam-agents run
--runner=FlinkRunner --streaming`` with checkpoints, the SDK worker in its
own process (LOOPBACK). The job never ends by itself: once its outputs are
complete it is cancelled through the job service, and the run exits 0.

The input is the main job's sample, a few bad records and one record with
a ``traceparent`` header, each keyed by its entity and stamped with its
event's time (KafkaIO's CreateTime), over two partitions. The sample is
shuffled in event time (4.3 h at most), so ``--max_out_of_orderness_ms``
covers that: every event waits in its key's queue until the watermark
passes it, which happens once the reader has caught up and KafkaIO moves the
watermark to the wall clock. Each key then runs its events in event-time
order, as the batch path does, so the committed outputs, read with
``read_committed`` consumers, are the DirectRunner's lines for the same
input from a file, byte for byte.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from beam_agents.beam import run as run_beam
from beam_agents.hosting import error_from_json
from beam_agents.runtime import ErrorRecord
from tests._kafka import consume, kafka_topics, produce
from tests.portable.conftest import KafkaJobServices, python_env
from tests.portable.test_flink_runner import AGENT, REPO, SAMPLE

pytestmark = pytest.mark.timeout(900)

MAX_EVENT_BYTES = 65_536
#: Each a DECODE dead letter, whose message names its problem.
BAD_RECORDS = {
    b'\xff\xfe{"entity_key": "c9"}': "UTF-8",
    b"this record is not JSON": "not JSON",
    json.dumps({"entity_key": "c9", "event_id": "big", "event_time_ms": 1,
                "payload": {"text": "x" * MAX_EVENT_BYTES}}).encode(): "max_event_bytes",
}
#: One event that comes with its producer's trace context as a record header.
TRACED_KEY = "kafka-traced"
TRACEPARENT = f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01"
#: A record with no event time of its own is stamped 1 ms after the epoch: it
#: holds no partition's event time back, and none ahead (0 is "now" to the client).
NO_TIME_MS = 1
PARTITIONS = 2
#: The longest the job may take to commit every outcome, on a busy machine.
OUTCOMES_TIMEOUT_S = 480


def _event_time(line: bytes) -> int | None:
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    time_ms = doc.get("event_time_ms") if isinstance(doc, dict) else None
    return time_ms if isinstance(time_ms, int) and time_ms > 0 else None


def _entity(line: bytes) -> bytes | None:
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    key = doc.get("entity_key") if isinstance(doc, dict) else None
    return key.encode() if isinstance(key, str) else None


def _disorder_ms(stamps: list[int]) -> int:
    """How far a record's time falls behind the latest time before it, at most."""
    latest = worst = 0
    for stamp in stamps:
        worst = max(worst, latest - stamp)
        latest = max(latest, stamp)
    return worst


def _outcome_ids(intents: list[bytes], errors: list[bytes]) -> tuple[dict[str, set[int]],
                                                                    Counter[str]]:
    """Each event's seqs among the intents, and its count among the dead letters."""
    seqs: defaultdict[str, set[int]] = defaultdict(set)
    for line in intents:
        intent = json.loads(line)
        seqs[f"{intent['entity_key']}/{intent['event_id']}"].add(intent["seq"])
    dead = Counter(f"{record.entity_key.decode()}/{record.event_id}"
                   for record in map(error_from_json, errors) if record.event_id)
    return dict(seqs), dead


def test_beam_agents_run_streams_kafka_to_kafka_on_the_flink_runner_as_the_direct_runner_does(
        kafka_broker: str, kafka_job_services: KafkaJobServices, tmp_path: Path) -> None:
    """Every event ends once (committed intents or one dead letter), as the batch path writes it."""
    sample = SAMPLE.read_bytes().splitlines()
    lines = sample + list(BAD_RECORDS)
    latest_ms = max(filter(None, map(_event_time, sample)))
    traced = json.dumps({"entity_key": TRACED_KEY, "event_id": "traced",
                         "event_time_ms": latest_ms, "payload": {"text": "hello"}}).encode()

    # The DirectRunner's lines for the same input, from a file.
    source = tmp_path / "events.jsonl"
    source.write_bytes(b"".join(line + b"\n" for line in lines))
    direct = tmp_path / "direct"
    run_beam(["--runner=DirectRunner", f"--input_files={source}",
              f"--output_path={direct / 'intents.jsonl'}",
              f"--errors_path={direct / 'errors.jsonl'}", *AGENT,
              f"--max_event_bytes={MAX_EVENT_BYTES}"])
    expected_intents = sorted((direct / "intents.jsonl").read_bytes().splitlines())
    expected_errors = sorted((direct / "errors.jsonl").read_bytes().splitlines())

    # Records months old: the broker's retention (7 days by record time) would drop them.
    name, topics = kafka_topics(kafka_broker, partitions=PARTITIONS,
                                config={"retention.ms": "-1"})
    records = [*lines, traced]
    stamps = [_event_time(line) or NO_TIME_MS for line in records]
    produce(kafka_broker, topics["events"], records, keys=[_entity(line) for line in records],
            timestamps=stamps,
            headers=[{"traceparent": TRACEPARENT.encode()} if line == traced else {}
                     for line in records])
    disorder_ms = _disorder_ms([stamp for stamp in stamps if stamp != NO_TIME_MS]) + 60_000
    assert disorder_ms <= 86_400_000, "the sample's disorder outgrew what the flag allows"

    command = [sys.executable, "-m", "beam_agents", "run",
               "--runner=FlinkRunner", f"--job_endpoint={kafka_job_services.job_endpoint}",
               "--environment_type=LOOPBACK", "--streaming", "--checkpointing_interval=500",
               f"--parallelism={PARTITIONS}",
               f"--input_kafka_topic={topics['events']}",
               f"--output_kafka_topic={topics['intents']}",
               f"--errors_kafka_topic={topics['errors']}",
               f"--kafka_bootstrap_servers={kafka_broker}", f"--kafka_group_id=run-{name}",
               "--kafka_starting_offsets=earliest",
               f"--kafka_expansion_service={kafka_job_services.expansion_service}",
               *AGENT, f"--max_event_bytes={MAX_EVENT_BYTES}",
               f"--max_out_of_orderness_ms={disorder_ms}"]
    log_path = tmp_path / "run.log"
    with log_path.open("w") as log:
        job = subprocess.Popen(command, cwd=REPO, env=python_env(), stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)

    def running() -> None:
        if job.poll() is not None:
            pytest.fail(f"beam-agents run ended with {job.returncode} before its outputs were "
                        f"in:\n{log_path.read_text()[-3000:]}\n{kafka_job_services.log_tail()}",
                        pytrace=False)

    try:
        started = time.monotonic()
        intents = consume(kafka_broker, topics["intents"], expect=len(expected_intents) + 1,
                          timeout_s=OUTCOMES_TIMEOUT_S, settle_s=5, between_polls=running)
        errors = consume(kafka_broker, topics["errors"], expect=len(expected_errors),
                         timeout_s=max(60.0, OUTCOMES_TIMEOUT_S - (time.monotonic() - started)),
                         settle_s=5, between_polls=running)
        states = kafka_job_services.cancel_jobs()
        code = job.wait(timeout=120)
    finally:
        if job.poll() is None:
            with contextlib.suppress(Exception):  # the failure above says more
                kafka_job_services.cancel_jobs()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job.pid, signal.SIGKILL)
            job.wait(timeout=30)
    output = log_path.read_text()
    assert states == ["CANCELLED"], f"{states}\n{kafka_job_services.log_tail()}"
    assert code == 0, f"a cancelled run is a stop, not a failure:\n{output[-3000:]}"
    assert "the job was cancelled" in output, output[-3000:]

    traced_intents = [value for key, value, _ in intents if key == TRACED_KEY.encode()]
    intent_lines = sorted(value for key, value, _ in intents if key != TRACED_KEY.encode())
    error_lines = sorted(value for _, value, _ in errors)
    assert (len(intent_lines), len(error_lines)) == (len(expected_intents), len(expected_errors))
    assert intent_lines == expected_intents
    assert error_lines == expected_errors

    # Each event once: one activation's intents, or one dead letter, never both.
    seqs, dead = _outcome_ids(intent_lines, error_lines)
    assert all(len(found) == 1 for found in seqs.values()), "an event ran twice"
    assert set(dead.values()) <= {1} and not set(dead) & set(seqs)
    # Keyed by entity; a dead letter without one has a null key.
    for key, value, _ in intents:
        assert key == json.loads(value)["entity_key"].encode()
    for key, value, _ in errors:
        record = error_from_json(value)
        assert key == (record.entity_key or None)

    decode = [record for record in map(error_from_json, error_lines)
              if record.stage == ErrorRecord.STAGE_DECODE]
    for bad, problem in BAD_RECORDS.items():
        # An oversize record keeps its size and a prefix of its bytes.
        (record,) = [found for found in decode if found.event == bad or (
            found.event_bytes == len(bad) and bad.startswith(found.event))]
        assert problem in record.message, record.message

    (traced_intent,) = traced_intents
    assert json.loads(traced_intent)["traceparent"] == TRACEPARENT
