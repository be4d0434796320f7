"""PNG figures of the results, drawn with matplotlib's Agg backend (no display needed).

One figure per benchmark, named ``b<N>_<topic>.png`` next to ``latest.json``.
Bars show medians with min-max whiskers; the scaling figure is log-log so
that a slope of 1 (linear cost) reads as a straight 45-degree line.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from benchmarks._child import MODULES

__all__ = ["FIGURES", "draw_all"]

#: Benchmark id -> file name of its figure: the module's name, ``b1_activation.png``.
#: B12's, B13's and B14's figures are in their JSON and docs/benchmarks.md; they draw none.
FIGURES = {bench: module.rsplit(".", 1)[1] + ".png" for bench, module in MODULES.items()
           if bench not in {"B12", "B13", "B14", "B15"}}


def _bars(ax: Axes, labels: list[str], stats: list[Mapping[str, float]], unit: str,
          colors: list[str]) -> None:
    medians = [s["median"] for s in stats]
    low = [s["median"] - s["min"] for s in stats]
    high = [s["max"] - s["median"] for s in stats]
    ax.bar(labels, medians, yerr=[low, high], capsize=4, color=colors)
    ax.set_ylabel(unit)
    for index, (value, top) in enumerate(zip(medians, (s["max"] for s in stats), strict=True)):
        ax.annotate(f"{value:,.0f}" if value >= 100 else f"{value:.2f}", (index, top),
                    ha="center", va="bottom", fontsize=8, xytext=(0, 3),
                    textcoords="offset points")
    top = max(s["max"] for s in stats)
    ax.set_ylim(min(0.0, *(s["min"] for s in stats)), top * 1.15 if top > 0 else 1.0)


def _b1(result: Mapping[str, Any], ax: Axes) -> None:
    cells = result["cells"]
    _bars(ax, ["floor", "facades", "naive\n(pickle)", "memory\nfloor", "memory\nfacade",
               "cache\nfloor", "cache\nfacade"],
          [result["floor_us"], result["facade_us"], result["naive_us"],
           cells["memory"]["floor_us"], cells["memory"]["facade_us"],
           cells["cache"]["floor_us"], cells["cache"]["facade_us"]],
          "µs per activation",
          ["#888888", "#1f77b4", "#d62728", "#bbbbbb", "#6baed6", "#bbbbbb", "#6baed6"])
    ax.set_title(f"B1 activation: {result['ratio']:.2f}x the floor (target "
                 f"{result['target']}x)")


def _b2(result: Mapping[str, Any], ax: Axes) -> None:
    _bars(ax, ["bare DoFn", "batch path\n(sync agent)", "batch path\n(async agent)"],
          [result["bare_events_per_s"], result["agent_events_per_s"],
           result["agent_async_events_per_s"]],
          "events/s (marginal)", ["#888888", "#1f77b4", "#6baed6"])
    ax.set_title(f"B2 DirectRunner: {result['ratio']:.2f}x the bare DoFn's cost per event "
                 f"(target {result['target']}x)")


def _b3(result: Mapping[str, Any], axes: tuple[Axes, Axes]) -> None:
    for ax, series, xlabel in ((axes[0], result["memory"], "memory blob bytes"),
                               (axes[1], result["cache"], "cache entries")):
        points = series["points"]
        xs = [p["blob_bytes"] if xlabel.startswith("memory") else p["x"] for p in points]
        for key, label, color in (("facade_us", f"facade (slope {series['facade_slope']})",
                                   "#1f77b4"),
                                  ("floor_us", f"protobuf floor (slope {series['floor_slope']})",
                                   "#888888")):
            ax.errorbar(xs, [p[key]["median"] for p in points],
                        yerr=[[p[key]["median"] - p[key]["min"] for p in points],
                              [p[key]["max"] - p[key]["median"] for p in points]],
                        marker="o", capsize=3, label=label, color=color)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("µs per activation")
        ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_title("B3 memory: cost vs blob size")
    axes[1].set_title("B3 cache: cost vs entries")


def _b4(result: Mapping[str, Any], ax: Axes) -> None:
    series = result["series_key0"]
    ax.plot(series["event"], series["state_bytes"], color="#1f77b4", lw=1,
            label="state bytes, key 0")
    ax.axhline(result["bound_bytes"], color="#d62728", ls="--",
               label=f"bound {result['bound_bytes']:,} B")
    ax.axhline(786_432, color="#888888", ls=":", label="memory soft cap 786,432 B")
    ax.set_xlabel("event number (all keys)")
    ax.set_ylabel("bytes")
    ax.set_ylim(0, result["bound_bytes"] * 1.1)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(f"B4 soak: max {result['max_state_bytes']:,} B per key, "
                 f"{result['compactions']} compactions, "
                 f"{result['failed_activations']} failures")


def _b5(result: Mapping[str, Any], ax: Axes) -> None:
    _bars(ax, ["compute_cache_key", "naive json + sha256"],
          [result["ours_keys_per_s"], result["naive_keys_per_s"]], "keys/s",
          ["#1f77b4", "#888888"])
    ax.set_title(f"B5 cache keys: {result['ratio']:.2f}x the naive time per key")


def _b6(result: Mapping[str, Any], axes: tuple[Axes, Axes]) -> None:
    palette = {"batch": "#1f77b4", "streaming": "#6baed6", "floor": "#c6dbef",
               "flink": "#ff7f0e", "flink_thread": "#fdae6b"}
    paths = [(name, result[name]) for name in palette if isinstance(result.get(name), Mapping)]
    streaming = result.get("streaming")
    if isinstance(streaming, Mapping) and "runner_floor" in streaming:
        # The runner's floor for the streaming path's shape, beside the path.
        at = [name for name, _ in paths].index("streaming") + 1
        paths.insert(at, ("floor", streaming["runner_floor"]))
    labels = [f"{name}\n{path['ratio_to_serial']['median']:.1f}x serial" for name, path in paths]
    colors = [palette[name] for name, _ in paths]
    serial = result["serial_events_per_s"]
    _bars(axes[0], ["serial\n(1 at a time)", *labels],
          [serial, *(path["events_per_s"] for _, path in paths)], "events/s",
          ["#888888", *colors])
    ideal = result["ideal_ratio"] * serial["median"]
    axes[0].axhline(ideal, color="#2ca02c", ls="--",
                    label=f"ideal {result['ideal_ratio']:.0f}x serial = {ideal:.0f}/s")
    axes[0].axhline(result["target"] * serial["median"], color="#d62728", ls=":",
                    label=f"target {result['target']}x serial")
    axes[0].set_ylim(0, max(ideal, *(p["events_per_s"]["max"] for _, p in paths)) * 1.2)
    axes[0].legend(fontsize=8, loc="upper left")
    axes[0].set_title(f"B6 {result['latency_ms']} ms model, {result['keys']} keys: throughput")
    _bars(axes[1], ["serial", *(name for name, _ in paths)],
          [result["serial_cpu_ms_per_event"], *(path["cpu_ms_per_event"] for _, path in paths)],
          "ms CPU per activation", ["#888888", *colors])
    axes[1].set_title("B6 CPU per activation (Flink: JVM and Python workers)")


def _b7(result: Mapping[str, Any], ax: Axes) -> None:
    backends = [(name, result[name]) for name in ("sqlite", "firestore")
                if isinstance(result.get(name), Mapping)]
    _bars(ax, [f"{name}\n{part['reads_per_activation']} read/act, "
               f"{part['writes_per_paid_call']} write/call" for name, part in backends],
          [part["added_ms_per_call"] for _, part in backends], "ms added per journaled call",
          ["#1f77b4", "#ff7f0e"][:len(backends)])
    limit = result["target"] * result["model_call_ms"] / 100
    ax.axhline(limit, color="#d62728", ls=":",
               label=f"target: {result['target']} % of a {result['model_call_ms']} ms call "
                     f"= {limit:.0f} ms")
    ax.set_ylim(0, max(limit, *(part["added_ms_per_call"]["max"] for _, part in backends))
                * 1.2)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(f"B7 call journal: +{result['ratio']:.2f} % of a {result['model_call_ms']} ms "
                 f"call ({result['ratio_backend']})")


def _b8(result: Mapping[str, Any], ax: Axes) -> None:
    cases = ("bundle_retry", "crash_restore", "rerun", "transient_outage")
    xs = range(len(cases))
    for offset, (side, label, color) in enumerate((("journal_off", "journal off", "#888888"),
                                                   ("journal_on", "journal on (SQLite)",
                                                    "#1f77b4"))):
        values = [result[case][side]["paid_per_committed"] for case in cases]
        bars = ax.bar([x + (offset - 0.5) * 0.38 for x in xs], values, width=0.38,
                      label=label, color=color)
        ax.bar_label(bars, fmt="%.2f", fontsize=8)
    ax.axhline(result["target"], color="#d62728", ls=":", label=f"target {result['target']}")
    ax.set_xticks(list(xs), [case.replace("_", "\n") for case in cases])
    ax.set_ylabel("paid calls per committed activation")
    ax.set_ylim(0, max(2.0, result["ratio_journal_off"]) * 1.25)
    ax.legend(fontsize=8, loc="upper right")
    ax.set_title("B8 paid model calls under faults")


def _b9(result: Mapping[str, Any], ax: Axes) -> None:
    cases = list(result["cases"].items())
    xs = list(range(len(cases)))
    width = 0.4
    whole = [case["whole_run_share"] for _, case in cases]
    steady = [case["share"] or 0.0 for _, case in cases]
    bars = ax.bar([x - width / 2 for x in xs], whole, width, color="#1f77b4",
                  label="share of the quota over the whole run")
    ax.bar_label(bars, labels=[f"{share:.2f}" for share in whole], fontsize=7)
    bars = ax.bar([x + width / 2 for x in xs], steady, width, color="#aec7e8",
                  label="after warm-up")
    ax.bar_label(bars, labels=[f"{share:.2f}\n{100 * case['rate_429_after_warm_up']:.1f} % 429"
                               for share, (_, case) in zip(steady, cases, strict=True)],
                 fontsize=7)
    ax.axhline(result["target"], color="#d62728", ls=":",
               label=f"target {result['target']} (fresh), {result['target_remembered']} "
                     "(remembered)")
    ax.axhline(result["target_remembered"], color="#d62728", ls=":")
    ax.set_xticks(xs, [f"{case['workers']} worker(s)\n"
                       f"{'remembered' if case['remembered'] else 'fresh'}"
                       f"{' + headers' if case['headers'] else ''}" for _, case in cases],
                  fontsize=7)
    ax.set_ylabel("requests served / quota")
    ax.set_ylim(0, 1.35)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(f"B9 quota utilisation at Q={cases[0][1]['rps']}/s "
                 "(no --model_max_rps)")


def _b10(result: Mapping[str, Any], ax: Axes) -> None:
    sizes = result["beam_agents_run"]["one_key_ms_per_event"]
    xs = [int(size) for size in sizes]
    ax.plot(xs, [value["median"] for value in sizes.values()], "o-", color="#1f77b4",
            label="one key, beam-agents run")
    ax.axhline(result["beam_agents_run"]["spread_ms_per_event"]["median"], color="#888888",
               ls="--", label="spread load (100 events per key)")
    ax.set_xscale("log")
    ax.set_xlabel("events on the key")
    ax.set_ylabel("ms per event (start-up removed)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(f"B10 hot key: {result['ratio']}x the spread load per event")


def _b11(result: Mapping[str, Any], ax: Axes) -> None:
    labels = ["slots bound", "hottest-key bound", "measured"]
    values = [result["bounds_s"]["slots"], result["bounds_s"]["hottest_key"],
              result["wall_s"] - result["start_up_s"]]
    bars = ax.bar(labels, values, color=["#cccccc", "#888888", "#1f77b4"])
    ax.bar_label(bars, fmt="%.0f s", fontsize=8)
    ax.set_ylabel("seconds")
    ax.set_title(f"B11 Zipf {result['keys']:,} keys x {result['events']:,} events: "
                 f"{result['ratio']}x the ideal")


def draw_all(results: Mapping[str, Mapping[str, Any]], out: Path) -> list[Path]:
    """Draw a figure for every benchmark present in `results`; returns the files written."""
    written = []
    for name, filename in FIGURES.items():
        if name not in results:
            continue
        if name in {"B3", "B6"}:
            fig, pair = plt.subplots(1, 2, figsize=(11, 4.2))
            (_b3 if name == "B3" else _b6)(results[name], (pair[0], pair[1]))
        else:
            fig, ax = plt.subplots(figsize=(8, 4.2))
            draw = {"B1": _b1, "B2": _b2, "B4": _b4, "B5": _b5, "B7": _b7, "B8": _b8,
                    "B9": _b9, "B10": _b10, "B11": _b11}[name]
            draw(results[name], ax)
        fig.tight_layout()
        path = out / filename
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
