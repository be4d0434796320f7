"""AgentBatchDoFn: the batch host, many whole keys at once through `KeyRuns`, no timers.

Beam's batch runner (the DirectRunner's FnApiRunner, the portable job
service) fires no processing-time timers, so the streaming host's wake timer
would never come. Here a GroupByKey hands over each key with all its events
instead, and this plain DoFn drives the shared engine itself: every key
added in a bundle runs concurrently with the others, one activation at a
time per key, in ``(event_time_ms, event_id)`` order over the whole input,
so shuffling the input changes nothing (invariant 10). Suspension, retry
and dead-lettering are the engine's, as on the streaming path (invariants
1, 8, 9). With a state snapshot (`beam_agents.beam._snapshot`), a key's
record arrives in its group beside its events: the key starts from it, and
its cells, once its events ran, go into the snapshot's next generation.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue
from google.protobuf.message import DecodeError

from beam_agents.beam._host import ProviderFactory, build_runtime, route, wall_ms
from beam_agents.beam._metrics import BeamMetrics
from beam_agents.beam._snapshot import SNAPSHOT_PARTS, SnapshotPlan
from beam_agents.errors import StateError
from beam_agents.hosting import (
    ActivationRuntime,
    KeyCells,
    KeyedEngine,
    KeyRuns,
    KeyStateSnapshot,
    PartInfo,
    SnapshotStore,
    SnapshotWriter,
    refuse_events,
    restore_key,
    snapshot_record,
    split_marked,
)
from beam_agents.runtime import AgentConfig

__all__ = ["AgentBatchDoFn"]


def _has_queued(record: bytes) -> bool:
    """Whether a key's record holds queued events: a pending wait's timeout, due now perhaps."""
    try:
        parsed = KeyStateSnapshot.FromString(record)
    except DecodeError:
        return True  # restoring it names the fault
    return any(cell.name == "queue" and len(cell.bag.items) > 0 for cell in parsed.cells)


class AgentBatchDoFn(beam.DoFn):
    """Runs each ``(entity_key, [AgentEvent bytes, ...])`` group to the end on the engine.

    At most ``config.max_in_flight`` keys are held at once: `process` waits
    for one to finish before taking more, so a bundle's memory stays bounded
    by the keys in flight, not by the input. The keys still running when the
    bundle ends are run to the end in `finish_bundle`, so no event outlives
    its bundle (invariant 8) and no state outlives the run.

    Args:
        config: What to run.
        provider: Builds the model provider in ``setup()`` in place of the one
            ``config.model`` names; the runtime closes what it builds.
        snapshot: Where each key's cells go once its events ran (its record,
            if any, comes marked in its group); None: keys start empty and
            their cells are dropped at the end.
    """

    def __init__(self, config: AgentConfig, *, provider: ProviderFactory | None = None,
                 snapshot: SnapshotPlan | None = None) -> None:
        super().__init__()
        self._config = config
        self._provider = provider
        self._snapshot = snapshot
        self._runtime: ActivationRuntime | None = None
        self._runs: KeyRuns | None = None
        self._metrics = BeamMetrics()
        self._store: SnapshotStore | None = None
        self._writer: SnapshotWriter | None = None
        self._parts: list[PartInfo] = []

    def setup(self) -> None:
        """Build the clients once per DoFn instance."""
        self._metrics = BeamMetrics()
        self._runtime = build_runtime(self._config, self._provider, self._metrics)
        if self._snapshot is not None:
            self._store = self._snapshot.config.open()

    def start_bundle(self) -> None:
        """Start a bundle on an engine of its own, so a failed bundle's runs stay its own."""
        assert self._runtime is not None, "setup() was not called"
        # A retried bundle starts from scratch: an activation a failed attempt
        # left running is never applied to the retry's fresh cells, and the
        # parts a failed attempt wrote are never listed (the commit prunes them).
        self._runs = KeyRuns(KeyedEngine.over(self._runtime), clock_ms=wall_ms,
                             on_done=self._keep if self._store is not None else None)
        if self._store is not None and self._snapshot is not None:
            self._writer = SnapshotWriter(self._store, self._snapshot.generation)
        self._parts = []

    def process(self, element: tuple[bytes, Iterable[bytes]],
                latest_ms: int | None = None) -> Iterator[Any]:
        """Add the key's events and emit whatever lines are ready, of any key.

        Args:
            element: A key and its events, with its snapshot record if any.
            latest_ms: With a snapshot, the input's latest event time: the
                timeouts of waits past it stay pending for the next run.
        """
        runs = self._require_runs()
        runs.waits_through_ms = latest_ms if self._snapshot is not None else None
        key, values = element
        events, records = split_marked(values)
        lines: list[tuple[str, Any]] = []
        if not records:
            lines.extend(runs.add(key, events))
        elif not events and not _has_queued(records[0]):
            # State and no events: carried to the next generation as it was.
            self._carry(records[0])
        else:
            try:
                cells = restore_key(key, records)
            except StateError as exc:
                # Its events never run on state other than its own (invariant 8);
                # the record goes on as it was, for a person to repair.
                self._carry(records[0])
                lines.extend(refuse_events(key, events, exc, self._metrics))
            else:
                lines.extend(runs.add(key, events, cells=cells))
        lines.extend(runs.advance(block=False))
        while runs.active >= self._config.max_in_flight:
            lines.extend(runs.advance(block=True))
        self._metrics.flush()  # on the bundle thread, which Beam attributes counters to
        yield from route(lines)
        yield from self._take_parts()

    def _carry(self, record: bytes) -> None:
        """Write a key's record into the next generation unchanged."""
        if self._writer is not None:
            self._parts.extend(self._writer.add(record))

    def _keep(self, key: Hashable, cells: KeyCells) -> None:
        """A key is done: its cells go into the snapshot's next generation."""
        assert self._writer is not None and isinstance(key, bytes)
        self._parts.extend(self._writer.add(snapshot_record(key, cells)))

    def _take_parts(self, *, windowed: bool = False) -> Iterator[Any]:
        parts, self._parts = self._parts, []
        window = GlobalWindow()
        for part in parts:
            doc = json.dumps(part.to_json(), sort_keys=True)
            yield beam.pvalue.TaggedOutput(SNAPSHOT_PARTS, WindowedValue(
                doc, window.max_timestamp(), (window,)) if windowed else doc)

    def finish_bundle(self) -> Iterator[Any]:
        """Run every key still in flight to the end; its lines go to the global window."""
        lines = self._require_runs().finish()
        self._runs = None
        if self._writer is not None:
            self._parts.extend(self._writer.close())
            self._writer = None
        self._metrics.flush()
        window = GlobalWindow()
        yield from route((channel, WindowedValue(line, window.max_timestamp(), (window,)))
                         for channel, line in lines)
        yield from self._take_parts(windowed=True)

    def teardown(self) -> None:
        """Close the clients."""
        if self._writer is not None:
            self._writer.abort()
            self._writer = None
        if self._store is not None:
            self._store.close()
            self._store = None
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None

    def _require_runs(self) -> KeyRuns:
        assert self._runs is not None, "start_bundle() was not called"
        return self._runs
