"""GenAI histograms aggregated in place, handed to the SDK's OTLP exporter as `MetricsData`.

Why not the SDK's instruments: ``Histogram.record`` cleans and hashes the
attributes and walks the views and the reader's storage for every sample,
about 15 us each, three samples per model call, and metrics are not
sampled, so at 1 % span sampling they were most of what tracing cost
(docs/benchmarks.md, B14). A sample here is a dict lookup, a bisect and
four additions under a lock; the export, once a minute, builds the SDK's
own cumulative data points.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricsData,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

__all__ = ["BUCKETS", "Histograms"]

#: Bucket boundaries the GenAI semantic conventions advise for each histogram.
BUCKETS: dict[str, tuple[float, ...]] = {
    "gen_ai.client.token.usage": (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144,
                                  1048576, 4194304, 16777216, 67108864),
    "gen_ai.client.operation.duration": (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28,
                                         2.56, 5.12, 10.24, 20.48, 40.96, 81.92),
}
_UNITS = {"gen_ai.client.token.usage": "{token}", "gen_ai.client.operation.duration": "s"}
_DESCRIPTIONS = {"gen_ai.client.token.usage": "Tokens paid per model call, input and output",
                 "gen_ai.client.operation.duration": "Duration of a model call"}


class _Cell:
    """One series: bucket counts, count, sum, min and max since the process started."""

    __slots__ = ("count", "counts", "max", "min", "sum")

    def __init__(self, buckets: int) -> None:
        self.counts = [0] * (buckets + 1)
        self.count = 0
        self.sum = 0.0
        self.min = float("inf")
        self.max = float("-inf")


class Histograms:
    """The ``gen_ai.client.*`` histograms of one process, cumulative, thread-safe."""

    def __init__(self, resource: Resource, scope: str) -> None:
        self._resource = resource
        self._scope = InstrumentationScope(scope)
        self._lock = threading.Lock()
        self._cells: dict[tuple[str, tuple[tuple[str, Any], ...]], _Cell] = {}
        self._start_ns = time.time_ns()

    def record(self, name: str, value: float, attributes: Mapping[str, Any]) -> None:
        """Add one sample; names other than the GenAI histograms' are ignored."""
        bounds = BUCKETS.get(name)
        if bounds is None:
            return
        # Keyed by the attributes in the caller's order: one call site always
        # builds them alike; `data` merges orders that differ.
        key = (name, tuple(attributes.items()))
        with self._lock:
            cell = self._cells.get(key)
            if cell is None:
                cell = self._cells[key] = _Cell(len(bounds))
            cell.counts[bisect_left(bounds, value)] += 1
            cell.count += 1
            cell.sum += value
            # Comparisons, not min()/max(): two calls fewer on every model call's path.
            if value < cell.min:  # noqa: PLR1730
                cell.min = value
            if value > cell.max:  # noqa: PLR1730
                cell.max = value

    def data(self) -> MetricsData | None:
        """Every series so far as cumulative data points, or None before the first sample."""
        now = time.time_ns()
        merged: dict[str, dict[tuple[tuple[str, Any], ...], _Cell]] = {}
        with self._lock:
            for (name, attributes), cell in self._cells.items():
                series = merged.setdefault(name, {})
                key = tuple(sorted(attributes))
                into = series.get(key)
                if into is None:
                    into = series[key] = _Cell(len(BUCKETS[name]))
                into.counts = [a + b for a, b in zip(into.counts, cell.counts, strict=True)]
                into.count += cell.count
                into.sum += cell.sum
                into.min = min(into.min, cell.min)
                into.max = max(into.max, cell.max)
        if not merged:
            return None
        metrics = [Metric(name=name, description=_DESCRIPTIONS[name], unit=_UNITS[name],
                          data=Histogram(data_points=[
                              HistogramDataPoint(
                                  attributes=dict(key), start_time_unix_nano=self._start_ns,
                                  time_unix_nano=now, count=cell.count, sum=cell.sum,
                                  bucket_counts=cell.counts, explicit_bounds=BUCKETS[name],
                                  min=cell.min, max=cell.max)
                              for key, cell in series.items()],
                              aggregation_temporality=AggregationTemporality.CUMULATIVE))
                   for name, series in merged.items()]
        return MetricsData(resource_metrics=[ResourceMetrics(
            resource=self._resource, schema_url="",
            scope_metrics=[ScopeMetrics(scope=self._scope, metrics=metrics, schema_url="")])])
