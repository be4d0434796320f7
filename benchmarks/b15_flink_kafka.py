"""B15. The native Flink job on Kafka: its capacity against the ideal, and latency at half of it.

The job of ``make demo-flink`` (``templates/flink/agent_job.py`` with the Kafka
flags, on a local MiniCluster at parallelism 2 over two partitions,
exactly-once sinks, checkpoints every second), in arrival order, runs B6's
agent: one call to a local model that answers after 200 ms, over 64 keys.

* **Capacity.** Two bursts, of a small and a large number of events, each
  published at once; each burst's time runs from its publish to its last
  outcome as the job writes it (a ``read_uncommitted`` consumer: counted at
  commit, a burst's end would step by the checkpoint interval). The rate is
  the difference of the sizes over the difference of the times, so start-up
  and the tail cancel out; the ideal is every key busy all the time (64 keys /
  200 ms = 320 events/s). CPU per activation: the job's whole process tree
  (the JVM, its MiniCluster and the Python workers), by the same difference.
* **The runner's floor.** The same bursts through the same job with its
  Activate step replaced by `benchmarks._flink_kafka_floor.FloorFunction`:
  each key's events held in keyed state and "run" one at a time on a 200 ms
  processing-time timer, no library code. What it reaches and spends is what
  PyFlink, the Kafka connector and the MiniCluster allow for this workload.
* **Latency.** Events published at half the measured capacity: p50 and p99
  from publish to the committed intent (``read_committed``), which includes
  up to one checkpoint interval (quoted beside the figures).
* **Both Python execution modes.** All of it in process mode (the default,
  whose figures are the top-level ones) and again in thread mode (``thread``).

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
#: PyFlink's Python execution modes, the job's default first (``--python_execution_mode``).
MODES = ("process", "thread")


def _line(number: int) -> bytes:
    return json.dumps({"entity_key": f"customer-{number % KEYS}", "event_id": f"e{number}",
                       "event_time_ms": 1_700_000_000_000 + number,
                       "payload": f"question {number}"}).encode()


class _Driver:
    """Publishes numbered lines and waits for their outcomes, as written or as committed."""

    def __init__(self, topics: Topics, published: Published, job: FlinkJob) -> None:
        self.topics, self.published, self.job = topics, published, job
        # Bursts are timed by when the job writes each outcome, not when its
        # checkpoint commits it, which would quantize them to the interval.
        self.written = KafkaOutcomes(topics, published, committed=False)
        self.committed = KafkaOutcomes(topics, published)
        self.written.start()
        self.committed.start()
        self.next = 0

    def stop(self) -> None:
        self.written.stop()
        self.committed.stop()

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

    def wait(self, numbers: list[int], outcomes: KafkaOutcomes, timeout_s: float = 300.0) -> float:
        """Wait until every line in `numbers` has an outcome; returns the last one's arrival."""
        deadline = time.monotonic() + timeout_s
        while True:
            with outcomes.lock:
                arrivals = [outcomes.first_at.get(number) for number in numbers]
            if all(at is not None for at in arrivals):
                return max(at for at in arrivals if at is not None)
            if not self.job.alive() or time.monotonic() > deadline:  # pragma: no cover
                raise RuntimeError(f"B15: {sum(at is None for at in arrivals)} of "
                                   f"{len(numbers)} lines have no outcome\n{self.job.log_tail()}")
            time.sleep(0.02)

    def burst(self, count: int) -> tuple[float, float]:
        """(seconds from publish to the last outcome written, job CPU seconds) of a burst.

        Then waits for the burst's commits, so the next burst starts on a quiet job.
        """
        cpu_before = proc_sample(self.job.pid)[1] or 0.0
        started = time.monotonic()
        numbers = self.send(count)
        last = self.wait(numbers, self.written)
        cpu_after = proc_sample(self.job.pid)[1] or 0.0
        self.wait(numbers, self.committed)
        return last - started, cpu_after - cpu_before


def _capacity(driver: _Driver, small: int, large: int,
              reps: int) -> tuple[list[float], list[float]]:
    """Events/s and CPU seconds per event of the job, by the difference of bursts."""
    pairs = []
    for rep in range(reps):
        sizes = (small, large) if rep % 2 == 0 else (large, small)
        measured = {size: driver.burst(size) for size in sizes}
        pairs.append((measured[small], measured[large]))
    # A pair whose large burst did not take longer is timed by the large burst
    # alone, start-up of the burst included: a lower bound.
    rates = [(large - small) / (big[0] - little[0]) if big[0] > little[0] + 0.1
             else large / big[0] for little, big in pairs]
    cpus = [(big[1] - little[1]) / (large - small) for little, big in pairs]
    return rates, cpus


def _started(bootstrap: str, out: Path, mode: str,
             entry: list[str] | None) -> tuple[_Driver, float]:
    """A job on fresh topics, past its start-up and every key's first call; and that time."""
    topics = Topics(bootstrap)
    started = time.monotonic()
    job = FlinkJob([*topics.job_flags(), *_AGENT, "--event_order", "arrival",
                    "--checkpointing_interval_ms", str(CHECKPOINT_MS),
                    "--python_execution_mode", mode, "--parallelism", "2"], out, entry=entry)
    driver = _Driver(topics, Published(), job)
    try:
        driver.wait(driver.send(KEYS, timed=False), driver.committed)
    except BaseException:
        driver.stop()
        job.stop()
        raise
    return driver, time.monotonic() - started


