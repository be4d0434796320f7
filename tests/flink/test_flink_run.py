"""`flink run --python templates/flink/agent_job.py` against a real standalone cluster.

The cluster comes from the Flink distribution inside apache-flink
(``pyflink/bin/start-cluster.sh``) with a private conf dir on free ports, its
own log and pid dirs (the ``flink_cluster`` fixture), and is stopped even
when the test fails. The cluster's processes get the repository on
``PYTHONPATH``, as a cluster gets a user's agent package installed (or
shipped with ``-pyfs``/``-pyarch``).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from beam_agents.beam import run as run_beam
from tests.flink.conftest import REPO, flink_run, part_lines

pytestmark = pytest.mark.timeout(300)


def _event_order(line: bytes) -> tuple[int, str]:
    """A line's place in event time; a malformed line goes last (it is a dead letter anyway)."""
    try:
        event = json.loads(line)
        return int(event["event_time_ms"]), str(event.get("event_id", ""))
    except (ValueError, KeyError, TypeError):
        return sys.maxsize, ""


def test_flink_run_submits_the_template_to_a_standalone_cluster(
        flink_cluster: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    """The submitted job writes the same intents and dead letters as the Beam pipeline."""
    address, env = flink_cluster
    events = tmp_path / "events.jsonl"
    # In event-time order, so that the job's arrival order is the Beam run's order.
    lines = (REPO / "examples" / "events.jsonl").open("rb").readlines()[:120]
    events.write_bytes(b"".join(sorted(lines, key=_event_order)) + b"not json\n")
    agent = ["--agent", "examples.support_agent:agent"]
    stdout = flink_run(address, env, REPO / "templates" / "flink" / "agent_job.py", [
        "--input_files", str(events), "--output_path", str(tmp_path / "intents"),
        "--errors_path", str(tmp_path / "errors"), *agent,
        "--checkpointing_interval_ms", "1000", "--parallelism", "2",
        # Activations while the job runs, so the reporter (every 200 ms) sees
        # their counters before the tasks finish; in event-time order they all
        # run in the job's last moments (test_equivalence covers that order).
        "--event_order", "arrival",
        "--job_name", "flink-run-test"])
    assert "Job has been submitted with JobID" in stdout

    run_beam(["--input_files", str(events), "--output_path", str(tmp_path / "beam.jsonl"),
              "--errors_path", str(tmp_path / "beam-errors.jsonl"), *agent])
    expected = sorted((tmp_path / "beam.jsonl").read_bytes().splitlines())
    assert len(expected) > 100
    assert part_lines(tmp_path / "intents") == expected
    assert part_lines(tmp_path / "errors") == sorted(
        (tmp_path / "beam-errors.jsonl").read_bytes().splitlines())

    # The counters left Python for Flink's metric system (the cluster logs them
    # through the slf4j reporter; the reporter writes the namespace's dots as _).
    reported = _reported_counters(Path(env["FLINK_LOG_DIR"]), "flink-run-test")
    assert reported.get("beam_agents_runtime.activations", 0) > 0, reported
    assert reported.get("beam_agents_model.provider_calls", 0) > 0, reported
    # Tokens are Flink metrics too: the local model reports usage on every call.
    assert reported.get("beam_agents_model.tokens_in", 0) > 0, reported
    assert reported.get("beam_agents_model.tokens_out", 0) > 0, reported


def _reported_counters(log_dir: Path, job_name: str) -> dict[str, int]:
    """The largest value the task managers reported per counter of the Activate operator."""
    pattern = re.compile(rf"\.{re.escape(job_name)}\.Activate\.\d+\.(beam_agents_\w+\.\w+): (\d+)")
    reported: dict[str, int] = {}
    for log in log_dir.glob("*taskexecutor*.log"):
        for name, value in pattern.findall(log.read_text(errors="replace")):
            reported[name] = max(reported.get(name, 0), int(value))
    return reported
