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
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyflink
import pytest

from beam_agents.memory import LongtermStoreConfig
from tests._firestore_server import firestore_host
from tests._flink_cluster import FlinkCluster, standalone_cluster
from tests._kafka import kafka_topics
from tests.flink._sink import part_lines
from tools.jaeger.server import Jaeger, start_jaeger, stop_jaeger

__all__ = ["REPO", "firestore_host", "flink_cluster", "flink_run", "job_env", "kafka_topics",
           "part_lines", "run_job", "store_rows"]

REPO = Path(__file__).resolve().parents[2]
FLINK_HOME = Path(pyflink.__file__).resolve().parent
_JOB_TIMEOUT_S = int(os.environ.get("FLINK_TEST_JOB_TIMEOUT_S", "240"))


def job_env(**extra: str) -> dict[str, str]:
    """The environment a Flink job (and so its Python workers) runs with.

    ``PYTHONFAULTHANDLER`` lets a hung job's Python threads be dumped with
    SIGABRT before it is killed (see `_run_to_end`).
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["PYTHONFAULTHANDLER"] = "1"
    env.update(extra)
    return env


def run_job(command: Sequence[str], *, env: dict[str, str] | None = None,
            log_dir: Path | None = None, cwd: Path = REPO) -> str:
    """Run a Flink job to completion; fail the test with its log tails if it fails.

    The job's MiniCluster logs to `log_dir` (a temporary one if None), so a
    failure shows what Flink did (task states, checkpoints, warnings) beside
    the output, and a kept `log_dir` lets a test's own assertions be traced.
    """
    with tempfile.TemporaryDirectory(prefix="flink-job-log-") as scratch:
        logs = log_dir or Path(scratch)
        logs.mkdir(parents=True, exist_ok=True)
        job = {**(env or job_env()), "FLINK_LOG_DIR": str(logs)}
        try:
            code, output = _run_to_end([sys.executable, *command], env=job, cwd=cwd)
        except AssertionError as hung:
            raise AssertionError(f"{hung}\n{_flink_log_digest(logs)}") from None
        if code != 0:
            raise AssertionError(f"Flink job {command[:2]} exited {code}:\n{_tail(output)}\n"
                                 f"{_flink_log_digest(logs)}")
    return output


_DIGEST = re.compile(r"^\S+ \S+ +(WARN|ERROR|INFO +\S+ +\[\] - .*(switched from|[Cc]heckpoint))")


def _flink_log_digest(log_dir: Path, lines: int = 80) -> str:
    """The last task-state, checkpoint, warning and error lines of Flink's logs in `log_dir`."""
    digest = [f"--- {log.name} (last {lines} state, checkpoint and warning lines):\n" + _tail(
        "\n".join(line[:300] for line in log.read_text(errors="replace").splitlines()
                  if _DIGEST.search(line)), lines)
        for log in sorted(log_dir.glob("*.log"))]
    return "\n".join(digest) or f"(no Flink log in {log_dir})"


