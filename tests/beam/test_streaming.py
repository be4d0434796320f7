"""The streaming host (`AgentDoFn`) on the streaming DirectRunner and Prism, from a `TestStream`.

The DirectRunner runs processing-time timers on a test clock that starts at
epoch 0, and the engine schedules them from the wall clock, so a stream
either advances processing time past the wall clock (the wake timer pumps
each key) or does not (offers pump, and the end-of-input timer drains each
key when the watermark reaches infinity). Both must give the same lines.

Prism (`--runner=PrismRunner`, the binary `make prism` builds for this Beam
line) runs the same tests with its SDK harness in this process (LOOPBACK). Its
processing-time clock under a TestStream is synthetic: a wake set for the wall
clock is rebased onto the stream's clock and fires as soon as nothing else is
due, and a cleared one fires at once. docs/decisions/0013-waking-a-key.md says what
the DoFn does about both. Prism 2.61 (the dev line's) stops such a pipeline
with "nothing in progress and no refreshes with non zero pending elements", so
only the Beam-latest line's Prism runs them.

The runner works in this process: the collector and the provider's call
counter are module globals that survive the DoFn's pickling by reference.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.test_stream import TestStream as EventStream
from apache_beam.transforms.window import TimestampedValue

from beam_agents.beam import ERRORS, AgentDoFn, DecodeEvents
from beam_agents.beam._metrics import local_tally
from beam_agents.errors import ProviderUnavailable
from beam_agents.hosting import EventOrdering, error_from_json
from beam_agents.metrics import RecordingMetrics
from beam_agents.model import BreakerConfig, ModelConfig, ModelRequest
from beam_agents.runtime import AgentConfig, AgentEvent, RetryPolicy
from beam_agents.stores import SqliteCallJournalConfig
from beam_agents.testing import ScriptedModel
from tests import agents
from tests._toolchain import prism_flags

pytestmark = pytest.mark.timeout(120)

#: Prism runs TestStreams with processing-time timers from Beam 2.77 on (see above).
PRISM_RUNS_STREAMS = tuple(map(int, beam.__version__.split(".")[:2])) >= (2, 77)
RUNNERS = ["direct", "prism"] if PRISM_RUNS_STREAMS else ["direct"]


@pytest.fixture(params=RUNNERS)
def runner(request: pytest.FixtureRequest) -> list[str]:
    """The runner's flags: the DirectRunner, or the Prism built for this Beam line."""
    return ["--runner=DirectRunner"] if request.param == "direct" else prism_flags()


def on_prism(runner: list[str]) -> bool:
    return runner[0] == "--runner=PrismRunner"


FAST_RETRY = RetryPolicy(retry_initial_ms=5, retry_max_ms=20, max_attempts=4)
KEYED = beam.typehints.Tuple[bytes, bytes]

#: Lines the pipeline wrote, by output; filled in this process by `collect`.
COLLECTED: defaultdict[str, list[bytes]] = defaultdict(list)
#: Provider calls per entity key, failed ones included, across every runtime built.
CALLS: Counter[str] = Counter()
#: How many of each key's first calls fail with a 503.
FAIL_FIRST: dict[str, int] = {}
_CALLS_LOCK = threading.Lock()


def collect(line: bytes, channel: str) -> None:
    COLLECTED[channel].append(line)


def answer(request: ModelRequest) -> str | BaseException:
    """Fails each key's first FAIL_FIRST[key] calls as unavailable, then answers."""
    content = str(request.messages[-1]["content"])
    who = content.split(":", 1)[0]
    with _CALLS_LOCK:
        CALLS[who] += 1
        failing = CALLS[who] <= FAIL_FIRST.get(who, 0)
    return ProviderUnavailable("503 from the test provider") if failing else f"ok {content}"


def flaky_provider() -> ScriptedModel:
    """Built by each runtime in setup(); the counts live in the module."""
    return ScriptedModel(answer)


def line(key: str, n: int, payload: str = "hi") -> bytes:
    return json.dumps({"entity_key": key, "event_id": f"e{n:02d}", "event_time_ms": 1_000 * n,
                       "payload": payload}).encode()


