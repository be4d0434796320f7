"""A standalone Flink cluster on this machine, for the suites and the soak: start, kill, restore.

`standalone_cluster` runs ``start-cluster.sh`` of a Flink distribution (the
one inside a PyFlink or apache-flink wheel) with private conf, log and pid
folders and free loopback ports, so it never meets another cluster, and
stops it, sweeping the pid files, even when its caller fails. `FlinkCluster`
answers what a failover needs: which task managers run a job, killing one
with its Python workers as a lost machine takes them, and starting
replacements as a deployment's supervisor would. Imports no Flink: the
native job's suite (PyFlink 2.3) and the FlinkRunner's (Flink 1.19) share it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests._emulators import free_port

__all__ = ["TASK_MANAGERS", "FlinkCluster", "kill_tree", "standalone_cluster"]

#: Task managers of a cluster. Two, as a deployment has more than one: a job
#: that loses one restarts on the other, and a failover test kills one.
TASK_MANAGERS = 2
START_TIMEOUT_S = 120


@dataclass
class FlinkCluster:
    """A running standalone cluster: its distribution, REST ``host:port`` and environment."""

    home: Path
    rest: str
    env: dict[str, str]

    @property
    def flink(self) -> str:
        """The ``flink`` command line client of the distribution."""
        return str(self.home / "bin" / "flink")

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://{self.rest}{path}", timeout=5) as reply:
            return json.load(reply)

    def overview(self) -> dict[str, object]:
        return dict(self._get("/overview"))

    def task_manager_pids(self) -> list[int]:
        """The live task manager processes."""
        return self._live_pids("*taskexecutor*.pid")

    def process_pids(self) -> list[int]:
        """Every live process of the cluster: its job manager and task managers."""
        return self._live_pids("*.pid")

    def _live_pids(self, pattern: str) -> list[int]:
        """The pids in the pid files matching `pattern` whose process lives.

        A killed one not yet reaped is a zombie: dead all the same.
        """
        pids = []
        for pid_file in Path(self.env["FLINK_PID_DIR"]).glob(pattern):
            for pid in pid_file.read_text().split():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    state = Path(f"/proc/{int(pid)}/stat").read_text().rsplit(")", 1)[1].split()
                    if state[0] != "Z":
                        pids.append(int(pid))
        return pids

    def registered_task_managers(self) -> int:
        """How many task managers the REST endpoint lists (0 while it does not answer)."""
        try:
            return int(self.overview().get("taskmanagers", 0))  # type: ignore[call-overload]
        except (OSError, ValueError):
            return 0

    def await_task_managers(self, count: int = TASK_MANAGERS) -> None:
        """Wait until `count` task managers have registered, or fail with the logs."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.registered_task_managers() < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"the Flink cluster's task managers did not come up:\n"
                                     f"{self.log_tail(2000)}")
            time.sleep(0.5)

    def restore_task_managers(self) -> None:
        """Start a task manager for each one that died, as a deployment's supervisor would."""
        missing = TASK_MANAGERS - len(self.task_manager_pids())
        for _ in range(missing):
            subprocess.run(["bash", str(self.home / "bin" / "taskmanager.sh"), "start"],
                           env=self.env, check=True, capture_output=True,
                           timeout=START_TIMEOUT_S)
        if missing > 0:
            self.await_task_managers()

    def job_task_manager_pids(self, job_id: str) -> list[int]:
        """The pids of the task managers that run a task of `job_id` (by their RPC ports)."""
        ports: set[int] = set()
        for vertex in self._get(f"/jobs/{job_id}")["vertices"]:
            for manager in self._get(f"/jobs/{job_id}/vertices/{vertex['id']}/taskmanagers")[
                    "taskmanagers"]:
                ports.add(int(str(manager["taskmanager-id"]).split(":")[1].split("-")[0]))
        listening = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True,
                                   timeout=10, check=True).stdout
        live = set(self.task_manager_pids())
        pids = set()
        for line in listening.splitlines():
            port, pid = re.search(r":(\d+)\s", line), re.search(r"pid=(\d+)", line)
            if port and pid and int(port.group(1)) in ports and int(pid.group(1)) in live:
                pids.add(int(pid.group(1)))
        return sorted(pids)

    def restored_checkpoint(self, job_id: str) -> int | None:
        """The id of the checkpoint `job_id` last restored from; None if it never restored."""
        restored = (self._get(f"/jobs/{job_id}/checkpoints").get("latest") or {}).get(
            "restored") or {}
        return restored.get("id")

    def checkpoints(self) -> int:
        """Checkpoints completed by the cluster's running job (0 while there is none)."""
        with contextlib.suppress(OSError, ValueError, KeyError):
            running = [job["jid"] for job in self._get("/jobs/overview")["jobs"]
                       if job["state"] == "RUNNING"]
            for jid in running:
                return int(self._get(f"/jobs/{jid}/checkpoints")["counts"]["completed"])
        return 0

    def job_state(self, job_id: str) -> str:
        """The job's state (RUNNING, RESTARTING, FAILED, ...); UNKNOWN when REST does not say."""
        try:
            return str(self._get(f"/jobs/{job_id}")["state"])
        except (OSError, ValueError, KeyError):
            return "UNKNOWN"

    def cancel_jobs(self) -> None:
        """Cancel every job that has not ended."""
        with contextlib.suppress(OSError, ValueError):
            for job in self._get("/jobs/overview")["jobs"]:
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


