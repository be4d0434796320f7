"""The native Flink job streaming from a Kafka topic to Kafka topics, on a real broker.

One job (``templates/flink/agent_job.py`` with the Kafka flags, on a local
MiniCluster, parallelism 2 over two partitions) runs for the module. Events
arrive out of order within ``--max_out_of_orderness_ms``, with bad records
among them; one watermark event per partition then moves event time past
them all. Its outputs are read back with ``read_committed`` consumers:

- intents equal, byte for byte, what the Beam batch pipeline writes for the
  same events (each key's events in event-time order, invariant 10), once
  each, keyed by entity key;
- every bad record is a DECODE dead letter with its stage and its bytes as headers;
- an event that arrives behind the watermark becomes a LATE dead letter
  (``--late_events dead_letter``), keyed by its entity.

It also shows that flink-sql-connector-kafka 5.0.0-2.2 (the newest, built
for Flink 2.2) runs on PyFlink 2.3.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from beam_agents.beam import run as run_beam
from beam_agents.hosting import error_from_json
from tests._kafka import consume, produce
from tests.flink.conftest import background_job, job_env, kafka_job, kafka_topics

pytestmark = pytest.mark.timeout(420)

KEYS = [f"k{n}" for n in range(6)]
EVENTS_PER_KEY = 12
BASE_MS = 1_700_000_000_000
DISORDER_MS = 5_000
#: Far enough ahead that the watermark passes every event above.
CLOCK_MS = BASE_MS + 10_000_000
PARTITIONS = 2
MAX_EVENT_BYTES = 1024
BAD_RECORDS = [b"not json at all", b'\xff\xfe{"entity_key": "k0"}',
               json.dumps({"entity_key": "k1", "event_id": "big", "event_time_ms": BASE_MS,
                           "payload": "x" * 2000}).encode()]


def _event(key: str, n: int) -> bytes:
    return json.dumps({"entity_key": key, "event_id": f"{key}-{n}",
                       "event_time_ms": BASE_MS + 1_000 * n, "payload": f"note {n}"},
                      sort_keys=True).encode()


def _clock(partition: int, at_ms: int) -> bytes:
    """An event whose only job is to move its partition's event time (it stays held)."""
    return json.dumps({"entity_key": f"~clock-{partition}", "event_id": f"clock-{at_ms}",
                       "event_time_ms": at_ms, "payload": "tick"}).encode()


@dataclass
class Outputs:
    topics: dict[str, str]
    events: list[bytes]
    intents: list[tuple[bytes | None, bytes, dict[str, bytes]]]
    errors: list[tuple[bytes | None, bytes, dict[str, bytes]]]
    late: list[tuple[bytes | None, bytes, dict[str, bytes]]]


@pytest.fixture(scope="module")
def outputs(kafka_broker: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outputs]:
    work = tmp_path_factory.mktemp("kafka-job")
    name, topics = kafka_topics(kafka_broker, partitions=PARTITIONS)
    events = [_event(key, n) for n in range(EVENTS_PER_KEY) for key in KEYS]
    # Out of order within the disorder the watermark waits for: each event
    # moves at most four places (4 s of event time) from its place.
    shuffled = list(events)
    rng = random.Random(7)
    for index in range(0, len(shuffled) - 4, 3):
        window = shuffled[index:index + 4]
        rng.shuffle(window)
        shuffled[index:index + 4] = window
    produce(kafka_broker, topics["events"], shuffled,
            keys=[json.loads(line)["entity_key"].encode() for line in shuffled])
    produce(kafka_broker, topics["events"], BAD_RECORDS)
    for partition in range(PARTITIONS):
        produce(kafka_broker, topics["events"], [_clock(partition, CLOCK_MS)], partition=partition)
    command = kafka_job(kafka_broker, name, topics,
                        "--max_out_of_orderness_ms", str(DISORDER_MS), "--idle_timeout_ms", "2000",
                        "--late_events", "dead_letter", "--max_event_bytes", str(MAX_EVENT_BYTES),
                        "--agent", "tests.agents:counter", "--checkpointing_interval_ms", "500",
                        "--parallelism", str(PARTITIONS))
    with background_job(command, env=job_env(), log_dir=work / "flink-log"):
        intents = consume(kafka_broker, topics["intents"], expect=len(events), timeout_s=300,
                          settle_s=3)
        errors = consume(kafka_broker, topics["errors"], expect=len(BAD_RECORDS), timeout_s=60)
        assert len(intents) == len(events), f"{len(intents)} intents of {len(events)}"
        # Now the watermark is past every event: one more for k0, from its past, is late.
        late_event = json.dumps({"entity_key": "k0", "event_id": "late", "payload": "late",
                                 "event_time_ms": BASE_MS + 500}).encode()
        produce(kafka_broker, topics["events"], [late_event], keys=[b"k0"])
        late = [record for record in consume(kafka_broker, topics["errors"],
                                             expect=len(BAD_RECORDS) + 1, timeout_s=120)
                if record[2].get("stage") == b"STAGE_LATE"]
    yield Outputs(topics, events, intents, errors, late)


