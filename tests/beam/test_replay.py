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


def test_a_model_id_other_than_the_journals_is_named_up_front_with_the_flag(
        recorded: tuple[Path, ChatServer]) -> None:
    """An unchanged agent replayed under another model id: the report says so, first."""
    chat = recorded[1]
    code, text, report = _replay(recorded, "replay_v1", "--model_id", "other-model")
    assert code == 1
    first = text.splitlines()[0]
    assert first.startswith("setting differs (12 activation(s)): model: the journal's calls "
                            "were made with model 'm'; this replay asks 'other-model'")
    assert "--model_provider openai --model_id m" in first
    assert report["settings_that_differ"][0]["activations"] == 12
    assert len(chat.requests) == 12


def test_a_sampling_setting_other_than_the_journals_is_named(
        recorded: tuple[Path, ChatServer]) -> None:
    code, text, _ = _replay(recorded, "replay_warm")
    assert code == 1
    assert text.splitlines()[0].startswith(
        "setting differs (12 activation(s)): sampling: the journal's calls were made with {}; "
        "this replay's agent asks {\"temperature\": 0.9} (temperature differ)")


def test_a_one_field_change_shows_that_field_in_full_and_the_report_holds_whole_lines(
        recorded: tuple[Path, ChatServer]) -> None:
    code, text, report = _replay(recorded, "replay_new_intent")
    assert code == 1
    assert "intents differ c0 e00: expected 1, got 1; intent[0].payload.v: expected (absent), " \
           "got 2" in text
    detail = next(d for d in report["details"] if d["event_id"] == "e00")  # type: ignore[union-attr]
    assert detail["field"] == "intent[0].payload.v"
    (want,), (got,) = detail["expected"], detail["got"]
    assert json.loads(json.loads(want)["payload"]) == {"text": "ok"}
    assert json.loads(json.loads(got)["payload"]) == {"text": "ok", "v": 2}
    assert f"    got       {got}" in text.splitlines()  # printed whole, not cut


def test_would_pay_counts_the_requests_reached_and_says_where_activations_stop(
        recorded: tuple[Path, ChatServer]) -> None:
    _, text, report = _replay(recorded, "replay_new_prompt")
    assert "requests reached, missing          4" in text
    assert "stops at its first request missing from the journal" in text
    assert report["would_pay_calls"] == 4


class DecidingServer(ChatServer):
    """Answers "refund" to a kind prompt and "ok" otherwise: a prompt that changes decisions."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[bytes] = []

    def respond(self, method: str, path: str, authorization: str | None,
                body: bytes) -> tuple[int, object]:
        self.bodies.append(body)
        status, answer = super().respond(method, path, authorization, body)
        answer["usage"] = {"prompt_tokens": 20, "completion_tokens": 3,  # type: ignore[index]
                           "total_tokens": 23}
        if "kind" in body.decode():
            answer["choices"][0]["message"]["content"] = "refund"  # type: ignore[index]
        return status, answer


def test_shadow_pays_at_most_n_sampled_across_keys_and_reports_changed_decisions(
        recorded: tuple[Path, ChatServer]) -> None:
    """--shadow --max_paid_calls 3: three requests reach a counting server, over both keys."""
    work, _ = recorded
    with DecidingServer() as server, pytest.MonkeyPatch.context() as env:
        env.setenv(VAR, "k")
        out = io.StringIO()
        code = replay(["--input_files", str(work / "events.jsonl"),
                       "--expected_intents", str(work / "intents.jsonl"),
                       "--report", str(work / "shadow.json"),
                       *_flags(server, work, "replay_kinder"),
                       "--model_price_in_per_mtok", "1", "--model_price_out_per_mtok", "2",
                       "--shadow", "--max_paid_calls", "3"], out=out)
        sent = [json.loads(body) for body in server.bodies]
    text, report = out.getvalue(), json.loads((work / "shadow.json").read_text())
    assert code == 1
    assert report["would_pay"] == 8
    assert len(sent) == 3  # never more than asked for
    shadow = report["shadow"]
    assert (shadow["paid"], shadow["sampled"], shadow["keys"]) == (3, 3, 2)
    assert (shadow["changed"], shadow["unchanged"], shadow["finished"]) == (3, 0, 3)
    users = sorted(message["content"] for request in sent for message in request["messages"]
                   if message["role"] == "user")
    keys = {int(content.split()[1]) % 3 for content in users}
    assert keys == {1, 2}  # both keys that changed, not three of one
    assert (shadow["tokens_in"], shadow["tokens_out"]) == (60, 9)
    assert shadow["spend"] == pytest.approx((60 * 1 + 9 * 2) / 1e6)
    assert "  decisions changed                  3   (of 3 run to the end)" in text
    assert "about 100% of the 8 activations that would pay would change" in text


def test_shadow_needs_a_limit(recorded: tuple[Path, ChatServer],
                              capsys: pytest.CaptureFixture[str]) -> None:
    work, chat = recorded
    code = cli.main(["replay", "--input_files", str(work / "events.jsonl"),
                     *_flags(chat, work, "replay_v1"), "--shadow"])
    assert code == 2
    assert "--max_paid_calls" in capsys.readouterr().err


def test_a_missing_journal_is_a_one_line_error_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "events.jsonl").write_text("")
    code = cli.main(["replay", "--input_files", str(tmp_path / "events.jsonl"),
                     "--agent", "tests.agents:replay_v1", "--call_journal", "sqlite",
                     "--call_journal_path", str(tmp_path / "missing.sqlite")])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "missing.sqlite" in err and "journal" in err
