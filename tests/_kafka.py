"""Start and stop a real Apache Kafka broker (KRaft, one node) for tests, demos and the soak.

The broker is Kafka itself, run from its Maven jars, which ``make
kafka-toolchain`` (tools/toolchain/kafka.mk, where the versions are pinned)
fetches into ``.toolchain/kafka-<version>/libs``; the Flink connector jar
lands in ``.toolchain/jars``. Nothing here fakes the protocol: transactions,
``read_committed`` and consumer groups are the broker's own.

* **Storage.** Formatted fresh on every `KafkaBroker.start` in a private
  directory (``kafka.tools.StorageTool format`` with a random cluster id), so
  no run sees another's topics; `stop` removes it.
* **Port.** The broker and its controller listen on 127.0.0.1 on ports picked
  here, as the emulators' are (tests._emulators).
* **Ready.** When the admin client lists the cluster's metadata.
* **Stop.** The JVM runs in a session of its own; `stop` sends SIGTERM to its
  process group, then SIGKILL after ~5 s.

A missing toolchain or Java raises `KafkaBrokerError` naming the command that
sets it up; callers fail with it (no test skips for a missing broker).
"""

from __future__ import annotations

import base64
import contextlib
import logging
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import cache
from pathlib import Path

from tests._emulators import accepts_connections, free_port, stop_process_group

__all__ = ["KafkaBroker", "KafkaBrokerError", "client_config", "connector_jar", "consume",
           "create_topics", "kafka_home", "kafka_topics", "pins", "produce", "running_broker"]

REPO = Path(__file__).resolve().parents[1]
_PINS = REPO / "tools" / "toolchain" / "kafka.mk"
_START_TIMEOUT_S = 90.0

_LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d %-5p [%c{{1}}] %m%n
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = info
"""


class KafkaBrokerError(RuntimeError):
    """The broker's toolchain or Java is missing, or the broker did not start."""


class _PortTakenError(KafkaBrokerError):
    """The broker could not bind a port picked for it: it starts again on new ones."""


@cache
def pins() -> dict[str, str]:
    """The versions pinned in tools/toolchain/kafka.mk, by variable name."""
    found = dict(re.findall(r"^([A-Z_0-9]+)\s*:=\s*(\S+)\s*$", _PINS.read_text(), re.MULTILINE))
    return {name: found[name] for name in ("KAFKA_VERSION", "FLINK_KAFKA_CONNECTOR")}


def kafka_home() -> Path:
    """The broker's jars, as ``make kafka-toolchain`` laid them out."""
    home = REPO / ".toolchain" / f"kafka-{pins()['KAFKA_VERSION']}"
    if not (home / ".installed").exists():
        raise KafkaBrokerError(
            f"the Kafka {pins()['KAFKA_VERSION']} broker jars are missing ({home}): run "
            "`make kafka-toolchain` (needs mvn and java; `make test` runs it)")
    return home


def connector_jar() -> Path:
    """The Flink Kafka connector jar (flink-sql-connector-kafka), for ``pipeline.jars``."""
    jar = (REPO / ".toolchain" / "jars"
           / f"flink-sql-connector-kafka-{pins()['FLINK_KAFKA_CONNECTOR']}.jar")
    if not jar.is_file():
        raise KafkaBrokerError(f"the Flink Kafka connector is missing ({jar}): run "
                               "`make kafka-toolchain` (needs mvn; `make test` runs it)")
    return jar


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise KafkaBrokerError("`java` is not on PATH; the Kafka broker needs Java 17")
    return java


