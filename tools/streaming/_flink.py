"""What the Flink-on-Kafka drivers share: topics on the broker, the job process, outcomes.

A driver publishes lines to an input topic, runs the native Flink job
(``templates/flink/agent_job.py`` with the Kafka flags, on a local
MiniCluster) in a child process, and reads the intents and errors topics
with ``read_committed`` consumers, timing each outcome from the publish of
the line it came from. Outputs become visible when the checkpoint that holds
them completes, so every latency includes up to one checkpoint interval.

Event time moves only with the stream's own events: a driver ends its input
with clock records (`Topics.clock`, one per partition, each second until it
is done), events far in the future for keys of their own, so the watermark
passes every real line; the clocks stay held and never reach the agent.
They repeat because Flink checkpoints no watermark: a job restored on a
quiet stream waits for its next record before event time moves again.
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
from pathlib import Path

from tools.streaming._common import REPO, Outcomes, Published

PARTITIONS = 2
#: Event time of the clock records: far past any real line's.
CLOCK_MS = 4_102_444_800_000  # 2100-01-01


class Topics:
    """The input, intents and errors topics of one run, and a producer for the input."""

    def __init__(self, bootstrap: str, name: str | None = None) -> None:
        from confluent_kafka import Producer  # noqa: PLC0415

        from tests._kafka import client_config, create_topics  # noqa: PLC0415

        self.bootstrap = bootstrap
        self.name = name or uuid.uuid4().hex[:8]
        create_topics(bootstrap, [self.topic(part) for part in ("input", "intents", "errors")],
                      partitions=PARTITIONS)
        self.producer = Producer(client_config(bootstrap, **{"linger.ms": 5,
                                                             "enable.idempotence": True}))

    def topic(self, part: str) -> str:
        return f"{part}-{self.name}"

    def job_flags(self) -> list[str]:
        from tests._kafka import connector_jar  # noqa: PLC0415

        return ["--input_kafka_topic", self.topic("input"),
                "--output_kafka_topic", self.topic("intents"),
                "--errors_kafka_topic", self.topic("errors"),
                "--kafka_bootstrap_servers", self.bootstrap,
                "--kafka_group_id", f"job-{self.name}",
                "--kafka_transactional_id_prefix", f"beam-agents-{self.name}",
                "--kafka_starting_offsets", "earliest",
                "--kafka_connector_jar", str(connector_jar())]

    def publish(self, line: bytes) -> None:
        """Publish one line, keyed by its entity when it has one (so a key keeps a partition)."""
        key = None
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            entity = json.loads(line).get("entity_key")
            key = entity.encode() if isinstance(entity, str) else None
        self.producer.produce(self.topic("input"), value=line, key=key)
        self.producer.poll(0)

    def clock(self) -> None:
        """One clock record per partition: the watermark passes every line published before."""
        for partition in range(PARTITIONS):
            self.producer.produce(self.topic("input"), partition=partition, value=json.dumps({
                "entity_key": f"~clock-{partition}", "event_id": f"~clock-{partition}",
                "event_time_ms": CLOCK_MS, "payload": "clock"}).encode())
        self.flush()

    def flush(self) -> None:
        self.producer.flush(30)


class KafkaOutcomes(Outcomes):
    """`Outcomes` read from the intents and errors topics with ``read_committed`` consumers.

    With ``committed=False`` they read uncommitted too, so an outcome counts
    when the job writes it rather than when the checkpoint holding it commits:
    the job's pace, without the checkpoint interval's steps in it.
    """

    def __init__(self, topics: Topics, published: Published, *, committed: bool = True) -> None:
        super().__init__(None, published)  # type: ignore[arg-type]
        self.topics = topics
        self.isolation = "read_committed" if committed else "read_uncommitted"

    def _pull(self, part: str) -> None:
        from confluent_kafka import Consumer  # noqa: PLC0415

        from tests._kafka import client_config  # noqa: PLC0415

        consumer = Consumer(client_config(self.topics.bootstrap, **{
            "group.id": f"driver-{uuid.uuid4().hex}", "auto.offset.reset": "earliest",
            "isolation.level": self.isolation, "enable.auto.commit": False}))
        consumer.subscribe([self.topics.topic(part)])
        try:
            while not self._stop.is_set():
                message = consumer.poll(0.2)
                if message is None or message.error() is not None:
                    continue
                self._record(part, message.value(), time.monotonic())
        finally:
            consumer.close()


class FlinkJob:
    """The native job on a local MiniCluster in a process group of its own.

    Its counters reach a driver through the tallies its subtasks write
    (``--flink_conf pipeline.global-job-parameters=...``, see flink_demo.py).
    `entry` runs another entry point with the same flags in place of
    ``agent_job.py`` (B15's floor: ``["-m", "benchmarks._flink_kafka_floor", ...]``).
    """

    def __init__(self, flags: list[str], out: Path, *, env: dict[str, str] | None = None,
                 entry: list[str] | None = None) -> None:
        self.out = out
        self.log_dir = out / "flink-log"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._stdout = (out / "job.out").open("w")
        run_env = {**os.environ, **(env or {}), "PYTHONPATH": str(REPO),
                   "FLINK_LOG_DIR": str(self.log_dir)}
        self.process = subprocess.Popen(
            [sys.executable, *(entry or [str(REPO / "templates" / "flink" / "agent_job.py")]),
             *flags,
             "--python_executable", sys.executable],
            cwd=REPO, env=run_env, stdin=subprocess.DEVNULL, stdout=self._stdout,
            stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        """Kill the job's process group (its MiniCluster and Python workers)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=30)
        self._stdout.close()

    def log_tail(self, chars: int = 3000) -> str:
        with contextlib.suppress(OSError):
            return (self.out / "job.out").read_text(errors="replace")[-chars:]
        return ""

