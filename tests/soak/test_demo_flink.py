"""`make demo-flink`'s driver on a small input: every line has an outcome, and a summary."""

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
    # make demo's summary, from the job's counters and the committed topics.
    summary = dict(re.findall(r"^  (\S[\w ()/-]*?)\s{2,}(\d+)\b", done.stdout, re.MULTILINE))
    assert int(summary["events read"]) == 150, output
    assert int(summary["errors by stage"]) == dead, output
    committed = int(summary["activations committed"])
    assert 0 < committed <= intents, output
    assert int(summary["model calls paid"]) >= committed, output  # each activation calls once
    assert int(summary["tokens paid (in / out)"]) > 0, output
