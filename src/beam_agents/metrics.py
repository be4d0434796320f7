"""The metrics port: how the pure core counts things without importing a runner.

The core increments counters by (namespace, name), the same pairs the
specification names (``beam_agents.memory:soft_cap_warnings``). The Beam
adapter binds them to ``apache_beam.metrics.Metrics``, the Flink adapter to
the operator's metric group; tests use `RecordingMetrics`.
"""

from __future__ import annotations

from collections import Counter
from typing import Protocol, runtime_checkable

__all__ = ["MetricsSink", "NoopMetrics", "RecordingMetrics"]


@runtime_checkable
class MetricsSink(Protocol):
    """Receives counter increments; must be cheap, thread-safe and never raise."""

    def inc(self, namespace: str, name: str, value: int = 1) -> None:
        """Add `value` to the counter `namespace:name`."""


class NoopMetrics:
    """Discards every increment; the default where nothing is bound."""

    def inc(self, namespace: str, name: str, value: int = 1) -> None:
        """Do nothing."""


class RecordingMetrics:
    """Keeps every counter in memory, for tests and for the demo's summary."""

    def __init__(self) -> None:
        self.counters: Counter[str] = Counter()

    def inc(self, namespace: str, name: str, value: int = 1) -> None:
        """Add `value` to ``counters["namespace:name"]``."""
        self.counters[f"{namespace}:{name}"] += value

    def get(self, namespace: str, name: str) -> int:
        """Return the current value of ``namespace:name`` (0 if never incremented)."""
        return self.counters[f"{namespace}:{name}"]
