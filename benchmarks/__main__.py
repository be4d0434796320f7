"""``python -m benchmarks``: run B1-B15, print a table, write ``latest.json`` and the figures.

Usage::

    python -m benchmarks                      # the full suite, a few minutes
    python -m benchmarks --quick --out DIR    # tiny sizes, 1-2 repetitions (the smoke test)
    python -m benchmarks --only B1,B3         # a subset
    python -m benchmarks --only B12 --merge   # a subset, kept beside the others' results

Each benchmark runs in a fresh interpreter (`benchmarks._child`) with glibc's
malloc thresholds pinned (`PINNED_MALLOC`). Without pinning, glibc adapts its
mmap threshold as large blocks come and go, and protobuf's serializer then
alternates between reusing heap memory and faulting in fresh pages for its
256 KiB buffers: the same parse-and-serialize measured 50 us or 180 us
depending on what ran before it. That would make the floor, and every ratio
against it, a measure of the allocator's history. B1 is also run once
without pinning and reported as ``ratio_default_malloc``, for comparison.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks._harness import ROOT, repo_env

__all__ = ["PINNED_MALLOC", "main"]

RESULTS = ROOT / "benchmarks" / "results"
ORDER = ("B1", "B2", "B3", "B4", "B5", "B6", "B7", "B8", "B9", "B10", "B11", "B12", "B13", "B14",
         "B15")

#: glibc tunables that turn off its adaptive mmap/trim thresholds: blocks up to
#: 64 MiB come from the heap and the heap is not trimmed below 128 MiB.
PINNED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(64 << 20), "MALLOC_TRIM_THRESHOLD_": str(128 << 20)}


def _run_child(name: str, *, quick: bool, pinned: bool) -> dict[str, Any]:
    env = repo_env({k: v for k, v in os.environ.items() if k not in PINNED_MALLOC})
    if pinned:
        env.update(PINNED_MALLOC)
    command = [sys.executable, "-m", "benchmarks._child", name, *(["--quick"] if quick else [])]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"benchmark {name} failed (exit {done.returncode}):\n"
                           f"{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _environment(quick: bool) -> dict[str, Any]:
    from google.protobuf import __version__ as protobuf_version  # noqa: PLC0415
    from google.protobuf.internal import api_implementation  # noqa: PLC0415

    try:
        from apache_beam.version import __version__ as beam_version  # noqa: PLC0415
    except ImportError:  # pragma: no cover - the dev environment has Beam
        beam_version = "not installed"
    return {
        "generated": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "quick": quick,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "protobuf": f"{protobuf_version} ({api_implementation.Type()})",
        "apache_beam": beam_version,
        "malloc": PINNED_MALLOC,
    }


def _figure(name: str, result: dict[str, Any]) -> str:
    """The headline measurement of one benchmark, for the table."""
    if name == "B1":
        return (f"facades {result['facade_us']['median']:.0f} us, floor "
                f"{result['floor_us']['median']:.0f} us, naive {result['naive_us']['median']:.0f}"
                f" us (unpinned malloc: {result.get('ratio_default_malloc', {}).get('median', '-')}"
                "x)")
    if name == "B2":
        return (f"batch path {result['agent_events_per_s']['median']:.0f} ev/s "
                f"(async {result['agent_async_events_per_s']['median']:.0f}), bare "
                f"{result['bare_events_per_s']['median']:.0f} ev/s")
    if name == "B3":
        return (f"slopes: memory {result['memory']['facade_slope']} vs protobuf "
                f"{result['memory']['floor_slope']}, cache {result['cache']['facade_slope']} vs "
                f"{result['cache']['floor_slope']}")
    if name == "B4":
        return (f"max {result['max_state_bytes']:,} B/key of {result['bound_bytes']:,} B, "
                f"{result['compactions']} compactions, {result['failed_activations']} failed")
    if name == "B5":
        return (f"{result['ours_keys_per_s']['median']:,.0f} vs "
                f"{result['naive_keys_per_s']['median']:,.0f} keys/s, canonical: "
                f"{'yes' if result['check_passed'] else 'NO'}")
    if name == "B7":
        backends = [f"{backend} " + (
            f"+{part['added_ms_per_call']['median']:.2f} ms/call "
            f"({part['added_percent_of_model_call']['median']:.2f} %), "
            f"{part['reads_per_activation']} reads/activation, "
            f"{part['writes_per_paid_call']} writes/paid call"
            if isinstance(part, dict) else "not measured")
            for backend, part in ((backend, result[backend])
                                  for backend in ("sqlite", "firestore"))]
        return "; ".join(backends)
    if name == "B8":
        return ", ".join(f"{case} {result[case]['journal_on']['paid_per_committed']:.2f} on / "
                         f"{result[case]['journal_off']['paid_per_committed']:.2f} off"
                         for case in ("bundle_retry", "crash_restore", "rerun",
                                      "transient_outage"))
    if name == "B9":
        return ", ".join(f"{key} {case['whole_run_share']:.2f} whole run / "
                         f"{case['share'] or 0:.2f} after warm-up, "
                         f"{100 * case['rate_429_after_warm_up']:.2f} % 429s"
                         for key, case in result["cases"].items())
    if name == "B10":
        cli = result["beam_agents_run"]
        return (f"hot {cli['hot_ms_per_event']['median']:.2f} vs spread "
                f"{cli['spread_ms_per_event']['median']:.2f} ms/event; one key: "
                + ", ".join(f"{int(size):,} {value['median']:.2f}"
                            for size, value in cli["one_key_ms_per_event"].items()))
    if name == "B12":
        batch, start = result["batch"], result["start_up"]
        return (f"Prism batch {batch['prism']['agent_us_per_event']['median']:.0f} us/ev "
                f"({batch['prism']['ratio_agent_to_bare']['median']:.2f}x bare), DirectRunner "
                f"{batch['direct']['agent_us_per_event']['median']:.0f} us/ev; start-up Prism "
                f"{start['prism_s']} s, job server {start['flink_job_server_s']} s")
    if name == "B13":
        batch = result["batch"]
        return (f"per 10k keys: write {result['write_ms_per_10k_keys']['median']:.0f} ms "
                f"({result['ratio_write_to_plain_file']['median']:.1f}x a plain file), read "
                f"{result['read_ms_per_10k_keys']['median']:.0f} ms; batch "
                f"{batch['with_snapshot_s']['median']:.1f} s with vs "
                f"{batch['without_snapshot_s']['median']:.1f} s without")
    if name == "B14":
        cpu = result["cpu_us_per_event"]
        return (f"off {cpu['off']['median']:.0f} us/ev, 100 % {cpu['traced_100']['median']:.0f}"
                f", 1 % {cpu['traced_1']['median']:.0f} ({result['traced_1']['ratio']}x)")
    if name == "B15":
        return "; ".join(
            f"{mode} {part['ratio_to_ideal']['median']:.2f} of ideal, "
            f"{part['cpu_ms_per_event']['median']:.2f} ms CPU/ev (floor "
            f"{part['floor']['ratio_to_ideal']['median']:.2f}, "
            f"{part['floor']['cpu_ms_per_event']['median']:.2f} ms), p99 at half "
            f"{part['latency_at_half_capacity']['p99_ms']} ms"
            for mode, part in (("process", result), ("thread", result["thread"])))
    if name == "B11":
        return (f"{result['wall_s'] - result['start_up_s']:.0f} s vs ideal "
                f"{result['ideal_s']:.0f} s (hottest key {result['hottest_key_events']:,} "
                "events)")
    paths = [f"{name} " + (f"{path['events_per_s']['median']:.0f} ev/s "
                           f"({path['ratio_to_serial']['median']:.1f}x)"
                           if isinstance(path, dict) else "not measured")
             for name, path in ((name, result[name]) for name in ("batch", "streaming", "flink"))]
    return (", ".join(paths) + f"; serial {result['serial_events_per_s']['median']:.2f} ev/s, "
            f"ideal {result['ideal_ratio']:.0f}x")


def _table(results: dict[str, dict[str, Any]]) -> str:
    rows = [("id", "benchmark", "ratio (median [min-max])", "target", "met", "figures")]
    for name in ORDER:
        if name not in results:
            continue
        result = results[name]
        ratio = f"{result['ratio']}"
        if "ratio_min" in result:
            ratio += f" [{result['ratio_min']}-{result['ratio_max']}]"
        target = result.get("target")
        met = result.get("met")
        rows.append((name, result["name"], ratio,
                     "-" if target is None else {"B4": f"<= {target:,}",
                                                 "B6": f">= {target}x",
                                                 "B7": f"<= {target} % of 200 ms",
                                                 "B8": f"<= {target} paid/commit",
                                                 "B9": f">= {target} of Q over the run",
                                                 "B10": f"<= {target}x spread",
                                                 "B11": f"<= {target}x ideal",
                                                 "B15": f">= {target} of ideal, <= 1 ms CPU"}.get(
                                                     name, f"<= {target}x"),
                     "-" if met is None else ("yes" if met else "NO"),
                     _figure(name, result)))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for index, row in enumerate(rows):
        cells = [str(cell).ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append("  ".join([*cells, row[-1]]))
        if index == 0:
            lines.append("  ".join("-" * width for width in [*widths, len(row[-1])]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the suite; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes and 1-2 repetitions: checks the suite runs, "
                             "measures nothing worth reading")
    parser.add_argument("--out", type=Path, default=RESULTS,
                        help="where latest.json and the PNG figures go (default: %(default)s)")
    parser.add_argument("--only", default=",".join(ORDER),
                        help="comma-separated benchmark ids to run (default: all)")
    parser.add_argument("--merge", action="store_true",
                        help="keep the results in OUT/latest.json of the benchmarks not run "
                             "(B12 runs from the Beam-latest venv, the rest from the dev one)")
    args = parser.parse_args(argv)
    selected = [name.strip().upper() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(selected) - set(ORDER))
    if unknown:
        parser.error(f"unknown benchmark id(s) {', '.join(unknown)}; known: {', '.join(ORDER)}")
    args.out.mkdir(parents=True, exist_ok=True)

    environment = _environment(args.quick)
    results: dict[str, dict[str, Any]] = {}
    for name in ORDER:
        if name not in selected:
            continue
        print(f"running {name} ...", file=sys.stderr, flush=True)
        results[name] = _run_child(name, quick=args.quick, pinned=True)
        if name == "B1":
            unpinned = _run_child(name, quick=args.quick, pinned=False)
            results[name]["ratio_default_malloc"] = {
                "median": unpinned["ratio"], "min": unpinned["ratio_min"],
                "max": unpinned["ratio_max"],
                "floor_us": unpinned["floor_us"], "facade_us": unpinned["facade_us"]}
            results[name]["note"] += (
                f" With glibc's default malloc settings the same run measures "
                f"{unpinned['ratio']:.2f}x (floor {unpinned['floor_us']['median']:.0f} us): "
                "protobuf's serializer then faults in fresh pages for its buffers on most "
                "runs, which the facades, copying into one buffer, do not; that inflated "
                "floor is not the one the target is judged against.")
    environment["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]

    figures: list[Path] = []
    if set(results) - {"B12"}:  # B12 draws no figure, and its venv has no matplotlib
        from benchmarks._plots import draw_all  # noqa: PLC0415 - matplotlib only when drawing

        figures = draw_all(results, args.out)
    document: dict[str, Any] = {"environment": environment}
    previous = args.out / "latest.json"
    if args.merge and previous.exists():
        kept = json.loads(previous.read_text())
        document = {**kept, **document, **results}
        if "environment" in kept and kept["environment"] != environment:
            # Each merged run keeps its own environment beside its results.
            document["environment"] = kept["environment"]
            for name, result in results.items():
                document[name] = {**result, "environment": environment}
    else:
        document.update(results)
    (args.out / "latest.json").write_text(json.dumps(document, indent=2) + "\n")
    print(_table(results))
    print(f"\nwrote {args.out / 'latest.json'} and {len(figures)} figures to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
