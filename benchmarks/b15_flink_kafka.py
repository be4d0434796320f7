"""B15. The native Flink job on Kafka: its capacity against the ideal, and latency at half of it.

The job of ``make demo-flink`` (``templates/flink/agent_job.py`` with the Kafka
flags, on a local MiniCluster at parallelism 2 over two partitions,
exactly-once sinks, checkpoints every second), in arrival order, runs B6's
agent: one call to a local model that answers after 200 ms, over 64 keys.
Every outcome is read from the committed topics with ``read_committed``
consumers, so it counts only once the checkpoint holding it completes.

* **Capacity.** Two bursts, of a small and a large number of events, each
  published at once; each burst's time runs from its publish to its last
  committed outcome. The rate is the difference of the sizes over the
  difference of the times, so start-up, the last checkpoint's wait and the
  tail cancel out; the ideal is every key busy all the time (64 keys / 200 ms
  = 320 events/s). CPU per activation: the job's whole process tree (the
  JVM, its MiniCluster and the Python workers), by the same difference.
* **Latency.** Events published at half the measured capacity: p50 and p99
  from publish to the committed intent, which includes up to one checkpoint
  interval (quoted beside the figures).

Targets (issue "streaming on Flink for real"): at least 0.9 of the ideal and
at most 1 ms of CPU per activation.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._harness import Profile, ratios, stat
from benchmarks.b6_latency import KEYS, LATENCY_MS
from tools.streaming._common import Published, percentile, proc_sample
from tools.streaming._flink import FlinkJob, KafkaOutcomes, Topics

__all__ = ["run"]

CHECKPOINT_MS = 1_000
_AGENT = ["--agent", "benchmarks._agents:slow_reply", "--model_latency_ms", str(LATENCY_MS)]
_IDEAL_PER_S = KEYS * 1000 / LATENCY_MS
TARGET_SHARE, TARGET_CPU_MS = 0.9, 1.0


def _line(number: int) -> bytes:
    return json.dumps({"entity_key": f"customer-{number % KEYS}", "event_id": f"e{number}",
                       "event_time_ms": 1_700_000_000_000 + number,
                       "payload": f"question {number}"}).encode()


class _Driver:
    """Publishes numbered lines and waits for their committed outcomes."""

    def __init__(self, topics: Topics, outcomes: KafkaOutcomes, published: Published,
                 job: FlinkJob) -> None:
        self.topics, self.outcomes, self.published, self.job = topics, outcomes, published, job
        self.next = 0

    def send(self, count: int, *, rate: float | None = None, timed: bool = True) -> list[int]:
        """Publish `count` lines, all at once or at `rate` a second; returns their numbers."""
        numbers = list(range(self.next, self.next + count))
        self.next += count
        begin = time.monotonic()
        for index, number in enumerate(numbers):
            if rate is not None:
                time.sleep(max(0.0, begin + index / rate - time.monotonic()))
            line = _line(number)
            if not timed:
                self.published.untimed.add(number)
            self.published.add(number, line, time.monotonic())
            self.topics.publish(line)
        self.topics.flush()
        return numbers

    def wait(self, numbers: list[int], timeout_s: float = 300.0) -> float:
        """Wait until every line in `numbers` has an outcome; returns the last one's arrival."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self.outcomes.lock:
                arrivals = [self.outcomes.first_at.get(number) for number in numbers]
            if all(at is not None for at in arrivals):
                return max(at for at in arrivals if at is not None)
            if not self.job.alive() or time.monotonic() > deadline:  # pragma: no cover
                raise RuntimeError(f"B15: {sum(at is None for at in arrivals)} of "
                                   f"{len(numbers)} lines have no outcome\n{self.job.log_tail()}")
            time.sleep(0.02)

    def burst(self, count: int) -> tuple[float, float]:
        """(seconds from publish to the last committed outcome, job CPU seconds) of a burst."""
        cpu_before = proc_sample(self.job.pid)[1] or 0.0
        started = time.monotonic()
        last = self.wait(self.send(count))
        cpu_after = proc_sample(self.job.pid)[1] or 0.0
        return last - started, cpu_after - cpu_before


