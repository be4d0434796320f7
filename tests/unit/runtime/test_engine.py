"""The engine: many keys in flight, per-key event-time order, suspension and exhaustion.

Driven through `KeyRuns` (the batch host's driver) over in-process cells, with
a real `ActivationRuntime` and a scripted provider; invariants 1, 9 and 10.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from beam_agents.errors import ConfigError, ProviderUnavailable
from beam_agents.hosting import (
    KeyedEngine,
    agent_config_from_mapping,
    error_from_json,
    start_runtime,
)
from beam_agents.metrics import RecordingMetrics
from beam_agents.model import BreakerConfig, CircuitBreaker, ModelConfig, ModelRequest
from beam_agents.runtime import AgentConfig, AgentEvent, RetryPolicy
from beam_agents.runtime._batch import KeyRuns
from beam_agents.runtime._scheduler import Scheduler
from beam_agents.testing import ScriptedModel
from tests import agents

pytestmark = pytest.mark.timeout(120)

FAST_RETRY = RetryPolicy(retry_initial_ms=5, retry_max_ms=20, max_attempts=4)


class Clock:
    """Milliseconds from the wall clock's monotonic cousin, as a host would pass."""

    def __call__(self) -> int:
        import time  # noqa: PLC0415

        return int(time.monotonic() * 1000)


def event(key: str, n: int, *, time_ms: int | None = None) -> bytes:
    return AgentEvent(entity_key=key.encode(), event_id=f"e{n:03d}",
                      event_time_ms=1_000 * n if time_ms is None else time_ms,
                      payload=f"m{n}".encode()).SerializeToString(deterministic=True)


def run(agent: str, groups: dict[str, list[bytes]], *, max_in_flight: int = 64,
        retry: RetryPolicy = FAST_RETRY, provider: ScriptedModel | None = None,
        ) -> tuple[list[tuple[str, bytes]], RecordingMetrics, Scheduler]:
    metrics = RecordingMetrics()
    # A breaker that never opens, so every attempt reaches the provider and can be counted.
    config = AgentConfig(agent=f"tests.agents:{agent}", max_in_flight=max_in_flight, retry=retry,
                         model=ModelConfig(breaker=BreakerConfig(failure_threshold=1000)))
    with start_runtime(config, metrics=metrics, provider=provider) as runtime:
        scheduler = Scheduler(runtime, max_in_flight=max_in_flight, metrics=metrics)
        runs = KeyRuns(KeyedEngine(scheduler, retry=retry, metrics=metrics), clock_ms=Clock())
        lines: list[tuple[str, bytes]] = []
        for key, events in groups.items():
            lines.extend(runs.add(key, events))
            lines.extend(runs.advance(block=False))
        lines.extend(runs.finish())
    return lines, metrics, scheduler


def by_key(lines: list[tuple[str, bytes]]) -> dict[str, list[dict[str, object]]]:
    grouped: dict[str, list[dict[str, object]]] = defaultdict(list)
    for channel, line in lines:
        doc = json.loads(line)
        grouped[doc["entity_key"]].append({"channel": channel, **doc})
    return grouped


def test_keys_run_concurrently_one_at_a_time_each_in_event_time_order() -> None:
    """100 keys x 20 events, shuffled: no overlap within a key, seqs follow event time."""
    shuffled = [(f"k{k:03d}", n) for k in range(100) for n in range(20)]
    random.Random(7).shuffle(shuffled)
    groups: dict[str, list[bytes]] = defaultdict(list)
    for key, n in shuffled:
        groups[key].append(event(key, n))
    agents.TIMED.clear()
    lines, metrics, scheduler = run("timed", groups, max_in_flight=64)

    assert len(lines) == 2000 and {channel for channel, _ in lines} == {"intents"}
    for key, intents in by_key(lines).items():
        order = [json.loads(str(i["payload"])) for i in intents]
        assert [o["seq"] for o in order] == list(range(1, 21)), key
        assert [o["event"] for o in order] == [f"e{n:03d}" for n in range(20)], key
    runs: dict[bytes, list[tuple[float, float]]] = defaultdict(list)
    for key, _, _, start, end in agents.TIMED:
        runs[key].append((start, end))
    for key, spans in runs.items():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), key
    assert 1 < scheduler.peak_in_flight <= 64
    assert metrics.get("beam_agents.runtime", "in_flight") == 0
    assert metrics.get("beam_agents.runtime", "queued") == 0


