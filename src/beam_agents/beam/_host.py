"""What both Beam hosts share: the errors tag, line routing, the clock, and the clients.

It also holds `SharedEngine`, the streaming host's one engine per process
(see its docstring for why a DoFn instance cannot own it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any, ClassVar

import apache_beam as beam

from beam_agents.beam._metrics import BeamMetrics
from beam_agents.hosting import ActivationRuntime, KeyedEngine, start_runtime, wall_ms
from beam_agents.model import ModelProvider
from beam_agents.runtime import AgentConfig

__all__ = ["ERRORS", "ProviderFactory", "SharedEngine", "build_runtime", "route", "wall_ms"]

#: The tag of the errors (dead-letter) output.
ERRORS = "errors"

#: Builds the model provider in ``setup()`` instead of the one the config
#: names (e.g. a test's scripted model); pickled with the DoFn, so importable.
ProviderFactory = Callable[[], ModelProvider]


def route(lines: Iterable[tuple[str, Any]]) -> Iterator[Any]:
    """Intents to the main output, dead letters to the ``errors`` output (lines or windowed)."""
    for channel, line in lines:
        yield line if channel == "intents" else beam.pvalue.TaggedOutput(ERRORS, line)


def build_runtime(config: AgentConfig, provider: ProviderFactory | None,
                  metrics: BeamMetrics) -> ActivationRuntime:
    """Build the clients in ``setup()``, never in ``__init__``: DoFns are pickled."""
    return start_runtime(config, metrics=metrics,
                         provider=provider() if provider is not None else None)


class SharedEngine:
    """One process's runtime and engine for one `AgentDoFn`, shared by all its copies.

    Beam may apply a key's outcome on another DoFn instance than the one that
    started the activation: the DirectRunner unpickles a fresh copy per
    bundle, and Dataflow runs one copy per thread, any of which may get the
    key's next timer. The scheduler holding the in-flight activation must
    therefore outlive each copy, or an activation would be lost and paid for
    again (invariant 9). So the copies share one engine per process, and
    the last copy to leave closes it only once no key has an activation whose
    outcome is still to be applied; until then it stays for the next copy
    (Beam's AsyncWrapper keeps one event loop per process likewise). If no
    copy ever comes back, it lives until the process ends.

    Even an idle engine stays `IDLE_CLOSE_S` after its last copy left. The
    local runner tears its DoFn down after every bundle, so closing at once
    rebuilt the runtime each time a streaming run went quiet: new clients,
    a provider's learned quota share forgotten (invariant 11), and the
    build's CPU paid again and again.
    """

    #: How long an engine no copy uses stays open, in case one comes back.
    IDLE_CLOSE_S: ClassVar[float] = 60.0

    _lock: ClassVar[threading.Lock] = threading.Lock()
    _live: ClassVar[dict[str, SharedEngine]] = {}

    def __init__(self, config: AgentConfig, provider: ProviderFactory | None) -> None:
        self.metrics = BeamMetrics()
        self.runtime = build_runtime(config, provider, self.metrics)
        self.engine = KeyedEngine.over(self.runtime)
        self._users = 0
        self._in_flight: set[Hashable] = set()
        # The wall-clock time each key's wake was set for, as this process set it.
        self._wake_due: dict[Hashable, int] = {}

    @classmethod
    def acquire(cls, dofn_id: str, config: AgentConfig,
                provider: ProviderFactory | None) -> SharedEngine:
        """Join the engine of the DoFn `dofn_id` names, building it on first use."""
        with cls._lock:
            shared = cls._live.get(dofn_id)
            if shared is None:
                shared = cls._live[dofn_id] = cls(config, provider)
            shared._users += 1
            return shared

    def release(self, dofn_id: str) -> None:
        """Leave; unless a copy comes back within `IDLE_CLOSE_S`, the clients close.

        They close only once no outcome is still due; a copy that returns
        later finds the engine as it was.
        """
        # Spans go out at every teardown, whether or not the clients close now.
        self.runtime.tracer.flush()
        with self._lock:
            self._users -= 1
            if self._users or self._in_flight:
                return
        closer = threading.Timer(self.IDLE_CLOSE_S, self._close_if_unused, args=(dofn_id,))
        closer.daemon = True  # never holds the process open
        closer.start()

    def _close_if_unused(self, dofn_id: str) -> None:
        with self._lock:
            if self._users or self._in_flight or self._live.get(dofn_id) is not self:
                return
            del self._live[dofn_id]
        self.runtime.close()

    def note_wake(self, key: Hashable, at_ms: int | None) -> None:
        """Remember the wall-clock time `key`'s wake was set for (None: cleared)."""
        with self._lock:
            if at_ms is None:
                self._wake_due.pop(key, None)
            else:
                self._wake_due[key] = at_ms

    def wake_due(self, key: Hashable) -> int | None:
        """The wall-clock time `key`'s wake was set for in this process, if it was."""
        with self._lock:
            return self._wake_due.get(key)

    def track(self, key: Hashable) -> None:
        """Note whether `key` has an activation whose outcome is still to be applied."""
        running = self.engine.scheduler.running(key) is not None
        with self._lock:
            if running:
                self._in_flight.add(key)
            else:
                self._in_flight.discard(key)
