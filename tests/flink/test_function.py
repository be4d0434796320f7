"""AgentKeyedProcessFunction's callbacks, driven in process the way PyFlink drives them.

No MiniCluster: a fake keyed backend switches the current key before each
callback, as PyFlink's does, and the test fires the timers the function
registers, with a real runtime behind it. The MiniCluster tests show the same
function end to end; these pin the timer protocol and the backpressure rule
(invariants 8 and 10) in seconds.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from pyflink.datastream import TimeDomain

from beam_agents.errors import ProviderUnavailable
from beam_agents.flink import ERRORS, AgentKeyedProcessFunction
from beam_agents.flink import _function as function_module
from beam_agents.flink._function import END_OF_INPUT_MS, FIRST_ROUND_MS, EventOrder
from beam_agents.hosting import start_runtime
from beam_agents.model import ModelRequest
from beam_agents.runtime import AgentConfig, AgentEvent, RetryPolicy
from beam_agents.testing import ScriptedModel
from tests import agents

pytestmark = pytest.mark.timeout(60)


class _Backend:
    """Keyed state of every key; `key` is the key in scope, set before each callback."""

    def __init__(self) -> None:
        self.key = ""
        self.values: dict[str, dict[str, Any]] = defaultdict(dict)


class _Value:
    def __init__(self, backend: _Backend, name: str) -> None:
        self._backend, self._name = backend, name

    def value(self) -> Any:
        return self._backend.values[self._name].get(self._backend.key)

    def update(self, value: Any) -> None:
        self._backend.values[self._name][self._backend.key] = value


class _List(_Value):
    def get(self) -> list[Any]:
        return list(self.value() or [])

    def add(self, value: Any) -> None:
        self.update([*self.get(), value])

    def clear(self) -> None:
        self._backend.values[self._name].pop(self._backend.key, None)


class _Group:
    """A metric group that accepts counters, gauges and distributions and keeps nothing."""

    def add_group(self, name: str) -> _Group:
        return self

    def counter(self, name: str) -> _Group:
        return self

    def gauge(self, name: str, read: Any) -> None:
        pass

    def distribution(self, name: str) -> _Group:
        return self

    def inc(self, value: int = 1) -> None:
        pass

    def update(self, value: int) -> None:
        pass


class _CountingGroup(_Group):
    """A metric group whose counters add up what reaches them, as Flink's do."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = defaultdict(int)
        self.reports = 0

    def counter(self, name: str) -> _Group:
        group = self

        class _Counter(_Group):
            def inc(self, value: int = 1) -> None:
                group.counts[name] += value
                group.reports += 1

        return _Counter()


class _RuntimeContext:
    def __init__(self, backend: _Backend, group: _Group | None = None) -> None:
        self._backend = backend
        self._group = group if group is not None else _Group()

    def get_state(self, descriptor: Any) -> _Value:
        return _Value(self._backend, descriptor.name)

    def get_list_state(self, descriptor: Any) -> _List:
        return _List(self._backend, descriptor.name)

    def get_metrics_group(self) -> _Group:
        return self._group

    def get_job_parameter(self, key: str, default_value: str) -> str:
        return default_value  # no tally folder: the run's client reads none

    def get_index_of_this_subtask(self) -> int:
        return 0

    def get_attempt_number(self) -> int:
        return 0


class _Context:
    """What PyFlink hands a callback: the key, a timer service, and a timer's domain."""

    def __init__(self, operator: _Operator, key: str, domain: TimeDomain | None = None) -> None:
        self._operator, self._key, self._domain = operator, key, domain

    def get_current_key(self) -> str:
        return self._key

    def timer_service(self) -> _Context:
        return self

    def time_domain(self) -> TimeDomain | None:
        return self._domain

    def current_processing_time(self) -> int:
        return int(time.time() * 1000)

    def register_processing_time_timer(self, timestamp: int) -> None:
        self._operator.processing_timers.add((timestamp, self._key))
        self._operator.processing_registrations += 1

    def register_event_time_timer(self, timestamp: int) -> None:
        self._operator.event_timers.add((timestamp, self._key))


