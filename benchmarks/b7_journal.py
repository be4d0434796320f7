"""B7. The call journal's own cost: a journaled model call against an unjournaled one.

Measured at the activation core (`ActivationRuntime.activate`) with the local
model answering at once (``ModelConfig.local.latency_ms=0``), so the
difference between the two is the journal's work and nothing else: the
activation's one range read of its ``(entity_key, seq)`` and, for the call it
pays, the write awaited before the agent sees the response (invariant 9). Each timed call is a fresh
activation of a fresh key (seq 1, empty state), so every one pays its call and
nothing is replayed. Two runtimes run side by side, one with the journal and
one without, alternating call by call (`benchmarks._harness.interleaved`);
the added time is the difference of their per-repetition means.

Backends: SQLite (a WAL file in a temporary folder, the embedded journal) and
Firestore, on the Firestore-protocol test server that the test suite uses
(``tests/_firestore_server.py``, a local gRPC server: a round trip over
loopback, not a datacenter's), started for the run. A machine that cannot
start that server reports Firestore as not measured, with the reason.

The added time is also given as a share of a 200 ms model call, the latency
B6 assumes of a hosted model: the journal only pays off if its cost is small
next to the call it saves. Target: at most 2 % on each backend. A durable
tool call (invariant 13) is measured the same way, with an agent that makes
one tool call and no model call (`benchmarks._agents.one_tool_call`): its
record is awaited before the agent sees the result, and its cost is set
against the same 200 ms. Reads and
writes are counted by wrapping the journal (`CountingJournal`): the contract
is one read per activation and one write per paid call.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from beam_agents.backend import JournalEntry, JournalWrite
from beam_agents.hosting import ActivationRuntime, KeyedState
from beam_agents.metrics import RecordingMetrics
from beam_agents.model import (
    CallJournal,
    LearnedRateRecord,
    LocalModelConfig,
    ModelConfig,
    ModelProvider,
)
from beam_agents.model.providers import build_provider
from beam_agents.runtime import AgentConfig, AgentEvent, Committed
from beam_agents.stores import FirestoreCallJournalConfig, SqliteCallJournalConfig
from benchmarks._agents import one_tool_call, slow_reply
from benchmarks._harness import Profile, Stat, interleaved, ratios, stat

__all__ = ["MODEL_CALL_MS", "TARGET_PERCENT", "CountingJournal", "open_runtime", "run"]

#: The model call the journal's cost is set against (B6's hosted-model latency).
MODEL_CALL_MS = 200
#: The most the journal may add, in percent of `MODEL_CALL_MS`.
TARGET_PERCENT = 2.0
AGENT = "benchmarks._agents:slow_reply"
_BACKENDS = ("sqlite", "firestore")


class CountingJournal:
    """A `CallJournal` that counts the reads and writes it passes on to another."""

    def __init__(self, inner: CallJournal) -> None:
        self._inner = inner
        self.reads = 0
        self.writes = 0

    async def read(self, entity_key: bytes, seq: int) -> Mapping[str, JournalEntry]:
        """Count, then read from the wrapped journal."""
        self.reads += 1
        return await self._inner.read(entity_key, seq)

    async def write(self, entry: JournalEntry) -> JournalWrite:
        """Count, then write to the wrapped journal."""
        self.writes += 1
        return await self._inner.write(entry)

    async def read_rates(self, account: str) -> Sequence[LearnedRateRecord]:
        """Read the learned rates from the wrapped journal (not counted: not a call's I/O)."""
        return await self._inner.read_rates(account)

    async def write_rate(self, record: LearnedRateRecord) -> None:
        """Write the learned rate to the wrapped journal (not counted)."""
        await self._inner.write_rate(record)

    async def close(self) -> None:
        """Close the wrapped journal."""
        await self._inner.close()


def open_runtime(journal: CallJournal | None, *, provider: ModelProvider | None = None,
                 metrics: RecordingMetrics | None = None, tool_call: bool = False,
                 ) -> ActivationRuntime:
    """The core as `beam_agents.hosting.start_runtime` builds it, with `journal` handed in.

    The journal is passed in already open (and wrapped) rather than named in
    ``AgentConfig.call_journal``, so that its calls can be counted; the agent
    is `benchmarks._agents.slow_reply`, one model call per event, or with
    `tool_call` `benchmarks._agents.one_tool_call`, one tool call per event.
    """
    config = AgentConfig(agent=AGENT, model=ModelConfig(local=LocalModelConfig(latency_ms=0)))
    return ActivationRuntime(config, agent=one_tool_call if tool_call else slow_reply,
                             provider=provider if provider is not None
                             else build_provider(config.model),
                             journal=journal, clock=time.monotonic, metrics=metrics)


def _fresh_activations(runtime: ActivationRuntime, prefix: str) -> Callable[[], None]:
    """One new key per call: seq 1 from empty state, so every call is paid for."""
    count = 0

    def activate() -> None:
        nonlocal count
        count += 1
        event = AgentEvent(entity_key=f"{prefix}-{count}".encode(), event_id=f"e{count}",
                           event_time_ms=1_700_000_000_000 + count,
                           payload=f"question {count}".encode())
        outcome = runtime.activate(KeyedState(), event)
        assert isinstance(outcome, Committed), outcome

    return activate


@contextlib.contextmanager
def _firestore_host() -> Iterator[str]:
    """The test suite's Firestore server, its address exported as the client expects."""
    from tests._firestore_server import EMULATOR_HOST_ENV, firestore_server  # noqa: PLC0415

    with firestore_server() as host:
        previous = os.environ.get(EMULATOR_HOST_ENV)
        os.environ[EMULATOR_HOST_ENV] = host
        try:
            yield host
        finally:
            if previous is None:
                os.environ.pop(EMULATOR_HOST_ENV, None)
            else:
                os.environ[EMULATOR_HOST_ENV] = previous


def _measure_tool(journal: CallJournal, profile: Profile, prefix: str) -> dict[str, Any]:
    """The journal's cost per durable tool call: its start marker and its result."""
    counting = CountingJournal(journal)
    with (open_runtime(counting, tool_call=True) as journaled,
          open_runtime(None, tool_call=True) as bare):
        times = interleaved({"journaled": _fresh_activations(journaled, f"{prefix}-tool"),
                             "unjournaled": _fresh_activations(bare, f"{prefix}-tool")},
                            reps=profile.reps, inner=profile.inner)
    added_ms = stat([j - u for j, u in zip(times["journaled"], times["unjournaled"],
                                            strict=True)]).scaled(1e3)
    return {
        "journaled_ms": stat(times["journaled"]).scaled(1e3).as_json(3),
        "unjournaled_ms": stat(times["unjournaled"]).scaled(1e3).as_json(3),
        "added_ms_per_tool_call": added_ms.as_json(3),
        "added_percent_of_model_call": added_ms.scaled(100 / MODEL_CALL_MS).as_json(3),
        "journal_writes": counting.writes,
        "met": added_ms.median * 100 / MODEL_CALL_MS <= TARGET_PERCENT,
    }


def _measure(journal: CallJournal, profile: Profile, prefix: str) -> dict[str, Any]:
    counting = CountingJournal(journal)
    metrics = RecordingMetrics()
    with open_runtime(counting, metrics=metrics) as journaled, open_runtime(None) as bare:
        times = interleaved({"journaled": _fresh_activations(journaled, prefix),
                             "unjournaled": _fresh_activations(bare, prefix)},
                            reps=profile.reps, inner=profile.inner)
    added = [j - u for j, u in zip(times["journaled"], times["unjournaled"], strict=True)]
    added_ms = stat(added).scaled(1e3)
    activations = metrics.get("beam_agents.runtime", "activations")
    paid = metrics.get("beam_agents.model", "provider_calls")
    return {
        "journaled_ms": stat(times["journaled"]).scaled(1e3).as_json(3),
        "unjournaled_ms": stat(times["unjournaled"]).scaled(1e3).as_json(3),
        "ratio_journaled_to_unjournaled": ratios(times["journaled"],
                                                 times["unjournaled"]).as_json(2),
        "added_ms_per_call": added_ms.as_json(3),
        "added_percent_of_model_call": added_ms.scaled(100 / MODEL_CALL_MS).as_json(3),
        "activations": activations,
        "paid_calls": paid,
        "journal_reads": counting.reads,
        "journal_writes": counting.writes,
        "facade_journal_writes": metrics.get("beam_agents.model", "journal_writes"),
        "reads_per_activation": round(counting.reads / max(activations, 1), 3),
        "writes_per_paid_call": round(counting.writes / max(paid, 1), 3),
        "met": added_ms.median * 100 / MODEL_CALL_MS <= TARGET_PERCENT,
    }


def _backend(name: str, profile: Profile, folder: Path) -> dict[str, Any]:
    prefix = f"b7-{uuid.uuid4().hex[:8]}"
    if name == "sqlite":
        path = folder / "calls.sqlite"
        result = _measure(SqliteCallJournalConfig(path=str(path)).open(), profile, prefix)
        # A runtime closes its journal: the tool calls' runtimes get one of their own.
        result["tool_call"] = _measure_tool(SqliteCallJournalConfig(path=str(path)).open(),
                                            profile, prefix)
        result["store"] = "SQLite, WAL, a file in a temporary folder"
        return result
    with _firestore_host() as host:
        config = FirestoreCallJournalConfig(project=f"bench-{uuid.uuid4().hex[:12]}",
                                            timeout_ms=10_000)
        result = _measure(config.open(), profile, prefix)
        result["tool_call"] = _measure_tool(config.open(), profile, prefix)
    result["store"] = f"Firestore-protocol test server on {host} (loopback gRPC)"
    return result


def _note(backends: dict[str, Any], skipped: dict[str, str]) -> str:
    parts = []
    for name, result in backends.items():
        added, share = result["added_ms_per_call"], result["added_percent_of_model_call"]
        parts.append(
            f"{name}: {result['journaled_ms']['median']:.2f} ms journaled vs "
            f"{result['unjournaled_ms']['median']:.2f} ms per activation, "
            f"+{added['median']:.2f} ms [{added['min']:.2f}-{added['max']:.2f}] per call, "
            f"{share['median']:.2f} % of a {MODEL_CALL_MS} ms call; "
            f"{result['reads_per_activation']} reads per activation, "
            f"{result['writes_per_paid_call']} writes per paid call; a tool call "
            f"+{result['tool_call']['added_ms_per_tool_call']['median']:.2f} ms, "
            f"{result['tool_call']['added_percent_of_model_call']['median']:.2f} %")
    text = "; ".join(parts) + ". " if parts else ""
    text += ("The added time is one range read when the activation starts and one "
             "awaited write per paid call, each a worker-thread hop for SQLite and a gRPC "
             "round trip for Firestore; the test server is local, so a real Firestore "
             "adds its network round trips on top. ")
    for name, reason in skipped.items():
        text += f"{name}: not measured: {reason}. "
    return text.strip()


def run(profile: Profile) -> dict[str, Any]:
    """Measure B7; see the module docstring."""
    backends: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="b7-journal-") as folder:
        for name in _BACKENDS:
            try:
                backends[name] = _backend(name, profile, Path(folder))
            except Exception as exc:
                if name != "firestore":
                    raise
                # The server is a Node package; a machine without it reports
                # Firestore as not measured rather than failing the suite.
                skipped[name] = f"{type(exc).__name__}: {exc}"[:500]
    worst = max(backends,
                key=lambda name: backends[name]["added_percent_of_model_call"]["median"])
    share: Stat = Stat(**backends[worst]["added_percent_of_model_call"])
    return {
        "name": "Call journal cost",
        "workload": ("ActivationRuntime.activate, one model call per activation, local model "
                     "with 0 ms latency, a fresh key per activation (every call paid); "
                     "journaled and unjournaled runtimes alternating call by call"),
        "unit": f"% of a {MODEL_CALL_MS} ms model call (added time per journaled call)",
        "model_call_ms": MODEL_CALL_MS,
        **{name: backends.get(name, f"not measured: {skipped.get(name)}")
           for name in _BACKENDS},
        "ratio": round(share.median, 3),
        "ratio_min": round(share.min, 3),
        "ratio_max": round(share.max, 3),
        "ratio_backend": worst,
        "target": TARGET_PERCENT,
        "met": all(result["met"] and result["tool_call"]["met"]
                   for result in backends.values()),
        "note": _note(backends, skipped),
    }
