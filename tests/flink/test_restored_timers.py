"""Timers survive a restore: a key's timer set in a checkpoint's last bundle is in the checkpoint.

PyFlink's process-mode operator applies the timers a bundle set after the
checkpoint the bundle ended in (beam_agents.flink._operator): a key that was
waiting on one is restored with no timer and never called back. The agent job
runs its function in the operator that applies them first; here a chain of
processing-time timers, each set by the one before, 100 ms apart, is cut by a
task failure and must go on from the restored checkpoint.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.flink.conftest import background_job, job_env

pytestmark = pytest.mark.timeout(240)


def _log(root: Path) -> list[str]:
    path = root / "log"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def _wait(root: Path, done: object, what: str, timeout_s: float = 120) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lines = _log(root)
        if done(lines):  # type: ignore[operator]
            return lines
        time.sleep(0.2)
    raise AssertionError(f"{what} within {timeout_s} s; the log ends {_log(root)[-10:]}")


def test_a_timer_chain_goes_on_after_a_restore(tmp_path: Path) -> None:
    """THEN each key's timers fire again after the restore, counting on from its checkpoint."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "keys").write_text("a\nb\n")
    command = ["-m", "tests.flink.timers_job", str(tmp_path)]
    with background_job(command, env=job_env(), log_dir=tmp_path / "flink-log"):
        _wait(tmp_path, lambda lines: sum(line.startswith("fire ") for line in lines) >= 30,
              "the chains did not fire 30 times")
        (tmp_path / "in" / "crash").write_text("crash\n")
        restored = _wait(tmp_path, lambda lines: lines.count("open") >= 2,
                         "the job did not restore")
        after = len(restored)
        lines = _wait(tmp_path, lambda lines: all(
            sum(line.startswith(f"fire {key} ") for line in lines[after:]) >= 5
            for key in "ab"), "a chain stopped at the restore", timeout_s=60)
    for key in "ab":
        counts = [int(line.split()[2]) for line in lines if line.startswith(f"fire {key} ")]
        resumed = [int(line.split()[2]) for line in lines[after:]
                   if line.startswith(f"fire {key} ")]
        # Restored from a checkpoint taken mid-chain: the count goes on from it.
        assert 1 < resumed[0] <= max(counts[:len(counts) - len(resumed)]) + 1
