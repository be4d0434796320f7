"""The metrics port bound to the Flink operator's metric group."""

from __future__ import annotations

from typing import Any

from beam_agents.metrics import BufferedMetrics

__all__ = ["FlinkMetrics"]


class FlinkMetrics(BufferedMetrics):
    """Counts through Flink counters, ``<operator scope>.beam_agents.memory.soft_cap_warnings``.

    The namespace becomes a metric subgroup, so the Flink UI and reporters
    show the same ``namespace:name`` pairs as Beam's counters. PyFlink binds
    a counter to the calling thread's bundle, and sync agents run on a pool
    thread, so increments are buffered (`BufferedMetrics`) and `flush`ed by
    the functions after each element.
    """

    def __init__(self, group: Any) -> None:
        super().__init__()
        self._group = group
        self._highest: dict[tuple[str, str], int] = {}

    def _counter(self, namespace: str, name: str) -> Any:
        return self._group.add_group(namespace).counter(name)

    def _report_peak(self, namespace: str, name: str, value: int) -> None:
        key = (namespace, name)
        if key not in self._highest:
            self._group.add_group(namespace).gauge(name, lambda: self._highest[key])
        self._highest[key] = max(self._highest.get(key, value), value)

    def _report_sample(self, namespace: str, name: str, value: int) -> None:
        self._distribution(namespace, name).update(value)

    def _new_distribution(self, namespace: str, name: str) -> Any:
        return self._group.add_group(namespace).distribution(name)
