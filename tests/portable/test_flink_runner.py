"""The Beam pipeline on Beam's FlinkRunner, for real: a job server, Flink, Python SDK workers.

Runs in the FlinkRunner line's venv (`make test-portable`): Beam 2.62, the
newest whose Flink runner Maven serves here, with the Flink 1.19 job server
shaded from it (tools/toolchain/portable.mk). Each test compares the runner's
files with what the DirectRunner of the same Beam writes for the same input,
byte for byte. The commands are templates/flink/README.md's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from beam_agents.beam import run as run_beam
from tests._toolchain import REPO, job_server_jar, pin
from tests.portable.conftest import FlinkCluster, python_env

pytestmark = pytest.mark.timeout(300)

SAMPLE = REPO / "examples" / "events.jsonl"
AGENT = ["--agent=examples.support_agent:agent"]


def sample_slice(path: Path, lines: int = 340) -> Path:
    """The main job's first lines: every kind of outcome, a malformed line among them."""
    path.write_text("".join(SAMPLE.read_text().splitlines(keepends=True)[:lines]))
    return path


def outputs(out: Path) -> tuple[bytes, bytes]:
    return (out / "intents.jsonl").read_bytes(), (out / "errors.jsonl").read_bytes()


def io_flags(source: Path, out: Path) -> list[str]:
    return [f"--input_files={source}", f"--output_path={out / 'intents.jsonl'}",
            f"--errors_path={out / 'errors.jsonl'}"]


def flink_flags(*extra: str) -> list[str]:
    return ["--runner=FlinkRunner", f"--flink_version={pin('FLINK_MINOR')}",
            f"--flink_job_server_jar={job_server_jar()}", *extra]


@pytest.fixture(scope="module")
def direct(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tuple[bytes, bytes]]:
    """The sample slice and what the DirectRunner writes for it."""
    root = tmp_path_factory.mktemp("direct")
    source = sample_slice(root / "events.jsonl")
    run_beam(["--runner=DirectRunner", *io_flags(source, root / "out"), *AGENT])
    intents, errors = outputs(root / "out")
    assert intents.count(b"\n") > 300 and errors.count(b"\n") >= 2  # the slice's known mix
    return source, (intents, errors)


def test_embedded_flink_runs_the_batch_pipeline_byte_identically(
        tmp_path: Path, direct: tuple[Path, tuple[bytes, bytes]]) -> None:
    """--flink_master=[local]: the job server's own Flink, workers in this process (LOOPBACK)."""
    source, expected = direct
    result = run_beam([*flink_flags("--flink_master=[local]", "--environment_type=LOOPBACK"),
                       *io_flags(source, tmp_path), *AGENT])
    assert result.beam_agents_runner.ran == "FlinkRunner"
    assert outputs(tmp_path) == expected


def test_flink_run_of_the_portable_jar_on_a_two_task_manager_cluster(
        tmp_path: Path, direct: tuple[Path, tuple[bytes, bytes]],
        flink_cluster: FlinkCluster, worker_pool: str) -> None:
    """build_beam_jar.sh, then `flink run` of the jar; SDK workers from an EXTERNAL pool."""
    source, expected = direct
    jar = tmp_path / "beam-agents-flink.jar"
    built = subprocess.run(
        ["templates/flink/build_beam_jar.sh", "--python", sys.executable,
         "--flink-version", pin("FLINK_MINOR"), "--job-server-jar", str(job_server_jar()),
         "--output", str(jar), "--environment-type", "EXTERNAL",
         "--environment-config", worker_pool, "--",
         *io_flags(source, tmp_path / "out"), *AGENT, "--parallelism=2"],
        cwd=REPO, env=python_env(), capture_output=True, text=True, timeout=240, check=False)
    assert built.returncode == 0 and jar.stat().st_size > 0, built.stderr[-3000:]

    flink_cluster.restore_task_managers()
    ran = subprocess.run([flink_cluster.flink, "run", "-m", flink_cluster.rest, str(jar)],
                         env=flink_cluster.env, capture_output=True, text=True, timeout=240,
                         check=False)
    assert ran.returncode == 0, f"{ran.stdout[-3000:]}\n{flink_cluster.log_tail()}"
    assert outputs(tmp_path / "out") == expected