def test_the_output_does_not_depend_on_the_input_order() -> None:
    events = [(f"k{k}", n) for k in range(5) for n in range(6)]

    def output(order: list[tuple[str, int]]) -> list[bytes]:
        groups: dict[str, list[bytes]] = defaultdict(list)
        for key, n in order:
            groups[key].append(event(key, n))
        lines, _, _ = run("counter", dict(sorted(groups.items())))
        return sorted(line for _, line in lines)

    shuffled = list(events)
    random.Random(3).shuffle(shuffled)
    assert output(shuffled) == output(events)


def flaky(fail_first: dict[str, int]) -> tuple[ScriptedModel, Counter[str]]:
    """A provider that fails each key's first N calls with a 503, then answers."""
    calls: Counter[str] = Counter()
    lock = threading.Lock()

    def answer(request: ModelRequest) -> str | BaseException:
        content = str(request.messages[-1]["content"])
        who = content.split(":", 1)[0]
        with lock:
            calls[who] += 1
            failing = calls[who] <= fail_first.get(who, 0)
        return ProviderUnavailable("503 from the test server") if failing else f"ok {content}"

    return ScriptedModel(answer), calls


def test_a_transient_outage_suspends_the_key_and_its_retry_replays_nothing_twice() -> None:
    """0 dead letters; calls = distinct requests + K failures; the key's later events wait."""
    model, calls = flaky({"blip": 2})
    groups = {key: [event(key, n) for n in range(3)] for key in ("blip", "calm")}
    backoff = RetryPolicy(retry_initial_ms=200, retry_max_ms=400, max_attempts=4)
    lines, metrics, _ = run("ask", groups, provider=model, retry=backoff)

    assert [channel for channel, _ in lines].count("errors") == 0
    assert calls == Counter({"blip": 3 + 2, "calm": 3})
    answers = {key: [json.loads(str(i["payload"])) for i in docs]
               for key, docs in by_key(lines).items()}
    assert [a["seq"] for a in answers["blip"]] == [1, 2, 3]
    assert answers["blip"][0]["text"] == "ok blip: m0"
    assert metrics.get("beam_agents.runtime", "suspended") == 2
    assert metrics.get("beam_agents.runtime", "retries") == 2
    # Other keys are not held up: all of calm's work is out while blip still backs off.
    owners = [json.loads(line)["entity_key"] for _, line in lines]
    assert owners[:3] == ["calm"] * 3 and owners[3:] == ["blip"] * 3


def test_a_retry_replays_the_calls_the_failed_attempt_paid_for() -> None:
    """Invariant 9: a call paid before the failure is not paid again by the retry."""
    paid: Counter[str] = Counter()
    failed_once = threading.Event()

    def answer(request: ModelRequest) -> str | BaseException:
        content = str(request.messages[-1]["content"])
        paid[content] += 1
        if content.startswith("second") and not failed_once.is_set():
            failed_once.set()
            return ProviderUnavailable("503")
        return f"re: {content}"

    groups = {"k": [AgentEvent(entity_key=b"k", event_id="e1", event_time_ms=1,
                               payload=b"x").SerializeToString()]}
    lines, _, _ = run("two_calls", groups, provider=ScriptedModel(answer))
    assert [channel for channel, _ in lines] == ["intents"]
    assert paid == Counter({"first x": 1, "second x": 2})