def _tail(text: str, lines: int = 60) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _run_to_end(argv: Sequence[str], *, env: dict[str, str],
                cwd: Path = REPO) -> tuple[int, str]:
    """Run `argv` in a process group of its own; returns its exit code and output.

    A local job's JVM (and a cluster client's) is a child of the process, so a
    timeout kills the whole group: a hung job must not outlive its test and
    load the machine for the next one. Before that, the JVMs' task threads and
    the Python threads are dumped, so the failure shows where the job stuck.
    """
    with subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, start_new_session=True) as proc:
        try:
            output, _ = proc.communicate(timeout=_JOB_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            java_threads = _dump_group(proc.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)  # the faulthandler writes the Python threads and aborts
            _kill_group(proc.pid)
            output, _ = proc.communicate()
            raise AssertionError(f"{argv[1:3]} did not finish in {_JOB_TIMEOUT_S} s.\n"
                                 f"JVM task threads:\n{java_threads}\n"
                                 f"Its output ends:\n{_tail(output, 150)}") from None
        finally:
            _kill_group(proc.pid)  # whatever the job left behind
    return proc.returncode, output


def _dump_group(pgid: int) -> str:
    """Thread dumps of a hung process group: JVM task threads returned, Python's to stderr."""
    dumps = []
    for pid in _group_members(pgid):
        try:
            command = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:  # it exited meanwhile
            continue
        if command == "java":
            dumps.append(_task_threads(pid))
        elif command.startswith("python"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGABRT)
    return "\n".join(dumps)


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.getpgid(int(entry.name)) == pgid:
                    members.append(int(entry.name))
    return members


def _task_threads(pid: int) -> str:
    """The threads of a JVM that run tasks or talk to Python workers (``jcmd Thread.print``)."""
    try:
        dump = subprocess.run(["jcmd", str(pid), "Thread.print"], capture_output=True,
                              text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(no thread dump of {pid}: {exc})"
    marks = ("org.apache.flink.python", "org.apache.flink.streaming.runtime.tasks",
             "org.apache.beam")
    threads = [block for block in dump.split("\n\n") if any(m in block for m in marks)]
    return f"--- JVM {pid}:\n" + ("\n\n".join(threads) or dump)[:30_000]


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


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


def _cluster(address: str, env: dict[str, str]) -> FlinkCluster:
    return FlinkCluster(FLINK_HOME, address, env)


def replace_lost_task_managers(address: str, env: dict[str, str]) -> None:
    """Start a task manager for each one that has died, as a deployment's supervisor would.

    A test that kills a Python worker may take its task manager down with it;
    the next test must not find the cluster short of slots.
    """
    _cluster(address, env).restore_task_managers()


@pytest.fixture(scope="session")
def flink_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """A standalone cluster from PyFlink's distribution: yields its REST ``host:port`` and env.

    Private conf, log and pid dirs and free ports (`tests._flink_cluster`).
    """
    conf = {"python": {"executable": sys.executable, "client": {"executable": sys.executable}},
            # Counters reach the task manager's log, so a test can see them leave Python.
            "metrics": {"reporter": {"slf4j": {
                "factory": {"class": "org.apache.flink.metrics.slf4j.Slf4jReporterFactory"},
                "interval": "200 ms"}}}}
    with standalone_cluster(FLINK_HOME, tmp_path_factory.mktemp("flink-cluster"), job_env(),
                            conf=conf) as cluster:
        yield cluster.rest, cluster.env


def flink_run(address: str, env: dict[str, str], script: Path, args: Sequence[str], *,
              cwd: Path = REPO) -> str:
    """``flink run --python script args`` against `address`; returns its output.

    If the job fails or hangs, every job still on the cluster is cancelled, so
    the next test gets free slots, and the cluster logs' digest is shown.
    """
    replace_lost_task_managers(address, env)
    command = [str(FLINK_HOME / "bin" / "flink"), "run", "-m", address, "--python", str(script),
               "-pyexec", sys.executable, *args]
    try:
        code, output = _run_to_end(command, env=env, cwd=cwd)
    except AssertionError as hung:
        task_managers = [_task_threads(int(pid))
                         for pid_file in Path(env["FLINK_PID_DIR"]).glob("*taskexecutor*.pid")
                         for pid in pid_file.read_text().split()]
        raise AssertionError("\n".join([str(hung), "Task manager threads:", *task_managers,
                                         _cluster_post_mortem(address, env)])) from None
    assert code == 0, f"{_tail(output)}\n{_cluster_post_mortem(address, env)}"
    return output


def _cluster_post_mortem(address: str, env: dict[str, str]) -> str:
    """Cancel the cluster's unfinished jobs; returns the cluster logs' digest."""
    _cluster(address, env).cancel_jobs()
    return _flink_log_digest(Path(env["FLINK_LOG_DIR"]))


def kafka_job(bootstrap: str, name: str, topics: dict[str, str], *flags: str) -> list[str]:
    """The native Flink job from `topics` ``events`` to ``intents`` and ``errors``, as tests run it.

    From the earliest offset, with a consumer group and transactional ids of
    the run's own `name`, the Kafka connector of the toolchain and this
    interpreter for the Python workers; `flags` add the agent and the rest.
    """
    from tests._kafka import connector_jar  # noqa: PLC0415

    return ["templates/flink/agent_job.py", "--input_kafka_topic", topics["events"],
            "--output_kafka_topic", topics["intents"], "--errors_kafka_topic", topics["errors"],
            "--kafka_bootstrap_servers", bootstrap, "--kafka_starting_offsets", "earliest",
            "--kafka_group_id", f"job-{name}", "--kafka_transactional_id_prefix", f"t-{name}",
            "--kafka_connector_jar", str(connector_jar()),
            "--python_executable", sys.executable, *flags]


@pytest.fixture()
def jaeger(tmp_path: Path) -> Iterator[Jaeger]:
    """A real Jaeger (tools/jaeger) for one test: an OTLP endpoint and a query API."""
    started = start_jaeger(tmp_path / "jaeger.log")
    yield started
    stop_jaeger(started)


@contextlib.contextmanager
def background_job(command: Sequence[str], *, env: dict[str, str],
                   log_dir: Path) -> Iterator[subprocess.Popen[str]]:
    """A streaming Flink job (it never ends by itself) running for the block, then killed.

    The job runs in a process group of its own, as `run_job`'s do, so its
    MiniCluster and Python workers go with it. If the block fails, the job's
    output and its Flink log digest are added to the failure.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    output = log_dir / "job.out"
    with output.open("w") as out:
        proc = subprocess.Popen([sys.executable, *command], cwd=REPO,
                                env={**env, "FLINK_LOG_DIR": str(log_dir)}, stdout=out,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        yield proc
    except AssertionError as failed:
        raise AssertionError(f"{failed}\nThe job's output ends:\n"
                             f"{_tail(output.read_text(errors='replace'))}\n"
                             f"{_flink_log_digest(log_dir)}") from None
    finally:
        _kill_group(proc.pid)
        proc.wait(timeout=30)


def submit_detached(address: str, env: dict[str, str], script: Path, args: Sequence[str]) -> str:
    """``flink run -d --python script args`` on the cluster; returns the job's id."""
    replace_lost_task_managers(address, env)
    command = [str(FLINK_HOME / "bin" / "flink"), "run", "-d", "-m", address, "--python",
               str(script), "-pyexec", sys.executable, *args]
    code, output = _run_to_end(command, env=env)
    found = re.search(r"JobID ([0-9a-f]{32})", output)
    assert code == 0 and found, f"{_tail(output)}\n{_cluster_post_mortem(address, env)}"
    return found.group(1)


def cancel_jobs(address: str, env: dict[str, str]) -> str:
    """Cancel every unfinished job on the cluster, restore its task managers; the log digest."""
    digest = _cluster_post_mortem(address, env)
    replace_lost_task_managers(address, env)
    return digest


def job_task_manager_pids(address: str, job_id: str, env: dict[str, str]) -> list[int]:
    """The pids of the task managers that run a task of `job_id`."""
    return _cluster(address, env).job_task_manager_pids(job_id)
