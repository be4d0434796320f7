"""AgentBatchDoFn: the batch host, many whole keys at once through `KeyRuns`, no timers.

Beam's batch runner (the DirectRunner's FnApiRunner, the portable job
service) fires no processing-time timers, so the streaming host's wake timer
would never come. Here a GroupByKey hands over each key with all its events
instead, and this plain DoFn drives the shared engine itself: every key
added in a bundle runs concurrently with the others, one activation at a
time per key, in ``(event_time_ms, event_id)`` order over the whole input,
so shuffling the input changes nothing (invariant 10). Suspension, retry
and dead-lettering are the engine's, as on the streaming path (invariants
1, 8, 9).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from beam_agents.beam._host import ProviderFactory, build_runtime, route, wall_ms
from beam_agents.beam._metrics import BeamMetrics
from beam_agents.runtime import ActivationRuntime, AgentConfig, KeyedEngine, KeyRuns

__all__ = ["AgentBatchDoFn"]


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
    """

    def __init__(self, config: AgentConfig, *, provider: ProviderFactory | None = None) -> None:
        super().__init__()
        self._config = config
        self._provider = provider
        self._runtime: ActivationRuntime | None = None
        self._runs: KeyRuns | None = None
        self._metrics = BeamMetrics()

    def setup(self) -> None:
        """Build the clients once per DoFn instance."""
        self._metrics = BeamMetrics()
        self._runtime = build_runtime(self._config, self._provider, self._metrics)

    def start_bundle(self) -> None:
        """Start a bundle on an engine of its own, so a failed bundle's runs stay its own."""
        assert self._runtime is not None, "setup() was not called"
        # A retried bundle starts from scratch: an activation a failed attempt
        # left running is never applied to the retry's fresh cells.
        self._runs = KeyRuns(KeyedEngine.over(self._runtime), clock_ms=wall_ms)

    def process(self, element: tuple[bytes, Iterable[bytes]]) -> Iterator[Any]:
        """Add the key's events and emit whatever lines are ready, of any key."""
        runs = self._require_runs()
        key, events = element
        lines = runs.add(key, events)
        lines.extend(runs.advance(block=False))
        while runs.active >= self._config.max_in_flight:
            lines.extend(runs.advance(block=True))
        self._metrics.flush()  # on the bundle thread, which Beam attributes counters to
        return route(lines)

    def finish_bundle(self) -> Iterator[Any]:
        """Run every key still in flight to the end; its lines go to the global window."""
        lines = self._require_runs().finish()
        self._runs = None
        self._metrics.flush()
        window = GlobalWindow()
        return route((channel, WindowedValue(line, window.max_timestamp(), (window,)))
                     for channel, line in lines)

    def teardown(self) -> None:
        """Close the clients."""
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None

    def _require_runs(self) -> KeyRuns:
        assert self._runs is not None, "start_bundle() was not called"
        return self._runs
