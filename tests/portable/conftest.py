"""The FlinkRunner suite's servers: a Flink 1.19 cluster, a Python worker pool, and outputs.

It runs in the FlinkRunner line's venv (Beam `FLINK_RUNNER_BEAM` of
tools/toolchain/portable.mk, the job server's own version) and finds the job
server and the cluster through `tests._toolchain`; `make test-portable`
builds them. Every server gets free loopback ports, its own conf, log and pid
folders, and is stopped even when a test fails.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._emulators import free_port
from tests._flink_cluster import FlinkCluster, standalone_cluster
from tests._toolchain import REPO, flink_home

__all__ = ["POOL_KEY", "FlinkCluster", "free_port", "python_env"]

#: The model API key the workers read from their environment (`--model_api_key_env`):
#: as on a cluster, the workers' environment holds it, not the submitter's.
POOL_KEY = "k1"


def python_env(**extra: str) -> dict[str, str]:
    """This venv's Python first on PATH (a worker pool starts `python`), the repo importable."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def flink_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlinkCluster]:
    """`start-cluster.sh` of the Flink 1.19 wheel: two task managers of two slots each."""
    # A job's subtasks spread over both task managers, so killing one hits the job.
    with standalone_cluster(flink_home(), tmp_path_factory.mktemp("flink-1.19"), python_env(),
                            conf={"cluster": {"evenly-spread-out-slots": True}}) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def worker_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Python worker pool (EXTERNAL environment) that both task managers reach.

    On one machine the two task managers share it, so it is
    templates/flink/worker_pool.py: Beam's ``worker_pool_main``, shared, stops
    one task manager's worker when the other releases a worker of the same id.
    """
    import grpc  # noqa: PLC0415 - comes with apache-beam

    port = free_port()
    log = tmp_path_factory.mktemp("worker-pool") / "pool.log"
    with log.open("wb") as out:
        pool = subprocess.Popen(
            [sys.executable, str(REPO / "templates" / "flink" / "worker_pool.py"),
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