def test_the_replay_cache_holds_a_suspended_heads_paid_calls_and_nothing_once_it_commits() -> None:
    """Invariants 1 and 3: the entries serve the seq they were paid under, and no later one."""
    from beam_agents._proto.llm_cache_pb2 import LlmCacheBlob  # noqa: PLC0415
    from beam_agents.hosting import KeyCells  # noqa: PLC0415

    failed_once = threading.Event()

    def answer(request: ModelRequest) -> str | BaseException:
        content = str(request.messages[-1]["content"])
        if content.startswith("second") and not failed_once.is_set():
            failed_once.set()
            return ProviderUnavailable("503")
        return f"re: {content}"

    def entries(cells: KeyCells) -> int:
        return len(LlmCacheBlob.FromString(bytes(cells.state.llm_cache.read() or b"")).entries)

    config = AgentConfig(agent="tests.agents:two_calls", retry=FAST_RETRY,
                         model=ModelConfig(breaker=BreakerConfig(failure_threshold=1000)))
    clock = Clock()
    with start_runtime(config, provider=ScriptedModel(answer)) as runtime:
        engine = KeyedEngine.over(runtime)
        cells = KeyCells.in_process()
        for n in range(2):
            assert engine.enqueue("k", cells, event("k", n)) is None
        engine.on_wake("k", cells, clock())  # starts e000
        suspended = engine.on_wake("k", cells, clock(), wait_s=30)
        assert suspended.lines == () and cells.attempt.read() == 1
        assert entries(cells) == 1  # the first call, paid before the 503
        lines = engine.on_end_of_input("k", cells, clock_ms=clock).lines
    assert [channel for channel, _ in lines] == ["intents", "intents"]
    assert cells.state.seq.read() == 2
    assert entries(cells) == 0


def test_a_provider_that_never_recovers_dead_letters_each_event_after_max_attempts() -> None:
    model, calls = flaky({"down": 10**6})
    groups = {"down": [event("down", n) for n in range(2)], "up": [event("up", 0)]}
    lines, metrics, _ = run("ask", groups, provider=model)

    errors = [error_from_json(line) for channel, line in lines if channel == "errors"]
    assert [(e.event_id, e.attempts, e.retriable) for e in errors] == [
        ("e000", 4, True), ("e001", 4, True)]
    assert calls["down"] == 2 * FAST_RETRY.max_attempts and calls["up"] == 1
    assert metrics.get("beam_agents.runtime", "retries_exhausted") == 2


def test_a_permanent_failure_is_dead_lettered_at_once() -> None:
    groups = {"k": [AgentEvent(entity_key=b"k", event_id="e1", event_time_ms=1,
                               payload=b"fail").SerializeToString()]}
    lines, metrics, _ = run("counter", groups)
    (channel, line), = lines
    assert channel == "errors" and error_from_json(line).attempts == 1
    assert metrics.get("beam_agents.runtime", "suspended") == 0


