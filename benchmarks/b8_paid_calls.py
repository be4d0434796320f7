"""B8. Paid model calls per committed activation under faults, with the journal and without.

The replay cache lives in keyed state, so whatever loses a commit loses the
calls it paid for; the call journal keeps them outside keyed state
(invariant 9). This benchmark counts, not times: the same events run through
the activation core (`ActivationRuntime.activate`, one model call per event,
the local model at 0 ms), with each key's state threaded by hand as a host
would (as `benchmarks.b6_latency` does), under each fault of a matrix:

* ``bundle_retry``: every outcome is dropped after it ran (the bundle that
  held it failed) and the event is redelivered against the same state;
* ``crash_restore``: after every window of events the state rolls back to the
  checkpoint taken before the window, and the window's events are replayed;
* ``rerun``: the whole input runs twice from empty state (a batch job rerun);
* ``transient_outage``: the provider fails the first attempt at every request
  with `ProviderUnavailable` (a 503, not paid for), and the activation is
  retried as the engine does: the failed attempt's ``llm_cache``, if any,
  is written and the event runs again with the same seq.

Each case runs once with a SQLite journal and once without. A paid call is a
provider call that returned a response (counted by wrapping the provider);
a committed activation is one whose outcome the final state kept, so every
case commits exactly the events once. The journal's target is 1.00 paid call
per committed activation in every case; without it, a case that replays
every activation once pays 2.00.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from beam_agents.errors import ProviderUnavailable
from beam_agents.hosting import ActivationRuntime, KeyedState
from beam_agents.model import CallJournal, ModelRequest, ModelResponse
from beam_agents.model.providers import LocalModel
from beam_agents.runtime import AgentEvent, Committed, Outcome
from beam_agents.stores import SqliteCallJournalConfig
from benchmarks._harness import Profile
from benchmarks.b7_journal import CountingJournal, open_runtime

__all__ = ["CASES", "TARGET", "run"]

#: Paid calls per committed activation the journal should hold every case to.
TARGET = 1.0
CASES = ("bundle_retry", "crash_restore", "rerun", "transient_outage")
_MAX_ATTEMPTS = 8


class LedgerProvider:
    """A `ModelProvider` that counts what it is paid for, optionally failing first attempts.

    With `flaky`, the first attempt at each distinct request raises
    `ProviderUnavailable` (a transient outage: a 503 is not paid for); the
    next attempt at it is answered.
    """

    def __init__(self, *, flaky: bool = False) -> None:
        self._inner = LocalModel()
        self.model_id = self._inner.model_id
        self._flaky = flaky
        self._seen: set[str] = set()
        self.attempts = 0
        self.paid = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer (and count it paid), or fail the first attempt when flaky."""
        self.attempts += 1
        asked = repr(list(request.messages))
        if self._flaky and asked not in self._seen:
            self._seen.add(asked)
            raise ProviderUnavailable("benchmark outage: first attempt answered 503",
                                      model_id=self.model_id, status=503)
        response = await self._inner.complete(request)
        self.paid += 1
        return response

    async def aclose(self) -> None:
        """Close the local model."""
        await self._inner.aclose()


def _events(count: int, keys: int) -> list[AgentEvent]:
    return [AgentEvent(entity_key=f"customer-{n % keys}".encode(), event_id=f"e{n}",
                       event_time_ms=1_700_000_000_000 + n * 1_000,
                       payload=f"question {n}".encode()) for n in range(count)]


def _kept(state: KeyedState, outcome: Outcome) -> KeyedState:
    assert isinstance(outcome, Committed), outcome
    return state.after(outcome)


def _step(runtime: ActivationRuntime, state: KeyedState, event: AgentEvent) -> KeyedState:
    """Run `event` from `state`; the state its commit leaves."""
    return _kept(state, runtime.activate(state, event))


def _until_committed(runtime: ActivationRuntime, state: KeyedState,
                     event: AgentEvent) -> tuple[KeyedState, int]:
    """Run `event` as the engine does: suspend on a retriable failure, retry with the same seq.

    Returns the committed state and how many attempts it took.
    """
    for attempt in range(1, _MAX_ATTEMPTS + 1):
        outcome = runtime.activate(state, event, attempt=attempt)
        if isinstance(outcome, Committed):
            return _kept(state, outcome), attempt
        assert outcome.error.retriable, outcome.error
        if outcome.llm_cache is not None:
            # Suspension writes what the attempt paid for, and nothing else.
            state = KeyedState(seq=state.seq, memory=state.memory, llm_cache=outcome.llm_cache)
    raise AssertionError(f"{event.event_id} did not commit in {_MAX_ATTEMPTS} attempts")


_Case = Callable[[ActivationRuntime, list[AgentEvent], int], int]


