"""B9. Quota utilisation: worker processes at a provider's quota, learning their share.

Each case starts a `QuotaServer` (`tests._quota_server`): an OpenAI-compatible
API behind one account-wide token bucket of Q requests per second (a second's
worth of burst), answering after 200 ms, and answering 429 with
``Retry-After: 1`` once the bucket is empty. One or two worker processes,
each ``beam-agents run`` on the DirectRunner with 64 keys in flight, a
one-call agent (`benchmarks._agents.slow_reply`) and the OpenAI provider,
share that quota and one API key with no coordination and no
``--model_max_rps`` (invariant 11). The cases vary what a worker knows:

* **fresh**: nothing: it learns its share from the 429s;
* **remembered**: a first pair of runs learned the quota and kept it in the
  call journal (a shared SQLite file); the measured run starts from it;
* **headers**: the server sends ``x-ratelimit-limit/remaining/reset-requests``,
  as OpenAI-compatible servers do, and the worker reads the limit from its
  first answer.

The server keeps the books. Measured, per case:

* **whole_run_share**: the ideal time (calls / Q) over the time from the first
  request to the last answer: the whole job as the quota saw it, warm-up and
  the tail after a worker finished included;
* **run_share**: the same over the processes' wall time, the runner's own
  start-up included (reported apart as **startup_s**);
* **share**: requests served over what the quota allows after warm-up (from
  5 s after the first 429, to when the 95th percentile of the answers is in
  or, with two workers, when the first of them has its last answer);
* **429 rate**: 429s over requests after warm-up, and over the whole run;
* **ends_s**: when each worker had its last answer (a worker that finishes
  early leaves the other alone with the quota);
* **early**: requests that came back, on the connection that had carried a
  429, inside its Retry-After (0 is the only right answer).

The baseline measured in the same run is the quota itself: the ideal time is
calls / Q. The headline ``ratio`` is the worst fresh case's whole-run share;
the targets are >= 0.85 over the whole run with two fresh workers, >= 0.95
with the rate remembered, and >= 0.9 with <= 1 % 429s after warm-up.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._harness import Profile
from tests._quota_server import QuotaServer, QuotaStats

__all__ = ["TARGET_429", "TARGET_REMEMBERED", "TARGET_SHARE", "TARGET_WHOLE_RUN", "run"]

TARGET_WHOLE_RUN = 0.85
TARGET_REMEMBERED = 0.95
TARGET_SHARE = 0.9
TARGET_429 = 0.01
LATENCY_MS = 200
KEYS = 64
WARM_UP_S = 5.0
ROOT = Path(__file__).resolve().parents[1]


def _events(path: Path, *, worker: str, keys: int, per_key: int) -> None:
    lines = [json.dumps({"entity_key": f"{worker}-{k:02d}", "event_id": f"e{n:03d}",
                         "event_time_ms": 1_000 * n + k,
                         "payload": {"text": f"{worker}-{k:02d} question {n}"}})
             for n in range(per_key) for k in range(keys)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _worker(folder: Path, server: QuotaServer, name: str, per_key: int,
            journal: Path | None) -> subprocess.Popen[str]:
    events = folder / f"{name}.jsonl"
    _events(events, worker=name, keys=KEYS, per_key=per_key)
    env = {**os.environ, "B9_KEY": "b9-account"}
    command = [sys.executable, "-m", "beam_agents", "run", "--input_files", str(events),
               "--output_path", str(folder / name / "intents.jsonl"),
               "--errors_path", str(folder / name / "errors.jsonl"),
               "--agent", "benchmarks._agents:slow_reply", "--model_provider", "openai",
               "--model_id", "m", "--model_base_url", server.url,
               "--model_api_key_env", "B9_KEY", "--max_in_flight", str(KEYS)]
    if journal is not None:
        command += ["--call_journal", "sqlite", "--call_journal_path", str(journal)]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _run_workers(folder: Path, server: QuotaServer, names: list[str], per_key: int,
                 journal: Path | None) -> float:
    """Run the workers to the end side by side; returns their wall time."""
    started = time.monotonic()
    jobs = [_worker(folder, server, name, per_key, journal) for name in names]
    for job in jobs:
        _, stderr = job.communicate(timeout=600)
        if job.returncode != 0:
            raise RuntimeError(f"a B9 worker failed:\n{stderr[-3000:]}")
    return time.monotonic() - started


def _converged_s(stats: QuotaStats, since: float, quiet_s: float = 8.0) -> float | None:
    """Seconds from the first request to the last 429 of the warm-up, or None.

    The warm-up's 429s come in clusters (the unpaced burst, then the slow
    start's overshoot); it ends at the first 429 followed by `quiet_s`
    without one. 0: no 429 at all. None: the 429s never thinned out.
    """
    limited = sorted(t for t in stats.limited_times if t >= since)
    if not limited:
        return 0.0
    first = min(limited[0], *(t for t in stats.ok_times if t >= since))
    for at, after in zip(limited, [*limited[1:], math.inf], strict=True):
        if after - at >= quiet_s:
            return round(at - first, 2)
    return None


def _measure(stats: QuotaStats, names: list[str], since: float, calls: int, rps: int,
             elapsed_s: float) -> dict[str, Any]:
    """The books of one measured run: the server's entries from `since` on."""
    ok = sorted(t for t in stats.ok_times if t >= since)
    limited = [t for t in stats.limited_times if t >= since]
    first = min([ok[0], *limited])
    ends = {name: max(t for t, text in stats.ok_texts if t >= since and f"{name}-" in text)
            for name in names}
    span = ok[-1] - first
    measured: dict[str, Any] = {
        "whole_run_share": round(calls / rps / span, 3),
        "run_share": round(calls / rps / elapsed_s, 3),
        "startup_s": round(first - since, 2),
        "ends_s": {name: round(end - first, 2) for name, end in ends.items()},
        "rate_429_overall": round(len(limited) / max(1, len(limited) + len(ok)), 4),
        "converged_s": _converged_s(stats, since),
        "rate_limited": len(limited),
        # The workers share one API key, so the server's per-key windows cannot
        # tell one worker's 429 from the other's; a request on the connection that
        # carried a 429 was sent after it was read, whoever sent it.
        "early": stats.early_on_connection,
    }
    warm_start = (min(limited) if limited else first) + WARM_UP_S
    end = min(ok[int(len(ok) * 0.95)], *ends.values()) if len(names) > 1 else \
        ok[int(len(ok) * 0.95)]
    if end > warm_start:
        measured["share"] = round(stats.utilisation(warm_start, end) if since == 0 else
                                  _share(ok, rps, warm_start, end), 4)
        measured["rate_429_after_warm_up"] = round(stats.refused_share(warm_start, end), 4)
    else:
        measured["share"] = None
        measured["rate_429_after_warm_up"] = 0.0
    return measured


