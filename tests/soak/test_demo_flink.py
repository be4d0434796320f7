"""`make demo-flink`'s driver on a small input: every published line has a committed outcome."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(420)

REPO = Path(__file__).resolve().parents[2]


def test_the_flink_demo_accounts_for_every_published_line(
        tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tools.streaming.flink_demo", "--limit", "150", "--rate", "100",
         "--out", str(tmp_path / "out"), "--timeout_s", "300"],
        cwd=REPO, capture_output=True, text=True, timeout=400, check=False)
    output = done.stdout + done.stderr[-3000:]
    assert done.returncode == 0, output
    line = re.search(r"flink on kafka: published (\d+)  intents (\d+)  dead letters (\d+)  "
                     r"accounted (\d+)/(\d+)", done.stdout)
    assert line, output
    published, intents, dead, accounted, total = map(int, line.groups())
    assert published == total == accounted == 150
    assert intents + dead >= 150 and dead >= 1  # line 149 of examples/events.jsonl is not JSON
    paid = re.search(r"^\s*model calls paid\s+(\d+)", done.stdout, re.MULTILINE)
    assert paid and int(paid.group(1)) > 0, output
