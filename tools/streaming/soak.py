"""`make soak`: a long streaming run through Pub/Sub and Firestore, with faults on a schedule.

R events/s over many keys go through the Pub/Sub emulator into ``beam-agents
run`` (the example support agent, the local model at 200 ms), with long-term
memory and the call journal on the official Firestore emulator. Faults, at
fixed fractions of the duration: a 503 burst of the provider in each run
(``--model_outage``), a 429 quota a little above R (``--model_quota``, which
bites while a restarted run catches up), the Firestore emulator stopped and
restarted on its port (it keeps no data across the restart), and the run
SIGKILLed and restarted over the same subscription and journal.

Figures (JSON): events lost, and what the killed run had pulled and not ended
(the local runner acknowledges on pull, so those are lost; Dataflow
redelivers them); intents duplicated, and whether every duplicate is
byte-identical (deduplicable by (entity_key, event_id, index)); model calls
re-paid; RSS of the run process over time and its growth after warm-up;
p50/p99 latency from publish to outcome; CPU seconds per event. A PNG plots
RSS and latency over time. Exits 1 if a check fails.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.streaming._common import (
    PROJECT,
    REPO,
    Outcomes,
    Published,
    Route,
    Run,
    percentile,
    proc_sample,
    summary_value,
)

#: How long each run's provider outage lasts, from its first failing call: a real
#: outage is a span of time, however few calls an open breaker lets through in it.
OUTAGE_S = 3

TEXTS = ["my invoice is wrong", "the app crashes on login", "how do I export my data?",
         "thanks, that worked", "the API returns 500", "can I change my plan?"]


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.streaming.soak",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration_s", type=float, default=600.0, help="publishing time")
    parser.add_argument("--rate", type=float, default=50.0, help="events published per second")
    parser.add_argument("--keys", type=int, default=1000, help="entity keys")
    parser.add_argument("--model_latency_ms", type=int, default=200)
    parser.add_argument("--max_in_flight", type=int, default=64)
    parser.add_argument("--retry_max_ms", type=int, default=60_000,
                        help="--retry_max_ms of the runs: how long a key waits at most between "
                             "retries of the 503 burst (the runs' default, 60 s)")
    parser.add_argument("--quota", type=int, default=0,
                        help="--model_quota of the runs (default: 1.2 x rate, rounded up)")
    parser.add_argument("--drain_s", type=float, default=0.0,
                        help="longest wait for outcomes after the last publish "
                             "(default: max(30, duration / 5))")
    parser.add_argument("--json", default=str(REPO / "benchmarks" / "results" / "soak.json"))
    parser.add_argument("--png", default=str(REPO / "docs" / "soak.png"))
    parser.add_argument("--out", default=str(REPO / "out" / "soak"))
    return parser.parse_args(argv)


def _line(n: int, keys: int) -> bytes:
    return json.dumps({"entity_key": f"soak-{n % keys:05d}", "event_id": f"s{n:07d}",
                       "event_time_ms": 1_767_225_600_000 + 20 * n,
                       "payload": {"text": TEXTS[(n // keys) % len(TEXTS)]}}).encode()


@dataclass
class Sample:
    t: float
    run: int
    rss: int
    cpu: float


@dataclass
class Soak:
    args: argparse.Namespace
    route: Route
    firestore: Any
    env: dict[str, str]
    out: Path
    begin: float = field(default_factory=time.monotonic)
    runs: list[Run] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    faults: list[dict[str, Any]] = field(default_factory=list)
    cpu_of_killed: float = 0.0
    kill: dict[str, Any] = field(default_factory=dict)

    def now(self) -> float:
        return time.monotonic() - self.begin

    def start_run(self, outage_first: int) -> Run:
        suffix = self.route.name
        quota = self.args.quota or math.ceil(self.args.rate * 1.2)
        run = Run([*self.route.run_flags(), "--agent", "examples.support_agent:agent",
                   "--model_latency_ms", str(self.args.model_latency_ms),
                   "--model_outage", f"{outage_first}:{OUTAGE_S}s", "--model_quota", str(quota),
                   "--max_in_flight", str(self.args.max_in_flight),
                   "--retry_max_ms", str(self.args.retry_max_ms),
                   "--longterm_store", "firestore", "--firestore_project", PROJECT,
                   "--firestore_collection", f"soak-longterm-{suffix}",
                   "--call_journal", "firestore",
                   "--call_journal_collection", f"soak-calls-{suffix}"],
                  self.env, self.out / f"run{len(self.runs) + 1}.log")
        self.runs.append(run)
        self.faults.append({"at_s": round(self.now(), 1), "fault": f"run {len(self.runs)} "
                            f"started (503 burst: {OUTAGE_S} s from call {outage_first}; "
                            f"429 quota {quota}/s)"})
        return run

    def sample(self) -> None:
        run = self.runs[-1]
        rss, cpu = proc_sample(run.pid)
        if rss is not None and cpu is not None:
            self.samples.append(Sample(self.now(), len(self.runs), rss, cpu))


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    warnings.filterwarnings("ignore", category=FutureWarning)
    from tests._emulators import FIRESTORE, PUBSUB, Emulator  # noqa: PLC0415

    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    pubsub, firestore = Emulator(PUBSUB), Emulator(FIRESTORE)
    started = time.monotonic()
    try:
        env = {PUBSUB.host_env: pubsub.start(), FIRESTORE.host_env: firestore.start(),
               "GOOGLE_CLOUD_PROJECT": PROJECT}
        os.environ.update(env)
        route = Route(f"soak{uuid.uuid4().hex[:6]}")
        soak = Soak(args, route, firestore, env, out)
        report = _soak(soak)
    finally:
        pubsub.stop()
        firestore.stop()
    report["wall_s"] = round(time.monotonic() - started, 1)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    _plot(report, Path(args.png))
    _print(report, args)
    return 0 if report["passed"] else 1


def _soak(soak: Soak) -> dict[str, Any]:
    args = soak.args
    duration, rate = args.duration_s, args.rate
    published = Published()
    outcomes = Outcomes(soak.route, published)
    outcomes.start()
    total = int(duration * rate)
    kill_at, fs_down_at, fs_down_for = fault_times(duration)
    run = soak.start_run(outage_first=max(1, int(0.15 * total)))
    # The first event goes alone and is waited for, so the run's start-up is
    # in no latency (its own is left out) and the schedule starts once it runs.
    published.untimed.add(0)
    published.add(0, _line(0, args.keys), time.monotonic())
    soak.route.publisher.publish(soak.route.topic("input"), _line(0, args.keys)).result()
    wait_until = time.monotonic() + 120
    while outcomes.ended < 1 and run.alive() and time.monotonic() < wait_until:
        time.sleep(0.05)
    soak.begin = time.monotonic()  # the schedule counts from here
    sent, next_sample, fs_state = 1, 0.0, "up"
    last_shown = 0.0
    while sent < total:
        now = soak.now()
        while sent < total and now >= (sent - 1) / rate:
            line = _line(sent, args.keys)
            published.add(sent, line, time.monotonic())
            soak.route.publisher.publish(soak.route.topic("input"), line)
            sent += 1
        if now >= next_sample:
            soak.sample()
            next_sample += 1.0
        fs_state = firestore_fault(soak, fs_state, now, fs_down_at, fs_down_for)
        if not soak.kill and now >= kill_at:
            soak.sample()
            progress = run.freeze()
            soak.cpu_of_killed = soak.samples[-1].cpu if soak.samples else 0.0
            run.kill()
            soak.kill = {"at_s": round(now, 1), "progress": progress,
                         "outcomes_before": outcomes.ended}
            soak.faults.append({"at_s": round(now, 1), "fault": "run 1 SIGKILLed"})
            run = soak.start_run(outage_first=max(1, int(0.2 * total)))
            soak.kill["restart_at"] = time.monotonic()
        if not run.alive():
            break
        if now - last_shown >= 5:
            _show(soak, outcomes, sent, total)
            last_shown = now
        time.sleep(0.005)
    return _finish(soak, run, outcomes, published)


def fault_times(duration: float) -> tuple[float, float, float]:
    """When, into a soak of `duration` s, the run is killed, and Firestore stops and for how long.

    One schedule for every mode, so their figures compare: the kill at 60 %,
    Firestore down at 35 % for 3 % of the run (4-15 s).
    """
    return 0.6 * duration, 0.35 * duration, min(15.0, max(4.0, 0.03 * duration))


def firestore_fault(soak: Any, state: str, now: float, down_at: float, down_for: float) -> str:
    """Stop the Firestore emulator at `down_at`, restart it `down_for` later; the new state.

    `state` goes "up" -> "down" -> "back"; each change is noted in `soak.faults`.
    """
    if state == "up" and now >= down_at:
        soak.firestore.stop()
        soak.faults.append({"at_s": round(now, 1), "fault": "Firestore emulator stopped"})
        return "down"
    if state == "down" and now >= down_at + down_for:
        soak.firestore.start()
        soak.faults.append({"at_s": round(soak.now(), 1),
                            "fault": "Firestore emulator restarted (empty)"})
        return "back"
    return state


def _show(soak: Soak, outcomes: Outcomes, sent: int, total: int) -> None:
    progress = soak.runs[-1].progress or {}
    with outcomes.lock:
        recent = [ms for _, ms in outcomes.latencies[-500:]]
    rss = soak.samples[-1].rss / 2**20 if soak.samples else 0
    p50, p99 = percentile(recent, 50) or 0, percentile(recent, 99) or 0
    print(f"\r  {soak.now():6.0f}s  run {len(soak.runs)}  published {sent}/{total}  ended "
          f"{outcomes.ended}  in flight {progress.get('in_flight', '?')}  queued "
          f"{progress.get('queued', '?')}  rss {rss:.0f} MiB  p50 {p50:.0f} ms  "
          f"p99 {p99:.0f} ms   ", end="", file=sys.stderr, flush=True)


def _finish(soak: Soak, run: Run, outcomes: Outcomes, published: Published) -> dict[str, Any]:
    args = soak.args
    # What the killed run took and had not ended: its frozen count of pulls
    # (counted before each ack) less the outcomes seen by then. The run's own
    # `ended` would not do: an event committed and not yet published counts there.
    pulled_not_ended = None
    progress = soak.kill.get("progress")
    if progress and "pulled" in progress:
        pulled_not_ended = progress["pulled"] - soak.kill["outcomes_before"]
    drain = args.drain_s or max(30.0, args.duration_s / 5)
    deadline = time.monotonic() + drain
    last_count, last_change = -1, time.monotonic()
    while time.monotonic() < deadline and run.alive():
        count = outcomes.ended
        if count != last_count:
            last_count, last_change = count, time.monotonic()
        if count >= len(published):
            break
        if (pulled_not_ended is not None and count >= len(published) - pulled_not_ended
                and time.monotonic() - last_change > 5):
            break  # what is missing is what the killed run took with it
        soak.sample()
        _show(soak, outcomes, len(published), len(published))
        time.sleep(1.0)
    print(file=sys.stderr)
    soak.sample()
    cpu_final = soak.samples[-1].cpu if soak.samples and soak.samples[-1].run == len(
        soak.runs) else 0.0
    code = run.interrupt(timeout_s=120)
    time.sleep(1.0)
    outcomes.stop()
    summary = run.stdout
    left = len(soak.route.drain("input"))  # never pulled: not lost, still there
    lost = len(published) - outcomes.ended - left
    duplicates, deduplicable = outcomes.duplicates()
    restart_at = soak.kill.get("restart_at")
    with outcomes.lock:
        committed_after = sum(1 for number, at in outcomes.first_at.items()
                              if restart_at is not None and at >= restart_at)
    paid2 = summary_value(summary, "model calls paid")
    re_paid = None if paid2 is None else max(0, paid2 - committed_after)
    latencies = [ms for _, ms in outcomes.latencies]
    rss = _rss_figures(soak)
    cpu_s = soak.cpu_of_killed + cpu_final
    checks = {
        "lost_within_what_the_killed_run_pulled": (
            lost <= pulled_not_ended if pulled_not_ended is not None and soak.kill
            else (lost == 0 if not soak.kill else False)),
        "duplicates_deduplicable": deduplicable,
        "re_paid_within_max_in_flight": re_paid is not None and re_paid <= args.max_in_flight,
        "run_stopped_cleanly": code == 0,
        "kill_happened": bool(soak.kill),
    }
    if args.duration_s >= 300 and rss["growth_pct"] is not None:
        checks["rss_growth_within_10pct"] = rss["growth_pct"] <= 10.0
    return {
        "duration_s": args.duration_s, "rate": args.rate, "keys": args.keys,
        "model_latency_ms": args.model_latency_ms, "max_in_flight": args.max_in_flight,
        "published": len(published), "with_outcome": outcomes.ended,
        "intents": outcomes.intents, "dead_letters": outcomes.dead_letters,
        "errors_by_stage": outcomes.errors_by_stage, "unmatched_outputs": outcomes.unmatched,
        "lost": lost, "pulled_not_ended_at_kill": pulled_not_ended,
        "left_in_subscription": left,
        "kill": {key: value for key, value in soak.kill.items() if key != "restart_at"},
        "duplicates": {"triples_seen_more_than_once": duplicates, "deduplicable": deduplicable},
        "calls": {"paid_by_run_2": paid2, "committed_after_restart": committed_after,
                  "re_paid": re_paid, "bound": args.max_in_flight,
                  "replayed_from_journal_run_2": summary_value(summary, "replayed from journal"),
                  "failed_run_2": summary_value(summary, "model calls failed"),
                  "rate_limited_run_2": summary_value(summary, "rate limited (429)"),
                  "how": "paid by the restarted run (its summary) minus the events whose first "
                         "outcome arrived after the restart; the killed run prints no summary"},
        "latency_ms": {"p50": percentile(latencies, 50), "p99": percentile(latencies, 99),
                       "series": _latency_series(outcomes, soak)},
        "rss": rss,
        "cpu_s_per_event": round(cpu_s / max(outcomes.ended, 1), 5),
        "cpu_s": round(cpu_s, 1),
        "faults": soak.faults,
        "run_2_exit_code": code,
        "run_2_summary": summary,
        "checks": checks,
        "passed": all(checks.values()),
    }


def _rss_figures(soak: Any, *, how: str = "run 1 (the longest stretch without a restart): "
                 "mean RSS of its last window over the mean of the window after a window of "
                 "warm-up") -> dict[str, Any]:
    """RSS over time (`soak.samples`) and its growth over the samples of run 1."""
    window = min(60.0, soak.args.duration_s / 10)
    series = [[round(s.t, 1), s.run, round(s.rss / 2**20, 1)] for s in soak.samples]
    first = [s for s in soak.samples if s.run == 1]
    growth = None
    if first:
        t0, t1 = first[0].t, first[-1].t
        early = [s.rss for s in first if t0 + window <= s.t < t0 + 2 * window]
        late = [s.rss for s in first if s.t >= t1 - window]
        if early and late and t1 - t0 >= 3 * window:
            growth = round((sum(late) / len(late) / (sum(early) / len(early)) - 1) * 100, 1)
    return {"growth_pct": growth, "window_s": window,
            "how": how,
            "peak_mib": max((s.rss for s in soak.samples), default=0) / 2**20,
            "series_t_run_mib": series}


def _latency_series(outcomes: Outcomes, soak: Any) -> list[list[float]]:
    bucket = 10.0 if soak.args.duration_s >= 300 else 5.0
    groups: dict[int, list[float]] = {}
    with outcomes.lock:
        for arrived, ms in outcomes.latencies:
            groups.setdefault(int((arrived - soak.begin) // bucket), []).append(ms)
    return [[(index + 0.5) * bucket, percentile(values, 50) or 0, percentile(values, 99) or 0]
            for index, values in sorted(groups.items())]


def _plot(report: dict[str, Any], path: Path, *, rss_label: str = "RSS of the run (MiB)",
          title: str = "soak", run_labels: dict[int, str] | None = None) -> None:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    figure, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    series = report["rss"]["series_t_run_mib"]
    for number in sorted({run for _, run, _ in series}):
        points = [(t, mib) for t, run, mib in series if run == number]
        label = (run_labels or {}).get(number, f"run {number}")
        top.plot([t for t, _ in points], [mib for _, mib in points], label=label)
    top.set_ylabel(rss_label)
    top.legend(loc="lower right")
    latency = report["latency_ms"]["series"]
    bottom.plot([t for t, _, _ in latency], [p50 for _, p50, _ in latency], label="p50")
    bottom.plot([t for t, _, _ in latency], [p99 for _, _, p99 in latency], label="p99")
    bottom.set_ylabel("publish -> outcome (ms)")
    bottom.set_xlabel("seconds since the first publish")
    bottom.set_yscale("log")
    bottom.legend(loc="upper left")
    for fault in report["faults"]:
        for axis in (top, bottom):
            axis.axvline(fault["at_s"], color="grey", linestyle=":", linewidth=0.8)
        bottom.annotate(fault["fault"].split(" (")[0], (fault["at_s"], 1), rotation=90,
                        fontsize=7, xycoords=("data", "axes fraction"), va="top")
    top.set_title(f"{title}: {report['rate']:g} events/s for {report['duration_s']:g} s, "
                  f"{report['published']} events, lost {report['lost']}")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _print(report: dict[str, Any], args: argparse.Namespace) -> None:
    calls, rss, latency = report["calls"], report["rss"], report["latency_ms"]
    print(f"soak: {report['published']} published over {report['duration_s']:g} s at "
          f"{report['rate']:g}/s; {report['intents']} intents, {report['dead_letters']} dead "
          f"letters {report['errors_by_stage']}")
    print(f"  lost {report['lost']} (the killed run had pulled and not ended "
          f"{report['pulled_not_ended_at_kill']}); left unpulled in the subscription "
          f"{report['left_in_subscription']}")
    print(f"  duplicated intents {report['duplicates']['triples_seen_more_than_once']} "
          f"(deduplicable: {report['duplicates']['deduplicable']})")
    print(f"  calls re-paid {calls['re_paid']} (bound {calls['bound']}; run 2 paid "
          f"{calls['paid_by_run_2']}, committed after the restart "
          f"{calls['committed_after_restart']})")
    print(f"  latency p50 {latency['p50']:.0f} ms  p99 {latency['p99']:.0f} ms; RSS peak "
          f"{rss['peak_mib']:.0f} MiB, growth {rss['growth_pct']}%; CPU "
          f"{report['cpu_s_per_event'] * 1000:.2f} ms/event; wall {report['wall_s']} s")
    _print_verdict(report, args)


def _print_verdict(report: dict[str, Any], args: argparse.Namespace) -> None:
    """The checks that failed, or PASSED, and where the figures went."""
    failed = [name for name, ok in report["checks"].items() if not ok]
    print("  PASSED" if not failed else f"  FAILED: {', '.join(failed)}")
    print(f"  figures: {args.json}  plot: {args.png}")


if __name__ == "__main__":
    sys.exit(main())