@pytest.mark.parametrize(("flags", "named"), [
    ({"max_in_flight": 0}, "--max_in_flight"),
    ({"agent_threads": 0}, "--agent_threads"),
    ({"retry": {"retry_initial_ms": -1}}, "--retry_initial_ms"),
    ({"retry": {"retry_max_ms": -5}}, "--retry_max_ms"),
    ({"retry": {"max_attempts": -1}}, "--max_attempts"),
])
def test_bad_engine_settings_raise_a_config_error_naming_the_flag(
        flags: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        agent_config_from_mapping({"agent": "tests.agents:counter", **flags})


def test_the_backoff_grows_is_capped_and_is_the_same_every_time() -> None:
    policy = RetryPolicy(retry_initial_ms=1_000, retry_max_ms=60_000, max_attempts=8)
    delays: list[Callable[[], int]] = [
        lambda a=attempt: policy.delay_ms(b"k", 3, a) for attempt in range(1, 9)]
    first = [delay() for delay in delays]
    assert first == [delay() for delay in delays]
    for attempt, value in enumerate(first, start=1):
        step = min(60_000, 1_000 * 2 ** (attempt - 1))
        assert step // 2 <= value <= step
    assert policy.delay_ms(b"k", 3, 1) != policy.delay_ms(b"j", 3, 1) or (
        policy.delay_ms(b"k", 4, 1) != policy.delay_ms(b"k", 3, 1))
    assert policy.gives_up_after(8) and not policy.gives_up_after(7)


def test_an_outcome_whose_key_moved_on_meanwhile_is_dropped_not_applied() -> None:
    """A key restored or committed elsewhere while its activation ran keeps its own state."""
    from beam_agents.hosting import KeyCells  # noqa: PLC0415

    metrics = RecordingMetrics()
    config = AgentConfig(agent="tests.agents:counter")
    with start_runtime(config, metrics=metrics) as runtime:
        engine = KeyedEngine.over(runtime)
        cells = KeyCells.in_process()
        first = event("k", 1)
        engine.on_element("k", cells, first, 0)
        assert engine.scheduler.running("k") is not None
        cells.state.seq.write(7)  # meanwhile the key's state moved on to seq 7
        step = engine.on_wake("k", cells, 0, wait_s=30)
        assert step.lines == () and cells.state.memory.read() is None
        assert metrics.get("beam_agents.runtime", "stale_outcomes") == 1
        # The event is still queued and runs again from the state the cells hold now.
        step = engine.on_end_of_input("k", cells, clock_ms=Clock())
        (channel, line), = step.lines
        assert channel == "intents" and json.loads(line)["seq"] == 8


def test_try_start_refuses_when_every_slot_is_taken() -> None:
    """max_in_flight is a hard bound: a third key waits while two run, and starts once one ends."""
    from beam_agents.hosting import KeyedState  # noqa: PLC0415

    config = AgentConfig(agent="tests.agents:steady", max_in_flight=2)
    with start_runtime(config, metrics=RecordingMetrics()) as runtime:
        scheduler = Scheduler(runtime, max_in_flight=2, metrics=RecordingMetrics())
        state = KeyedState(memory=None, llm_cache=None, seq=0, budget=None)
        assert scheduler.try_start("a", state, event("a", 1), attempt=1)
        assert scheduler.try_start("b", state, event("b", 1), attempt=1)
        assert not scheduler.has_slot()
        assert not scheduler.try_start("c", state, event("c", 1), attempt=1)
        assert scheduler.running("c") is None and scheduler.busy == 2
        scheduler.wait_for_slot(30)  # a finished activation frees its slot before its take
        assert scheduler.has_slot()
        assert scheduler.take("a", wait_s=30) is not None
        assert scheduler.try_start("c", state, event("c", 1), attempt=1)
        assert scheduler.peak_in_flight == 2


def test_a_key_past_max_queued_per_key_gets_backlog_dead_letters_and_others_go_on() -> None:
    """Invariant 4 covers the queue: the overflow carries the event, is retriable, is counted."""
    from beam_agents.hosting import KeyCells  # noqa: PLC0415

    metrics = RecordingMetrics()
    config = AgentConfig(agent="tests.agents:counter", max_queued_per_key=2)
    with start_runtime(config, metrics=metrics) as runtime:
        engine = KeyedEngine.over(runtime)
        hot, cold = KeyCells.in_process(), KeyCells.in_process()
        # Queued without pumping, so no activation can finish (and make room)
        # between two arrivals, however loaded the machine.
        refused = [line for n in range(4)
                   if (line := engine.enqueue("hot", hot, event("hot", n))) is not None]
        engine.on_element("cold", cold, event("cold", 0), 0)
        lines = [*engine.on_end_of_input("hot", hot, clock_ms=Clock()).lines,
                 *engine.on_end_of_input("cold", cold, clock_ms=Clock()).lines]
    records = [error_from_json(line) for _, line in refused]
    assert [(r.stage, r.event_id, r.retriable) for r in records] == [
        (error_from_json(refused[0][1]).STAGE_BACKLOG, "e002", True),
        (error_from_json(refused[0][1]).STAGE_BACKLOG, "e003", True)]
    assert records[0].event == event("hot", 2)  # redrivable: the record carries the event
    assert "--max_queued_per_key" in records[0].message
    committed = Counter(json.loads(line)["entity_key"] for channel, line in lines
                        if channel == "intents")
    assert committed == {"hot": 2, "cold": 1}
    assert metrics.get("beam_agents.runtime", "errors_backlog") == 2


@pytest.mark.parametrize("late_events", ["run", "dead_letter"])
def test_an_event_behind_the_keys_watermark_is_late_counted_and_run_or_dead_lettered(
        late_events: str) -> None:
    """Event time on an unbounded input: the watermark releases events; a late one is counted."""
    from beam_agents.hosting import EventOrdering, KeyCells  # noqa: PLC0415

    ordering = EventOrdering(max_out_of_orderness_ms=100,
                             late_events=late_events)  # type: ignore[arg-type]
    metrics = RecordingMetrics()
    with start_runtime(AgentConfig(agent="tests.agents:counter"), metrics=metrics) as runtime:
        engine, cells = KeyedEngine.over(runtime), KeyCells.in_process()
        assert engine.enqueue_unbounded("k", cells, event("k", 5, time_ms=5_000), ordering=ordering,
                            watermark_ms=None) is None
        held = engine.on_wake("k", cells, 0, ready_through_ms=ordering.ready_through(None))
        assert (held.wake_at_ms, held.held_until_ms) == (None, 5_000)  # waits for the watermark
        assert ordering.release_at(5_000) == 5_100
        started = engine.on_wake("k", cells, 0, ready_through_ms=ordering.ready_through(5_100))
        assert engine.scheduler.running("k") is not None and started.held_until_ms is None
        late = engine.enqueue_unbounded("k", cells, event("k", 4, time_ms=4_000), ordering=ordering,
                            watermark_ms=5_100)
        lines = engine.on_end_of_input("k", cells, clock_ms=Clock()).lines
    assert metrics.get("beam_agents.runtime", "late_events") == 1
    ran = [json.loads(line)["event_id"] for channel, line in lines if channel == "intents"]
    if late_events == "run":
        assert late is None and ran == ["e005", "e004"]
    else:
        assert late is not None and error_from_json(late[1]).stage == error_from_json(
            late[1]).STAGE_LATE
        assert ran == ["e005"]
        assert metrics.get("beam_agents.runtime", "errors_late") == 1


def test_the_queue_length_and_the_oldest_queued_age_are_distributions() -> None:
    """Each queued event samples its key's queue length; each first start, the head's age."""
    from beam_agents.hosting import KeyCells  # noqa: PLC0415

    metrics = RecordingMetrics()
    config = AgentConfig(agent="tests.agents:counter")
    with start_runtime(config, metrics=metrics) as runtime:
        engine = KeyedEngine.over(runtime)
        cells = KeyCells.in_process()
        for n in range(3):  # event times 0, 1,000 and 2,000 ms
            engine.enqueue("k", cells, event("k", n))
        clock = iter(range(10_000, 10_000_000, 500))
        engine.on_end_of_input("k", cells, clock_ms=lambda: next(clock))
    lengths = metrics.distributions["beam_agents.runtime:queue_length"]
    assert (lengths.count, lengths.min, lengths.max, lengths.sum) == (3, 1, 3, 6)
    ages = metrics.distributions["beam_agents.runtime:oldest_queued_age_ms"]
    assert ages.count == 3  # one sample per event, on its first attempt only
    assert ages.min is not None and ages.min >= 10_000 - 2_000
    assert ages.max is not None and ages.max >= 10_000  # the first event's, at time 0


class _HeldCallbacks:
    """A runtime stand-in whose futures run a blocking callback before any other.

    `concurrent.futures.Future.set_result` wakes the waiters, then runs the
    callbacks in the setting thread: holding the first one recreates, on
    purpose, a host that takes an outcome before the scheduler's own callback
    has run.
    """

    def __init__(self) -> None:
        self.release = threading.Event()
        self.futures: list[concurrent.futures.Future[object]] = []
        self.breaker = CircuitBreaker(BreakerConfig(), clock=self.clock)

    def clock(self) -> float:
        return 0.0

    async def activate_async(self, *_: object, **__: object) -> None:
        return None

    def submit(self, work: Coroutine[Any, Any, object]) -> concurrent.futures.Future[object]:
        work.close()
        future: concurrent.futures.Future[object] = concurrent.futures.Future()
        future.add_done_callback(lambda _: self.release.wait(30))
        self.futures.append(future)
        return future


def test_a_key_taken_before_the_done_callback_starts_again_within_max_in_flight() -> None:
    """The taken activation's slot is free at once: the next start fits, and the peak is 1."""
    from beam_agents.hosting import KeyedState  # noqa: PLC0415

    runtime = _HeldCallbacks()
    scheduler = Scheduler(runtime, max_in_flight=1, metrics=RecordingMetrics())  # type: ignore[arg-type]
    state = KeyedState(memory=None, llm_cache=None, seq=0, budget=None)
    assert scheduler.try_start("a", state, event("a", 1), attempt=1)
    finisher = threading.Thread(target=runtime.futures[0].set_result, args=("done",))
    finisher.start()
    try:
        assert scheduler.take("a", wait_s=30) is not None  # its callbacks are still held
        assert scheduler.try_start("a", state, event("a", 2), attempt=1)
        assert scheduler.peak_in_flight == 1 and scheduler.busy == 1
    finally:
        runtime.release.set()
        finisher.join(30)
    assert scheduler.busy == 1  # the late callback frees nothing twice


def test_wait_for_returns_when_the_activation_finishes_and_leaves_its_outcome() -> None:
    """At once for a key that runs nothing; at the finish, not the timeout; at the timeout else."""
    from beam_agents.hosting import KeyedState  # noqa: PLC0415

    runtime = _HeldCallbacks()
    runtime.release.set()  # the callbacks run at once
    scheduler = Scheduler(runtime, max_in_flight=2, metrics=RecordingMetrics())  # type: ignore[arg-type]
    state = KeyedState(memory=None, llm_cache=None, seq=0, budget=None)
    begun = time.monotonic()
    scheduler.wait_for("idle", 30)
    assert time.monotonic() - begun < 10  # not the 30 s timeout
    assert scheduler.try_start("a", state, event("a", 1), attempt=1)
    scheduler.wait_for("a", 0.01)
    assert not runtime.futures[0].done()
    finisher = threading.Timer(0.05, runtime.futures[0].set_result, args=("done",))
    finisher.start()
    begun = time.monotonic()
    scheduler.wait_for("a", 30)
    assert runtime.futures[0].done() and time.monotonic() - begun < 10
    assert scheduler.take("a") is not None  # the wait took nothing
    finisher.join(30)


def test_the_engines_old_method_names_still_work_and_say_what_replaced_them() -> None:
    """A host written against the names before the rename runs for one more release."""
    from beam_agents.hosting import KeyCells  # noqa: PLC0415

    config = AgentConfig(agent="tests.agents:counter")
    with start_runtime(config, metrics=RecordingMetrics()) as runtime:
        engine = KeyedEngine.over(runtime)
        cells = KeyCells.in_process()
        with pytest.warns(DeprecationWarning, match=r"KeyedEngine.offer is renamed "
                          r"KeyedEngine.on_element"):
            engine.offer("a", cells, event("a", 0), 0)
        with pytest.warns(DeprecationWarning, match="KeyedEngine.drain is renamed"):
            lines = engine.drain("a", cells, clock_ms=Clock()).lines
    assert [channel for channel, _ in lines] == ["intents"]
    assert KeyedEngine.pump.__doc__ == "Deprecated: use `on_wake`."
