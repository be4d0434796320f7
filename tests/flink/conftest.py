"""Running the native Flink job for tests: a subprocess per job, outputs read back.

Each job runs in its own interpreter (``python templates/flink/agent_job.py``
or a test job module), which starts PyFlink's local MiniCluster. A process
per job keeps the JVM's environment exact: the Python workers inherit it, so
``PYTHONPATH`` (for ``tests.agents`` and ``examples``) and
``FIRESTORE_EMULATOR_HOST`` reach them, and a failed job cannot leave a
gateway behind for the next test.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyflink
import pytest
import yaml

from beam_agents.memory import LongtermStoreConfig
from tests._firestore_server import firestore_host

__all__ = ["REPO", "firestore_host", "flink_cluster", "flink_run", "job_env", "part_lines",
           "run_job", "store_rows"]

REPO = Path(__file__).resolve().parents[2]
FLINK_HOME = Path(pyflink.__file__).resolve().parent
_JOB_TIMEOUT_S = 240
_START_TIMEOUT_S = 90


def job_env(**extra: str) -> dict[str, str]:
    """The environment a Flink job (and so its Python workers) runs with."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def run_job(command: Sequence[str], *, env: dict[str, str] | None = None) -> str:
    """Run a Flink job to completion; fail the test with its log tail if it fails."""
    done = subprocess.run([sys.executable, *command], cwd=REPO, env=env or job_env(),
                          capture_output=True, text=True, timeout=_JOB_TIMEOUT_S, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-60:])
        raise AssertionError(f"Flink job {command[:2]} exited {done.returncode}:\n{tail}")
    return done.stdout


def part_lines(directory: Path) -> list[bytes]:
    """All committed lines of a FileSink directory, sorted (in-progress files excluded)."""
    lines: list[bytes] = []
    for part in directory.rglob("*"):
        if part.is_file() and not part.name.startswith("."):
            lines += part.read_bytes().splitlines()
    return sorted(lines)


def store_rows(config: LongtermStoreConfig, entities: Sequence[bytes]) -> list[bytes]:
    """Every long-term row of `entities`, serialized deterministically, in key order."""
    async def read() -> list[bytes]:
        store = config.open()
        try:
            rows = []
            for entity in entities:
                found = await store.search(entity, "", 10_000)
                rows += [record.SerializeToString(deterministic=True) for record in found]
            return rows
        finally:
            await store.close()

    return asyncio.run(read())


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


@pytest.fixture(scope="session")
def flink_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """A standalone cluster from PyFlink's distribution: yields its REST ``host:port`` and env.

    Private conf, log and pid dirs and free ports, so it never meets another
    cluster; ``stop-cluster.sh`` and a sweep of the pid files run even when a
    test fails.
    """
    root = tmp_path_factory.mktemp("flink-cluster")
    conf_dir, log_dir, pid_dir = (root / name for name in ("conf", "log", "pid"))
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
    # Counters reach the task manager's log, so a test can see them leave Python.
    conf["metrics"] = {"reporter": {"slf4j": {
        "factory": {"class": "org.apache.flink.metrics.slf4j.Slf4jReporterFactory"},
        "interval": "200 ms"}}}
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
        yield f"localhost:{rest_port}", {**env, "FLINK_LOG_DIR": str(log_dir)}
    finally:
        subprocess.run(["bash", str(bin_dir / "stop-cluster.sh")], env=env, check=False,
                       capture_output=True, timeout=60)
        for pid_file in pid_dir.glob("*.pid"):  # whatever stop-cluster.sh missed
            for pid in pid_file.read_text().split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), 9)


def flink_run(address: str, env: dict[str, str], script: Path, args: Sequence[str]) -> str:
    """``flink run --python script args`` against `address`; returns its stdout."""
    done = subprocess.run(
        [str(FLINK_HOME / "bin" / "flink"), "run", "-m", address, "--python", str(script),
         "-pyexec", sys.executable, *args],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=_JOB_TIMEOUT_S, check=False)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return done.stdout
