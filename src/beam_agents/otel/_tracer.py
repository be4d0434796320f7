"""The `Tracer` port over the OpenTelemetry SDK: spans and GenAI histograms out over OTLP/HTTP.

One exporter per worker process (`OtelTracer.shared`): a Dataflow or Flink
worker runs many DoFn or function instances, and each would otherwise open
its own connection and buffer. Spans are buffered (`BatchSpanProcessor`) and
sent from the SDK's own thread, so an activation never waits for the
collector; a full buffer or a failed export drops spans, counted as
``beam_agents.tracing:spans_dropped`` on the runtime's metrics. Hosts call
`flush` at teardown/close, and the process flushes once more at exit.

Ids: an activation's span id is derived from the job's ``run_id``, its
identity (entity key, seq, event id) and its attempt, and, with no producer
context, so is its trace id. Every attempt of one event is thus one trace,
and a retry after a suspension links to its first attempt by computing that
attempt's span id, with nothing kept in keyed state.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import threading
from collections.abc import Sequence
from typing import Any, ClassVar

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.metrics import Histogram
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.trace.status import Status, StatusCode

from beam_agents.metrics import MetricsSink, NoopMetrics
from beam_agents.tracing import NOOP_SPAN, Attributes, Span, TracingConfig

__all__ = ["OtelTracer"]

_log = logging.getLogger(__name__)

_SCOPE = "beam_agents"
NAMESPACE = "beam_agents.tracing"

#: Bucket boundaries the GenAI semantic conventions advise for each histogram.
_BUCKETS = {
    "gen_ai.client.token.usage": (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144,
                                  1048576, 4194304, 16777216, 67108864),
    "gen_ai.client.operation.duration": (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28,
                                         2.56, 5.12, 10.24, 20.48, 40.96, 81.92),
}
_UNITS = {"gen_ai.client.token.usage": "{token}", "gen_ai.client.operation.duration": "s"}
_DESCRIPTIONS = {"gen_ai.client.token.usage": "Tokens paid per model call, input and output",
                 "gen_ai.client.operation.duration": "Duration of a model call"}


class _SeededIds(IdGenerator):
    """Random ids, except for the next span a thread starts after `seed`."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self._next = threading.local()

    def seed(self, trace_id: int, span_id: int) -> None:
        self._next.ids = (trace_id, span_id)

    def clear(self) -> None:
        self._next.ids = None

    def generate_trace_id(self) -> int:
        ids = getattr(self._next, "ids", None)
        return ids[0] if ids else self._random.generate_trace_id()

    def generate_span_id(self) -> int:
        ids = getattr(self._next, "ids", None)
        return ids[1] if ids else self._random.generate_span_id()


class _CountingExporter(SpanExporter):
    """Counts the spans of failed exports; the rest is the OTLP exporter's."""

    def __init__(self, inner: SpanExporter, tracer: OtelTracer) -> None:
        self._inner = inner
        self._tracer = tracer

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception:  # an exporter bug must not kill the SDK's thread
            _log.exception("span export raised")
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self._tracer.dropped(len(spans))
        else:
            self._tracer.exported(len(spans))
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._inner.force_flush(timeout_millis)


class _CountingProcessor(BatchSpanProcessor):
    """A batch processor that counts the spans a full buffer drops."""

    def __init__(self, exporter: SpanExporter, tracer: OtelTracer, config: TracingConfig) -> None:
        super().__init__(exporter, max_queue_size=config.max_queue_size,
                         schedule_delay_millis=config.schedule_delay_ms,
                         max_export_batch_size=min(512, config.max_queue_size),
                         export_timeout_millis=config.export_timeout_ms)
        self._tracer = tracer
        self._max = config.max_queue_size

    def on_end(self, span: ReadableSpan) -> None:
        # The SDK drops the oldest buffered span and only logs it; its buffer
        # is private, so a pinned SDK version is read here (pyproject's otel extra).
        queue = getattr(getattr(self, "_batch_processor", None), "_queue", ())
        if span.context is not None and span.context.trace_flags.sampled \
                and len(queue) >= self._max:
            self._tracer.dropped(1)
        super().on_end(span)


class _OtelSpan:
    """A `Span` over an SDK span."""

    __slots__ = ("_owner", "_span", "recording", "traceparent")

    def __init__(self, owner: OtelTracer, span: Any) -> None:
        self._owner = owner
        self._span = span
        self.recording: bool = span.is_recording()
        context = span.get_span_context()
        self.traceparent = (f"00-{context.trace_id:032x}-{context.span_id:016x}-"
                            f"{int(context.trace_flags):02x}") if context.is_valid else ""

    def child(self, name: str, *, client: bool = False) -> Span:
        if not self.recording:
            return NOOP_SPAN  # an unsampled activation's children are not sampled either
        span = self._owner.sdk_tracer.start_span(
            name, context=trace.set_span_in_context(self._span),
            kind=SpanKind.CLIENT if client else SpanKind.INTERNAL)
        return _OtelSpan(self._owner, span)

    def set_attributes(self, attributes: Attributes) -> None:
        self._span.set_attributes(attributes)

    def add_event(self, name: str, attributes: Attributes) -> None:
        self._span.add_event(name, attributes)

    def end(self, *, error_type: str | None = None) -> None:
        if error_type is not None and self.recording:
            self._span.set_attribute("error.type", error_type)
            self._span.set_status(Status(StatusCode.ERROR, error_type))
        self._span.end()


