"""``python -m fuzz``: run the fuzz targets, each in its own libFuzzer process, and summarise.

Usage::

    python -m fuzz --runs 200000                       # every target (``make fuzz``)
    python -m fuzz --runs 10000 --target ring --seed 1  # one target, reproducibly

A target runs in a subprocess because libFuzzer owns the process: it exits
when the runs are done or at the first crash, whose input it writes to
``fuzz/results/crashes/<target>/``. Each run mutates a scratch copy of the
seed corpus (new inputs go to a temporary directory, so the committed seeds
never change). The table on stdout and ``fuzz/results/latest.json`` give, per
target, the inputs run, the crashes and the seconds; the exit status is 1 if
any target crashed. Replay a crash with ``python -m fuzz.<target> FILE``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from importlib.metadata import version
from pathlib import Path

from fuzz import TARGETS

__all__ = ["RESULTS", "TargetResult", "main", "run_target", "run_targets"]

ROOT = Path(__file__).resolve().parents[1]
FUZZ = ROOT / "fuzz"
RESULTS = FUZZ / "results"

#: libFuzzer's longest generated input, per target (default 4096 bytes). A
#: ring's decoders loop per item in Python, and a 4 KiB ring of empty items
#: costs milliseconds while finding nothing a 1 KiB one does not.
MAX_LEN = {"ring": 512}
_DEFAULT_MAX_LEN = 4096
#: Targets that parse JSON get the field names and edge values to splice in.
DICTIONARIES = {name: FUZZ / "json.dict" for name in ("event_json", "error_json", "redrive")}
#: An input that runs longer than this is a hang, reported like a crash.
PER_INPUT_TIMEOUT_S = 10

_DONE = re.compile(r"^Done (\d+) runs in (\d+) second", re.MULTILINE)
_CRASHED_AT = re.compile(r"^fuzz: input (\d+) crashed", re.MULTILINE)
_STATUS = re.compile(r"^#(\d+)\s", re.MULTILINE)
_SEED = re.compile(r"^INFO: Seed: (\d+)", re.MULTILINE)
_ARTIFACT = re.compile(r"Test unit written to (\S+)")
_SUMMARY = re.compile(r"^SUMMARY: libFuzzer: (.+)$", re.MULTILINE)


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetResult:
    """One target's run: inputs executed, crashes found, wall-clock seconds.

    Attributes:
        inputs: libFuzzer's ``Done N runs`` count; after a crash, the inputs
            up to and including the crashing one.
        crashes: Inputs written as crash, timeout or out-of-memory artifacts
            (libFuzzer stops at the first), or 1 if the process failed
            without writing one.
        problem: What went wrong, from the log: the exception or libFuzzer's
            summary line; empty when nothing did.
        log: The full libFuzzer output, kept under the results directory.
    """

    target: str
    inputs: int
    crashes: int
    seconds: float
    exit_code: int
    seed: int | None
    artifacts: tuple[str, ...]
    problem: str
    log: str


def run_target(target: str, *, runs: int, seed: int | None = None,
               results: Path = RESULTS) -> TargetResult:
    """Fuzz `target` for `runs` inputs in a libFuzzer subprocess; never raises for a crash."""
    if target not in TARGETS:
        raise ValueError(f"unknown fuzz target {target!r}; choose from {', '.join(TARGETS)}")
    crashes_dir = results / "crashes" / target
    crashes_dir.mkdir(parents=True, exist_ok=True)
    log_path = results / "logs" / f"{target}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix=f"fuzz-{target}-") as scratch:
        command = [
            sys.executable, "-m", f"fuzz.{target}",
            f"-runs={runs}",
            f"-max_len={MAX_LEN.get(target, _DEFAULT_MAX_LEN)}",
            f"-timeout={PER_INPUT_TIMEOUT_S}",
            "-rss_limit_mb=2048",
            # No re-reading of the scratch corpus: a reload runs the files a
            # reduction left behind, and one that falls in the last loop adds
            # them to the total past -runs, so the count depended on the clock.
            "-reload=0",
            f"-artifact_prefix={crashes_dir}{os.sep}",
            *([f"-seed={seed}"] if seed is not None else []),
            *([f"-dict={DICTIONARIES[target]}"] if target in DICTIONARIES else []),
            scratch,  # libFuzzer adds new inputs to the first corpus directory only
            str(FUZZ / "corpus" / target),
        ]
        started = time.monotonic()
        try:
            done = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, errors="replace",
                                  timeout=_deadline_s(runs), check=False)
            output, exit_code = done.stdout, done.returncode
        except subprocess.TimeoutExpired as exc:
            stdout = exc.stdout or b""
            output = stdout.decode(errors="replace") if isinstance(stdout, bytes) else stdout
            output += f"\nfuzz: killed after {_deadline_s(runs)} s: the run hung\n"
            exit_code = -9
        seconds = time.monotonic() - started
    log_path.write_text(output)
    return _parse(target, output, exit_code, round(seconds, 2), log_path)


def run_targets(targets: Sequence[str], *, runs: int, seed: int | None = None,
                jobs: int = os.cpu_count() or 1, results: Path = RESULTS) -> list[TargetResult]:
    """`run_target` for each of `targets`, `jobs` at a time; results in the order given."""
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(
            lambda name: run_target(name, runs=runs, seed=seed, results=results), targets))


def _deadline_s(runs: int) -> int:
    """The whole run's limit, beyond libFuzzer's per-input one: 20 ms an input, 10 min at least."""
    return max(600, runs // 50)


def _parse(target: str, output: str, exit_code: int, seconds: float,
           log_path: Path) -> TargetResult:
    done = _DONE.search(output)
    crashed_at = _CRASHED_AT.search(output)
    if done:
        inputs = int(done.group(1))
    elif crashed_at:
        inputs = int(crashed_at.group(1))
    else:
        inputs = max((int(n) for n in _STATUS.findall(output)), default=0)
    artifacts = tuple(_ARTIFACT.findall(output))
    seed = _SEED.search(output)
    crashes = len(artifacts) or (0 if exit_code == 0 and done else 1)
    return TargetResult(target=target, inputs=inputs, crashes=crashes, seconds=seconds,
                        exit_code=exit_code, seed=int(seed.group(1)) if seed else None,
                        artifacts=artifacts, problem=_problem(output) if crashes else "",
                        log=str(log_path))


def _problem(output: str) -> str:
    """The uncaught exception's last line, else libFuzzer's summary, else the log's tail."""
    marker = "=== Uncaught Python exception: ==="
    if marker in output:
        after = output.split(marker, 1)[1].strip().splitlines()
        return after[0] if after else "uncaught Python exception"
    summary = _SUMMARY.search(output)
    if summary:
        return summary.group(1)
    return output.strip().splitlines()[-1] if output.strip() else "no output"