def _bundle_retry(runtime: ActivationRuntime, events: list[AgentEvent], window: int) -> int:
    states: dict[bytes, KeyedState] = {}
    for event in events:
        state = states.get(event.entity_key, KeyedState())
        _step(runtime, state, event)  # ran, then its bundle failed: dropped
        states[event.entity_key] = _step(runtime, state, event)
    return len(events)


def _crash_restore(runtime: ActivationRuntime, events: list[AgentEvent], window: int) -> int:
    checkpoint: dict[bytes, KeyedState] = {}
    for start in range(0, len(events), window):
        batch = events[start:start + window]
        for replay in (False, True):
            # The first pass is lost with the crash; the restore replays the window.
            states = dict(checkpoint)
            for event in batch:
                states[event.entity_key] = _step(
                    runtime, states.get(event.entity_key, KeyedState()), event)
            if replay:
                checkpoint = states
    return len(events)


def _rerun(runtime: ActivationRuntime, events: list[AgentEvent], window: int) -> int:
    for _ in range(2):
        states: dict[bytes, KeyedState] = {}
        for event in events:
            states[event.entity_key] = _step(
                runtime, states.get(event.entity_key, KeyedState()), event)
    return len(events)


def _transient_outage(runtime: ActivationRuntime, events: list[AgentEvent],
                      window: int) -> int:
    states: dict[bytes, KeyedState] = {}
    for event in events:
        states[event.entity_key], _ = _until_committed(
            runtime, states.get(event.entity_key, KeyedState()), event)
    return len(events)


_RUNS: dict[str, _Case] = {"bundle_retry": _bundle_retry, "crash_restore": _crash_restore,
                           "rerun": _rerun, "transient_outage": _transient_outage}


def _case(name: str, journal: CallJournal | None, events: list[AgentEvent],
          window: int) -> dict[str, Any]:
    provider = LedgerProvider(flaky=name == "transient_outage")
    counting = CountingJournal(journal) if journal is not None else None
    with open_runtime(counting, provider=provider) as runtime:
        committed = _RUNS[name](runtime, events, window)
    result: dict[str, Any] = {
        "committed_activations": committed,
        "paid_calls": provider.paid,
        "provider_attempts": provider.attempts,
        "paid_per_committed": round(provider.paid / committed, 4),
    }
    if counting is not None:
        result["journal_reads"] = counting.reads
        result["journal_writes"] = counting.writes
    return result


def _note(cases: dict[str, Any]) -> str:
    said = ", ".join(f"{name} {case['journal_on']['paid_per_committed']:.2f} on / "
                     f"{case['journal_off']['paid_per_committed']:.2f} off"
                     for name, case in cases.items())
    outage = cases["transient_outage"]["journal_off"]
    text = (f"Paid calls per committed activation, journal on / off: {said}. "
            "With the journal every replayed activation reads the calls its lost attempt "
            "paid for and replays them, so each call is paid once whatever was lost. ")
    if outage["paid_per_committed"] <= TARGET:
        text += ("The outage costs nothing extra even without the journal: a call that "
                 "fails with a 503 is not paid for, and the engine's suspension commits the "
                 "replay cache of whatever the attempt did pay for (invariant 1), so the "
                 f"retry pays only what failed ({outage['provider_attempts']} provider "
                 f"attempts for {outage['committed_activations']} activations). The "
                 "journal matters there only when the suspension's own write is lost too. ")
    return text.strip()


def run(profile: Profile) -> dict[str, Any]:
    """Measure B8; see the module docstring."""
    count, keys, window = (12, 3, 4) if profile.quick else (200, 10, 25)
    events = _events(count, keys)
    cases: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="b8-journal-") as folder:
        for name in CASES:
            journal = SqliteCallJournalConfig(path=str(Path(folder) / f"{name}.sqlite")).open()
            cases[name] = {"journal_on": _case(name, journal, events, window),
                           "journal_off": _case(name, None, events, window)}
    on = [case["journal_on"]["paid_per_committed"] for case in cases.values()]
    off = [case["journal_off"]["paid_per_committed"] for case in cases.values()]
    return {
        "name": "Paid calls under faults",
        "workload": (f"{count} events over {keys} keys, one model call each, through "
                     "ActivationRuntime.activate with state threaded by hand; crash/restore "
                     f"windows of {window} events; journal on: SQLite"),
        "unit": "paid model calls per committed activation (a count)",
        "events": count,
        "keys": keys,
        "window": window,
        **cases,
        "ratio": max(on),
        "ratio_min": min(on),
        "ratio_max": max(on),
        "ratio_journal_off": max(off),
        "target": TARGET,
        "met": max(on) <= TARGET,
        "note": _note(cases),
    }
