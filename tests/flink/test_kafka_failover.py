"""Exactly once from Kafka to Kafka through a TaskManager killed mid-stream.

The job (``templates/flink/agent_job.py`` on Kafka, parallelism 2) runs on the
standalone cluster with checkpoints every second, the call journal and
long-term rows in SQLite, and an agent that asks a model (an
OpenAI-compatible server in this process, which counts every call) about
each event. Events are published at a steady rate. Once intents are
committed, the task managers that run the job are SIGKILLed with their Python
workers, as a lost machine or container takes them, and replaced, as a
supervisor would; Flink restores the last checkpoint and replays the topic
from its offsets. Then, read with ``read_committed``:

- each event's intent is there exactly once, byte-identical to the Beam
  pipeline's for the same events, and each key's seqs run 1..N without a gap
  or a repeat;
- the long-term rows equal the fault-free run's (invariant 5's seq guard);
- calls paid are at most the fault-free run's plus those in flight at the
  kill (paid and not yet journaled then; the journal replays the rest).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
import uuid
from pathlib import Path

import pytest

from beam_agents.beam import run as run_beam
from beam_agents.stores import SqliteLongtermConfig
from tests._flink_cluster import FlinkCluster, kill_tree
from tests._kafka import client_config, connector_jar, consume, create_topics, produce
from tests.flink.conftest import (
    FLINK_HOME,
    REPO,
    cancel_jobs,
    job_task_manager_pids,
    replace_lost_task_managers,
    store_rows,
    submit_detached,
)
from tests.flink.test_journal_failover import _Provider

pytestmark = pytest.mark.timeout(600)

KEYS = [f"customer-{n}" for n in range(8)]
EVENTS_PER_KEY = 30
EVENTS = len(KEYS) * EVENTS_PER_KEY
RATE = 40.0  # events/s: six seconds of stream
BASE_MS = 1_700_000_000_000
PARTITIONS = 2
#: Committed intents before the kill: some checkpoints are behind it, most of the stream ahead.
KILL_AFTER = 40


def _events() -> list[bytes]:
    return [json.dumps({"entity_key": key, "event_id": f"{key}-{n}",
                        "event_time_ms": BASE_MS + 100 * (n * len(KEYS) + i),
                        "payload": f"note {n} for {key}"}).encode()
            for n in range(EVENTS_PER_KEY) for i, key in enumerate(KEYS)]


def _publish(bootstrap: str, topic: str, events: list[bytes], stop: threading.Event) -> None:
    """Publish `events` at `RATE`, each keyed by its entity, then clock events per partition."""
    from confluent_kafka import Producer  # noqa: PLC0415

    producer = Producer(client_config(bootstrap, **{"linger.ms": 5,
                                                    "enable.idempotence": True}))
    start = time.monotonic()
    for index, event in enumerate(events):
        if stop.is_set():
            return
        time.sleep(max(0.0, start + index / RATE - time.monotonic()))
        producer.produce(topic, value=event, key=json.loads(event)["entity_key"].encode())
        producer.poll(0)
    producer.flush(60)
    # Then move event time past the last events, every second until the test
    # ends: it moves only with the stream's own records, and Flink checkpoints
    # no watermark, so a job restored on a quiet stream would wait for the next.
    while not stop.is_set():
        for partition in range(PARTITIONS):
            produce(bootstrap, topic, [json.dumps({
                "entity_key": f"~clock-{partition}", "event_id": f"clock-{partition}",
                "event_time_ms": BASE_MS + 10_000_000, "payload": "tick"}).encode()],
                partition=partition)
        stop.wait(1.0)


def _journaled(path: Path) -> int:
    if not path.exists():
        return 0
    with contextlib.closing(sqlite3.connect(path, timeout=30)) as db:
        return int(db.execute("SELECT COUNT(*) FROM call_journal").fetchone()[0])


def _agent_flags(url: str, out: Path) -> list[str]:
    return ["--agent", "tests.agents:paced_journal", "--model_provider", "openai",
            "--model_id", "fake", "--model_base_url", url,
            "--longterm_store", "sqlite", "--sqlite_path", str(out / "longterm.sqlite"),
            "--call_journal", "sqlite", "--call_journal_path", str(out / "calls.sqlite")]


@pytest.mark.spec("M21")
def test_a_killed_task_manager_restores_and_kafka_readers_see_each_intent_once(
        kafka_broker: str, flink_cluster: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    """THEN read_committed sees each event's intent once; rows and calls as without the fault."""
    address, env = flink_cluster
    events = _events()

    # The fault-free reference: the Beam pipeline over the same events.
    clean = tmp_path / "clean"
    clean.mkdir()
    (clean / "events.jsonl").write_bytes(b"\n".join(events) + b"\n")
    with _Provider() as provider:
        run_beam(["--input_files", str(clean / "events.jsonl"),
                  "--output_path", str(clean / "intents.jsonl"),
                  "--errors_path", str(clean / "errors.jsonl"),
                  *_agent_flags(provider.url, clean)])
        clean_paid = sum(provider.calls.values())
    expected = sorted((clean / "intents.jsonl").read_bytes().splitlines())
    assert len(expected) == EVENTS and clean_paid == EVENTS

    name = uuid.uuid4().hex[:8]
    topics = {part: f"{part}-{name}" for part in ("events", "intents", "errors")}
    create_topics(kafka_broker, list(topics.values()), partitions=PARTITIONS)
    chaos = tmp_path / "chaos"
    chaos.mkdir()
    stop = threading.Event()
    with _Provider() as provider:
        publisher = threading.Thread(target=_publish, args=(kafka_broker, topics["events"],
                                                            events, stop), daemon=True)
        try:
            job_id = submit_detached(address, env, REPO / "templates" / "flink" / "agent_job.py", [
                "--input_kafka_topic", topics["events"], "--output_kafka_topic", topics["intents"],
                "--errors_kafka_topic", topics["errors"], "--kafka_bootstrap_servers",
                kafka_broker, "--kafka_starting_offsets", "earliest",
                "--kafka_group_id", f"job-{name}", "--kafka_transactional_id_prefix",
                f"t-{name}", "--kafka_connector_jar", str(connector_jar()),
                "--idle_timeout_ms", "2000", *_agent_flags(provider.url, chaos),
                "--checkpointing_interval_ms", "1000", "--parallelism", str(PARTITIONS),
                "--restart_attempts", "5", "--restart_delay_ms", "2000",
                "--job_name", f"kafka-failover-{name}"])
            publisher.start()
            before = consume(kafka_broker, topics["intents"], expect=KILL_AFTER, timeout_s=240)
            assert len(before) >= KILL_AFTER, f"only {len(before)} intents before the kill"
            victims = job_task_manager_pids(address, job_id, env)
            assert victims, "no task manager runs the job"
            for pid in victims:
                kill_tree(pid)
            time.sleep(1.0)  # what the killed workers had sent is at the server by now
            paid_at_kill = sum(provider.calls.values())
            in_flight = paid_at_kill - _journaled(chaos / "calls.sqlite")
            replace_lost_task_managers(address, env)

            committed = consume(kafka_broker, topics["intents"], expect=EVENTS, timeout_s=150,
                                settle_s=5)
            errors = consume(kafka_broker, topics["errors"], expect=0, timeout_s=5)
            restored = FlinkCluster(FLINK_HOME, address, env).restored_checkpoint(job_id)
        finally:
            stop.set()
            digest = cancel_jobs(address, env)
        paid = sum(provider.calls.values())
    print(f"killed task managers {victims} after {len(before)} committed intents; restored "
          f"checkpoint {restored}; {paid} calls paid (fault-free {clean_paid}, in flight at "
          f"the kill {in_flight})")

    assert restored is not None, f"the job did not restore a checkpoint\n{digest}"
    values = sorted(value for _, value, _ in committed)
    assert len(values) == len(set(values)), "an intent was committed twice"
    assert values == expected, f"{len(values)} of {EVENTS} intents\n{digest}"
    assert errors == []
    by_key: dict[str, list[int]] = {}
    for key, value, _ in committed:
        intent = json.loads(value)
        assert key == intent["entity_key"].encode()
        by_key.setdefault(intent["entity_key"], []).append(intent["seq"])
    assert {key: sorted(seqs) for key, seqs in by_key.items()} == {
        key: list(range(1, EVENTS_PER_KEY + 1)) for key in KEYS}
    entities = [key.encode() for key in KEYS]
    assert store_rows(SqliteLongtermConfig(path=str(chaos / "longterm.sqlite")), entities) == (
        store_rows(SqliteLongtermConfig(path=str(clean / "longterm.sqlite")), entities))
    assert paid <= clean_paid + in_flight
