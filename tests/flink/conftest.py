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
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from beam_agents.memory import LongtermStoreConfig
from tests._firestore_server import firestore_host

__all__ = ["REPO", "firestore_host", "job_env", "part_lines", "run_job", "store_rows"]

REPO = Path(__file__).resolve().parents[2]
_JOB_TIMEOUT_S = 240


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