def _environment(runs: int) -> dict[str, object]:
    return {
        "generated": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "runs_per_target": runs,
        "python": platform.python_version(),
        "atheris": version("atheris"),
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the chosen targets, print the table, write the JSON summary; 1 if anything crashed."""
    parser = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10_000, help="inputs per target")
    parser.add_argument("--target", action="append", choices=TARGETS,
                        help="a target to run (repeatable); all by default")
    parser.add_argument("--seed", type=int, help="libFuzzer's random seed; random by default")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="targets run at once (default: one per CPU)")
    parser.add_argument("--results", type=Path, default=RESULTS,
                        help="where logs, crashes and latest.json go")
    args = parser.parse_args(argv)
    targets = args.target or list(TARGETS)
    environment = _environment(args.runs)
    print(f"fuzzing {len(targets)} target(s), {args.runs} inputs each, {args.jobs} at a time")
    started = time.monotonic()
    results = run_targets(targets, runs=args.runs, seed=args.seed, jobs=args.jobs,
                          results=args.results)
    wall_seconds = round(time.monotonic() - started, 2)
    print(f"{'target':<14}{'inputs':>10}{'crashes':>9}{'seconds':>9}")
    for result in results:
        print(f"{result.target:<14}{result.inputs:>10}{result.crashes:>9}{result.seconds:>9.1f}")
        if result.crashes:
            print(f"    {result.problem}")
            for artifact in result.artifacts:
                print(f"    input: {artifact}")
            print(f"    log:   {result.log}")
    total_inputs = sum(r.inputs for r in results)
    total_crashes = sum(r.crashes for r in results)
    print(f"{'total':<14}{total_inputs:>10}{total_crashes:>9}"
          f"{sum(r.seconds for r in results):>9.1f}   ({wall_seconds:.1f} s wall clock)")
    summary = {**environment, "total_inputs": total_inputs, "total_crashes": total_crashes,
               "wall_seconds": wall_seconds,
               "targets": [asdict(r) for r in results]}
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "latest.json").write_text(json.dumps(summary, indent=2) + "\n")
    return 1 if total_crashes else 0


if __name__ == "__main__":
    sys.exit(main())
