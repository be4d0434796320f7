"""`make demo-traces`: the main job with tracing on, its spans read back from Jaeger.

Starts Jaeger (built by `make jaeger`) on free loopback ports, runs
`beam-agents run` with the flags given after ``--`` and
``--otel_exporter_otlp_endpoint`` pointing at it, waits until Jaeger has
stored every span, writes them to ``out/traces.json`` (the query API's JSON,
which `tools.jaeger.picture` draws), prints a summary and one activation's
span tree, and stops Jaeger. Run from a terminal, it keeps Jaeger up until
Enter or Ctrl-C so the query API can be browsed; ``--hold_s`` sets a time
instead. `make demo` stays the quick job without any of this.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tools.jaeger.server import Jaeger, start_jaeger, stop_jaeger

SERVICE = "beam-agents"


def _settled(jaeger: Jaeger, *, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """Every trace of the run, once Jaeger's span count stops growing (it stores asynchronously)."""
    deadline = time.monotonic() + timeout_s
    last, steady = -1, 0
    traces: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        traces = jaeger.traces(SERVICE, limit=100000)
        count = sum(len(t["spans"]) for t in traces)
        steady = steady + 1 if count == last and count > 0 else 0
        if steady >= 3:
            break
        last = count
        time.sleep(0.5)
    return traces


def _tag(span: dict[str, Any], key: str) -> Any:
    return next((t["value"] for t in span.get("tags", ()) if t["key"] == key), None)


def _parent(span: dict[str, Any]) -> str | None:
    return next((r["spanID"] for r in span.get("references", ()) if r["refType"] == "CHILD_OF"),
                None)


def tree_lines(trace: dict[str, Any]) -> list[str]:
    """One trace as indented lines: offset, duration, name and what marks it."""
    spans = sorted(trace["spans"], key=lambda s: s["startTime"])
    ids = {s["spanID"] for s in spans}
    children: dict[str | None, list[dict[str, Any]]] = collections.defaultdict(list)
    for span in spans:
        parent = _parent(span)
        children[parent if parent in ids else None].append(span)
    start = spans[0]["startTime"] if spans else 0
    lines: list[str] = []

    def walk(span: dict[str, Any], depth: int) -> None:
        marks = [f"{key.rsplit('.', 1)[-1]}={_tag(span, key)}"
                 for key in ("beam_agents.outcome", "beam_agents.call.replayed",
                             "beam_agents.call.source", "beam_agents.attempt")
                 if _tag(span, key) not in (None, False)]
        marks += [e["fields"][0]["value"] for e in span.get("logs", ())
                  if e.get("fields") and e["fields"][0]["key"] == "event"]
        lines.append(f"{(span['startTime'] - start) / 1000:9.1f} ms {span['duration'] / 1000:8.1f}"
                     f" ms  {'  ' * depth}{span['operationName']}  {' '.join(map(str, marks))}")
        for child in children[span["spanID"]]:
            walk(child, depth + 1)

    for root in children[None]:
        walk(root, 0)
    return lines


def _showcase(traces: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A trace with a suspension and a replayed call if the run has one, else the largest."""
    def score(trace: dict[str, Any]) -> tuple[int, int, int]:
        spans = trace["spans"]
        return (any(_tag(s, "beam_agents.outcome") == "suspended" for s in spans),
                any(_tag(s, "beam_agents.call.replayed") is True for s in spans), len(spans))
    return max(traces, key=score, default=None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out"))
    parser.add_argument("--hold_s", type=float, default=None,
                        help="keep Jaeger up this long after the run (default: until Enter "
                             "from a terminal, 0 otherwise)")
    parser.add_argument("run_flags", nargs=argparse.REMAINDER,
                        help="after --: the flags of `beam-agents run`")
    args = parser.parse_args(argv)
    flags = [f for f in args.run_flags if f != "--"]
    args.out.mkdir(parents=True, exist_ok=True)
    jaeger = start_jaeger(args.out / "jaeger.log")
    try:
        run = subprocess.run(
            [sys.executable, "-m", "beam_agents", "run", *flags,
             "--otel_exporter_otlp_endpoint", jaeger.endpoint, "--otel_metrics_exporter", "otlp"],
            check=False)
        traces = _settled(jaeger)
        (args.out / "traces.json").write_text(json.dumps({"data": traces}))
        names = collections.Counter(s["operationName"].split(" ")[0]
                                    for t in traces for s in t["spans"])
        replayed = sum(_tag(s, "beam_agents.call.replayed") is True
                       for t in traces for s in t["spans"])
        print(f"\ntraces: {len(traces)}, spans: {sum(names.values())} "
              f"({', '.join(f'{n} {c}' for n, c in sorted(names.items()))}; replayed {replayed})")
        showcase = _showcase(traces)
        if showcase is not None:
            print(f"one activation's trace ({showcase['traceID']}):")
            print("\n".join(tree_lines(showcase)))
        print(f"all spans: {args.out / 'traces.json'}")
        hold = args.hold_s if args.hold_s is not None else (None if sys.stdin.isatty() else 0.0)
        query = f"http://127.0.0.1:{jaeger.query_port}/api/traces?service={SERVICE}&limit=20"
        if hold is None:
            print(f"Jaeger's query API: {query}\npress Enter to stop Jaeger")
            with contextlib.suppress(EOFError, KeyboardInterrupt):
                input()
        elif hold > 0:
            print(f"Jaeger's query API for {hold:.0f} s: {query}")
            with contextlib.suppress(KeyboardInterrupt):
                time.sleep(hold)
        return run.returncode
    finally:
        stop_jaeger(jaeger)


if __name__ == "__main__":
    sys.exit(main())
