"""`flink run --python templates/flink/agent_job.py` against a real standalone cluster.

The cluster comes from the Flink distribution inside apache-flink
(``pyflink/bin/start-cluster.sh``) with a private conf dir on free ports, its
own log and pid dirs, and is stopped even when the test fails. The cluster's
processes get the repository on ``PYTHONPATH``, as a cluster gets a user's
agent package installed (or shipped with ``-pyfs``/``-pyarch``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyflink
import pytest
import yaml

from beam_agents.beam import run as run_beam
from tests.flink.conftest import REPO, job_env, part_lines

pytestmark = pytest.mark.timeout(300)

FLINK_HOME = Path(pyflink.__file__).resolve().parent
_START_TIMEOUT_S = 90


def _free_port() -> int:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rest_ready(port: int) -> bool:
    """True once the REST endpoint answers and a task manager has registered."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/overview", timeout=2) as reply:
            return int(json.load(reply).get("taskmanagers", 0)) > 0
    except OSError:
        return False


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """A standalone Flink cluster: yields ``host:port`` of its REST endpoint and the env."""
    conf_dir, log_dir, pid_dir = (tmp_path / name for name in ("conf", "log", "pid"))
    shutil.copytree(FLINK_HOME / "conf", conf_dir)
    log_dir.mkdir()
    pid_dir.mkdir()
    conf = yaml.safe_load((conf_dir / "config.yaml").read_text())
    rest_port = _free_port()
    conf["jobmanager"]["rpc"]["port"] = _free_port()
    conf["jobmanager"]["memory"]["process"]["size"] = "1024m"
    conf["taskmanager"]["numberOfTaskSlots"] = 2
    conf["taskmanager"]["memory"]["process"]["size"] = "1280m"
    conf["rest"] = {**conf.get("rest", {}), "port": rest_port, "bind-port": str(rest_port)}
    conf["python"] = {"executable": sys.executable, "client": {"executable": sys.executable}}
    (conf_dir / "config.yaml").write_text(yaml.safe_dump(conf))
    env = job_env(FLINK_CONF_DIR=str(conf_dir), FLINK_LOG_DIR=str(log_dir),
                  FLINK_PID_DIR=str(pid_dir))
    bin_dir = FLINK_HOME / "bin"
    try:
        subprocess.run(["bash", str(bin_dir / "start-cluster.sh")], env=env, check=True,
                       capture_output=True, timeout=_START_TIMEOUT_S)
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not _rest_ready(rest_port):
            if time.monotonic() > deadline:
                logs = "\n".join(p.read_text()[-2000:] for p in log_dir.glob("*.log"))
                raise AssertionError(f"the Flink cluster did not come up:\n{logs}")
            time.sleep(0.5)
        yield f"localhost:{rest_port}", env
    finally:
        subprocess.run(["bash", str(bin_dir / "stop-cluster.sh")], env=env, check=False,
                       capture_output=True, timeout=60)
        for pid_file in pid_dir.glob("*.pid"):  # whatever stop-cluster.sh missed
            for pid in pid_file.read_text().split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), 9)


def test_flink_run_submits_the_template_to_a_standalone_cluster(
        cluster: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    """The submitted job writes the same intents and dead letters as the Beam pipeline."""
    address, env = cluster
    events = tmp_path / "events.jsonl"
    events.write_bytes(b"".join((REPO / "examples" / "events.jsonl").open("rb").readlines()[:120])
                       + b"not json\n")
    agent = ["--agent", "examples.support_agent:agent"]
    done = subprocess.run(
        [str(FLINK_HOME / "bin" / "flink"), "run", "-m", address,
         "--python", str(REPO / "templates" / "flink" / "agent_job.py"),
         "-pyexec", sys.executable,
         "--input_files", str(events), "--output_path", str(tmp_path / "intents"),
         "--errors_path", str(tmp_path / "errors"), *agent,
         "--checkpointing_interval_ms", "1000", "--parallelism", "2"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "Job has been submitted with JobID" in done.stdout

    run_beam(["--input_files", str(events), "--output_path", str(tmp_path / "beam.jsonl"),
              "--errors_path", str(tmp_path / "beam-errors.jsonl"), *agent])
    expected = sorted((tmp_path / "beam.jsonl").read_bytes().splitlines())
    assert len(expected) > 100
    assert part_lines(tmp_path / "intents") == expected
    assert part_lines(tmp_path / "errors") == sorted(
        (tmp_path / "beam-errors.jsonl").read_bytes().splitlines())
