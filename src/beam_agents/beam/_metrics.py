"""The metrics port bound to Beam's `Metrics`, e.g. ``beam_agents.memory:soft_cap_warnings``."""

from __future__ import annotations

import threading
from collections import Counter

from apache_beam.metrics.metric import Metrics

__all__ = ["BeamMetrics"]


class BeamMetrics:
    """Counts through Beam counters, so they show in ``result.metrics()`` and on Dataflow.

    Beam attributes a counter increment to the bundle of the *calling thread*,
    and sync agents run on a worker thread of the runtime. Increments are
    therefore buffered (thread-safely) and handed to Beam by `flush`, which
    the DoFn calls from its bundle thread after each activation.
    """

    def __init__(self) -> None:
        self._pending: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def inc(self, namespace: str, name: str, value: int = 1) -> None:
        """Buffer an increment of ``namespace:name``; safe from any thread."""
        with self._lock:
            self._pending[(namespace, name)] += value

    def flush(self) -> None:
        """Hand buffered increments to Beam; call from the DoFn's bundle thread."""
        with self._lock:
            pending, self._pending = self._pending, Counter()
        for (namespace, name), value in pending.items():
            Metrics.counter(namespace, name).inc(value)
