"""What the streaming drivers share: routes on the Pub/Sub emulator, the run process, outcomes.

A driver publishes lines to an input topic, runs ``beam-agents run`` on its
subscription in a child process, and pulls the intents and dead letters the
run publishes, timing each one from the publish of the line it came from.
"""

from __future__ import annotations

import codecs
import contextlib
import hashlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # tests._emulators, from a dev tool
    sys.path.insert(0, str(REPO))

PROJECT = "beam-agents-test"
_PROGRESS = re.compile(r"progress((?:\s+\w+=\d+)+)")


def percentile(values: list[float], q: float) -> float | None:
    """The `q`-th percentile (nearest rank) of `values`, or None for none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def fmt_ms(value: float | None) -> str:
    return "?" if value is None else f"{value:.0f} ms"


class Route:
    """An input topic and subscription, and the intents and errors topics with theirs."""

    def __init__(self, name: str | None = None) -> None:
        from google.cloud import pubsub_v1  # noqa: PLC0415

        self.name = name or uuid.uuid4().hex[:8]
        self.publisher = pubsub_v1.PublisherClient(
            batch_settings=pubsub_v1.types.BatchSettings(max_latency=0.005))
        self.subscriber = pubsub_v1.SubscriberClient()
        for part in ("input", "intents", "errors"):
            self.publisher.create_topic(name=self.topic(part))
            self.subscriber.create_subscription(name=self.subscription(part),
                                                topic=self.topic(part))

    def topic(self, part: str) -> str:
        return f"projects/{PROJECT}/topics/{part}-{self.name}"

    def subscription(self, part: str) -> str:
        return f"projects/{PROJECT}/subscriptions/{part}-{self.name}"

    def run_flags(self) -> list[str]:
        return ["--input_subscription", self.subscription("input"),
                "--output_topic", self.topic("intents"), "--errors_topic", self.topic("errors")]

    def drain(self, part: str) -> list[bytes]:
        """Pull and acknowledge everything left in `part`'s subscription."""
        from google.api_core.exceptions import DeadlineExceeded  # noqa: PLC0415

        out: list[bytes] = []
        while True:
            try:
                response = self.subscriber.pull(subscription=self.subscription(part),
                                                max_messages=1000, timeout=2.0)
            except DeadlineExceeded:
                return out
            if not response.received_messages:
                return out
            out.extend(item.message.data for item in response.received_messages)
            self.subscriber.acknowledge(subscription=self.subscription(part), ack_ids=[
                item.ack_id for item in response.received_messages])

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.publisher.stop()
        with contextlib.suppress(Exception):
            self.subscriber.close()


@dataclass
class Published:
    """Every line published: when, and how to recognise its outcome."""

    at: dict[int, float] = field(default_factory=dict)        # line number -> monotonic time
    by_event_id: dict[str, int] = field(default_factory=dict)  # JSON lines with an event_id
    by_sha256: dict[str, int] = field(default_factory=dict)    # every line, by its digest
    untimed: set[int] = field(default_factory=set)  # lines left out of the latencies

    def add(self, number: int, line: bytes, at: float) -> None:
        self.at[number] = at
        self.by_sha256.setdefault(hashlib.sha256(line).hexdigest(), number)
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            event_id = json.loads(line).get("event_id")
            if isinstance(event_id, str) and event_id:
                self.by_event_id.setdefault(event_id, number)

    def __len__(self) -> int:
        return len(self.at)


class Outcomes:
    """Pulls the intents and errors subscriptions in two threads, timing each arrival."""

    def __init__(self, route: Route, published: Published) -> None:
        self.route = route
        self.published = published
        self.lock = threading.Lock()
        self.first_at: dict[int, float] = {}   # line number -> first outcome's arrival
        self.latencies: list[tuple[float, float]] = []  # (arrival, latency ms), first outcomes
        self.intents = 0
        self.dead_letters = 0
        self.unmatched = 0
        self.triples: dict[tuple[str, str, int], list[bytes]] = {}
        self.errors_by_stage: dict[str, int] = {}
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._pull, args=(part,), daemon=True)
                         for part in ("intents", "errors")]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)

    @property
    def ended(self) -> int:
        with self.lock:
            return len(self.first_at)

    def _pull(self, part: str) -> None:
        from google.api_core.exceptions import DeadlineExceeded  # noqa: PLC0415

        subscription = self.route.subscription(part)
        while not self._stop.is_set():
            try:
                response = self.route.subscriber.pull(subscription=subscription,
                                                      max_messages=1000, timeout=1.0)
            except DeadlineExceeded:
                continue
            except Exception:  # the emulator going away at the end
                if self._stop.is_set():
                    return
                time.sleep(0.2)
                continue
            arrived = time.monotonic()
            received = response.received_messages
            if not received:
                continue
            for item in received:
                self._record(part, item.message.data, arrived)
            with contextlib.suppress(Exception):
                self.route.subscriber.acknowledge(subscription=subscription,
                                                  ack_ids=[item.ack_id for item in received])

    def _match(self, part: str, doc: dict[str, Any]) -> int | None:
        if part == "errors":
            for digest in (doc.get("event_sha256"), _event_digest(doc)):
                if digest and digest in self.published.by_sha256:
                    return self.published.by_sha256[digest]
        event_id = doc.get("event_id")
        if isinstance(event_id, str) and event_id in self.published.by_event_id:
            return self.published.by_event_id[event_id]
        return None

    def _record(self, part: str, data: bytes, arrived: float) -> None:
        try:
            doc = json.loads(data)
        except ValueError:
            doc = {}
        with self.lock:
            if part == "intents":
                self.intents += 1
                triple = (str(doc.get("entity_key")), str(doc.get("event_id")),
                          int(doc.get("index", 0)))
                self.triples.setdefault(triple, []).append(data)
            else:
                self.dead_letters += 1
                stage = str(doc.get("stage", "?")).removeprefix("STAGE_").lower()
                self.errors_by_stage[stage] = self.errors_by_stage.get(stage, 0) + 1
            number = self._match(part, doc)
            if number is None:
                self.unmatched += 1
                return
            if number not in self.first_at:
                self.first_at[number] = arrived
                sent = self.published.at.get(number)
                if sent is not None and number not in self.published.untimed:
                    self.latencies.append((arrived, (arrived - sent) * 1000))

    def duplicates(self) -> tuple[int, bool]:
        """Triples (entity_key, event_id, index) seen more than once; all copies identical?"""
        with self.lock:
            repeated = [copies for copies in self.triples.values() if len(copies) > 1]
        return len(repeated), all(len(set(copies)) == 1 for copies in repeated)


