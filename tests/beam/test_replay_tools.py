"""``beam-agents replay`` covers tools: a recorded result replays; an unrecorded call never runs."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from beam_agents import cli
from beam_agents.replay import main as replay
from tests import agents

pytestmark = pytest.mark.timeout(300)


def test_replay_replays_recorded_tool_results_and_never_runs_an_unrecorded_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "tool-runs.log"
    monkeypatch.setenv(agents.TOOL_LOG_ENV, str(log))
    lines = [json.dumps({"entity_key": f"c{n % 2}", "event_id": f"e{n}",
                         "event_time_ms": 1_000 + n, "payload": f"A{n}X"}) for n in range(6)]
    (tmp_path / "events.jsonl").write_text("\n".join(lines) + "\n")
    journal = ["--call_journal", "sqlite", "--call_journal_path", str(tmp_path / "calls.db")]
    assert cli.main(["run", "--input_files", str(tmp_path / "events.jsonl"),
                     "--output_path", str(tmp_path / "intents.jsonl"),
                     "--errors_path", str(tmp_path / "errors.jsonl"),
                     "--agent", "tests.agents:order_agent", *journal]) == 0
    assert len(agents.tool_runs(str(log))) == 6

    def check(agent: str) -> tuple[int, dict[str, object], str]:
        out = io.StringIO()
        code = replay(["--input_files", str(tmp_path / "events.jsonl"),
                       "--expected_intents", str(tmp_path / "intents.jsonl"),
                       "--report", str(tmp_path / f"{agent}.json"),
                       "--agent", f"tests.agents:{agent}", *journal], out=out)
        return code, json.loads((tmp_path / f"{agent}.json").read_text()), out.getvalue()

    code, report, text = check("order_agent")
    assert (code, report["unchanged"], report["would_run_tools"]) == (0, 6, 0), text
    code, report, text = check("order_agent_v2")
    assert (code, report["would_run_tools"], report["unchanged"]) == (1, 6, 0), text
    assert "would run      c0 e0" in text
    assert len(agents.tool_runs(str(log))) == 6  # replay ran no tool, recorded or not