class KafkaBroker:
    """One single-node KRaft broker on 127.0.0.1, formatted fresh at each start.

    Args:
        log_level: The broker's root log level (its log is in `log_path`).
        heap_mb: The broker JVM's heap.
        transaction_version: The cluster's ``transaction.version`` feature; None
            keeps the release's default (2 since Kafka 4.0).
    """

    def __init__(self, *, log_level: str = "WARN", heap_mb: int = 512,
                 transaction_version: int | None = None) -> None:
        self.transaction_version = transaction_version
        self.port = 0
        self._controller_port = 0
        self._log_level = log_level
        self._heap_mb = heap_mb
        self._dir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """``host:port`` for ``bootstrap.servers``."""
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path | None:
        """The broker's log file while it has a directory."""
        return None if self._dir is None else self._dir / "broker.log"

    @property
    def running(self) -> bool:
        """Whether the broker's JVM is alive."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> str:
        """Format a fresh log directory, start the broker and wait until it serves metadata.

        A broker that finds a port taken (another process bound it between the
        pick and the JVM's bind) starts again on new ports, up to three times.
        """
        if self.running:
            return self.bootstrap
        for attempt in range(3):
            try:
                return self._start_once()
            except _PortTakenError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _start_once(self) -> str:
        classpath = f"{kafka_home() / 'libs'}/*"
        java = _java()
        self._dir = Path(tempfile.mkdtemp(prefix="kafka-broker-"))
        self.port, self._controller_port = free_port(), free_port()
        config = self._dir / "server.properties"
        config.write_text(self._properties())
        log4j = self._dir / "log4j2.properties"
        log4j.write_text(_LOG4J2.format(log=self._dir / "broker.log", level=self._log_level))
        jvm = [java, f"-Xmx{self._heap_mb}m", f"-Xms{min(self._heap_mb, 256)}m",
               "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
               f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath]
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        formatted = subprocess.run(
            [*jvm, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(config),
             *(["--feature", f"transaction.version={self.transaction_version}"]
               if self.transaction_version is not None else [])],
            capture_output=True, text=True, timeout=120, check=False)
        if formatted.returncode != 0:
            raise KafkaBrokerError(f"formatting the broker's storage failed:\n"
                                   f"{formatted.stdout[-1500:]}{formatted.stderr[-1500:]}")
        with open(self._dir / "stdout.log", "wb") as out:
            self._process = subprocess.Popen([*jvm, "kafka.Kafka", str(config)],
                                             stdin=subprocess.DEVNULL, stdout=out,
                                             stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._await_ready()
        except BaseException:
            self.stop()
            raise
        return self.bootstrap

    def _properties(self) -> str:
        assert self._dir is not None
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self._controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},"
                         f"CONTROLLER://127.0.0.1:{self._controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self._dir / "data"),
            # One node: every internal topic has one replica, and few partitions
            # (50 each by default), which a busy 2-core machine creates faster.
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
        }
        return "".join(f"{key}={value}\n" for key, value in settings.items())

    def _await_ready(self) -> None:
        from confluent_kafka.admin import AdminClient  # noqa: PLC0415

        deadline = time.monotonic() + _START_TIMEOUT_S
        while not accepts_connections(self.port) and time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                break
            time.sleep(0.1)
        admin = AdminClient(client_config(self.bootstrap))
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                error = (_PortTakenError if "Address already in use" in self.log_tail(10**7)
                         else KafkaBrokerError)
                raise error(f"the Kafka broker exited with code "
                                       f"{self._process.returncode} during start:\n"
                                       f"{self.log_tail()}")
            with contextlib.suppress(Exception):
                if admin.list_topics(timeout=2).brokers:
                    return
            time.sleep(0.2)
        raise KafkaBrokerError(f"the Kafka broker was not ready on {self.bootstrap} within "
                               f"{_START_TIMEOUT_S:.0f}s:\n{self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the broker's logs, for failure messages."""
        if self._dir is None:
            return "(no log)"
        text = "".join(path.read_text(errors="replace")
                       for path in (self._dir / "stdout.log", self._dir / "broker.log")
                       if path.exists())
        return text[-chars:] or "(empty log)"

    def stop(self) -> None:
        """SIGTERM the broker's process group, SIGKILL after ~5 s; remove its storage."""
        process, self._process = self._process, None
        if process is not None:
            stop_process_group(process, self.port)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


@contextlib.contextmanager
def running_broker(**kwargs: str | int) -> Iterator[KafkaBroker]:
    """A started broker for the block, stopped (and its storage removed) on the way out."""
    broker = KafkaBroker(**kwargs)  # type: ignore[arg-type]
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def create_topics(bootstrap: str, names: Sequence[str], *, partitions: int = 1,
                  config: Mapping[str, str] | None = None) -> None:
    """Create `names` with `partitions` each (and topic `config`), and wait until they exist."""
    from confluent_kafka.admin import AdminClient, NewTopic  # noqa: PLC0415

    admin = AdminClient(client_config(bootstrap))
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions,
                                            replication_factor=1, config=dict(config or {}))
                                   for name in names])
    for future in futures.values():
        future.result(timeout=60)


