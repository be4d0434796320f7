"""Where the tests find what `make toolchain` fetched and built (tools/toolchain/portable.mk).

Every path is derived from the running Beam's version and the pins in
portable.mk, so a suite finds the Prism of its own Beam line. Anything missing
fails the test with one line naming it and the make target that builds it:
these suites never skip.
"""

from __future__ import annotations

import re
from pathlib import Path

import apache_beam
import pytest

from beam_agents.beam._runner import with_runner_safeguards

__all__ = ["REPO", "flink_home", "job_server_jar", "kafkaio_job_server", "pin", "prism_binary",
           "prism_flags"]

REPO = Path(__file__).resolve().parents[1]
_PINS = REPO / "tools" / "toolchain" / "portable.mk"


def pin(name: str) -> str:
    """The value of ``NAME := value`` in portable.mk (the one place the versions live)."""
    found = re.search(rf"^{name}\s*:=\s*(\S+)\s*$", _PINS.read_text(), re.MULTILINE)
    assert found, f"{name} is not pinned in {_PINS}"
    return found.group(1)


def _present(path: Path, what: str, target: str) -> Path:
    if not path.exists():
        pytest.fail(f"{what} is missing: {path} (build it with `make {target}`; "
                    "`make test` does)", pytrace=False)
    return path


def prism_binary() -> Path:
    """The Prism built for the running Beam's version."""
    version = apache_beam.__version__
    return _present(REPO / ".toolchain" / f"prism-{version}" / "prism",
                    f"Prism for Beam {version}", "prism")


def prism_flags() -> list[str]:
    """Pipeline flags that run on that Prism (the SDK harness in this process).

    Beam 2.7x keeps one Prism job server per process, built from the options
    of the first PrismRunner: a DirectRunner's Prism try without a location
    (which fails offline) would otherwise answer every later run here, and
    ignore its ``--prism_location``. The experiment gives each run its own.
    The tests build their pipelines themselves, so they add the safeguard
    `beam-agents run` adds for Prism too (no bundle splits).
    """
    return with_runner_safeguards(
        ["--runner=PrismRunner", f"--prism_location={prism_binary()}",
         "--experiments=disable_prism_server_singleton"], streaming=True)


def job_server_jar() -> Path:
    """The Flink job server of the running Beam, for the pinned Flink minor."""
    version, minor = apache_beam.__version__, pin("FLINK_MINOR")
    if version != pin("FLINK_RUNNER_BEAM"):
        pytest.fail(f"the FlinkRunner suite runs on Beam {pin('FLINK_RUNNER_BEAM')}, the job "
                    f"server's version, not {version}: use .venv-beam-{pin('FLINK_RUNNER_BEAM')}"
                    " (`make test-portable`)", pytrace=False)
    return _present(
        REPO / ".toolchain" / "jars" / f"beam-runners-flink-{minor}-job-server-{version}.jar",
        f"the Flink {minor} job server of Beam {version}", "job-server")


def kafkaio_job_server() -> Path:
    """The job server's launcher with Beam's KafkaIO on its classpath (`make kafkaio`).

    A jar of a manifest alone: the job server's main class and JVM options,
    and a Class-Path of the job-server jar and then KafkaIO's jars, so the
    standalone expansion service runs on the same classpath with ``-cp``.
    """
    job_server_jar()  # the running Beam is the job server's, and its jar is there
    version = pin("FLINK_RUNNER_BEAM")
    return _present(REPO / ".toolchain" / f"beam-kafkaio-{version}" / "flink-job-server.jar",
                    f"Beam {version}'s KafkaIO for the job server", "kafkaio")


def flink_home() -> Path:
    """The Flink distribution of the job server's minor version (its apache-flink wheel)."""
    minor = pin("FLINK_MINOR")
    venv = REPO / f".venv-flink-{minor}"
    found = sorted(venv.glob("lib/python3*/site-packages/pyflink/bin/start-cluster.sh"))
    if not found:
        pytest.fail(f"the Flink {minor} cluster is missing: no pyflink/bin in {venv} "
                    f"(build it with `make {venv}/.installed`; `make test` does)",
                    pytrace=False)
    return found[0].parent.parent
