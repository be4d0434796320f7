"""The agent pipeline on a real Beam runner (the DirectRunner), end to end through files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline

from beam_agents.beam import build_pipeline
from beam_agents.errors import ConfigError

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "events.jsonl"


def line(key: str, event_id: str, payload: str, time_ms: int) -> str:
    return json.dumps({"entity_key": key, "event_id": event_id, "event_time_ms": time_ms,
                       "payload": payload})


def run(tmp_path: Path, lines: list[str] | None, agent: str, *, source: Path | None = None,
        extra: tuple[str, ...] = ()) -> tuple[list[dict], list[dict], object]:
    if source is None:
        source = tmp_path / "events.jsonl"
        source.write_text("\n".join(lines or []) + "\n")
    out, errors = tmp_path / "intents.jsonl", tmp_path / "errors.jsonl"
    options = PipelineOptions([
        "--runner=DirectRunner", f"--input_files={source}", f"--output_path={out}",
        f"--errors_path={errors}", f"--agent={agent}", *extra])
    pipeline = TestPipeline(options=options)
    build_pipeline(pipeline, options)
    result = pipeline.run()
    result.wait_until_finish()
    read = lambda p: [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []  # noqa: E731
    return read(out), read(errors), result


def counter_value(result: object, namespace: str, name: str) -> int:
    counters = result.metrics().query(MetricsFilter().with_name(name))["counters"]  # type: ignore[attr-defined]
    return sum(c.committed for c in counters if c.key.metric.namespace == namespace)


def test_the_success_path_commits_state_and_emits_intents(tmp_path: Path) -> None:
    lines = [line("u1", f"e{i}", "hi", 1000 + i) for i in range(3)]
    intents, errors, _ = run(tmp_path, lines, "tests.agents:counter")

    assert errors == []
    payloads = sorted((i["seq"], json.loads(i["payload"])["count"]) for i in intents)
    assert payloads == [(1, 1), (2, 2), (3, 3)]  # each activation saw the previous one's memory


def test_a_failing_agent_emits_one_error_record_and_changes_no_state(tmp_path: Path) -> None:
    lines = [line("u1", "e1", "hi", 1), line("u1", "e2", "fail", 2), line("u1", "e3", "hi", 3)]
    intents, errors, _ = run(tmp_path, lines, "tests.agents:counter")

    assert len(errors) == 1
    [error] = errors
    assert (error["stage"], error["event_id"], error["seq"]) == ("STAGE_AGENT", "e2", 2)
    by_event = {i["event_id"]: json.loads(i["payload"]) for i in intents}
    assert set(by_event) == {"e1", "e3"}
    # e3 sees e1's memory, not e2's staged writes, and takes e2's seq.
    assert by_event["e3"] == {"count": 2, "seq": 2, "seen": 2}


def test_seq_grows_by_one_per_committed_activation_per_key(tmp_path: Path) -> None:
    lines = [line(f"u{i % 3}", f"e{i}", "hi", i) for i in range(12)]
    intents, _, _ = run(tmp_path, lines, "tests.agents:counter")

    for key in ("u0", "u1", "u2"):
        assert sorted(i["seq"] for i in intents if i["entity_key"] == key) == [1, 2, 3, 4]


def test_the_same_input_twice_from_empty_state_gives_byte_identical_intents(
        tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, first_errors, _ = run(tmp_path / "a", None, "examples.support_agent:agent",
                                 source=SAMPLE)
    second, second_errors, _ = run(tmp_path / "b", None, "examples.support_agent:agent",
                                   source=SAMPLE)
    canonical = lambda rows: sorted(json.dumps(r, sort_keys=True) for r in rows)  # noqa: E731

    assert len(first) > 900
    assert canonical(first) == canonical(second)
    assert canonical(first_errors) == canonical(second_errors)


def test_malformed_lines_become_decode_errors_and_every_line_is_accounted_for(
        tmp_path: Path) -> None:
    lines = [line("u1", "e1", "hi", 1), "not json", json.dumps({"entity_key": "u1"}),
             line("u2", "e2", "hi", 2), json.dumps({"entity_key": "", "event_time_ms": 1})]
    intents, errors, _ = run(tmp_path, lines, "tests.agents:counter")

    decode = [e for e in errors if e["stage"] == "STAGE_DECODE"]
    assert sorted(e["event"] for e in decode) == sorted(lines[i] for i in (1, 2, 4))
    assert len(intents) + len(errors) == len(lines)  # the counter agent emits one intent each


def test_the_soft_cap_counter_shows_in_result_metrics(tmp_path: Path) -> None:
    intents, errors, result = run(tmp_path, None, "examples.support_agent:agent",
                                  source=SAMPLE)

    assert counter_value(result, "beam_agents.memory", "soft_cap_warnings") >= 1
    assert counter_value(result, "beam_agents.runtime", "events") == len(
        SAMPLE.read_text().splitlines())
    assert counter_value(result, "beam_agents.model", "provider_calls") > 900
    found = result.metrics().query(MetricsFilter().with_name("queue_length"))["distributions"]
    lengths = [d.committed for d in found if d.key.metric.namespace == "beam_agents.runtime"]
    undecodable = sum(1 for error in errors if error["stage"] == "STAGE_DECODE")
    waits = sum(1 for intent in intents if intent["kind"] == "wait")
    assert waits > 0  # each wait's timeout is queued at its deadline, as an event of its own
    assert sum(d.count for d in lengths) == len(
        SAMPLE.read_text().splitlines()) - undecodable + waits
    assert max(d.max for d in lengths) > 1  # the sample has keys with many events


@pytest.mark.parametrize("flags", [
    ("--output_path=o.jsonl", "--errors_path=e.jsonl"),  # no input at all
    ("--input_files=a.jsonl", "--input_subscription=projects/p/subscriptions/s",
     "--output_path=o.jsonl", "--errors_path=e.jsonl"),
    ("--input_files=a.jsonl", "--errors_path=e.jsonl"),  # intents would be dropped
    ("--input_files=a.jsonl", "--output_path=o.jsonl"),  # dead letters would be dropped
])
def test_inputs_and_outputs_are_checked_before_building(flags: tuple[str, ...]) -> None:
    options = PipelineOptions(["--agent=tests.agents:counter", *flags])
    with pytest.raises(ConfigError):
        build_pipeline(TestPipeline(options=options), options)


def test_a_streaming_input_refuses_a_file_sink_and_names_the_flag() -> None:
    options = PipelineOptions(["--agent=tests.agents:counter",
                               "--input_subscription=projects/p/subscriptions/s",
                               "--output_topic=projects/p/topics/o",
                               "--errors_path=errors.jsonl"])
    with pytest.raises(ConfigError, match="--errors_topic") as raised:
        build_pipeline(TestPipeline(options=options), options)
    assert raised.value.field == "errors_path"