def kafka_topics(bootstrap: str, *, partitions: int = 1,
                 config: Mapping[str, str] | None = None) -> tuple[str, dict[str, str]]:
    """Fresh ``events``, ``intents`` and ``errors`` topics; returns their run's name and them."""
    name = uuid.uuid4().hex[:8]
    topics = {part: f"{part}-{name}" for part in ("events", "intents", "errors")}
    create_topics(bootstrap, list(topics.values()), partitions=partitions, config=config)
    return name, topics


def client_config(bootstrap: str, **extra: object) -> dict[str, object]:
    """A confluent-kafka config whose client logs go to Python logging, not stderr."""
    return {"bootstrap.servers": bootstrap, "logger": logging.getLogger("kafka-client"),
            **extra}


def produce(bootstrap: str, topic: str, values: Sequence[bytes], *,
            keys: Sequence[bytes | None] | None = None, partition: int | None = None,
            headers: Sequence[dict[str, bytes]] | None = None,
            timestamps: Sequence[int] | None = None) -> None:
    """Publish `values` (with `keys`, `headers` and `timestamps`, or all to `partition`).

    A timestamp is the record's CreateTime in ms since the epoch; without
    one (or with 0) the client stamps the send time. Waits until all are in.
    """
    from confluent_kafka import Producer  # noqa: PLC0415

    producer = Producer(client_config(bootstrap, **{"linger.ms": 5, "enable.idempotence": True}))
    for index, value in enumerate(values):
        where: dict[str, object] = {} if partition is None else {"partition": partition}
        if headers is not None and headers[index]:
            where["headers"] = list(headers[index].items())
        if timestamps is not None:
            where["timestamp"] = timestamps[index]
        producer.produce(topic, value=value, key=None if keys is None else keys[index], **where)
        producer.poll(0)
    left = producer.flush(60)
    if left:
        raise KafkaBrokerError(f"{left} message(s) to {topic} were not delivered in 60 s")


def consume(bootstrap: str, topic: str, *, expect: int, timeout_s: float = 120.0,
            settle_s: float = 0.0, between_polls: Callable[[], None] | None = None,
            ) -> list[tuple[bytes | None, bytes, dict[str, bytes]]]:
    """Read `topic` from the start with ``read_committed`` until `expect` records are in.

    Returns ``(key, value, headers)`` per record, in partition order. After
    `expect` records it reads on for `settle_s`, so a duplicate committed
    later would still be seen. Fewer than `expect` by `timeout_s` returns what came.
    `between_polls` runs after each poll (at least every 0.5 s); it raises to
    stop the read early, e.g. when the job that writes the topic has died.
    """
    from confluent_kafka import Consumer  # noqa: PLC0415

    consumer = Consumer(client_config(bootstrap, **{
        "group.id": f"read-{uuid.uuid4().hex}", "auto.offset.reset": "earliest",
        "isolation.level": "read_committed", "enable.auto.commit": False}))
    consumer.subscribe([topic])
    records: list[tuple[bytes | None, bytes, dict[str, bytes]]] = []
    deadline = time.monotonic() + timeout_s
    settle_until: float | None = None
    try:
        while time.monotonic() < deadline:
            if settle_until is not None and time.monotonic() >= settle_until:
                break
            message = consumer.poll(0.5)
            if between_polls is not None:
                between_polls()
            if message is None or message.error() is not None:
                continue
            records.append((message.key(), message.value(),
                            {name: value for name, value in (message.headers() or [])}))
            if len(records) >= expect and settle_until is None:
                settle_until = time.monotonic() + settle_s
    finally:
        consumer.close()
    return records