def stream_of(batches: Iterable[list[bytes]], *, pump_by_timer: bool) -> EventStream:
    """One TestStream step per batch; each key's events arrive in event-time order."""
    stream = EventStream()
    if pump_by_timer:
        # Past the wall clock: from here on every wake timer the engine sets is due.
        stream = stream.advance_processing_time(int(time.time()) + 86_400)
    for step, batch in enumerate(batches, start=1):
        stream = stream.add_elements([TimestampedValue(data, step) for data in batch])
        if pump_by_timer:
            stream = stream.advance_processing_time(1)
        stream = stream.advance_watermark_to(step)
    return stream.advance_watermark_to_infinity()


def run_stream(stream: EventStream, config: AgentConfig, runner: list[str] | None = None, *,
               provider: Callable[[], ScriptedModel] | None = None,
               ) -> tuple[list[dict], list[dict]]:
    COLLECTED.clear()
    options = PipelineOptions(runner or ["--runner=DirectRunner"])
    options.view_as(StandardOptions).streaming = True
    pipeline = TestPipeline(options=options)
    decoded = (pipeline
               | "Events" >> stream
               | "Decode" >> beam.ParDo(DecodeEvents("json")).with_output_types(KEYED)
               .with_outputs(ERRORS, main="events"))
    activated = decoded.events | "Activate" >> beam.ParDo(
        AgentDoFn(config, provider=provider)).with_input_types(KEYED).with_outputs(
        ERRORS, main="intents")
    _ = activated.intents | "KeepIntents" >> beam.Map(collect, "intents")
    _ = ((decoded[ERRORS], activated[ERRORS])
         | "AllErrors" >> beam.Flatten()
         | "KeepErrors" >> beam.Map(collect, "errors"))
    # Counters are not asserted here: this runner reports only a step's last bundle.
    pipeline.run().wait_until_finish()
    return ([json.loads(x) for x in COLLECTED["intents"]],
            [json.loads(x) for x in COLLECTED["errors"]])