def run(profile: Profile) -> dict[str, Any]:
    """Measure B15; see the module docstring."""
    from tests._kafka import KafkaBroker  # noqa: PLC0415

    # Bursts that each take several checkpoint intervals, as outcomes appear only on checkpoints.
    small, large = (2 * KEYS, 10 * KEYS) if profile.quick else (4 * KEYS, 24 * KEYS)
    reps = 1 if profile.quick else 3
    latency_s = 4.0 if profile.quick else 20.0
    out = Path(tempfile.mkdtemp(prefix="b15-"))
    broker = KafkaBroker()
    bootstrap = broker.start()
    job = outcomes = None
    try:
        topics = Topics(bootstrap)
        published = Published()
        outcomes = KafkaOutcomes(topics, published)
        outcomes.start()
        started = time.monotonic()
        job = FlinkJob([*topics.job_flags(), *_AGENT, "--event_order", "arrival",
                        "--checkpointing_interval_ms", str(CHECKPOINT_MS),
                        "--parallelism", "2"], out)
        driver = _Driver(topics, outcomes, published, job)
        driver.wait(driver.send(KEYS, timed=False))  # start-up, and every key's first call
        start_up_s = time.monotonic() - started
        pairs = []
        for rep in range(reps):
            sizes = (small, large) if rep % 2 == 0 else (large, small)
            measured = {size: driver.burst(size) for size in sizes}
            pairs.append((measured[small], measured[large]))
        # A pair whose large burst did not take longer (a checkpoint's timing) is timed by
        # the large burst alone, start-up of the burst included: a lower bound.
        rates = [(large - small) / (big[0] - little[0]) if big[0] > little[0] + 0.5
                 else large / big[0] for little, big in pairs]
        cpus = [(big[1] - little[1]) / (large - small) for little, big in pairs]
        capacity = min(stat(rates).median, _IDEAL_PER_S)
        before = len(outcomes.latencies)
        driver.wait(driver.send(int(capacity / 2 * latency_s), rate=capacity / 2))
        with outcomes.lock:
            latencies = [ms for _, ms in outcomes.latencies[before:]]
    finally:
        if outcomes is not None:
            outcomes.stop()
        if job is not None:
            job.stop()
        broker.stop()
        shutil.rmtree(out, ignore_errors=True)
    share = ratios(rates, [_IDEAL_PER_S] * len(rates))
    cpu = stat(cpus).scaled(1e3)
    met = share.median >= TARGET_SHARE and cpu.median <= TARGET_CPU_MS
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    return {
        "name": "The native Flink job on Kafka: capacity and latency",
        "workload": (f"{KEYS} keys, a {LATENCY_MS} ms local model, parallelism 2 over two "
                     f"partitions, bursts of {small} vs {large} events, checkpoints every "
                     f"{CHECKPOINT_MS} ms"),
        "unit": "events/s over the ideal (every key busy)",
        "events": {"small": small, "large": large}, "keys": KEYS, "latency_ms": LATENCY_MS,
        "checkpoint_interval_ms": CHECKPOINT_MS, "start_up_s": round(start_up_s, 1),
        "ideal_events_per_s": _IDEAL_PER_S,
        "events_per_s": stat(rates).as_json(1), "ratio_to_ideal": share.as_json(3),
        "cpu_ms_per_event": cpu.as_json(2),
        "latency_at_half_capacity": {"events_per_s": round(capacity / 2, 1),
                                     "events": len(latencies),
                                     "p50_ms": None if p50 is None else round(p50),
                                     "p99_ms": None if p99 is None else round(p99)},
        "ratio": share.median, "ratio_min": share.min, "ratio_max": share.max,
        "target": TARGET_SHARE, "met": met,
        "note": (f"{stat(rates).median:.0f} events/s = {share.median:.2f} of the ideal "
                 f"({_IDEAL_PER_S:.0f}/s), {cpu.median:.2f} ms CPU per activation (the JVM, "
                 f"its MiniCluster and the Python workers); at half that rate publish -> "
                 f"committed intent p50 {p50 or 0:.0f} ms, p99 {p99 or 0:.0f} ms with "
                 f"checkpoints every {CHECKPOINT_MS} ms; start-up {start_up_s:.0f} s apart."),
    }