@contextlib.contextmanager
def standalone_cluster(home: Path, root: Path, env: Mapping[str, str], *,
                       conf: Mapping[str, Any] | None = None) -> Iterator[FlinkCluster]:
    """`TASK_MANAGERS` task managers of two slots each under `root`, stopped on the way out.

    Args:
        home: The Flink distribution (its ``bin/`` and ``conf/``).
        root: An empty folder for the cluster's conf, log and pid folders.
        env: The environment of the cluster's processes (and so of their Python workers).
        conf: Configuration merged over the distribution's, one level deep.
    """
    conf_dir, log_dir, pid_dir = (root / name for name in ("conf", "log", "pid"))
    shutil.copytree(home / "conf", conf_dir)
    log_dir.mkdir()
    pid_dir.mkdir()
    settings = yaml.safe_load((conf_dir / "config.yaml").read_text())
    rest_port = free_port()
    settings["jobmanager"]["rpc"]["port"] = free_port()
    settings["jobmanager"]["memory"]["process"]["size"] = "1024m"
    settings["taskmanager"]["numberOfTaskSlots"] = 2
    settings["taskmanager"]["memory"]["process"]["size"] = "1280m"
    settings["rest"] = {**settings.get("rest", {}), "port": rest_port,
                        "bind-port": str(rest_port)}
    # A killed task manager is noticed in seconds, not after the default 50 s;
    # but not in 5 s, which a busy machine's stall exceeds: a loaded run lost a
    # live task manager to a missed heartbeat with 5 s.
    settings["heartbeat"] = {"interval": 2000, "timeout": 20000}
    for key, value in (conf or {}).items():
        settings[key] = ({**settings.get(key, {}), **value} if isinstance(value, dict)
                         else value)
    (conf_dir / "config.yaml").write_text(yaml.safe_dump(settings))
    (conf_dir / "workers").write_text("localhost\n" * TASK_MANAGERS)
    cluster = FlinkCluster(home, f"localhost:{rest_port}", {
        **env, "FLINK_HOME": str(home), "FLINK_CONF_DIR": str(conf_dir),
        "FLINK_LOG_DIR": str(log_dir), "FLINK_PID_DIR": str(pid_dir)})
    try:
        subprocess.run(["bash", str(home / "bin" / "start-cluster.sh")], env=cluster.env,
                       check=True, capture_output=True, timeout=START_TIMEOUT_S)
        cluster.await_task_managers()
        yield cluster
    finally:
        cluster.cancel_jobs()
        subprocess.run(["bash", str(home / "bin" / "stop-cluster.sh")], env=cluster.env,
                       check=False, capture_output=True, timeout=60)
        for pid_file in pid_dir.glob("*.pid"):  # whatever stop-cluster.sh missed
            for pid in pid_file.read_text().split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)


def kill_tree(pid: int) -> None:
    """SIGKILL a process and everything it started (a task manager and its Python workers)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry.name))
    tree, stack = [], [pid]
    while stack:
        tree.append(current := stack.pop())
        stack.extend(children.get(current, []))
    for member in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, signal.SIGKILL)