def _mode(bootstrap: str, out: Path, mode: str, *, small: int, large: int, reps: int,
          latency_s: float) -> dict[str, Any]:
    """The job in one Python execution mode: capacity, CPU and latency, then its floor's."""
    driver, start_up_s = _started(bootstrap, out / mode, mode, None)
    try:
        rates, cpus = _capacity(driver, small, large, reps)
        capacity = min(stat(rates).median, _IDEAL_PER_S)
        before = len(driver.committed.latencies)
        driver.wait(driver.send(int(capacity / 2 * latency_s), rate=capacity / 2),
                    driver.committed)
        with driver.committed.lock:
            latencies = [ms for _, ms in driver.committed.latencies[before:]]
    finally:
        driver.stop()
        driver.job.stop()
    floor, _ = _started(bootstrap, out / f"{mode}-floor", mode,
                        ["-m", "benchmarks._flink_kafka_floor", "--latency_ms", str(LATENCY_MS)])
    try:
        floor_rates, floor_cpus = _capacity(floor, small, large, reps)
    finally:
        floor.stop()
        floor.job.stop()
    share = ratios(rates, [_IDEAL_PER_S] * len(rates))
    floor_share = ratios(floor_rates, [_IDEAL_PER_S] * len(floor_rates))
    cpu, floor_cpu = stat(cpus).scaled(1e3), stat(floor_cpus).scaled(1e3)
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    return {
        "start_up_s": round(start_up_s, 1),
        "events_per_s": stat(rates).as_json(1), "ratio_to_ideal": share.as_json(3),
        "cpu_ms_per_event": cpu.as_json(2),
        "floor": {"events_per_s": stat(floor_rates).as_json(1),
                  "ratio_to_ideal": floor_share.as_json(3),
                  "cpu_ms_per_event": floor_cpu.as_json(2)},
        "library_cpu_ms_per_event": round(cpu.median - floor_cpu.median, 2),
        "latency_at_half_capacity": {"events_per_s": round(capacity / 2, 1),
                                     "events": len(latencies),
                                     "p50_ms": None if p50 is None else round(p50),
                                     "p99_ms": None if p99 is None else round(p99)},
        "met": share.median >= TARGET_SHARE and cpu.median <= TARGET_CPU_MS,
    }


def _said(mode: str, result: dict[str, Any]) -> str:
    half = result["latency_at_half_capacity"]
    return (f"{mode} mode: {result['events_per_s']['median']:.0f} events/s = "
            f"{result['ratio_to_ideal']['median']:.2f} of the ideal, "
            f"{result['cpu_ms_per_event']['median']:.2f} ms CPU per activation (its floor "
            f"{result['floor']['ratio_to_ideal']['median']:.2f} and "
            f"{result['floor']['cpu_ms_per_event']['median']:.2f} ms); at half that rate "
            f"publish -> committed intent p50 {half['p50_ms']} ms, p99 {half['p99_ms']} ms")


def run(profile: Profile) -> dict[str, Any]:
    """Measure B15; see the module docstring."""
    from tests._kafka import KafkaBroker  # noqa: PLC0415

    small, large = (2 * KEYS, 10 * KEYS) if profile.quick else (4 * KEYS, 24 * KEYS)
    reps = 1 if profile.quick else 3
    latency_s = 4.0 if profile.quick else 20.0
    out = Path(tempfile.mkdtemp(prefix="b15-"))
    broker = KafkaBroker()
    bootstrap = broker.start()
    try:
        modes = {mode: _mode(bootstrap, out, mode, small=small, large=large, reps=reps,
                             latency_s=latency_s) for mode in MODES}
    finally:
        broker.stop()
        shutil.rmtree(out, ignore_errors=True)
    default, thread = modes["process"], modes["thread"]
    return {
        "name": "The native Flink job on Kafka: capacity and latency",
        "workload": (f"{KEYS} keys, a {LATENCY_MS} ms local model, parallelism 2 over two "
                     f"partitions, bursts of {small} vs {large} events, checkpoints every "
                     f"{CHECKPOINT_MS} ms"),
        "unit": "events/s over the ideal (every key busy)",
        "events": {"small": small, "large": large}, "keys": KEYS, "latency_ms": LATENCY_MS,
        "checkpoint_interval_ms": CHECKPOINT_MS, "ideal_events_per_s": _IDEAL_PER_S,
        # The default mode's figures at the top, as every other benchmark gives them.
        **{name: default[name] for name in ("start_up_s", "events_per_s", "ratio_to_ideal",
                                            "cpu_ms_per_event", "floor",
                                            "library_cpu_ms_per_event",
                                            "latency_at_half_capacity")},
        "thread": thread,
        "ratio": default["ratio_to_ideal"]["median"],
        "ratio_min": default["ratio_to_ideal"]["min"],
        "ratio_max": default["ratio_to_ideal"]["max"],
        "target": TARGET_SHARE, "met": default["met"], "met_in_thread_mode": thread["met"],
        "note": "; ".join(_said(mode, modes[mode]) for mode in MODES)
                + f"; checkpoints every {CHECKPOINT_MS} ms.",
    }
