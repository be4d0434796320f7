"""The metrics port: how the pure core counts things without importing a runner.

The core increments counters by (namespace, name), the same pairs the
specification names (``beam_agents.memory:soft_cap_warnings``), and reports
high-water marks (``beam_agents.runtime:in_flight_peak``) and samples of a
distribution (``beam_agents.runtime:queue_length``) the same way, and a
few notes, text a person needs beside a count (the first entity whose
long-term write was superseded, ``beam_agents.memory:longterm_superseded_first``). The Beam
adapter binds them to ``apache_beam.metrics.Metrics`` (a peak becomes a
distribution, whose max is the peak), the Flink adapter to the operator's
metric group; tests use `RecordingMetrics`.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = ["BufferedMetrics", "Distribution", "MetricsSink", "NoopMetrics", "RecordingMetrics"]


@runtime_checkable
class MetricsSink(Protocol):
    """Receives counter increments and peaks; must be cheap, thread-safe and never raise."""

    def inc(self, namespace: str, name: str, value: int = 1) -> None:
        """Add `value` (which may be negative) to the counter `namespace:name`."""

    def peak(self, namespace: str, name: str, value: int) -> None:
        """Record that `namespace:name` reached `value`; the sink keeps the largest."""

    def observe(self, namespace: str, name: str, value: int) -> None:
        """Add one sample to the distribution `namespace:name` (count, sum, min, max)."""

    def note(self, namespace: str, name: str, text: str) -> None:
        """Record `text` under `namespace:name`; the sink keeps the first it was given."""


class NoopMetrics:
    """Discards every increment; the default where nothing is bound."""

    def inc(self, namespace: str, name: str, value: int = 1) -> None:
        """Do nothing."""

    def peak(self, namespace: str, name: str, value: int) -> None:
        """Do nothing."""

    def observe(self, namespace: str, name: str, value: int) -> None:
        """Do nothing."""

    def note(self, namespace: str, name: str, text: str) -> None:
        """Do nothing."""


@dataclass(slots=True)
class Distribution:
    """What a distribution metric keeps, as Beam's and Flink's do: count, sum, min and max."""

    count: int = 0
    sum: int = 0
    min: int | None = None
    max: int | None = None

    def add(self, value: int) -> None:
        """Count one sample."""
        self.count += 1
        self.sum += value
        self.min = value if self.min is None else min(self.min, value)
        self.max = value if self.max is None else max(self.max, value)

    @property
    def mean(self) -> float | None:
        """The samples' mean, or None before the first."""
        return self.sum / self.count if self.count else None


class RecordingMetrics:
    """Keeps every counter in memory, for tests and for the demo's summary."""

    def __init__(self) -> None:
        self.counters: Counter[str] = Counter()
        self.peaks: dict[str, int] = {}
        self.distributions: dict[str, Distribution] = {}
        self.notes: dict[str, str] = {}

    def inc(self, namespace: str, name: str, value: int = 1) -> None:
        """Add `value` to ``counters["namespace:name"]``."""
        self.counters[f"{namespace}:{name}"] += value

    def peak(self, namespace: str, name: str, value: int) -> None:
        """Keep the largest `value` in ``peaks["namespace:name"]``."""
        key = f"{namespace}:{name}"
        self.peaks[key] = max(self.peaks.get(key, value), value)

    def observe(self, namespace: str, name: str, value: int) -> None:
        """Add `value` to ``distributions["namespace:name"]``."""
        self.distributions.setdefault(f"{namespace}:{name}", Distribution()).add(value)

    def note(self, namespace: str, name: str, text: str) -> None:
        """Keep the first `text` in ``notes["namespace:name"]``."""
        self.notes.setdefault(f"{namespace}:{name}", text)

    def get(self, namespace: str, name: str) -> int:
        """Return the current value of ``namespace:name`` (0 if never incremented)."""
        return self.counters[f"{namespace}:{name}"]


