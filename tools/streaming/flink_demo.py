"""`make demo-flink`: the main job as a streaming Flink job, from a Kafka topic to Kafka topics.

Starts a Kafka broker (tests/_kafka.py: Kafka from its Maven jars, KRaft, one
node, on a free loopback port), creates the input, intents and errors topics
(two partitions each), starts the native Flink job on them
(``templates/flink/agent_job.py`` on a local MiniCluster: the example support
agent, the local model of ``make demo``, exactly-once sinks, checkpoints every
second), publishes examples/events.jsonl at a steady rate, and shows one live
line: outcomes per second, lines pending (queued or in flight in the job, or
done and waiting for their checkpoint), and p50/p99 latency from publish to
the committed intent or dead letter. Once every line is accounted for it
prints `make demo`'s summary (from the job's counters and the committed
topics) and its own line. Exits 1 with a one-line reason if a line
is lost or it times out.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

from beam_agents._summary import print_summary
from beam_agents.flink._metrics import COUNTERS_DIR_PARAMETER, read_tallies
from beam_agents.model import ModelConfig
from tools.streaming._common import REPO, Published, fmt_ms, percentile
from tools.streaming._flink import FlinkJob, KafkaOutcomes, Topics

#: The flags of `make demo`'s job, on Flink (the agent, its model and stores).
PRICE_IN, PRICE_OUT = 0.15, 0.60
AGENT_FLAGS = ["--agent", "examples.support_agent:agent", "--model_outage", "40:4",
               "--model_quota", "60", "--model_price_in_per_mtok", str(PRICE_IN),
               "--model_price_out_per_mtok", str(PRICE_OUT)]


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.streaming.flink_demo",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", default=str(REPO / "examples" / "events.jsonl"))
    parser.add_argument("--limit", type=int, default=0, help="publish only the first N lines")
    parser.add_argument("--rate", type=float, default=50.0, help="lines published per second")
    parser.add_argument("--model_latency_ms", type=int, default=100)
    parser.add_argument("--checkpointing_interval_ms", type=int, default=1000)
    parser.add_argument("--out", default=str(REPO / "out" / "flink-streaming"))
    parser.add_argument("--timeout_s", type=float, default=240.0,
                        help="give up if the outcomes are not all in by then")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    warnings.filterwarnings("ignore", category=FutureWarning)
    from tests._kafka import KafkaBroker, KafkaBrokerError  # noqa: PLC0415

    lines = [line for line in Path(args.events).read_bytes().splitlines() if line.strip()]
    lines = lines[:args.limit] if args.limit else lines
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    counters = out / "counters"
    counters.mkdir()
    started = time.monotonic()
    broker = KafkaBroker()
    try:
        bootstrap = broker.start()
    except KafkaBrokerError as exc:
        print(f"demo-flink: the Kafka broker did not start: {exc}", file=sys.stderr)
        return 1
    job = outcomes = None
    try:
        topics = Topics(bootstrap)
        print(f"Kafka {bootstrap}; topics input/intents/errors-{topics.name}; the Flink job "
              f"logs to {out}/", file=sys.stderr)
        flags = [*topics.job_flags(), *AGENT_FLAGS,
                 "--model_latency_ms", str(args.model_latency_ms),
                 "--checkpointing_interval_ms", str(args.checkpointing_interval_ms),
                 "--idle_timeout_ms", "1000", "--parallelism", "2",
                 "--call_journal", "sqlite", "--call_journal_path", str(out / "calls.sqlite"),
                 "--longterm_store", "sqlite", "--sqlite_path", str(out / "longterm.sqlite"),
                 "--flink_conf", f"pipeline.global-job-parameters={COUNTERS_DIR_PARAMETER}:"
                 f"{counters}"]
        job = FlinkJob(flags, out)
        published = Published()
        outcomes = KafkaOutcomes(topics, published)
        outcomes.start()
        reason = _drive(args, job, topics, outcomes, published, lines, started)
        print(file=sys.stderr)
        if reason:
            print(f"demo-flink FAILED: {reason}\n{job.log_tail()}", file=sys.stderr)
            return 1
        elapsed = time.monotonic() - started
        _summary(outcomes, published=len(published), counters_dir=counters, topics=topics,
                 elapsed_s=elapsed, checkpoint_ms=args.checkpointing_interval_ms)
        latencies = [ms for _, ms in outcomes.latencies]
        print(f"flink on kafka: published {len(published)}  intents {outcomes.intents}  "
              f"dead letters {outcomes.dead_letters}  accounted {outcomes.ended}/"
              f"{len(published)}  latency p50 {fmt_ms(percentile(latencies, 50))}  "
              f"p99 {fmt_ms(percentile(latencies, 99))}  (checkpoints every "
              f"{args.checkpointing_interval_ms} ms)  wall {elapsed:.1f} s")
        return 0
    finally:
        if outcomes is not None:
            outcomes.stop()
        if job is not None:
            job.stop()
        broker.stop()


def _summary(outcomes: KafkaOutcomes, *, published: int, counters_dir: Path, topics: Topics,
             elapsed_s: float, checkpoint_ms: int) -> None:
    """`make demo`'s summary, from the job's counters and the committed topics.

    The counters are the tallies each Activate subtask writes as it reports
    (`FlinkMetrics.write_tally`; the job runs on this machine). They are read
    once they stop changing, while clock records keep the job's callbacks
    coming, so the last activations' counts are in. Events read are the
    published lines (each one is accounted for: an intent or a dead letter),
    which leaves the clock records out, and errors by stage come from the
    committed errors topic, as `make demo`'s come from its dead letters.
    """
    tallies = read_tallies(counters_dir)
    for _ in range(10):
        topics.clock()
        time.sleep(0.5)
        latest = read_tallies(counters_dir)
        if latest == tallies:
            break
        tallies = latest
    counts, peaks, notes, restarted = tallies
    counters = Counter({key: value for key, value in counts.items()
                        if not key[1].startswith("errors_")})
    counters[("beam_agents.runtime", "events")] = published
    for stage, count in outcomes.errors_by_stage.items():
        counters[("beam_agents.runtime", f"errors_{stage}")] = count
    runner = (f"native Flink job on Kafka, local MiniCluster; outputs committed on checkpoints "
              f"every {checkpoint_ms} ms")
    if restarted:
        runner += f"; {restarted} subtask(s) restarted, their counts start at their restore"
    print_summary(counters, peaks, notes, elapsed_s=elapsed_s, runner=runner,
                  model=ModelConfig(price_in_per_mtok=PRICE_IN, price_out_per_mtok=PRICE_OUT))


def _drive(args: argparse.Namespace, job: FlinkJob, topics: Topics,  # noqa: PLR0917
           outcomes: KafkaOutcomes, published: Published, lines: list[bytes],
           started: float) -> str | None:
    """Publish at the rate with the live line; None once every line has an outcome."""
    deadline = time.monotonic() + args.timeout_s
    # The first two lines go alone: the second moves event time past the
    # first, whose outcome then shows the job is up (start-up is in no
    # latency but theirs, which are left out).
    for number in (0, 1):
        published.untimed.add(number)
        published.add(number, lines[number], time.monotonic())
        topics.publish(lines[number])
    topics.flush()
    print("  waiting for the Flink job to start (the first line's outcome) ...", end="",
          file=sys.stderr, flush=True)
    while outcomes.ended < 1:
        if not job.alive():
            return f"the Flink job exited with {job.process.returncode} during start-up"
        if time.monotonic() > deadline:
            return f"timed out after {args.timeout_s:.0f}s waiting for the job to start"
        time.sleep(0.05)
    begin, sent, last_shown, clocked = time.monotonic(), 2, 0.0, 0.0
    window: list[tuple[float, int]] = []
    while True:
        now = time.monotonic()
        while sent < len(lines) and now >= begin + (sent - 2) / args.rate:
            published.add(sent, lines[sent], time.monotonic())
            topics.publish(lines[sent])
            sent += 1
        if sent == len(lines) and now >= clocked + 1:
            topics.clock()  # event time passes the last lines (again each second: see _flink)
            clocked = now
        if outcomes.ended >= len(lines):
            return None
        if not job.alive():
            return f"the Flink job exited with {job.process.returncode} before the end"
        if now > deadline:
            return (f"timed out after {args.timeout_s:.0f}s: {len(lines) - outcomes.ended} of "
                    f"{len(lines)} published line(s) have no outcome")
        if now - last_shown >= 0.25:
            window.append((now, outcomes.ended))
            while len(window) > 2 and now - window[0][0] > 3:
                window.pop(0)
            (t0, e0), (t1, e1) = window[0], window[-1]
            with outcomes.lock:
                recent = [ms for _, ms in outcomes.latencies[-2000:]]
            print(f"\r  {now - started:5.1f}s  published {sent}/{len(lines)}  ended "
                  f"{outcomes.ended}  {(e1 - e0) / max(t1 - t0, 1e-9):6.1f} events/s  pending "
                  f"{sent - outcomes.ended:>4}  p50 {fmt_ms(percentile(recent, 50))}  "
                  f"p99 {fmt_ms(percentile(recent, 99))}   ", end="", file=sys.stderr,
                  flush=True)
            last_shown = now
        time.sleep(0.005)


if __name__ == "__main__":
    sys.exit(main())