def by_key(intents: list[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = defaultdict(list)
    for intent in sorted(intents, key=lambda i: (i["entity_key"], i["seq"])):
        grouped[intent["entity_key"]].append(intent)
    return grouped


COUNTER_BATCHES = [
    [line("a", 0), line("b", 0), line("c", 0)],
    [line("a", 1), b"not json", line("b", 1), line("a", 2)],
    [line("c", 1), line("b", 2, "fail"), line("a", 3), line("b", 3)],
    [line("c", 2), line("c", 3), line("b", 4), line("a", 4)],
]


@pytest.mark.parametrize("pump_by_timer", [True, False], ids=["wake_timer", "end_of_input"])
def test_each_key_runs_in_event_time_order_with_its_dead_letters(pump_by_timer: bool,
                                                                 runner: list[str]) -> None:
    """Seqs follow event time per key; an agent failure and an undecodable line dead-letter."""
    intents, errors = run_stream(stream_of(COUNTER_BATCHES, pump_by_timer=pump_by_timer),
                                 AgentConfig(agent="tests.agents:counter"), runner)

    order = {key: [(i["seq"], i["event_id"], json.loads(i["payload"])["count"]) for i in rows]
             for key, rows in by_key(intents).items()}
    assert order == {
        "a": [(n + 1, f"e{n:02d}", n + 1) for n in range(5)],
        "b": [(1, "e00", 1), (2, "e01", 2), (3, "e03", 3), (4, "e04", 4)],
        "c": [(n + 1, f"e{n:02d}", n + 1) for n in range(4)],
    }
    stages = sorted((e["stage"], e.get("event_id", "")) for e in errors)
    assert stages == [("STAGE_AGENT", "e02"), ("STAGE_DECODE", "")]
    [decode_error] = [e for e in errors if e["stage"] == "STAGE_DECODE"]
    assert decode_error["event"] == "not json"  # the original bytes, for a redrive
    [agent_error] = [e for e in errors if e["stage"] == "STAGE_AGENT"]
    assert (agent_error["entity_key"], agent_error["seq"], agent_error["attempts"]) == ("b", 3, 1)


@pytest.mark.parametrize("pump_by_timer", [True, False], ids=["wake_timer", "end_of_input"])
def test_an_outage_suspends_the_key_and_each_call_is_paid_once(pump_by_timer: bool,
                                                               runner: list[str],
                                                               tmp_path: Path) -> None:
    """0 dead letters; calls = distinct requests + K failed ones; the suspended key keeps order.

    Prism may run a bundle again (it did on a machine at load 20, paying one
    call twice), and invariant 9 promises no call paid twice across a bundle
    retry only with a call journal: on Prism the run has one, as a user's should.
    """
    CALLS.clear()
    FAIL_FIRST.clear()
    FAIL_FIRST["blip"] = 3
    batches = [[line("blip", n, f"m{n}"), line("calm", n, f"m{n}")] for n in range(4)]
    journal = (SqliteCallJournalConfig(path=str(tmp_path / "calls.sqlite"))
               if on_prism(runner) else None)
    config = AgentConfig(agent="tests.agents:ask", retry=FAST_RETRY, call_journal=journal,
                         model=ModelConfig(breaker=BreakerConfig(failure_threshold=1000)))
    intents, errors = run_stream(stream_of(batches, pump_by_timer=pump_by_timer), config,
                                 runner, provider=flaky_provider)

    assert errors == []
    assert dict(CALLS) == {"blip": 4 + 3, "calm": 4}
    assert sorted(by_key(intents)) == ["blip", "calm"]
    for key, rows in by_key(intents).items():
        answers = [json.loads(i["payload"]) for i in rows]
        assert [(i["seq"], i["event_id"]) for i in rows] == [
            (n + 1, f"e{n:02d}") for n in range(4)], key
        assert [a["text"] for a in answers] == [f"ok {key}: m{n}" for n in range(4)], key


def _ordered_run(ordering: EventOrdering, batches: list[list[tuple[str, int]]],
                 runner: list[str]) -> tuple[list[dict], list[dict], RecordingMetrics]:
    """Each batch's (key, n) events in the order given, then the watermark past them (or kept)."""
    stream, watermark = EventStream(), 0.0
    for batch in batches:
        stream = stream.add_elements([TimestampedValue(line(key, n), n) for key, n in batch])
        watermark = max(watermark + 0.1, max(n for _, n in batch) + 0.5)
        stream = stream.advance_watermark_to(watermark)
    stream = stream.advance_watermark_to_infinity()
    COLLECTED.clear()
    options = PipelineOptions(runner)
    options.view_as(StandardOptions).streaming = True
    pipeline = TestPipeline(options=options)
    decoded = (pipeline
               | "Events" >> stream
               | "Decode" >> beam.ParDo(DecodeEvents("json")).with_output_types(KEYED)
               .with_outputs(ERRORS, main="events"))
    activated = decoded.events | "Activate" >> beam.ParDo(
        AgentDoFn(AgentConfig(agent="tests.agents:counter"), ordering=ordering)
    ).with_input_types(KEYED).with_outputs(ERRORS, main="intents")
    _ = activated.intents | "KeepIntents" >> beam.Map(collect, "intents")
    _ = activated[ERRORS] | "KeepErrors" >> beam.Map(collect, "errors")
    with local_tally() as tally:  # the local runner drops counters set in timer callbacks
        pipeline.run().wait_until_finish()
    return ([json.loads(x) for x in COLLECTED["intents"]],
            [json.loads(x) for x in COLLECTED["errors"]], tally)


#: Out of order within each batch; the second batch's e02 is behind what "a" already ran.
OUT_OF_ORDER = [[("a", 3), ("b", 1), ("a", 1), ("b", 0), ("a", 0)],
                [("a", 2)],
                [("a", 5), ("b", 2), ("a", 4)]]

#: "a" holds one event (e03) when the first watermark passes it, so a single
#: release timer lets it run, and e02 arrives behind what "a" already ran.
#: With several held events the local runner fires the key's release timers
#: one bundle at a time, each setting the next, and may take the next batch in
#: between: e02 would then arrive before "a" ran past it, and is not late.
LATE = [[("a", 3), ("b", 1), ("b", 0)], [("a", 2)], [("a", 5), ("b", 2), ("a", 4)]]


def test_events_out_of_order_within_the_bound_run_in_exact_event_time_order(
        runner: list[str]) -> None:
    """Beam streaming, event-time order: the watermark releases each key's events in order."""
    intents, errors, tally = _ordered_run(EventOrdering(), [OUT_OF_ORDER[0], OUT_OF_ORDER[2]],
                                           runner)
    assert errors == []
    assert tally.get("beam_agents.runtime", "late_events") == 0
    ran = {key: [i["event_id"] for i in rows] for key, rows in by_key(intents).items()}
    assert ran == {"a": ["e00", "e01", "e03", "e04", "e05"], "b": ["e00", "e01", "e02"]}


def test_a_late_event_runs_on_arrival_and_is_counted(runner: list[str]) -> None:
    """Behind the watermark: counted, and queued at once, not held for a watermark.

    It arrives after the watermark released e03, which has started by then,
    so it runs next, and before e04 and e05, which wait for the watermark.
    """
    intents, errors, tally = _ordered_run(EventOrdering(), LATE, runner)
    assert errors == []
    assert tally.get("beam_agents.runtime", "late_events") == 1
    assert [i["event_id"] for i in by_key(intents)["a"]] == ["e03", "e02", "e04", "e05"]


def test_a_late_event_is_a_late_dead_letter_with_the_flag(runner: list[str]) -> None:
    """--late_events dead_letter: the late event is a LATE dead letter carrying it."""
    intents, errors, tally = _ordered_run(EventOrdering(late_events="dead_letter"), LATE, runner)
    assert tally.get("beam_agents.runtime", "late_events") == 1
    assert [(e["stage"], e["event_id"], e["retriable"]) for e in errors] == [
        ("STAGE_LATE", "e02", True)]
    record = error_from_json(json.dumps(errors[0]))
    assert AgentEvent.FromString(record.event).event_id == "e02"  # redrivable
    assert [i["event_id"] for i in by_key(intents)["a"]] == ["e03", "e04", "e05"]


def test_arrival_order_runs_an_event_as_soon_as_its_key_is_free(runner: list[str]) -> None:
    """--event_order arrival: no waiting for the watermark, so "a" starts with what arrives first.

    The DirectRunner hands a batch's elements over as the stream lists them, so
    "a" starts with e03. Prism queues a stage's input by event time and hands
    it over in that order, so there "a" starts with e00, and runs in order.
    """
    intents, errors, _ = _ordered_run(EventOrdering(mode="arrival"), [OUT_OF_ORDER[0]], runner)
    assert errors == []
    ran = [i["event_id"] for i in by_key(intents)["a"]]
    assert sorted(ran) == ["e00", "e01", "e03"]
    assert ran[0] == ("e00" if on_prism(runner) else "e03")


def test_the_end_of_a_bounded_stream_runs_every_keys_next_event_at_once(
        runner: list[str]) -> None:
    """Beam's end-of-input rounds: each key's n-th event starts beside the other keys' n-th.

    Drained key after key, the 6 keys' activations at the end would not
    overlap; in rounds, most of each seq's six run side by side. Prism hands
    a key's next round over before the other keys' current one, so there the
    rounds run key after key: each key's seqs still run in order, one at a time.
    """
    agents.TIMED.clear()
    keys = [f"k{k}" for k in range(6)]
    stream = EventStream().add_elements(
        [TimestampedValue(line(key, n), n) for n in range(3) for key in keys])
    COLLECTED.clear()
    options = PipelineOptions(runner)
    options.view_as(StandardOptions).streaming = True
    pipeline = TestPipeline(options=options)
    decoded = (pipeline
               | "Events" >> stream.advance_watermark_to_infinity()
               | "Decode" >> beam.ParDo(DecodeEvents("json")).with_output_types(KEYED)
               .with_outputs(ERRORS, main="events"))
    activated = decoded.events | "Activate" >> beam.ParDo(
        AgentDoFn(AgentConfig(agent="tests.agents:steady"))).with_input_types(
        KEYED).with_outputs(ERRORS, main="intents")
    _ = activated.intents | "KeepIntents" >> beam.Map(collect, "intents")
    pipeline.run().wait_until_finish()

    intents = [json.loads(x) for x in COLLECTED["intents"]]
    assert {key: [i["seq"] for i in rows] for key, rows in by_key(intents).items()} == {
        key: [1, 2, 3] for key in keys}
    for seq in (2, 3):
        spans = sorted((start, end) for _, s, _, start, end in agents.TIMED if s == seq)
        assert len(spans) == len(keys)
        overlapping = max(sum(1 for s, e in spans if s <= start < e) for start, _ in spans)
        if on_prism(runner):
            assert overlapping >= 1, (seq, spans)
        else:
            assert overlapping > len(keys) // 2, (seq, spans)


def test_a_key_past_its_backlog_cap_dead_letters_the_overflow_and_others_go_on(
        runner: list[str]) -> None:
    """Invariant 4: past --max_queued_per_key, BACKLOG dead letters that carry their events.

    Five events of one key arrive before the watermark lets any run, so its
    queue fills to the cap of three and the other two are refused; the
    other key's events are not touched by it. Which two is the order the
    runner hands the batch over in, so the test holds to counts and to the
    events each record carries.
    """
    hot = [line("hot", n) for n in range(5)]
    cold = [line("cold", n) for n in range(2)]
    stream = EventStream().add_elements([TimestampedValue(data, 1) for data in hot + cold])
    config = AgentConfig(agent="tests.agents:counter", max_queued_per_key=3)
    intents, errors = run_stream(stream.advance_watermark_to_infinity(), config, runner)

    ran = {key: [i["event_id"] for i in rows] for key, rows in by_key(intents).items()}
    assert len(ran["hot"]) == 3 and len(ran["cold"]) == 2
    assert [(e["stage"], e["entity_key"], e["retriable"]) for e in errors] == [
        ("STAGE_BACKLOG", "hot", True)] * 2
    carried = {AgentEvent.FromString(error_from_json(json.dumps(e)).event).event_id
               for e in errors}
    assert carried | set(ran["hot"]) == {f"e{n:02d}" for n in range(5)}  # none lost, none twice
    assert [i["seq"] for i in by_key(intents)["hot"]] == [1, 2, 3]


PUMPS: Counter[str] = Counter()


def test_a_wake_that_fires_before_its_time_waits_for_the_activation(
        monkeypatch: pytest.MonkeyPatch, runner: list[str]) -> None:
    """The runner's clock a day ahead fires every wake at once: the key waits, not re-fires.

    Without the wait, each 40 ms activation is pumped on every pass the
    runner makes over its due timers, tens of times; with it, an event costs
    its arrival, its release by the watermark and about one wake.
    """
    counted = AgentDoFn._pump

    def pump(self: AgentDoFn, *args: object, **kwargs: object) -> object:
        PUMPS[sys._getframe(1).f_code.co_name] += 1  # the callback that pumps
        return counted(self, *args, **kwargs)

    PUMPS.clear()
    monkeypatch.setattr(AgentDoFn, "_pump", pump)
    batches = [[line(key, n) for key in ("a", "b", "c")] for n in range(4)]
    intents, errors = run_stream(stream_of(batches, pump_by_timer=True),
                                 AgentConfig(agent="tests.agents:steady"), runner)

    assert errors == [] and len(intents) == 12
    assert {key: [i["seq"] for i in rows] for key, rows in by_key(intents).items()} == {
        key: [1, 2, 3, 4] for key in ("a", "b", "c")}
    # About one wake an activation; at most two, as on a loaded machine a
    # wake that fired at its time may find its activation still running.
    assert PUMPS["on_wake"] <= 2 * len(intents), PUMPS
    assert sum(PUMPS.values()) <= 4 * len(intents), PUMPS
