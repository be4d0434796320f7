"""Event time on the native Flink job's topic: a quiet partition, and a late event that runs.

One job at parallelism 2 reads a topic of two partitions, and every event is
published to partition 0: the subtask reading partition 1 sees nothing.

- **Idleness.** The keyed operator's watermark is the least of its inputs',
  so the quiet subtask would hold event time back for ever; with
  ``--idle_timeout_ms`` it is marked idle, and the events run once the
  watermark passes them. (With ``--idle_timeout_ms 0`` none of them runs.)
- **A late event that runs.** With ``--late_events run`` (the default), an
  event behind the watermark runs on arrival, as its key's next activation,
  not as a dead letter. (The engine counts it as ``late_events``:
  tests/unit/runtime/test_engine.py; a MiniCluster loads no metrics
  reporter to read it from here.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests._kafka import consume, produce
from tests.flink.conftest import background_job, job_env, kafka_job, kafka_topics

pytestmark = pytest.mark.timeout(300)

BASE_MS = 1_700_000_000_000


def _event(event_id: str, at_ms: int, key: str = "k0") -> bytes:
    return json.dumps({"entity_key": key, "event_id": event_id, "event_time_ms": at_ms,
                       "payload": event_id}).encode()


def test_a_quiet_partition_holds_no_time_back_and_a_late_event_runs_on_arrival(
        kafka_broker: str, tmp_path: Path) -> None:
    name, topics = kafka_topics(kafka_broker, partitions=2)
    on_time = [_event(f"e{n}", BASE_MS + 1_000 * n) for n in range(5)]
    # Moves partition 0's event time past the events above; it stays held itself.
    clock = _event("clock", BASE_MS + 100_000, key="~clock")
    produce(kafka_broker, topics["events"], [*on_time, clock], partition=0)
    command = kafka_job(kafka_broker, name, topics, "--idle_timeout_ms", "1000",
                        "--late_events", "run", "--agent", "tests.agents:counter",
                        "--checkpointing_interval_ms", "500", "--parallelism", "2")
    with background_job(command, env=job_env(), log_dir=tmp_path / "flink-log"):
        intents = consume(kafka_broker, topics["intents"], expect=len(on_time), timeout_s=180)
        assert len(intents) == len(on_time), "the quiet partition held event time back"
        produce(kafka_broker, topics["events"], [_event("late", BASE_MS + 500)], partition=0)
        intents = consume(kafka_broker, topics["intents"], expect=len(on_time) + 1,
                          timeout_s=120, settle_s=2)
    runs = sorted((json.loads(value)["seq"], json.loads(value)["event_id"])
                  for _, value, _ in intents)
    # In event-time order, then the late one on arrival, as the key's next activation.
    assert runs == [*((n + 1, f"e{n}") for n in range(5)), (6, "late")]
    assert consume(kafka_broker, topics["errors"], expect=1, timeout_s=3) == []