def _share(ok: list[float], rps: int, start: float, end: float) -> float:
    return sum(1 for t in ok if start <= t < end) / (rps * (end - start))


def _case(rps: int, workers: int, seconds: float, *, remembered: bool,
          headers: bool) -> dict[str, Any]:
    per_key = max(2, round(rps * seconds / workers / KEYS))
    with tempfile.TemporaryDirectory(prefix="b9-quota-") as name:
        folder = Path(name)
        journal = folder / "calls.sqlite" if remembered else None
        with QuotaServer(rps=rps, latency_ms=LATENCY_MS, retry_after_s=1.0,
                         rate_headers=headers) as server:
            if remembered:  # a first run learns the quota and keeps it in the journal
                _run_workers(folder, server, [f"l{i}" for i in range(workers)],
                             max(2, per_key // 2), journal)
                time.sleep(1.5)  # the bucket refills
            since = server.stats().elapsed_s
            names = [f"w{i}" for i in range(workers)]
            elapsed = _run_workers(folder, server, names, per_key, journal)
            stats = server.stats()
        lost = sum(len((folder / n / "errors.jsonl").read_text().splitlines()) for n in names)
    calls = per_key * KEYS * workers
    return {"rps": rps, "workers": workers, "remembered": remembered, "headers": headers,
            "calls": calls, "elapsed_s": round(elapsed, 2), "ideal_s": round(calls / rps, 2),
            "dead_letters": lost, **_measure(stats, names, since, calls, rps, elapsed)}


def run(profile: Profile) -> dict[str, Any]:
    """Measure B9; see the module docstring."""
    grid = ([(1, False, False)] if profile.quick else
            [(1, False, False), (2, False, False), (1, True, False), (2, True, False),
             (1, False, True), (2, False, True)])
    seconds = 8.0 if profile.quick else 50.0
    cases = {f"q20_w{workers}_{'remembered' if remembered else 'fresh'}"
             f"{'_headers' if headers else ''}": _case(20, workers, seconds,
                                                       remembered=remembered, headers=headers)
             for workers, remembered, headers in grid}
    fresh = [case for case in cases.values() if not case["remembered"] and not case["headers"]]
    remembered_cases = [case for case in cases.values() if case["remembered"]]
    shares = [case["share"] or 0.0 for case in cases.values()]
    worst_429 = max(case["rate_429_after_warm_up"] for case in cases.values())
    worst_fresh = min(case["whole_run_share"] for case in fresh)
    worst_remembered = min((case["whole_run_share"] for case in remembered_cases), default=None)
    said = "; ".join(
        f"{label}: {case['whole_run_share']:.2f} of the quota over the whole run "
        f"({case['share'] if case['share'] is None else round(case['share'], 2)} after warm-up, "
        f"{case['run_share']:.2f} with the runner's {case['startup_s']} s start-up), "
        f"{100 * case['rate_429_overall']:.1f} % 429s, {case['early']} early"
        for label, case in cases.items())
    return {
        "name": "Quota utilisation",
        "workload": (f"{KEYS} keys per worker, one call per event, a {LATENCY_MS} ms model "
                     "behind an account quota of Q requests/s (429 + Retry-After: 1); "
                     "beam-agents run on the DirectRunner, no --model_max_rps"),
        "unit": "share of the quota used over the whole run (worst fresh case)",
        "cases": cases,
        "ratio": worst_fresh,
        "ratio_min": min(case["whole_run_share"] for case in cases.values()),
        "ratio_max": max(case["whole_run_share"] for case in cases.values()),
        "worst_share_after_warm_up": min(shares),
        "worst_remembered_whole_run_share": worst_remembered,
        "worst_429_rate": worst_429,
        "target": TARGET_WHOLE_RUN,
        "target_remembered": TARGET_REMEMBERED,
        "target_429": TARGET_429,
        "met": (worst_fresh >= TARGET_WHOLE_RUN and min(shares) >= TARGET_SHARE
                and worst_429 <= TARGET_429
                and (worst_remembered is None or worst_remembered >= TARGET_REMEMBERED)),
        "note": said + ".",
    }