def _beam_intents(tmp_path: Path, events: list[bytes]) -> list[bytes]:
    source = tmp_path / "events.jsonl"
    source.write_bytes(b"\n".join(events) + b"\n")
    run_beam(["--input_files", str(source), "--output_path", str(tmp_path / "intents.jsonl"),
              "--errors_path", str(tmp_path / "errors.jsonl"), "--agent", "tests.agents:counter"])
    return sorted((tmp_path / "intents.jsonl").read_bytes().splitlines())


def test_intents_from_kafka_equal_the_beam_pipelines_once_each_keyed_by_entity(
        outputs: Outputs, tmp_path: Path) -> None:
    """Every event's intent is committed once, as the batch pipeline writes it."""
    values = sorted(value for _, value, _ in outputs.intents)
    assert len(set(values)) == len(values), "an intent was committed twice"
    assert values == _beam_intents(tmp_path, outputs.events)
    for key, value, _ in outputs.intents:
        assert key == json.loads(value)["entity_key"].encode()


def test_each_keys_events_run_in_event_time_order_despite_the_disorder(outputs: Outputs) -> None:
    """Each key's seqs run 1..N in the order of its events' event times."""
    by_key: dict[str, list[tuple[int, str]]] = {}
    for _, value, _ in outputs.intents:
        intent = json.loads(value)
        by_key.setdefault(intent["entity_key"], []).append((intent["seq"], intent["event_id"]))
    for key, runs in by_key.items():
        runs.sort()
        assert [seq for seq, _ in runs] == list(range(1, EVENTS_PER_KEY + 1))
        assert [event for _, event in runs] == [f"{key}-{n}" for n in range(EVENTS_PER_KEY)]
    assert sorted(by_key) == KEYS  # the clock events stay held: the watermark never passes them


def test_bad_records_on_the_topic_are_decode_dead_letters_with_stage_and_event_headers(
        outputs: Outputs) -> None:
    """A record that is not JSON, not UTF-8 or oversize is a DECODE dead letter, never a crash."""
    decode = [(key, error_from_json(value), headers) for key, value, headers in outputs.errors
              if headers.get("stage") == b"STAGE_DECODE"]
    assert len(decode) == len(BAD_RECORDS)
    found = {headers["event"] for _, _, headers in decode}
    assert found == set(BAD_RECORDS)
    for key, record, headers in decode:
        assert key is None and headers["event"] == record.event


def test_an_event_behind_the_watermark_is_a_late_dead_letter_keyed_by_its_entity(
        outputs: Outputs) -> None:
    """With --late_events dead_letter, a late event is a LATE dead letter, not an activation."""
    assert len(outputs.late) == 1
    key, value, headers = outputs.late[0]
    record = error_from_json(value)
    assert key == b"k0" and record.event_id == "late"
    assert headers["event"] == record.event
