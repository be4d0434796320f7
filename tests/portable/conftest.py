"""The FlinkRunner suite's servers: a Flink 1.19 cluster, a Python worker pool, KafkaIO's servers.

It runs in the FlinkRunner line's venv (Beam `FLINK_RUNNER_BEAM` of
tools/toolchain/portable.mk, the job server's own version) and finds the job
server and the cluster through `tests._toolchain`; `make test-portable`
builds them. Every server gets free loopback ports, its own conf, log and pid
folders, and is stopped even when a test fails.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests._emulators import accepts_connections, free_port, stop_process_group
from tests._flink_cluster import FlinkCluster, standalone_cluster
from tests._toolchain import REPO, flink_home, kafkaio_job_server

__all__ = ["POOL_KEY", "FlinkCluster", "KafkaJobServices", "free_port", "python_env"]

#: How long a JVM of KafkaIO's servers may take to listen on a busy machine.
_SERVER_START_S = 180

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


@dataclass
class KafkaJobServices:
    """The job server with KafkaIO on its classpath and a standalone expansion service.

    Attributes:
        job_endpoint: ``host:port`` of the job service (``--job_endpoint``).
        expansion_service: ``host:port`` of the expansion service
            (``--kafka_expansion_service``).
        log_dir: Where both servers log.
    """

    job_endpoint: str
    expansion_service: str
    log_dir: Path

    def cancel_jobs(self, *, timeout_s: float = 60) -> list[str]:
        """Cancel every running job through the job service; returns their states once ended."""
        import grpc  # noqa: PLC0415 - comes with apache-beam
        from apache_beam.portability.api import (  # noqa: PLC0415
            beam_job_api_pb2,
            beam_job_api_pb2_grpc,
        )

        ended = {beam_job_api_pb2.JobState.Enum.Value(name)
                 for name in ("DONE", "FAILED", "CANCELLED", "UPDATED", "DRAINED")}
        with grpc.insecure_channel(self.job_endpoint) as channel:
            service = beam_job_api_pb2_grpc.JobServiceStub(channel)
            jobs = service.GetJobs(beam_job_api_pb2.GetJobsRequest(), timeout=30).job_info
            for job in jobs:
                if job.state not in ended:
                    service.Cancel(beam_job_api_pb2.CancelJobRequest(job_id=job.job_id),
                                   timeout=30)
            deadline = time.monotonic() + timeout_s
            while True:
                states = [service.GetState(beam_job_api_pb2.GetJobStateRequest(
                    job_id=job.job_id), timeout=30).state for job in jobs]
                if all(state in ended for state in states) or time.monotonic() > deadline:
                    return [beam_job_api_pb2.JobState.Enum.Name(state) for state in states]
                time.sleep(0.5)

    def log_tail(self, chars: int = 3000) -> str:
        """The end of both servers' logs, for failure messages."""
        return "".join(f"--- {path.name}\n{path.read_text(errors='replace')[-chars:]}\n"
                       for path in sorted(self.log_dir.glob("*.log")))


@pytest.fixture(scope="module")
def kafka_job_services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaJobServices]:
    """KafkaIO's two servers on free loopback ports, stopped (their process groups) after.

    The job server runs its embedded Flink (``--flink-master=[local]``) and
    runs the Java transforms in its own process (the EMBEDDED environment).
    The expansion service is a standalone one on the same classpath: the job
    server's own gives Java transforms Beam's Docker image, and there is no
    Docker here. It expands KafkaIO's read as an unbounded source
    (``use_deprecated_read``): the splittable-DoFn form read nothing on this
    runner (docs/streaming.md, "Beam on Kafka").
    """
    launcher = kafkaio_job_server()
    java = shutil.which("java")
    if java is None:
        pytest.fail("`java` is not on PATH; the job server and the expansion service need "
                    "Java 17", pytrace=False)
    log_dir = tmp_path_factory.mktemp("kafkaio-servers")
    job_port, expansion_port = free_port(), free_port()
    commands = {
        "job-server": (job_port, [java, "-jar", str(launcher), "--flink-master=[local]",
                                  f"--job-port={job_port}", f"--artifact-port={free_port()}",
                                  f"--expansion-port={free_port()}"]),
        "expansion-service": (expansion_port, [
            java, "-cp", str(launcher), "org.apache.beam.sdk.expansion.service.ExpansionService",
            str(expansion_port), "--defaultEnvironmentType=EMBEDDED",
            "--experiments=use_deprecated_read"]),
    }
    started: list[tuple[subprocess.Popen[bytes], int]] = []
    services = KafkaJobServices(f"localhost:{job_port}", f"localhost:{expansion_port}", log_dir)
    try:
        for name, (port, command) in commands.items():
            with (log_dir / f"{name}.log").open("wb") as out:
                started.append((subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                                 start_new_session=True), port))
        deadline = time.monotonic() + _SERVER_START_S
        for process, port in started:
            while not accepts_connections(port):
                assert process.poll() is None, f"a server exited:\n{services.log_tail()}"
                assert time.monotonic() < deadline, (
                    f"not listening in {_SERVER_START_S} s:\n{services.log_tail()}")
                time.sleep(0.2)
        yield services
    finally:
        for process, port in started:
            stop_process_group(process, port)
