"""Run mutmut over the modules ``[tool.mutmut]`` names, then summarise its verdicts.

    python tools/mutate.py             # fresh run: clear mutants/, mutmut run, summary
    python tools/mutate.py --resume    # keep mutants/: mutmut re-tests changed code only
    python tools/mutate.py --summary   # summarise the verdicts already in mutants/

A fresh run is the default so the figures do not depend on what an earlier
run cached. The summary goes to stdout and to ``mutate/results.json``: totals,
one line per mutated file, and the names of the surviving mutants, so a diff
of that file shows a new survivor. Inspect one with ``mutmut show NAME``;
mutmut's log of the run is ``mutants/run.log``.

The kill rate is ``(killed + timeout) / total``: a mutant that makes the
tests hang has been detected too (mutmut's own badge counts it the same way).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections import Counter
from importlib.metadata import version
from pathlib import Path
from typing import Any

from mutmut.stats import status_by_exit_code

ROOT = Path(__file__).resolve().parent.parent
MUTANTS = ROOT / "mutants"
RESULTS = ROOT / "mutate" / "results.json"
STATUSES = ("killed", "survived", "timeout", "no tests", "suspicious", "skipped", "segfault",
            "caught by type check", "not checked")


def run_mutmut(max_children: int, *, fresh: bool) -> float:
    """Run ``mutmut run`` from the repository root and return its wall time in seconds."""
    if fresh and MUTANTS.exists():
        shutil.rmtree(MUTANTS)
    MUTANTS.mkdir(exist_ok=True)
    mutmut = Path(sys.executable).with_name("mutmut")
    log = MUTANTS / "run.log"
    start = time.monotonic()
    with log.open("w") as out:
        done = subprocess.run([str(mutmut), "run", "--max-children", str(max_children)],
                              cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, check=False)
    elapsed = time.monotonic() - start
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        sys.exit(f"mutmut run failed with exit code {done.returncode}; end of {log}:\n{tail}")
    return elapsed


def verdicts() -> dict[str, dict[str, str]]:
    """Each mutated file's mutants and their status, from mutmut's ``.meta`` files."""
    found: dict[str, dict[str, str]] = {}
    for meta in sorted(MUTANTS.rglob("*.py.meta")):
        source = str(meta.relative_to(MUTANTS))[: -len(".meta")]
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        if codes:
            found[source] = {name: status_by_exit_code[code] for name, code in codes.items()}
    return found


def tally(statuses: Counter[str]) -> dict[str, Any]:
    total = sum(statuses.values())
    counts: dict[str, Any] = {status.replace(" ", "_"): statuses[status] for status in STATUSES}
    counts["total"] = total
    detected = statuses["killed"] + statuses["timeout"]
    counts["kill_rate"] = round(detected / total, 4) if total else None
    return counts


def summarise(elapsed_s: float | None, max_children: int) -> dict[str, Any]:
    by_file = verdicts()
    if not by_file:
        sys.exit(f"no mutmut verdicts under {MUTANTS}; run without --summary first")
    everything: Counter[str] = Counter()
    files = {}
    for source, mutants in by_file.items():
        statuses = Counter(mutants.values())
        everything += statuses
        files[source] = tally(statuses)
    survivors = sorted(name for mutants in by_file.values()
                       for name, status in mutants.items() if status == "survived")
    return {
        "tool": f"mutmut {version('mutmut')}",
        "max_children": max_children,
        "elapsed_s": None if elapsed_s is None else round(elapsed_s),
        "totals": tally(everything),
        "files": files,
        "survivors": survivors,
    }


def report(results: dict[str, Any]) -> None:
    width = max(len(source) for source in results["files"])
    print(f"{'file':<{width}}  killed survived timeout  total  kill rate")
    for source, row in [*results["files"].items(), ("total", results["totals"])]:
        rate = "-" if row["kill_rate"] is None else f"{row['kill_rate']:.1%}"
        print(f"{source:<{width}}  {row['killed']:>6} {row['survived']:>8} {row['timeout']:>7} "
              f"{row['total']:>6}  {rate:>9}")
    totals = results["totals"]
    others = {k: v for k, v in totals.items()
              if k not in {"killed", "survived", "timeout", "total", "kill_rate"} and v}
    if others:
        print("also:", ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in others.items()))
    if results["elapsed_s"] is not None:
        print(f"mutmut ran {results['elapsed_s']} s with {results['max_children']} workers")
    print(f"killed {totals['killed']}, survived {totals['survived']}, timeout {totals['timeout']}, "
          f"total {totals['total']}, kill rate {totals['kill_rate']:.1%}")
    print(f"summary: {RESULTS.relative_to(ROOT)}; a survivor: mutmut show NAME")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-children", type=int, default=2)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true", help="keep mutants/ from the last run")
    mode.add_argument("--summary", action="store_true", help="only summarise mutants/")
    args = parser.parse_args()
    elapsed = None if args.summary else run_mutmut(args.max_children, fresh=not args.resume)
    results = summarise(elapsed, args.max_children)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    report(results)


if __name__ == "__main__":
    main()
