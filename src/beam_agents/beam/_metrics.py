"""The metrics port bound to Beam's `Metrics`, e.g. ``beam_agents.memory:soft_cap_warnings``."""

from __future__ import annotations

from typing import Any

from apache_beam.metrics.metric import Metrics

from beam_agents.metrics import BufferedMetrics

__all__ = ["BeamMetrics"]


class BeamMetrics(BufferedMetrics):
    """Counts through Beam counters, so they show in ``result.metrics()`` and on Dataflow.

    Increments are buffered (see `BufferedMetrics`) and handed to Beam by
    `flush`, which the DoFns call from their bundle thread after each element.
    """

    def _counter(self, namespace: str, name: str) -> Any:
        return Metrics.counter(namespace, name)

    def _report_peak(self, namespace: str, name: str, value: int) -> None:
        # A distribution's max over all workers and bundles is the peak.
        Metrics.distribution(namespace, name).update(value)
