"""`make soak ENGINE=flink`: the soak on the native Flink job, Kafka to Kafka, a TaskManager lost.

R events/s over many keys are published to a Kafka topic (a real broker,
tests/_kafka.py) and run by the native Flink job (``templates/flink/
agent_job.py`` with the Kafka flags, submitted with ``flink run -d`` to a
standalone cluster of two task managers, tests/_flink_cluster.py, at
parallelism 2 over two partitions, checkpoints every second): the example
support agent on the local model at 200 ms, with long-term memory and the
call journal on the official Firestore emulator. Faults, at fixed fractions
of the duration, as in the local runner's soak: a 503 burst of the provider
(``--model_outage``, in each Python worker), a 429 quota a little above each
worker's share of R (``--model_quota``, which bites while a restored job
catches up), the Firestore emulator stopped and restarted on its port (it
keeps no data across the restart), and, in place of a SIGKILL of the local
runner, the task managers that run the job SIGKILLed with their Python
workers and replaced, as a lost machine and its supervisor would; Flink
restores the last checkpoint and reads on from its offsets.

The Flink job promises more than the local runner can: exactly-once output.
So it checks that every published event has its intent or dead letter in the
committed output (read with ``read_committed``), **0 lost**, and that no
intent is there twice, **0 duplicated**, and that the job restored a
checkpoint and still runs. Figures (JSON): those, the job's counters (from
the tallies its subtasks write; a restored subtask counts from its restore),
RSS and CPU of the cluster's processes (job manager, task managers and their
Python workers) over time, and p50/p99 latency from publish to committed
outcome, which includes up to a checkpoint interval. A PNG plots RSS and
latency over time. Exits 1 if a check fails.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from beam_agents.flink._metrics import COUNTERS_DIR_PARAMETER, read_tallies
from tools.streaming._common import PROJECT, REPO, Published, percentile, proc_sample
from tools.streaming._flink import KafkaOutcomes, Topics
from tools.streaming.soak import (
    OUTAGE_S,
    Sample,
    _latency_series,
    _line,
    _plot,
    _print_verdict,
    _rss_figures,
    fault_times,
    firestore_fault,
)

PARALLELISM = 2
CHECKPOINT_MS = 1_000
#: The drain ends once no outcome came for this long: the job stopped making progress.
STALL_S = 60.0


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.streaming.flink_soak",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration_s", type=float, default=600.0, help="publishing time")
    parser.add_argument("--rate", type=float, default=15.0, help="events published per second")
    parser.add_argument("--keys", type=int, default=1000, help="entity keys")
    parser.add_argument("--model_latency_ms", type=int, default=200)
    parser.add_argument("--quota", type=int, default=0,
                        help="--model_quota of each Python worker (default: 1.2 x its share "
                             "of the rate, rounded up)")
    parser.add_argument("--drain_s", type=float, default=0.0,
                        help="longest wait for outcomes after the last publish "
                             "(default: max(120, duration))")
    parser.add_argument("--json", default=str(REPO / "benchmarks" / "results" /
                                              "soak-flink.json"))
    parser.add_argument("--png", default=str(REPO / "docs" / "soak-flink.png"))
    parser.add_argument("--out", default=str(REPO / "out" / "soak-flink"))
    return parser.parse_args(argv)


@dataclass
class FlinkSoak:
    args: argparse.Namespace
    cluster: Any  # tests._flink_cluster.FlinkCluster
    firestore: Any  # tests._emulators.Emulator
    topics: Topics
    out: Path
    begin: float = field(default_factory=time.monotonic)
    samples: list[Sample] = field(default_factory=list)
    faults: list[dict[str, Any]] = field(default_factory=list)
    cpu_by_pid: dict[int, float] = field(default_factory=dict)
    job_id: str = ""
    kill: dict[str, Any] = field(default_factory=dict)

    def now(self) -> float:
        return time.monotonic() - self.begin

    def fault(self, text: str) -> None:
        self.faults.append({"at_s": round(self.now(), 1), "fault": text})

    def sample(self) -> None:
        """RSS and CPU of every cluster process and its Python workers; CPU kept per process.

        A killed task manager's CPU is what it had used at its last sample, so
        `cpu_s` sums the processes ever seen, not only the live ones.
        """
        rss_total, seen = 0, False
        for pid in self.cluster.process_pids():
            rss, cpu = proc_sample(pid)
            if rss is None or cpu is None:
                continue
            seen = True
            rss_total += rss
            self.cpu_by_pid[pid] = cpu
        if seen:  # run 1 before the kill, 2 after: the plot's series
            self.samples.append(Sample(self.now(), 2 if self.kill else 1, rss_total,
                                       self.cpu_s()))

    def cpu_s(self) -> float:
        return sum(self.cpu_by_pid.values())

    def submit(self, counters: Path) -> None:
        from tests._flink_cluster import START_TIMEOUT_S  # noqa: PLC0415

        args = self.args
        quota = args.quota or math.ceil(args.rate * 1.2 / PARALLELISM)
        suffix = self.topics.name
        outage_first = max(1, int(0.15 * args.duration_s * args.rate / PARALLELISM))
        command = [self.cluster.flink, "run", "-d", "-m", self.cluster.rest, "--python",
                   str(REPO / "templates" / "flink" / "agent_job.py"), "-pyexec",
                   sys.executable, *self.topics.job_flags(),
                   "--agent", "examples.support_agent:agent",
                   "--model_latency_ms", str(args.model_latency_ms),
                   "--model_outage", f"{outage_first}:{OUTAGE_S}s",
                   "--model_quota", str(quota),
                   "--longterm_store", "firestore", "--firestore_project", PROJECT,
                   "--firestore_collection", f"soak-longterm-{suffix}",
                   "--call_journal", "firestore",
                   "--call_journal_collection", f"soak-calls-{suffix}",
                   "--checkpointing_interval_ms", str(CHECKPOINT_MS),
                   "--parallelism", str(PARALLELISM), "--idle_timeout_ms", "2000",
                   "--restart_attempts", "20", "--restart_delay_ms", "2000",
                   "--job_name", f"soak-{suffix}",
                   "--flink_conf",
                   f"pipeline.global-job-parameters={COUNTERS_DIR_PARAMETER}:{counters}"]
        done = subprocess.run(command, env=self.cluster.env, cwd=REPO, capture_output=True,
                              text=True, timeout=START_TIMEOUT_S * 2, check=False)
        found = re.search(r"JobID ([0-9a-f]{32})", done.stdout)
        if done.returncode != 0 or not found:
            raise RuntimeError(f"flink run failed ({done.returncode}):\n{done.stdout[-3000:]}"
                               f"\n{done.stderr[-3000:]}")
        self.job_id = found.group(1)
        self.faults.append({"at_s": 0.0, "fault": f"job submitted (503 burst: {OUTAGE_S} s "
                            f"from call {outage_first} of each worker; 429 quota {quota}/s "
                            "a worker)"})


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    warnings.filterwarnings("ignore", category=FutureWarning)
    import pyflink  # noqa: PLC0415

    from tests._emulators import FIRESTORE, Emulator  # noqa: PLC0415
    from tests._flink_cluster import standalone_cluster  # noqa: PLC0415
    from tests._kafka import KafkaBroker  # noqa: PLC0415

    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    (out / "counters").mkdir(parents=True)
    firestore, broker = Emulator(FIRESTORE), KafkaBroker()
    started = time.monotonic()
    try:
        os.environ.update({FIRESTORE.host_env: firestore.start(),
                           "GOOGLE_CLOUD_PROJECT": PROJECT})
        bootstrap = broker.start()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        home = Path(pyflink.__file__).resolve().parent
        conf = {"python": {"executable": sys.executable,
                           "client": {"executable": sys.executable}}}
        with standalone_cluster(home, out / "cluster", env, conf=conf) as cluster:
            topics = Topics(bootstrap, f"soak{uuid.uuid4().hex[:6]}")
            soak = FlinkSoak(args, cluster, firestore, topics, out)
            soak.submit(out / "counters")
            report = _soak(soak, out / "counters")
    finally:
        broker.stop()
        firestore.stop()
    report["wall_s"] = round(time.monotonic() - started, 1)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    _plot(report, Path(args.png), rss_label="RSS of the cluster (MiB)",
          title="soak on Flink", run_labels={1: "before the kill", 2: "after the kill"})
    _print(report, args)
    return 0 if report["passed"] else 1


def _soak(soak: FlinkSoak, counters: Path) -> dict[str, Any]:
    args = soak.args
    duration, rate = args.duration_s, args.rate
    published = Published()
    outcomes = KafkaOutcomes(soak.topics, published)
    outcomes.start()
    total = int(duration * rate)
    kill_at, fs_down_at, fs_down_for = fault_times(duration)
    # The first two events go alone: the second moves event time past the first,
    # whose outcome shows the job runs; start-up is in no latency but theirs,
    # which are left out, and the schedule starts from there.
    for number in (0, 1):
        published.untimed.add(number)
        published.add(number, _line(number, args.keys), time.monotonic())
        soak.topics.publish(_line(number, args.keys))
    soak.topics.flush()
    wait_until = time.monotonic() + 180
    while outcomes.ended < 1 and time.monotonic() < wait_until:
        time.sleep(0.1)
    soak.begin = time.monotonic()
    sent, next_sample, fs_state, last_shown = 2, 0.0, "up", 0.0
    while sent < total:
        now = soak.now()
        while sent < total and now >= (sent - 2) / rate:
            line = _line(sent, args.keys)
            published.add(sent, line, time.monotonic())
            soak.topics.publish(line)
            sent += 1
        if now >= next_sample:
            soak.sample()
            next_sample += 1.0
        fs_state = firestore_fault(soak, fs_state, now, fs_down_at, fs_down_for)
        if not soak.kill and now >= kill_at:
            _kill(soak, outcomes)
        if now - last_shown >= 5:
            _show(soak, outcomes, sent, total)
            last_shown = now
        time.sleep(0.005)
    return _finish(soak, outcomes, published, counters)


def _kill(soak: FlinkSoak, outcomes: KafkaOutcomes) -> None:
    """SIGKILL the task managers that run the job, with their Python workers; start new ones."""
    from tests._flink_cluster import kill_tree  # noqa: PLC0415

    soak.sample()
    victims = soak.cluster.job_task_manager_pids(soak.job_id)
    for pid in victims:
        kill_tree(pid)
    soak.kill = {"at_s": round(soak.now(), 1), "task_managers": len(victims),
                 "outcomes_before": outcomes.ended}
    soak.fault(f"{len(victims)} task manager(s) SIGKILLed")
    time.sleep(1.0)
    soak.cluster.restore_task_managers()
    soak.fault("task managers replaced")


def _show(soak: FlinkSoak, outcomes: KafkaOutcomes, sent: int, total: int) -> None:
    with outcomes.lock:
        recent = [ms for _, ms in outcomes.latencies[-500:]]
    rss = soak.samples[-1].rss / 2**20 if soak.samples else 0
    p50, p99 = percentile(recent, 50) or 0, percentile(recent, 99) or 0
    print(f"\r  {soak.now():6.0f}s  published {sent}/{total}  ended {outcomes.ended}  "
          f"pending {sent - outcomes.ended}  rss {rss:.0f} MiB  p50 {p50:.0f} ms  "
          f"p99 {p99:.0f} ms   ", end="", file=sys.stderr, flush=True)


def _finish(soak: FlinkSoak, outcomes: KafkaOutcomes, published: Published,
            counters: Path) -> dict[str, Any]:
    args = soak.args
    # The job catches up after its faults for as long as it needs: the drain
    # ends once every event has its outcome, or once none came for `STALL_S`
    # (the job stopped making progress), or at the cap.
    deadline = time.monotonic() + (args.drain_s or max(120.0, args.duration_s))
    last_count, last_change = -1, time.monotonic()
    stalled = False
    while time.monotonic() < deadline and outcomes.ended < len(published):
        if outcomes.ended != last_count:
            last_count, last_change = outcomes.ended, time.monotonic()
        elif time.monotonic() - last_change > STALL_S:
            stalled = True
            break
        # Event time moves only with the stream's records: clock records move it past
        # the last events (again each second, as Flink checkpoints no watermark).
        soak.topics.clock()
        soak.sample()
        _show(soak, outcomes, len(published), len(published))
        time.sleep(1.0)
    drained_s = round(soak.now() - args.duration_s, 1)
    print(file=sys.stderr)
    soak.sample()
    state = soak.cluster.job_state(soak.job_id)
    restored = soak.cluster.restored_checkpoint(soak.job_id)
    tallies, peaks, _, restarted = read_tallies(counters)
    soak.cluster.cancel_jobs()
    time.sleep(2.0)  # what the last checkpoint committed reaches the readers
    outcomes.stop()
    lost = len(published) - outcomes.ended
    duplicates, _ = outcomes.duplicates()
    latencies = [ms for _, ms in outcomes.latencies]
    rss = _rss_figures(soak, how="the cluster's processes before the kill: mean RSS of the "
                       "last window over the mean of the window after a window of warm-up")
    checks = {
        "no_event_lost": lost == 0,
        "no_intent_duplicated": duplicates == 0,
        "kill_happened": bool(soak.kill),
        "restored_a_checkpoint": restored is not None,
        "job_still_running": state == "RUNNING",
    }
    if args.duration_s >= 300 and rss["growth_pct"] is not None:
        checks["rss_growth_within_10pct"] = rss["growth_pct"] <= 10.0
    job_counters = {f"{namespace}:{name}": value
                    for (namespace, name), value in sorted(tallies.items())}
    return {
        "engine": "flink", "duration_s": args.duration_s, "rate": args.rate, "keys": args.keys,
        "model_latency_ms": args.model_latency_ms, "parallelism": PARALLELISM,
        "checkpoint_interval_ms": CHECKPOINT_MS,
        "published": len(published), "with_outcome": outcomes.ended,
        "intents": outcomes.intents, "dead_letters": outcomes.dead_letters,
        "errors_by_stage": outcomes.errors_by_stage, "unmatched_outputs": outcomes.unmatched,
        "lost": lost, "duplicated_intents": duplicates,
        "drain": {"s_after_publishing": drained_s, "stalled": stalled,
                  "how": f"until every event had its outcome, or none came for {STALL_S:g} s, "
                         "or the cap (--drain_s)"},
        "kill": soak.kill, "restored_checkpoint": restored, "job_state_at_end": state,
        "job_counters": job_counters, "job_peaks": {
            f"{namespace}:{name}": value for (namespace, name), value in sorted(peaks.items())},
        "subtasks_restarted": restarted,
        "latency_ms": {"p50": percentile(latencies, 50), "p99": percentile(latencies, 99),
                       "series": _latency_series(outcomes, soak)},
        "rss": rss,
        "cpu_s_per_event": round(soak.cpu_s() / max(outcomes.ended, 1), 5),
        "cpu_s": round(soak.cpu_s(), 1),
        "faults": soak.faults,
        "checks": checks,
        "passed": all(checks.values()),
    }


def _print(report: dict[str, Any], args: argparse.Namespace) -> None:
    rss, latency, counts = report["rss"], report["latency_ms"], report["job_counters"]
    print(f"soak on flink: {report['published']} published over {report['duration_s']:g} s "
          f"at {report['rate']:g}/s; {report['intents']} intents, {report['dead_letters']} "
          f"dead letters {report['errors_by_stage']}")
    print(f"  lost {report['lost']}; duplicated intents {report['duplicated_intents']} "
          f"(committed output, read_committed)")
    print(f"  {report['kill'].get('task_managers', 0)} task manager(s) killed at "
          f"{report['kill'].get('at_s')} s; restored checkpoint {report['restored_checkpoint']}; "
          f"job {report['job_state_at_end']} at the end")
    print(f"  job counters: paid calls {counts.get('beam_agents.model:paid_calls', 0)}, failed "
          f"{counts.get('beam_agents.model:provider_errors', 0)}, suspended "
          f"{counts.get('beam_agents.runtime:suspended', 0)}, rate limited "
          f"{counts.get('beam_agents.model:rate_limited', 0)} (a restored subtask counts from "
          "its restore)")
    print(f"  latency p50 {latency['p50'] or 0:.0f} ms  p99 {latency['p99'] or 0:.0f} ms "
          f"(checkpoints every {report['checkpoint_interval_ms']} ms); RSS peak "
          f"{rss['peak_mib']:.0f} MiB, growth {rss['growth_pct']}%; CPU "
          f"{report['cpu_s_per_event'] * 1000:.2f} ms/event; wall {report['wall_s']} s")
    _print_verdict(report, args)


if __name__ == "__main__":
    sys.exit(main())
