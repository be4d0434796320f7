"""`make demo-streaming`'s driver on a small input: every published line has an outcome."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]


def test_the_streaming_demo_accounts_for_every_published_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tools.streaming.demo", "--limit", "200", "--rate", "100",
         "--out", str(tmp_path / "out"), "--timeout_s", "60"],
        cwd=REPO, capture_output=True, text=True, timeout=110, check=False)
    output = done.stdout + done.stderr[-3000:]
    assert done.returncode == 0, output
    assert "summary" in done.stdout and "events read" in done.stdout, output
    line = re.search(r"streaming: published (\d+)  intents (\d+)  dead letters (\d+)  "
                     r"accounted (\d+)/(\d+)", done.stdout)
    assert line, output
    published, intents, dead, accounted, total = map(int, line.groups())
    assert published == total == accounted == 200
    assert intents + dead >= 200
    assert dead >= 1  # line 149 of examples/events.jsonl is not JSON
    assert "p50" in done.stdout and "wall" in done.stdout