class _Operator:
    """Runs the function like PyFlink's keyed operator: elements, then the timers it set."""

    def __init__(self, config: AgentConfig, *, event_order: EventOrder = "event_time",
                 group: _Group | None = None, hold_input_at: int | None = None) -> None:
        self.backend = _Backend()
        self.function = AgentKeyedProcessFunction(
            config, event_order=event_order,
            **({} if hold_input_at is None else {"hold_input_at": hold_input_at}))
        self.function.open(_RuntimeContext(self.backend, group))  # type: ignore[arg-type]
        self.engine = self.function._engine  # kept past close(), to read the queues
        self.processing_timers: set[tuple[int, str]] = set()
        self.processing_registrations = 0
        self.event_timers: set[tuple[int, str]] = set()
        self.event_rounds: list[list[str]] = []  # keys fired at the end, by timestamp
        self.intents: list[dict[str, Any]] = []
        self.errors: list[dict[str, Any]] = []

    def element(self, key: str, event: bytes) -> None:
        self.backend.key = key
        self._collect(self.function.process_element((key, event), _Context(self, key)))

    def fire_processing_timers(self, *, until_idle: bool) -> None:
        """Fire the due processing-time timers, in time order; optionally until none is left."""
        while self.processing_timers:
            now = int(time.time() * 1000)
            due = sorted(t for t in self.processing_timers if t[0] <= now)
            if not due:
                if not until_idle:
                    return
                time.sleep(0.005)
                continue
            for timer in due:
                self.processing_timers.discard(timer)
                self._fire(timer, TimeDomain.PROCESSING_TIME)

    def end_of_input(self) -> None:
        """The final watermark: the event-time timers set so far fire, in timestamp order.

        Pending processing-time timers never fire. Nor, here, does an
        event-time timer set while the pass runs: PyFlink fires one only if a
        bundle is still open when the pass ends, so a function cannot count on it.
        """
        self.processing_timers.clear()
        due, self.event_timers = sorted(self.event_timers), set()
        last = None
        for timer in due:
            if timer[0] != last:
                self.event_rounds.append([])
                last = timer[0]
            self.event_rounds[-1].append(timer[1])
            self._fire(timer, TimeDomain.EVENT_TIME)

    def queued(self, key: str) -> int:
        """The key's queue length, as the engine reads it from the key's cells."""
        self.backend.key = key
        assert self.engine is not None
        return self.engine.queue_length(key, self.function._cells)

    def close(self) -> None:
        self.function.close()

    def _fire(self, timer: tuple[int, str], domain: TimeDomain) -> None:
        timestamp, key = timer
        self.backend.key = key
        self._collect(self.function.on_timer(timestamp, _Context(self, key, domain)))

    def _collect(self, outputs: Iterator[Any]) -> None:
        for output in outputs:
            if isinstance(output, tuple):
                assert output[0] is ERRORS
                self.errors.append(json.loads(output[1]))
            else:
                self.intents.append(json.loads(output))


def _event(key: str, n: int) -> bytes:
    return AgentEvent(entity_key=key.encode(), event_id=f"e{n:02d}", event_time_ms=1_000 + n,
                      payload=f"m{n}".encode()).SerializeToString(deterministic=True)


