"""B10. A hot key: one key with 40,000 events costs what 400 keys of 100 events cost.

Each key's events run one after another (invariant 1), so a hot key cannot
be faster per event than a spread load; what it must not be is slower. The
per-key queue used to be parsed whole to pick its head and rewritten whole
to drop it, so a key's n-th event cost O(n) and a backlog cost O(n^2). It
now costs O(log n) per event (see docs/decisions/0009-per-key-queue.md).

Two runs of `beam-agents run` (the DirectRunner batch path, the README's
`chat` agent, the local model at 0 ms) at the same size: 1 key x N events,
and N/100 keys x 100 events. Start-up is taken out by a run of 1 key x 100
events: time per event is (wall - that run's wall) / (events - 100). The
same is reported for one key at 1,000, 10,000 and 40,000 events, whose
slope shows whether the cost per event still grows with the backlog; and
for the native Flink job on a MiniCluster at 10,000 events, hot against
spread, the same way. Target: the hot run at most 1.5x the spread run's
time per event.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from benchmarks import _flink
from benchmarks._cli import event_line, run_cli
from benchmarks._harness import Profile, ratios, stat

__all__ = ["TARGET", "run"]

TARGET = 1.5
_AGENT = "benchmarks._agents:chat"
_FLAGS = ["--agent", _AGENT, "--model_latency_ms", "0"]
_BASE = 100  # events of the start-up run
_T0 = 1_767_225_600_000


def _lines(keys: int, per_key: int) -> list[bytes]:
    """`keys` keys with `per_key` events each, in event-time order, keys interleaved."""
    return [event_line(f"customer-{index % keys:05d}", index, time_ms=_T0 + index * 1_000)
            for index in range(keys * per_key)]


def _per_event_ms(wall_s: float, base_s: float, events: int) -> float:
    return max(wall_s - base_s, 1e-6) / (events - _BASE) * 1e3


def _measure(runner: Callable[[list[bytes]], float], *, hot: int, reps: int,
             ladder: Sequence[int]) -> dict[str, Any]:
    """Hot against spread at `hot` events, and one key at each size of `ladder`."""
    spread_keys = hot // 100
    hot_ms: list[float] = []
    spread_ms: list[float] = []
    ladder_ms: dict[int, list[float]] = {size: [] for size in ladder if size != hot}
    for rep in range(reps):
        base = runner(_lines(1, _BASE))
        cases: list[tuple[str, int, list[bytes]]] = [
            ("hot", hot, _lines(1, hot)), ("spread", hot, _lines(spread_keys, 100)),
            *((f"ladder-{size}", size, _lines(1, size)) for size in ladder_ms)]
        for name, events, lines in (cases if rep % 2 == 0 else list(reversed(cases))):
            per_event = _per_event_ms(runner(lines), base, events)
            if name == "hot":
                hot_ms.append(per_event)
            elif name == "spread":
                spread_ms.append(per_event)
            else:
                ladder_ms[events].append(per_event)
    ratio = ratios(hot_ms, spread_ms)
    per_size = {str(size): stat(values).as_json(3) for size, values in ladder_ms.items()}
    per_size[str(hot)] = stat(hot_ms).as_json(3)
    return {"events": hot, "spread_keys": spread_keys,
            "hot_ms_per_event": stat(hot_ms).as_json(3),
            "spread_ms_per_event": stat(spread_ms).as_json(3),
            "ratio_hot_to_spread": ratio.as_json(2),
            "one_key_ms_per_event": dict(sorted(per_size.items(), key=lambda kv: int(kv[0])))}


def _flink_runner(lines: list[bytes]) -> float:
    return _flink.run_job(lines, _FLAGS).wall_s


def run(profile: Profile) -> dict[str, Any]:
    """Measure B10; see the module docstring."""
    ladder: tuple[int, ...]
    if profile.quick:
        hot, ladder, reps = 400, (200,), 1
    else:
        hot, ladder, reps = 40_000, (1_000, 10_000), 2
    cli = _measure(lambda lines: run_cli(lines, _FLAGS), hot=hot, reps=reps, ladder=ladder)
    flink: dict[str, Any] | str
    if profile.quick:
        flink = "not measured: the quick profile leaves out the Flink job (a JVM per run)"
    elif not _flink.adopt_orphans():
        flink = "not measured: counting the job's processes needs Linux's prctl"
    else:
        flink = _measure(_flink_runner, hot=10_000, reps=1, ladder=())
    ratio = cli["ratio_hot_to_spread"]
    sizes = cli["one_key_ms_per_event"]
    flink_text = ("" if isinstance(flink, str) else
                  f" The Flink job at {flink['events']:,} events: hot "
                  f"{flink['hot_ms_per_event']['median']:.2f} ms/event against spread "
                  f"{flink['spread_ms_per_event']['median']:.2f} "
                  f"({flink['ratio_hot_to_spread']['median']:.2f}x): a hot key's events "
                  "wait in one queue and run one by one at the end of input, while a "
                  "spread load's keys run side by side in rounds.")
    return {
        "name": "Hot key (1 key x N events against N/100 keys x 100)",
        "workload": (f"beam-agents run, chat agent, local model at 0 ms; {hot:,} events; "
                     f"start-up removed by a {_BASE}-event run"),
        "unit": "ms/event (hot over spread)",
        "beam_agents_run": cli,
        "flink": flink,
        "ratio": ratio["median"],
        "ratio_min": ratio["min"],
        "ratio_max": ratio["max"],
        "target": TARGET,
        "met": ratio["median"] <= TARGET,
        "note": (
            f"One key with {hot:,} events costs {ratio['median']:.2f}x the time per event of "
            f"{cli['spread_keys']} keys with 100 each ({cli['hot_ms_per_event']['median']:.2f} "
            f"against {cli['spread_ms_per_event']['median']:.2f} ms). On one key the cost per "
            "event stays flat as the backlog grows: "
            + ", ".join(f"{int(size):,} events {value['median']:.2f} ms"
                        for size, value in sizes.items())
            + ". Before the per-key queue, each doubling of one key's events cost four "
            "times as much (4,000 events took 25.9 s)." + flink_text),
    }
