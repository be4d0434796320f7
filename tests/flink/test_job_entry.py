"""The native Flink job as a user starts it: ``python agent_job.py`` from their own folder.

Run on the real MiniCluster (`run_job`), from a temporary working directory
that holds the agent module and the input files, as `beam-agents run` is run.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.flink.conftest import REPO, flink_run, job_env, part_lines, run_job

pytestmark = pytest.mark.timeout(300)

JOB = REPO / "templates" / "flink" / "agent_job.py"

#: An agent no installed package holds: only the working directory has it.
AGENT = '''\
def agent(ctx):
    reply = ctx.model.complete([{"role": "user", "content": ctx.payload_json()["text"]}])
    ctx.emit("reply", {"text": reply.text, "seq": ctx.seq})
'''


def _events(key: str, count: int) -> str:
    return "".join(json.dumps({"entity_key": key, "event_id": f"{key}-{n}",
                               "event_time_ms": 1_000 * (n + 1), "payload": {"text": f"hi {n}"}})
                   + "\n" for n in range(count))


def _summary_count(output: str, label: str) -> str:
    found = re.search(rf"^  {re.escape(label)} +(\S+)", output, re.MULTILINE)
    assert found, f"no {label!r} line in:\n{output}"
    return found.group(1)


def test_the_job_runs_an_agent_from_the_working_directory_over_a_glob_and_sums_it_up(
        tmp_path: Path) -> None:
    """THEN the agent module is found, the glob reads both files, and the summary counts them."""
    (tmp_path / "triage_agent.py").write_text(AGENT)
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "day-1.jsonl").write_text(_events("c1", 4) + _events("c2", 3))
    (inputs / "day-2.jsonl").write_text(_events("c3", 5) + "not json\n")
    (inputs / "notes.txt").write_text(_events("c9", 2))  # not matched by the glob

    output = run_job([str(JOB), "--input_files", "in/day-*.jsonl",
                      "--output_path", "out/intents", "--errors_path", "out/errors",
                      "--agent", "triage_agent:agent", "--parallelism", "2",
                      "--event_order", "arrival", "--checkpointing_interval_ms", "1000",
                      "--python_executable", sys.executable], env=job_env(), cwd=tmp_path)

    intents = part_lines(tmp_path / "out" / "intents")
    assert len(intents) == 12
    assert not any(b"c9" in line for line in intents)
    assert _summary_count(output, "runner") == "native"
    assert _summary_count(output, "events read") == "13"
    assert _summary_count(output, "activations committed") == "12"
    assert _summary_count(output, "model calls paid") == "12"
    assert _summary_count(output, "errors by stage") == "1"
    assert _summary_count(output, "  decode") == "1"
    # The Python workers' shutdown leaves nothing on the terminal of a run that succeeded.
    assert "Multiplexer hanging up" not in output
    assert "Traceback" not in output


def test_an_agent_module_that_is_not_there_is_one_line_naming_it(tmp_path: Path) -> None:
    """THEN the job stops before Flink starts, with one typed line naming the module."""
    (tmp_path / "events.jsonl").write_text(_events("c1", 1))
    done = subprocess.run([sys.executable, str(JOB), "--input_files", "events.jsonl",
                           "--output_path", "out/intents", "--errors_path", "out/errors",
                           "--agent", "no_such_agent:agent"], cwd=tmp_path, env=job_env(),
                          capture_output=True, text=True, timeout=120, check=False)

    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if "no_such_agent" in line]
    assert len(errors) == 1 and errors[0].startswith("agent_job.py: ConfigError:"), done.stderr


def test_a_glob_that_matches_nothing_is_an_error_naming_it(tmp_path: Path) -> None:
    """THEN, as in beam-agents run, an empty match is refused before the job starts."""
    done = subprocess.run([sys.executable, str(JOB), "--input_files", "in/*.jsonl",
                           "--output_path", "out/intents", "--errors_path", "out/errors",
                           "--agent", "tests.agents:counter"], cwd=tmp_path, env=job_env(),
                          capture_output=True, text=True, timeout=120, check=False)

    assert done.returncode == 2
    assert "'in/*.jsonl' matches no file" in done.stderr
    assert "Traceback" not in done.stderr


def test_flink_run_ships_an_agent_from_the_working_directory_to_the_cluster(
        flink_cluster: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    """THEN task managers started elsewhere run the module that only the client's folder holds."""
    address, env = flink_cluster
    (tmp_path / "triage_agent.py").write_text(AGENT)
    (tmp_path / "events.jsonl").write_text(_events("c1", 3) + _events("c2", 2))

    output = flink_run(address, env, JOB, [
        "--input_files", str(tmp_path / "events.jsonl"),
        "--output_path", str(tmp_path / "out" / "intents"),
        "--errors_path", str(tmp_path / "out" / "errors"),
        "--agent", "triage_agent:agent", "--parallelism", "1"], cwd=tmp_path)

    assert len(part_lines(tmp_path / "out" / "intents")) == 5
    # On a cluster the counters stay in Flink's metrics; the summary says so.
    assert _summary_count(output, "runner") == "native"
    assert _summary_count(output, "events read") == "-"
    assert "not counted" in output
    assert _summary_count(output, "errors by stage") == "0"