def _payloads(intents: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    return [json.loads(i["payload"]) for i in intents if i["entity_key"] == key]


@pytest.mark.parametrize("order", ["event_time", "arrival"])
def test_keys_run_at_once_and_each_key_commits_in_event_time_order(order: EventOrder) -> None:
    """Many keys in flight per instance; per key one at a time, seq following event time."""
    agents.TIMED.clear()
    operator = _Operator(AgentConfig(agent="tests.agents:timed", max_in_flight=16),
                         event_order=order)
    keys = [f"k{k}" for k in range(8)]
    try:
        for n, key in itertools.product(range(5), keys):
            operator.element(key, _event(key, n))
            operator.fire_processing_timers(until_idle=False)
        operator.fire_processing_timers(until_idle=True)
        operator.end_of_input()
    finally:
        operator.close()

    assert operator.errors == []
    for key in keys:
        ran = _payloads(operator.intents, key)
        assert [(r["seq"], r["event"]) for r in ran] == [(n + 1, f"e{n:02d}") for n in range(5)]
        assert operator.queued(key) == 0
    spans = sorted((start, end) for _, _, _, start, end in agents.TIMED)
    assert any(b[0] < a[1] for a, b in itertools.pairwise(spans))  # keys overlapped


def test_every_key_registers_the_end_of_input_timers_and_they_drain_the_queue() -> None:
    """In event-time order nothing runs before the final watermark, which then runs everything."""
    operator = _Operator(AgentConfig(agent="tests.agents:counter"))
    try:
        for n, key in itertools.product(range(4), ("a", "b", "c")):
            operator.element(key, _event(key, n))
        # A round per queued position, then the drain, set with the events.
        assert operator.event_timers == {
            (at, key) for key in ("a", "b", "c")
            for at in (*range(FIRST_ROUND_MS, FIRST_ROUND_MS + 4), END_OF_INPUT_MS)}
        assert operator.processing_timers == set() and operator.intents == []
        assert all(operator.queued(key) == 4 for key in ("a", "b", "c"))
        operator.end_of_input()
    finally:
        operator.close()

    for key in ("a", "b", "c"):
        assert [p["count"] for p in _payloads(operator.intents, key)] == [1, 2, 3, 4]
        assert operator.queued(key) == 0


def test_the_end_of_input_runs_every_keys_next_event_at_once() -> None:
    """The end-of-input rounds start each key's next event in the same round, so they overlap.

    Drained key after key, each activation started at the end would wait for
    the one before it, and no two would overlap.
    """
    agents.TIMED.clear()
    operator = _Operator(AgentConfig(agent="tests.agents:steady"))
    keys = [f"k{k}" for k in range(6)]
    try:
        for n, key in itertools.product(range(3), keys):
            operator.element(key, _event(key, n))  # no processing-time timer ever fires
        operator.end_of_input()
    finally:
        operator.close()

    for key in keys:
        assert [p["seq"] for p in _payloads(operator.intents, key)] == [1, 2, 3]
        assert operator.queued(key) == 0
    for seq in (1, 2, 3):
        started = sorted((start, end) for _, s, _, start, end in agents.TIMED if s == seq)
        assert len(started) == len(keys)
        overlapping = max(sum(1 for s, e in started if s <= start < e) for start, _ in started)
        assert overlapping > len(keys) // 2, (seq, started)
    # Three rounds of every key, then the drain.
    assert operator.event_rounds == [sorted(keys)] * 4
    assert operator.event_timers == set()  # nothing set for a pass that will not fire it


def test_any_line_order_gives_the_same_intents_in_event_time_order() -> None:
    """Invariant 10 on Flink: three line orders, byte-identical intents; ties by event_id."""
    def events() -> list[tuple[str, bytes]]:
        out = [(key, _event(key, n)) for key in ("a", "b") for n in range(6)]
        for event_id in ("e9", "e10", "e100"):  # one event time: e10 < e100 < e9
            out.append(("a", AgentEvent(entity_key=b"a", event_id=event_id, event_time_ms=5,
                                        payload=event_id.encode()).SerializeToString(
                                            deterministic=True)))
        return out

    runs = []
    for order in (events(), events()[::-1], sorted(events(), key=lambda e: e[1][::-1])):
        operator = _Operator(AgentConfig(agent="tests.agents:counter"))
        try:
            for key, event in order:
                operator.element(key, event)
            operator.end_of_input()
        finally:
            operator.close()
        runs.append(sorted(json.dumps(i, sort_keys=True) for i in operator.intents))
        ran = [i["event_id"] for i in operator.intents if i["entity_key"] == "a"]
        assert ran[:3] == ["e10", "e100", "e9"], ran
    assert runs[0] == runs[1] == runs[2]


def test_a_key_past_its_queue_cap_dead_letters_the_rest_as_backlog() -> None:
    """Invariant 4 on the queue: the cap's overflow is BACKLOG dead letters carrying the event."""
    operator = _Operator(AgentConfig(agent="tests.agents:counter", max_queued_per_key=3))
    try:
        for n in range(5):
            operator.element("hot", _event("hot", n))
        operator.element("cold", _event("cold", 0))
        assert operator.queued("hot") == 3
        operator.end_of_input()
    finally:
        operator.close()
    assert [p["count"] for p in _payloads(operator.intents, "hot")] == [1, 2, 3]
    assert [p["count"] for p in _payloads(operator.intents, "cold")] == [1]
    assert [(e["stage"], e["event_id"], e["retriable"]) for e in operator.errors] == [
        ("STAGE_BACKLOG", "e03", True), ("STAGE_BACKLOG", "e04", True)]


def test_the_drain_after_the_rounds_runs_what_is_left() -> None:
    """The drain timer alone (a key restored from before the rounds) runs its queue to the end."""
    operator = _Operator(AgentConfig(agent="tests.agents:counter"))
    try:
        for n in range(2):
            operator.element("a", _event("a", n))
        operator.event_timers = {(END_OF_INPUT_MS, "a")}
        operator.end_of_input()
    finally:
        operator.close()
    assert [p["count"] for p in _payloads(operator.intents, "a")] == [1, 2]
    assert operator.event_rounds == [["a"]] and operator.queued("a") == 0


def test_a_key_that_runs_ahead_holds_the_input() -> None:
    """In arrival order, after each element a key holds at most hold_input_at events."""
    operator = _Operator(AgentConfig(agent="tests.agents:timed"), event_order="arrival",
                         hold_input_at=3)
    try:
        for n in range(8):
            operator.element("hot", _event("hot", n))
            assert operator.queued("hot") <= 3
        operator.end_of_input()
    finally:
        operator.close()
    assert [p["seq"] for p in _payloads(operator.intents, "hot")] == list(range(1, 9))


def test_a_key_with_a_wake_pending_registers_only_an_earlier_one() -> None:
    """Arrivals behind a running activation add no timer: the pending wake calls the key back."""
    config = AgentConfig(agent="tests.agents:timed")
    operator = _Operator(config, event_order="arrival")
    try:
        for n in range(6):
            operator.element("k", _event("k", n))
        after_arrivals = operator.processing_registrations
        operator.fire_processing_timers(until_idle=True)
    finally:
        operator.close()
    assert after_arrivals == 1  # the first arrival's wake; five more arrivals set none
    assert [p["seq"] for p in _payloads(operator.intents, "k")] == list(range(1, 7))


def test_a_suspended_key_does_not_hold_the_input(monkeypatch: pytest.MonkeyPatch) -> None:
    """Invariant 10: a suspended key's later events wait in its queue; other keys go on."""
    calls: list[str] = []
    lock = threading.Lock()

    def answer(request: ModelRequest) -> str | BaseException:
        content = str(request.messages[-1]["content"])
        with lock:
            calls.append(content)
        return ProviderUnavailable("503") if content.startswith("down") else f"ok {content}"

    model = ScriptedModel(answer)
    monkeypatch.setattr(function_module, "start_runtime",
                        lambda config, metrics: start_runtime(config, metrics=metrics,
                                                              provider=model))
    # A long backoff: the head stays suspended for the whole test.
    config = AgentConfig(agent="tests.agents:ask",
                         retry=RetryPolicy(retry_initial_ms=60_000, retry_max_ms=60_000))
    operator = _Operator(config, event_order="arrival")
    try:
        started = time.monotonic()
        for n in range(5):
            operator.element("down", _event("down", n))
        operator.element("up", _event("up", 0))
        operator.fire_processing_timers(until_idle=False)
        waited_s = time.monotonic() - started
        deadline = time.monotonic() + 10
        while not operator.intents and time.monotonic() < deadline:
            operator.fire_processing_timers(until_idle=False)
            time.sleep(0.005)
    finally:
        operator.close()

    assert operator.queued("down") == 5 and operator.errors == []
    assert [c for c in calls if c.startswith("down")] == ["down: m0"]
    assert [p["text"] for p in _payloads(operator.intents, "up")] == ["ok up: m0"]
    assert waited_s < 5  # no element waited out the 60 s backoff


def test_counters_wait_in_the_buffer_between_reports_and_the_drain_reports_them_all(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Fewer calls into the JVM: reports come at most METRICS_EVERY_MS apart, and the drain
    at the end of the input reports every count, so a finished job's counters are whole."""
    monkeypatch.setattr(function_module, "METRICS_EVERY_MS", 10**9)
    group = _CountingGroup()
    operator = _Operator(AgentConfig(agent="tests.agents:counter"), group=group)
    keys = [f"k{k}" for k in range(3)]
    try:
        for n, key in itertools.product(range(4), keys):
            operator.element(key, _event(key, n))
        assert group.reports == 0  # twelve callbacks, nothing reported yet
        operator.end_of_input()
        assert group.counts["activations"] == 12 and group.counts["committed"] == 12
    finally:
        operator.close()
    assert len(operator.intents) == 12