class BufferedMetrics:
    """Buffers increments from any thread until the host's own thread drains them.

    Beam and PyFlink attribute a counter increment to the bundle of the
    *calling thread*, and sync agents run on a worker thread of the runtime,
    so the runner adapters buffer here and report after each activation:
    a subclass binds `_counter` to its engine, and the host calls `flush` from
    its own thread.
    """

    def __init__(self) -> None:
        self._pending: Counter[tuple[str, str]] = Counter()
        self._peaks: dict[tuple[str, str], int] = {}
        self._samples: list[tuple[str, str, int]] = []
        self._notes: dict[tuple[str, str], str] = {}
        self._noted: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._bound: dict[tuple[str, str], Any] = {}
        self._distributions: dict[tuple[str, str], Any] = {}

    def inc(self, namespace: str, name: str, value: int = 1) -> None:
        """Buffer an increment of ``namespace:name``; safe from any thread."""
        with self._lock:
            self._pending[(namespace, name)] += value

    def peak(self, namespace: str, name: str, value: int) -> None:
        """Buffer a high-water mark of ``namespace:name``; safe from any thread."""
        with self._lock:
            key = (namespace, name)
            self._peaks[key] = max(self._peaks.get(key, value), value)

    def observe(self, namespace: str, name: str, value: int) -> None:
        """Buffer a sample of the distribution ``namespace:name``; safe from any thread."""
        with self._lock:
            self._samples.append((namespace, name, value))

    def note(self, namespace: str, name: str, text: str) -> None:
        """Buffer a note; only the first per name is ever reported; safe from any thread."""
        with self._lock:
            key = (namespace, name)
            if key not in self._noted:
                self._noted.add(key)
                self._notes[key] = text

    def drain(self) -> list[tuple[str, str, int]]:
        """Take every buffered ``(namespace, name, value)`` and reset the buffer."""
        with self._lock:
            pending, self._pending = self._pending, Counter()
        return [(namespace, name, value) for (namespace, name), value in pending.items()]

    def flush(self) -> None:
        """Hand buffered increments and peaks to the engine; call from the host's thread."""
        for namespace, name, value in self.drain():
            counter = self._bound.get((namespace, name))
            if counter is None:
                counter = self._bound[(namespace, name)] = self._counter(namespace, name)
            counter.inc(value)
        with self._lock:
            peaks, self._peaks = self._peaks, {}
            samples, self._samples = self._samples, []
            notes, self._notes = self._notes, {}
        for (namespace, name), value in peaks.items():
            self._report_peak(namespace, name, value)
        for namespace, name, value in samples:
            self._report_sample(namespace, name, value)
        for (namespace, name), text in notes.items():
            self._report_note(namespace, name, text)

    def _report_peak(self, namespace: str, name: str, value: int) -> None:
        """Hand a high-water mark to the engine; subclasses bind it."""
        raise NotImplementedError

    def _report_sample(self, namespace: str, name: str, value: int) -> None:
        """Hand one sample of a distribution to the engine; subclasses bind it."""
        raise NotImplementedError

    def _report_note(self, namespace: str, name: str, text: str) -> None:
        """Hand a note to the engine; engines without text metrics keep none."""

    def _counter(self, namespace: str, name: str) -> Any:
        """The engine's counter for ``namespace:name``, anything with ``inc``."""
        raise NotImplementedError

    def _distribution(self, namespace: str, name: str) -> Any:
        """The engine's distribution for ``namespace:name``, built once (`_new_distribution`).

        Building one costs more than an update (Beam's finds the calling
        bundle at each update), so one per name serves every later update.
        """
        key = (namespace, name)
        distribution = self._distributions.get(key)
        if distribution is None:
            distribution = self._distributions[key] = self._new_distribution(namespace, name)
        return distribution

    def _new_distribution(self, namespace: str, name: str) -> Any:
        """A new distribution of the engine for ``namespace:name``, anything with ``update``."""
        raise NotImplementedError