def _event_digest(doc: dict[str, Any]) -> str | None:
    import base64  # noqa: PLC0415

    raw = doc.get("event_b64")
    if isinstance(raw, str):
        with contextlib.suppress(ValueError):
            return hashlib.sha256(base64.b64decode(raw)).hexdigest()
    text = doc.get("event")
    if isinstance(text, str):
        return hashlib.sha256(text.encode()).hexdigest()
    return None


class Run:
    """One ``beam-agents run`` child: its stdout kept, its stderr scanned for progress lines."""

    def __init__(self, flags: Iterable[str], env: dict[str, str], log: Path) -> None:
        self.log_path = log
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log = log.open("w", encoding="utf-8", errors="replace")
        self.progress: dict[str, int] | None = None
        self.progress_at: float | None = None
        self.stdout = ""
        self.started = time.monotonic()
        self.process: subprocess.Popen[bytes] = subprocess.Popen(
            [sys.executable, "-m", "beam_agents", "run", *flags], cwd=REPO,
            env={**os.environ, **env, "PYTHONPATH": str(REPO)},
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True)
        self._out = threading.Thread(target=self._read_stdout, daemon=True)
        self._err = threading.Thread(target=self._read_stderr, daemon=True)
        self._out.start()
        self._err.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        self.stdout = self.process.stdout.read().decode(errors="replace")

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        pending = ""
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        while True:
            raw = os.read(self.process.stderr.fileno(), 65536)
            chunk = decoder.decode(raw, final=not raw)
            if not raw:
                break
            self._log.write(chunk)
            pending += chunk
            *lines, pending = re.split(r"[\r\n]", pending)
            for line in lines:
                self._scan(line)
        self._scan(pending)
        self._log.flush()

    def _scan(self, line: str) -> None:
        found = _PROGRESS.search(line)
        if found:
            self.progress = {name: int(value) for name, value in
                             re.findall(r"(\w+)=(\d+)", found.group(1))}
            self.progress_at = time.monotonic()

    def interrupt(self, timeout_s: float) -> int | None:
        """SIGINT and wait for the exit; None if it did not exit in time (then it is killed)."""
        self.process.send_signal(signal.SIGINT)
        try:
            code = self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return None
        self.join()
        return code

    def freeze(self, settle_s: float = 0.5) -> dict[str, int] | None:
        """SIGSTOP the run and return its last progress line once stderr has been read.

        The run prints a line after each pull and before acknowledging it, so
        the line returned counts every message the run took from the subscription.
        """
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGSTOP)
        time.sleep(settle_s)  # what it wrote before stopping reaches `_read_stderr`
        return dict(self.progress) if self.progress else None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        self.join()

    def join(self) -> None:
        self._out.join(timeout=10)
        self._err.join(timeout=10)
        with contextlib.suppress(Exception):
            self._log.close()

    def log_tail(self, chars: int = 2000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-chars:]
        return ""


def summary_value(summary: str, label: str) -> int | None:
    """A counter of the run's summary (``model calls paid`` ...), or None if absent."""
    found = re.search(rf"^\s*{re.escape(label)}\s+(\d+)", summary, re.MULTILINE)
    return int(found.group(1)) if found else None


def proc_sample(pid: int) -> tuple[int | None, float | None]:
    """(VmRSS bytes, utime+stime seconds) of `pid` and its descendants, None when gone."""
    pids = [pid, *_descendants(pid)]
    rss = 0
    cpu = 0.0
    seen = False
    tick = os.sysconf("SC_CLK_TCK")
    for one in pids:
        try:
            status = Path(f"/proc/{one}/status").read_text()
            stat = Path(f"/proc/{one}/stat").read_text()
        except OSError:
            continue
        seen = True
        found = re.search(r"VmRSS:\s+(\d+) kB", status)
        rss += int(found.group(1)) * 1024 if found else 0
        fields = stat.rsplit(")", 1)[1].split()
        cpu += (int(fields[11]) + int(fields[12])) / tick
    return (rss, cpu) if seen else (None, None)


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    out: list[int] = []
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            out.append(child)
            stack.append(child)
    return out
