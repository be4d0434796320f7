"""``beam-agents run`` as a user runs it: a JSON-lines file in, a child process, wall time out.

B10 and B11 measure the command itself, start-up included, so each run is a
fresh interpreter on a fresh scratch directory, and every event must come
out as an intent: a run that dead-letters anything measured something else.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks._harness import ROOT, repo_env, write_events

__all__ = ["event_line", "run_cli"]

_TIMEOUT_S = 3_600


def event_line(key: str, number: int, *, time_ms: int) -> bytes:
    """One input line: `key`'s event number `number` at `time_ms`."""
    return json.dumps({"entity_key": key, "event_id": f"e{number:07d}", "event_time_ms": time_ms,
                       "payload": {"text": f"question {number}"}}).encode()


def run_cli(lines: Sequence[bytes], flags: Sequence[str]) -> float:
    """Wall seconds of ``beam-agents run`` over `lines` with `flags`.

    Raises:
        RuntimeError: the run failed, or did not commit one intent per line.
    """
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as scratch:
        work = Path(scratch)
        source = write_events(work, lines)
        command = [sys.executable, "-m", "beam_agents", "run", "--input_files", str(source),
                   "--output_path", str(work / "intents.jsonl"),
                   "--errors_path", str(work / "errors.jsonl"), *flags]
        start = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, env=repo_env(), capture_output=True, text=True,
                              timeout=_TIMEOUT_S, check=False)
        wall_s = time.perf_counter() - start
        if done.returncode != 0:
            raise RuntimeError(f"beam-agents run exited {done.returncode}: "
                               f"{done.stderr[-2000:]}")
        intents = sum(len(path.read_bytes().splitlines())
                      for path in work.glob("intents.jsonl*"))
        errors = sum(len(path.read_bytes().splitlines()) for path in work.glob("errors.jsonl*"))
        if errors or intents != len(lines):
            raise RuntimeError(f"beam-agents run gave {intents} intents and {errors} dead "
                               f"letters for {len(lines)} events")
        return wall_s
