"""The FlinkRunner suite's servers: a Flink 1.19 cluster, a Python worker pool, and outputs.

It runs in the FlinkRunner line's venv (Beam `FLINK_RUNNER_BEAM` of
tools/toolchain/portable.mk, the job server's own version) and finds the job
server and the cluster through `tests._toolchain`; `make test-portable`
builds them. Every server gets free loopback ports, its own conf, log and pid
folders, and is stopped even when a test fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests._emulators import free_port
from tests._toolchain import REPO, flink_home

__all__ = ["POOL_KEY", "FlinkCluster", "free_port", "python_env"]

_START_TIMEOUT_S = 120
#: The model API key the workers read from their environment (`--model_api_key_env`):
#: as on a cluster, the workers' environment holds it, not the submitter's.
POOL_KEY = "k1"
#: Two task managers, as a deployment has more than one: the failover test kills one.
TASK_MANAGERS = 2


def python_env(**extra: str) -> dict[str, str]:
    """This venv's Python first on PATH (a worker pool starts `python`), the repo importable."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


@dataclass
class FlinkCluster:
    """A standalone Flink cluster of the job server's minor version, from its wheel."""

    home: Path
    rest: str
    env: dict[str, str]

    @property
    def flink(self) -> str:
        return str(self.home / "bin" / "flink")

    def overview(self) -> dict[str, object]:
        with urllib.request.urlopen(f"http://{self.rest}/overview", timeout=5) as reply:
            return dict(json.load(reply))

    def task_manager_pids(self) -> list[int]:
        pids = []
        for pid_file in Path(self.env["FLINK_PID_DIR"]).glob("*taskexecutor*.pid"):
            for pid in pid_file.read_text().split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), 0)
                    pids.append(int(pid))
        return pids

    def await_task_managers(self, count: int = TASK_MANAGERS) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            with contextlib.suppress(OSError, ValueError):
                if int(self.overview().get("taskmanagers", 0)) >= count:  # type: ignore[call-overload]
                    return
            if time.monotonic() > deadline:
                raise AssertionError(f"the Flink cluster's task managers did not come up:\n"
                                     f"{self.log_tail()}")
            time.sleep(0.5)

    def restore_task_managers(self) -> None:
        """Start a task manager for each that died, as a deployment's supervisor would."""
        for _ in range(TASK_MANAGERS - len(self.task_manager_pids())):
            subprocess.run(["bash", str(self.home / "bin" / "taskmanager.sh"), "start"],
                           env=self.env, check=True, capture_output=True,
                           timeout=_START_TIMEOUT_S)
        self.await_task_managers()

    def checkpoints(self) -> int:
        """Checkpoints completed by the cluster's running job (0 while there is none)."""
        with contextlib.suppress(OSError, ValueError, KeyError):
            with urllib.request.urlopen(f"http://{self.rest}/jobs/overview", timeout=5) as reply:
                running = [job["jid"] for job in json.load(reply)["jobs"]
                           if job["state"] == "RUNNING"]
            for jid in running:
                with urllib.request.urlopen(f"http://{self.rest}/jobs/{jid}/checkpoints",
                                            timeout=5) as reply:
                    return int(json.load(reply)["counts"]["completed"])
        return 0

    def cancel_jobs(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            with urllib.request.urlopen(f"http://{self.rest}/jobs/overview", timeout=5) as reply:
                jobs = json.load(reply)["jobs"]
            for job in jobs:
                if job["state"] not in {"FINISHED", "FAILED", "CANCELED"}:
                    cancel = urllib.request.Request(
                        f"http://{self.rest}/jobs/{job['jid']}?mode=cancel", method="PATCH")
                    urllib.request.urlopen(cancel, timeout=5).close()

    def job_manager_log(self) -> str:
        """The job manager's log so far (a test reads what its own job added)."""
        return "\n".join(log.read_text(errors="replace")
                         for log in sorted(Path(self.env["FLINK_LOG_DIR"]).glob(
                             "*standalonesession*.log")))

    def log_tail(self, chars: int = 3000) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-chars:]}"
                         for log in sorted(Path(self.env["FLINK_LOG_DIR"]).glob("*.log")))


@pytest.fixture(scope="session")
def flink_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlinkCluster]:
    """`start-cluster.sh` of the Flink 1.19 wheel: two task managers of two slots each."""
    home = flink_home()
    root = tmp_path_factory.mktemp("flink-1.19")
    conf_dir, log_dir, pid_dir = (root / name for name in ("conf", "log", "pid"))
    shutil.copytree(home / "conf", conf_dir)
    log_dir.mkdir()
    pid_dir.mkdir()
    conf = yaml.safe_load((conf_dir / "config.yaml").read_text())
    rest_port = free_port()
    conf["jobmanager"]["rpc"]["port"] = free_port()
    conf["jobmanager"]["memory"]["process"]["size"] = "1024m"
    conf["taskmanager"]["numberOfTaskSlots"] = 2
    conf["taskmanager"]["memory"]["process"]["size"] = "1280m"
    conf["rest"] = {**conf.get("rest", {}), "port": rest_port, "bind-port": str(rest_port)}
    # A job's subtasks spread over both task managers, so killing one hits the job.
    conf["cluster"] = {**conf.get("cluster", {}), "evenly-spread-out-slots": True}
    # A killed task manager is noticed in seconds, not after the default 50 s;
    # but not in 5 s, which a busy machine's stall exceeds: a loaded run lost a live task
    # manager to a missed heartbeat with 5 s (as tests/flink's cluster uses 20 s).
    conf["heartbeat"] = {"interval": 2000, "timeout": 20000}
    (conf_dir / "config.yaml").write_text(yaml.safe_dump(conf))
    (conf_dir / "workers").write_text("localhost\n" * TASK_MANAGERS)
    env = python_env(FLINK_HOME=str(home), FLINK_CONF_DIR=str(conf_dir),
                     FLINK_LOG_DIR=str(log_dir), FLINK_PID_DIR=str(pid_dir))
    cluster = FlinkCluster(home, f"localhost:{rest_port}", env)
    try:
        subprocess.run(["bash", str(home / "bin" / "start-cluster.sh")], env=env, check=True,
                       capture_output=True, timeout=_START_TIMEOUT_S)
        cluster.await_task_managers()
        yield cluster
    finally:
        cluster.cancel_jobs()
        subprocess.run(["bash", str(home / "bin" / "stop-cluster.sh")], env=env, check=False,
                       capture_output=True, timeout=60)
        for pid_file in pid_dir.glob("*.pid"):  # whatever stop-cluster.sh missed
            for pid in pid_file.read_text().split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)


@pytest.fixture(scope="session")
def worker_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Beam's Python worker pool (EXTERNAL environment), as a sidecar of the task managers."""
    import grpc  # noqa: PLC0415 - comes with apache-beam

    port = free_port()
    log = tmp_path_factory.mktemp("worker-pool") / "pool.log"
    with log.open("wb") as out:
        pool = subprocess.Popen(
            [sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main",
             f"--service_port={port}"],
            env=python_env(QUOTA_TEST_KEY=POOL_KEY), stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
    try:
        with grpc.insecure_channel(f"localhost:{port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=60)
        yield f"localhost:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pool.pid, signal.SIGTERM)  # the pool and the workers it started
        with contextlib.suppress(subprocess.TimeoutExpired):
            pool.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pool.pid, signal.SIGKILL)