class OtelTracer:
    """The OpenTelemetry `Tracer`: per-process, buffered, never blocking an activation.

    Args:
        config: Where to export, how much to sample, what to leave out.
    """

    _lock: ClassVar[threading.Lock] = threading.Lock()
    _shared: ClassVar[dict[TracingConfig, OtelTracer]] = {}

    def __init__(self, config: TracingConfig) -> None:
        self._config = config
        self.capture_content = config.capture_content
        self.clear_keys = config.clear_keys
        self._counts_lock = threading.Lock()
        self._sinks: list[MetricsSink] = []
        self.spans_dropped = 0
        self.spans_exported = 0
        resource = Resource.create({"service.name": config.service_name,
                                    **dict(config.resource_attributes)})
        self._ids = _SeededIds()
        headers = dict(config.headers)
        timeout_s = config.export_timeout_ms / 1000
        self._provider = TracerProvider(
            resource=resource, id_generator=self._ids,
            sampler=ParentBased(TraceIdRatioBased(config.sample_ratio)))
        self._processor = _CountingProcessor(
            _CountingExporter(OTLPSpanExporter(endpoint=config.url("traces"), headers=headers,
                                               timeout=timeout_s), self),
            self, config)
        self._provider.add_span_processor(self._processor)
        self.sdk_tracer = self._provider.get_tracer(_SCOPE)
        self._meters: MeterProvider | None = None
        self._histograms: dict[str, Histogram] = {}
        if config.export_metrics:
            reader = PeriodicExportingMetricReader(
                OTLPMetricExporter(endpoint=config.url("metrics"), headers=headers,
                                   timeout=timeout_s),
                export_interval_millis=config.metrics_interval_ms,
                export_timeout_millis=config.export_timeout_ms)
            views = [View(instrument_name=name,
                          aggregation=ExplicitBucketHistogramAggregation(boundaries=buckets))
                     for name, buckets in _BUCKETS.items()]
            self._meters = MeterProvider(resource=resource, metric_readers=[reader], views=views)
            meter = self._meters.get_meter(_SCOPE)
            for name in _BUCKETS:
                self._histograms[name] = meter.create_histogram(
                    name, unit=_UNITS[name], description=_DESCRIPTIONS[name])
        self._propagator = TraceContextTextMapPropagator()
        self._closed = False

    @classmethod
    def shared(cls, config: TracingConfig, metrics: MetricsSink | None = None) -> OtelTracer:
        """This process's tracer for `config`, built on first use and flushed at exit.

        `metrics` receives ``beam_agents.tracing:spans_dropped`` from now on.
        """
        with cls._lock:
            tracer = cls._shared.get(config)
            if tracer is None:
                tracer = cls._shared[config] = cls(config)
                atexit.register(tracer.shutdown)
        if metrics is not None and not isinstance(metrics, NoopMetrics):
            tracer.report_to(metrics)
        return tracer

    def report_to(self, metrics: MetricsSink) -> None:
        """Count dropped spans on `metrics` too (the runtime's sink, flushed by its host)."""
        with self._counts_lock:
            self._sinks = [*self._sinks[-7:], metrics]  # the latest few live runtimes

    def dropped(self, count: int) -> None:
        """Count spans that will never reach the collector (a full buffer, a failed export)."""
        with self._counts_lock:
            self.spans_dropped += count
            sink = self._sinks[-1] if self._sinks else None
        if sink is not None:
            sink.inc(NAMESPACE, "spans_dropped", count)

    def exported(self, count: int) -> None:
        """Count spans the collector accepted."""
        with self._counts_lock:
            self.spans_exported += count

    def start(self, name: str, *, parent: str, identity: tuple[bytes, int, str],
              attempt: int) -> Span:
        """Start an activation's span with derived ids; see the module docstring."""
        entity_key, seq, event_id = identity
        seed = b"%s|%d|%s|" % (self._config.run_id.encode(), seq, event_id.encode()) + entity_key
        context = None
        parent_context = None
        if parent:
            context = self._propagator.extract({"traceparent": parent})
            parent_context = trace.get_current_span(context).get_span_context()
            if not parent_context.is_valid:
                context, parent_context = None, None
        trace_id = parent_context.trace_id if parent_context is not None else _id(seed, 16)
        links: list[Link] = []
        if attempt > 1:
            # The first attempt's id is computed, not stored (module docstring).
            first = SpanContext(trace_id=trace_id, span_id=_id(seed + b"|1", 8), is_remote=True,
                                trace_flags=TraceFlags(TraceFlags.SAMPLED))
            links.append(Link(first, {"beam_agents.link": "first_attempt"}))
        self._ids.seed(trace_id, _id(seed + b"|%d" % attempt, 8))
        try:
            span = self.sdk_tracer.start_span(name, context=context, kind=SpanKind.INTERNAL,
                                              links=links)
        finally:
            self._ids.clear()
        if isinstance(span, NonRecordingSpan) and not span.get_span_context().is_valid:
            return NOOP_SPAN
        return _OtelSpan(self, span)

    def record(self, name: str, value: float, attributes: Attributes) -> None:
        """Add one sample to a ``gen_ai.client.*`` histogram; unknown names are ignored."""
        histogram = self._histograms.get(name)
        if histogram is not None:
            histogram.record(value, attributes)

    def flush(self) -> None:
        """Send what is buffered, waiting at most the export timeout."""
        if self._closed:
            return
        timeout = self._config.export_timeout_ms
        self._provider.force_flush(timeout)
        if self._meters is not None:
            self._meters.force_flush(timeout)

    def shutdown(self) -> None:
        """Flush and stop the exporter's threads; at process exit, or once per test."""
        if self._closed:
            return
        self.flush()
        self._closed = True
        self._provider.shutdown()
        if self._meters is not None:
            self._meters.shutdown()
        with self._lock:
            if self._shared.get(self._config) is self:
                del self._shared[self._config]


def _id(seed: bytes, size: int) -> int:
    value = int.from_bytes(hashlib.blake2b(seed, digest_size=size).digest(), "big")
    return value or 1  # an all-zero id is invalid
