"""The metrics port bound to Beam's `Metrics`, e.g. ``beam_agents.memory:soft_cap_warnings``."""

from __future__ import annotations

from apache_beam.metrics.metric import Metrics

from beam_agents.metrics import BufferedMetrics

__all__ = ["BeamMetrics"]


class BeamMetrics(BufferedMetrics):
    """Counts through Beam counters, so they show in ``result.metrics()`` and on Dataflow.

    Increments are buffered (see `BufferedMetrics`) and handed to Beam by
    `flush`, which the DoFn calls from its bundle thread after each activation.
    """

    def flush(self) -> None:
        """Hand buffered increments to Beam; call from the DoFn's bundle thread."""
        for namespace, name, value in self.drain():
            Metrics.counter(namespace, name).inc(value)
