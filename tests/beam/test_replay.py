"""``beam-agents replay``: an agent checked on recorded traffic and its journal, paying nothing.

The recorded run is ``beam-agents run`` against a local OpenAI-compatible
server that counts requests; replay then points at the same server, so a
request it sent would show up there.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from beam_agents import cli
from beam_agents.replay import main as replay
from tests._key_servers import ChatServer

pytestmark = pytest.mark.timeout(300)

VAR = "BEAM_AGENTS_REPLAY_TEST_KEY"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, ChatServer]]:
    """12 events over 3 keys (and one bad line) run once by tests.agents:replay_v1."""
    work = tmp_path_factory.mktemp("recorded")
    lines = [json.dumps({"entity_key": f"c{n % 3}", "event_id": f"e{n:02d}",
                         "event_time_ms": 1_767_225_600_000 + n * 1000,
                         "payload": f"question {n}"}) for n in range(12)]
    (work / "events.jsonl").write_text("\n".join([*lines, "not json"]) + "\n")
    with ChatServer() as chat, pytest.MonkeyPatch.context() as env:
        env.setenv(VAR, "k")
        code = cli.main(["run", "--input_files", str(work / "events.jsonl"),
                         "--output_path", str(work / "intents.jsonl"),
                         "--errors_path", str(work / "errors.jsonl"),
                         *_flags(chat, work, "replay_v1")])
        assert code == 0
        assert len(chat.requests) == 12
        yield work, chat


def _flags(chat: ChatServer, work: Path, agent: str) -> list[str]:
    return ["--agent", f"tests.agents:{agent}", "--model_provider", "openai",
            "--model_base_url", chat.url, "--model_id", "m", "--model_api_key_env", VAR,
            "--call_journal", "sqlite", "--call_journal_path", str(work / "calls.sqlite")]


def _replay(recorded: tuple[Path, ChatServer], agent: str, *extra: str
            ) -> tuple[int, str, dict[str, object]]:
    work, chat = recorded
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as env:
        env.setenv(VAR, "k")
        code = replay(["--input_files", str(work / "events.jsonl"),
                       "--expected_intents", str(work / "intents.jsonl"),
                       "--report", str(work / f"{agent}.json"),
                       *_flags(chat, work, agent), *extra], out=out)
    return code, out.getvalue(), json.loads((work / f"{agent}.json").read_text())


def test_the_same_agent_replays_unchanged_and_exits_0(
        recorded: tuple[Path, ChatServer]) -> None:
    code, text, report = _replay(recorded, "replay_v1")
    assert code == 0, text
    assert (report["activations"], report["unchanged"], report["would_pay"],
            report["intents_differ"], report["undecodable"]) == (12, 12, 0, 0, 1)
    assert len(recorded[1].requests) == 12  # nothing sent


def test_a_changed_prompt_exits_1_names_what_would_pay_and_pays_nothing(
        recorded: tuple[Path, ChatServer]) -> None:
    code, text, report = _replay(recorded, "replay_new_prompt")
    assert code == 1
    assert (report["would_pay"], report["would_pay_calls"], report["unchanged"]) == (4, 4, 8)
    assert isinstance(report["would_pay_estimated_tokens"], int)
    assert report["would_pay_estimated_tokens"] > 0
    paying = sorted(line.split()[2:4] for line in text.splitlines()
                    if line.startswith("would pay "))
    assert paying == [["c1", f"e{n:02d}:"] for n in (1, 4, 7, 10)]
    assert len(recorded[1].requests) == 12  # the counting server saw no new request

    allowed, _, _ = _replay(recorded, "replay_new_prompt", "--max_new_calls", "4")
    assert allowed == 0


def test_a_changed_intent_exits_1_and_is_diffed_by_key_and_event(
        recorded: tuple[Path, ChatServer]) -> None:
    code, text, report = _replay(recorded, "replay_new_intent")
    assert code == 1
    assert (report["intents_differ"], report["would_pay"]) == (12, 0)
    assert "intents differ c0 e00: expected 1, got 1" in text
    assert len(recorded[1].requests) == 12


def test_a_missing_journal_is_a_one_line_error_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "events.jsonl").write_text("")
    code = cli.main(["replay", "--input_files", str(tmp_path / "events.jsonl"),
                     "--agent", "tests.agents:replay_v1", "--call_journal", "sqlite",
                     "--call_journal_path", str(tmp_path / "missing.sqlite")])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "missing.sqlite" in err and "journal" in err
