"""The native Flink job as the benchmarks run it: the template on a local MiniCluster.

`run_job` runs ``templates/flink/agent_job.py`` in an interpreter of its own
(it starts PyFlink's MiniCluster: a JVM, which starts the Python workers),
the way tests/flink runs it, and returns what one run cost: wall seconds,
CPU seconds of every process the job started, and when its output was
committed.

Counting the job's CPU needs a trick: the JVM outlives the interpreter that
started it and is re-parented, so its CPU time would reach nobody's
``RUSAGE_CHILDREN``. This process therefore makes itself a child subreaper
(Linux ``prctl(PR_SET_CHILD_SUBREAPER)``): orphans of the job become its
children, and reaping them adds their CPU time, and their own reaped
children's (the Python workers'), to this process's.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks._harness import ROOT, repo_env, write_events

__all__ = ["JobRun", "adopt_orphans", "run_job"]

TEMPLATE = ROOT / "templates" / "flink" / "agent_job.py"
_PR_SET_CHILD_SUBREAPER = 36
_JOB_TIMEOUT_S = 600
_REAP_TIMEOUT_S = 30


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRun:
    """One finished run of the job.

    Attributes:
        wall_s: From starting the interpreter to its exit.
        cpu_s: CPU time (user + system) of the interpreter, the JVM and the
            Python workers, all reaped.
        commits: ``(seconds after the start, lines)`` of each committed intents
            part file, by the file's last write; the sink rolls a part file
            on every checkpoint.
    """

    wall_s: float
    cpu_s: float
    commits: tuple[tuple[float, int], ...]

    @property
    def lines(self) -> int:
        """Intent lines the job committed."""
        return sum(count for _, count in self.commits)


def adopt_orphans() -> bool:
    """Make this process the subreaper of what it starts; False where Linux's prctl is missing."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _reap(group: int) -> None:
    """Wait for every process of the job's group to exit and reap it.

    Orphans keep their process group, so once the interpreter has exited the
    group holds only the JVM and its workers on their way out; a group that
    is still there after `_REAP_TIMEOUT_S` is killed, so no job outlives its
    measurement.
    """
    deadline = time.monotonic() + _REAP_TIMEOUT_S
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid:
            continue
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        time.sleep(0.05)


def _commits(directory: Path, start: float) -> tuple[tuple[float, int], ...]:
    parts = [part for part in directory.rglob("*")
             if part.is_file() and not part.name.startswith(".")]
    return tuple(sorted((round(part.stat().st_mtime - start, 3),
                         len(part.read_bytes().splitlines())) for part in parts))


def run_job(events: list[bytes], agent_flags: list[str], *, parallelism: int = 1,
            checkpointing_interval_ms: int = 1_000) -> JobRun:
    """Run the template over `events` (JSON lines) and return what the run cost.

    Raises:
        RuntimeError: the job failed, or committed no line for some event.
    """
    with tempfile.TemporaryDirectory(prefix="bench-flink-") as scratch:
        work = Path(scratch)
        source = write_events(work, events)
        env = repo_env()
        env["FLINK_LOG_DIR"] = str(work / "logs")
        command = [sys.executable, str(TEMPLATE), "--input_files", str(source),
                   "--output_path", str(work / "intents"), "--errors_path", str(work / "errors"),
                   "--python_executable", sys.executable, "--parallelism", str(parallelism),
                   "--checkpointing_interval_ms", str(checkpointing_interval_ms),
                   *agent_flags]
        cpu_before = _children_cpu_s()
        wall_start, start = time.perf_counter(), time.time()
        with subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, start_new_session=True) as job:
            try:
                output, _ = job.communicate(timeout=_JOB_TIMEOUT_S)
            finally:
                with contextlib.suppress(ProcessLookupError):
                    if job.poll() is None:
                        os.killpg(job.pid, signal.SIGKILL)
        wall_s = time.perf_counter() - wall_start
        _reap(job.pid)
        cpu_s = _children_cpu_s() - cpu_before
        if job.returncode != 0:
            tail = output.decode(errors="replace").splitlines()[-15:]
            raise RuntimeError(f"the Flink job exited {job.returncode}: " + " | ".join(tail))
        run = JobRun(wall_s=wall_s, cpu_s=cpu_s, commits=_commits(work / "intents", start))
        if run.lines != len(events):
            raise RuntimeError(f"the Flink job committed {run.lines} lines for {len(events)} "
                               "events")
        return run
