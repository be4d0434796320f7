"""The native Flink job's end-of-run summary: the lines ``beam-agents run`` prints.

Flink hands its client no metrics when a job ends (PyFlink's functions have
no accumulators), so the summary is gathered from what this process can
read, and says what it could not:

* **counters** from the tallies each Activate subtask leaves in a folder the
  client names (`FlinkMetrics.write_tally`): only when the job runs in this
  process's MiniCluster, as a cluster's task managers write to disks of
  their own; there, Flink's own metrics (the web UI, a reporter) hold them;
* **errors by stage** from the dead letters the run wrote, when
  ``--errors_path`` is a local folder: the committed output itself.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from beam_agents._summary import print_summary
from beam_agents.flink._metrics import COUNTERS_DIR_PARAMETER, RECEIVED, read_tallies
from beam_agents.hosting import error_from_json
from beam_agents.runtime import AgentConfig, ErrorRecord

__all__ = ["detached", "execute_with_summary"]

Key = tuple[str, str]


def execute_with_summary(env: Any, options: Any, config: AgentConfig) -> Any:
    """Execute the bounded job, then print its summary; returns Flink's JobExecutionResult.

    A detached submission (``flink run -d``) returns before the job ends and
    prints none.
    """
    local = _runs_here(env)
    folder = Path(tempfile.mkdtemp(prefix="beam-agents-counters-")) if local else None
    if folder is not None:
        env.get_config().set_global_job_parameters({COUNTERS_DIR_PARAMETER: str(folder)})
    errors_dir = _local_folder(options.errors_path)
    earlier = set(errors_dir.glob("errors-*.jsonl")) if errors_dir is not None else set()
    started = time.monotonic()
    try:
        result = env.execute(options.job_name)
        if detached(result):
            return result
        elapsed_s = time.monotonic() - started
        counters: Counter[Key] = Counter()
        peaks: dict[Key, int] = {}
        notes: dict[Key, str] = {}
        restarted = 0
        missing: list[str] = []
        if folder is not None:
            counters, peaks, notes, restarted = read_tallies(folder)
        else:
            missing.append("counters (the task managers keep them in Flink's metrics: its web "
                           "UI or a metrics reporter)")
        # Errors by stage come from the dead letters themselves where they can be read.
        counters = Counter({key: value for key, value in counters.items()
                            if not key[1].startswith("errors_")})
        received = counters.pop(RECEIVED, 0)
        counters.pop(("beam_agents.runtime", "events"), None)  # Decode's, which leaves none
        if errors_dir is not None:
            counters.update(_errors_by_stage(set(errors_dir.glob("errors-*.jsonl")) - earlier))
            if folder is not None:
                counters[("beam_agents.runtime", "events")] = (
                    received + counters[("beam_agents.runtime", "errors_decode")])
        else:
            missing.append(f"errors by stage ({options.errors_path} is not a local folder)")
        runner = "native Flink job, " + ("local MiniCluster" if local else "cluster")
        if restarted:
            runner += (f"; {restarted} subtask(s) restarted, their counts start at the "
                       "checkpoint they restored")
        print_summary(counters, peaks, notes, elapsed_s=elapsed_s, model=config.model,
                      runner=runner, uncounted="; ".join(missing) if missing else None)
        return result
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def detached(result: Any) -> bool:
    """Whether `env.execute` returned at once, the job submitted detached (``flink run -d``)."""
    return "Detached" in result._j_job_execution_result.getClass().getSimpleName()


def _runs_here(env: Any) -> bool:
    """Whether the job runs in this process's MiniCluster (``python agent_job.py``)."""
    name = env._j_stream_execution_environment.getClass().getSimpleName()
    return str(name) == "LocalStreamEnvironment"


def _local_folder(path: str | None) -> Path | None:
    """`path` as a folder on this machine, or None for another file system (``gs://``)."""
    if not path:
        return None
    if path.startswith("file://"):
        path = path.removeprefix("file://")
    elif "://" in path:
        return None
    return Path(path)


def _errors_by_stage(parts: set[Path]) -> Counter[Key]:
    """Count the dead letters in `parts` by stage, as the ``errors_<stage>`` counters do."""
    counted: Counter[Key] = Counter({("beam_agents.runtime", "errors_decode"): 0})
    for part in parts:
        with part.open("rb") as lines:
            for line in lines:
                if line.strip():
                    stage = ErrorRecord.Stage.Name(error_from_json(line).stage)
                    counted[("beam_agents.runtime", f"errors_{stage[6:].lower()}")] += 1
    return counted
