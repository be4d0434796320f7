"""`make demo-streaming`: the main job's events through Pub/Sub, live.

Starts the official Pub/Sub emulator, creates the input, intents and errors
topics with their subscriptions, starts ``beam-agents run`` on the input
subscription (the example support agent, the local model, SQLite journal and
long-term store under out/streaming/), publishes examples/events.jsonl at a
steady rate, and shows one live line: outcomes per second, activations in
flight and events queued (from the run's ``progress`` line, ``?`` without
it), and p50/p99 latency from publish to the first intent or dead letter.
Once every published line has an outcome it stops the run with SIGINT,
prints the run's summary and its own line, and stops the emulator. Exits 1
with a one-line reason if a line is lost or it times out.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
import warnings
from pathlib import Path

from tools.streaming._common import (
    REPO,
    Outcomes,
    Published,
    Route,
    Run,
    fmt_ms,
    percentile,
)


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.streaming.demo",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", default=str(REPO / "examples" / "events.jsonl"))
    parser.add_argument("--limit", type=int, default=0, help="publish only the first N lines")
    parser.add_argument("--rate", type=float, default=50.0, help="lines published per second")
    parser.add_argument("--model_latency_ms", type=int, default=100)
    parser.add_argument("--out", default=str(REPO / "out" / "streaming"))
    parser.add_argument("--timeout_s", type=float, default=120.0,
                        help="give up if the outcomes are not all in by then")
    return parser.parse_args(argv)


def _live(run: Run, outcomes: Outcomes, published: Published, total: int,  # noqa: PLR0917
          window: list[tuple[float, int]], started: float) -> str:
    now = time.monotonic()
    progress = run.progress if run.progress_at and now - run.progress_at < 5 else None
    ended = outcomes.ended  # outcomes seen on the output subscriptions
    window.append((now, ended))
    while len(window) > 2 and now - window[0][0] > 3:
        window.pop(0)
    (t0, e0), (t1, e1) = window[0], window[-1]
    rate = (e1 - e0) / (t1 - t0) if t1 > t0 else 0.0
    with outcomes.lock:
        recent = [ms for _, ms in outcomes.latencies[-2000:]]
    in_flight = str(progress.get("in_flight", "?")) if progress else "?"
    queued = str(progress.get("queued", "?")) if progress else "?"
    return (f"\r  {now - started:5.1f}s  published {len(published)}/{total}  "
            f"ended {outcomes.ended}  {rate:6.1f} events/s  in flight {in_flight:>3}  "
            f"queued {queued:>4}  p50 {fmt_ms(percentile(recent, 50))}  "
            f"p99 {fmt_ms(percentile(recent, 99))}   ")


def main(argv: list[str] | None = None) -> int:  # noqa: PLR0915
    args = _args(argv)
    warnings.filterwarnings("ignore", category=FutureWarning)  # google client libraries
    from tests._emulators import PUBSUB, Emulator, EmulatorError  # noqa: PLC0415

    lines = [line.rstrip(b"\r\n") for line in Path(args.events).read_bytes().splitlines()]
    lines = [line for line in lines if line]
    if args.limit:
        lines = lines[:args.limit]
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    started = time.monotonic()
    emulator = Emulator(PUBSUB)
    try:
        host = emulator.start()
    except EmulatorError as exc:
        print(f"demo-streaming: the Pub/Sub emulator did not start: {exc}", file=sys.stderr)
        return 1
    os.environ[PUBSUB.host_env] = host
    route = run = outcomes = None
    try:
        route = Route()
        print(f"Pub/Sub emulator on {host}; topics input/intents/errors-{route.name}",
              file=sys.stderr)
        run = Run([*route.run_flags(), "--agent", "examples.support_agent:agent",
                   "--model_latency_ms", str(args.model_latency_ms),
                   "--model_outage", "40:4", "--model_quota", "60",
                   "--model_price_in_per_mtok", "0.15", "--model_price_out_per_mtok", "0.60",
                   "--call_journal", "sqlite", "--call_journal_path", str(out / "calls.sqlite"),
                   "--longterm_store", "sqlite", "--sqlite_path", str(out / "longterm.sqlite")],
                  {PUBSUB.host_env: host}, out / "run.log")
        published = Published()
        outcomes = Outcomes(route, published)
        outcomes.start()
        reason = _drive(args, run, route, outcomes, published, lines, started)
        print(file=sys.stderr)
        if reason:
            print(f"demo-streaming FAILED: {reason}", file=sys.stderr)
            if run.alive():
                run.kill()
            print(run.log_tail(), file=sys.stderr)
            return 1
        code = run.interrupt(timeout_s=60)
        time.sleep(0.5)  # anything the run published while it stopped
        outcomes.stop()
        print(run.stdout, end="")
        if code != 0:
            print(f"demo-streaming FAILED: the run exited with {code} after SIGINT\n"
                  f"{run.log_tail()}", file=sys.stderr)
            return 1
        latencies = [ms for _, ms in outcomes.latencies]
        print(f"streaming: published {len(published)}  intents {outcomes.intents}  "
              f"dead letters {outcomes.dead_letters}  accounted {outcomes.ended}/"
              f"{len(published)}  latency p50 {fmt_ms(percentile(latencies, 50))}  "
              f"p99 {fmt_ms(percentile(latencies, 99))}  wall {time.monotonic() - started:.1f} s")
        if outcomes.ended != len(published):
            print(f"demo-streaming FAILED: {len(published) - outcomes.ended} published "
                  "line(s) have no outcome", file=sys.stderr)
            return 1
        return 0
    finally:
        if outcomes is not None:
            outcomes.stop()
        if run is not None and run.alive():
            run.kill()
        if route is not None:
            route.close()
        emulator.stop()


def _drive(args: argparse.Namespace, run: Run, route: Route, outcomes: Outcomes,  # noqa: PLR0917
           published: Published, lines: list[bytes], started: float) -> str | None:
    """Publish at the rate while showing the live line; None once every line has an outcome."""
    futures = []
    window: list[tuple[float, int]] = []
    last_shown = 0.0
    deadline = time.monotonic() + args.timeout_s
    # The first line goes alone and is waited for: the run's start-up (a few
    # seconds of Beam) is then in no latency but its own, which is left out.
    published.untimed.add(0)
    published.add(0, lines[0], time.monotonic())
    route.publisher.publish(route.topic("input"), lines[0]).result(timeout=30)
    print("  waiting for the run to start (the first line's outcome) ...", end="",
          file=sys.stderr, flush=True)
    while outcomes.ended < 1:
        if not run.alive():
            return f"the run exited with {run.process.returncode} during start-up"
        if time.monotonic() > deadline:
            return f"timed out after {args.timeout_s:.0f}s waiting for the run to start"
        time.sleep(0.02)
    begin = time.monotonic()
    sent = 1
    while True:
        now = time.monotonic()
        while sent < len(lines) and now >= begin + (sent - 1) / args.rate:
            published.add(sent, lines[sent], time.monotonic())
            futures.append(route.publisher.publish(route.topic("input"), lines[sent]))
            sent += 1
        if sent == len(lines):
            for future in futures:
                future.result(timeout=30)
            futures.clear()
            if outcomes.ended >= len(lines):
                return None
        if not run.alive():
            return f"the run exited with {run.process.returncode} before the end"
        if now > deadline:
            return (f"timed out after {args.timeout_s:.0f}s: {len(lines) - outcomes.ended} of "
                    f"{len(lines)} published line(s) have no outcome")
        if now - last_shown >= 0.25:
            print(_live(run, outcomes, published, len(lines), window, started),
                  end="", file=sys.stderr, flush=True)
            last_shown = now
        time.sleep(0.005)


if __name__ == "__main__":
    sys.exit(main())
