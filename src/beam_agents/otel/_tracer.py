"""The `Tracer` port over OTLP/HTTP: our own span records, the SDK's exporters on the wire.

What the OpenTelemetry SDK does here, and what it does not. Its OTLP/HTTP
exporters send (``OTEL_EXPORTER_OTLP_*`` certificates, compression and
timeouts, retries with backoff, Retry-After), and its metric exporter takes
our histograms as its own `MetricsData`. Its tracer and span objects do not
take part: a span there is a locked object with validated, bounded
attributes, handed through processors and re-encoded one message at a time,
and at two spans per event that was most of tracing's cost (B14,
docs/benchmarks.md). A span here is a `SpanRecord` filled in place and,
when it ends, frozen into immutable values (`beam_agents.otel._otlp.freeze`)
in a bounded buffer; the export thread writes a batch of them to the wire
format and sends it.

One exporter per worker process (`OtelTracer.shared`): a Dataflow or Flink
worker runs many DoFn or function instances, and each would otherwise open
its own connection and buffer. Spans wait in the buffer and are sent from
one daemon thread, so an activation never waits for the collector; a full
buffer or a failed export drops spans, counted as
``beam_agents.tracing:spans_dropped`` on the runtime's metrics. Hosts call
`flush` at teardown/close, and the process flushes once more at exit.

Sampling is the SDK's ``ParentBased(TraceIdRatioBased(ratio))``, decided
the same way: a producer's context is followed, sampled or not; without
one, a trace is kept when the low 64 bits of its id fall under
``ratio * 2**64``.

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
import os
import random
import re
import threading
import time
import weakref
from typing import ClassVar

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics.export import MetricExportResult
from opentelemetry.sdk.resources import Resource

from beam_agents.metrics import MetricsSink, NoopMetrics
from beam_agents.otel._histograms import Histograms
from beam_agents.otel._otlp import (
    Frozen,
    SpanRecord,
    encode_frozen,
    encode_request,
    encode_resource_scope,
    freeze,
)
from beam_agents.tracing import NOOP_SPAN, Attributes, Span, TracingConfig

__all__ = ["OtelTracer"]

_log = logging.getLogger(__name__)

_SCOPE = "beam_agents"
NAMESPACE = "beam_agents.tracing"
_INTERNAL, _CLIENT = 1, 3  # OTLP SpanKind
#: Spans per export request, as the SDK's batch processor sends at most.
_BATCH = 512
#: W3C trace context, version 00 (later versions may append fields).
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_LOW64 = (1 << 64) - 1


class _RecordingSpan(SpanRecord):
    """A sampled span: its own record, encoded when it ends into the tracer's buffer."""

    __slots__ = ("_tracer",)
    recording = True

    def __init__(self, tracer: OtelTracer, trace_id: bytes, span_id: bytes,  # noqa: PLR0917
                 parent_id: bytes, name: str, kind: int) -> None:
        super().__init__(trace_id, span_id, parent_id, name, kind, time.time_ns())
        self._tracer = tracer

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id.hex()}-{self.span_id.hex()}-01"

    def child(self, name: str, *, client: bool = False) -> Span:
        return _RecordingSpan(self._tracer, self.trace_id, _random_span_id(), self.span_id,
                              name, _CLIENT if client else _INTERNAL)

    def set_attributes(self, attributes: Attributes) -> None:
        self.attributes.update(attributes)

    def add_event(self, name: str, attributes: Attributes) -> None:
        if self.events is None:
            self.events = []
        self.events.append((name, time.time_ns(), attributes))

    def end(self, *, error_type: str | None = None) -> None:
        if self.end_ns:
            return  # ended once already
        if error_type is not None:
            self.attributes["error.type"] = error_type
            self.error = error_type
        self.end_ns = time.time_ns()
        self._tracer.buffer(self)


class _ContextOnly:
    """An activation that is not sampled: nothing is kept, its context travels on unsampled."""

    __slots__ = ("traceparent",)
    recording = False

    def __init__(self, traceparent: str) -> None:
        self.traceparent = traceparent

    def child(self, name: str, *, client: bool = False) -> Span:
        return NOOP_SPAN  # an unsampled activation's children are not sampled either

    def set_attributes(self, attributes: Attributes) -> None:
        """Keep nothing."""

    def add_event(self, name: str, attributes: Attributes) -> None:
        """Keep nothing."""

    def end(self, *, error_type: str | None = None) -> None:
        """Send nothing."""


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
        self._bound = round(config.sample_ratio * (1 << 64))
        resource = Resource.create({"service.name": config.service_name,
                                    **dict(config.resource_attributes)})
        self._resource_scope = encode_resource_scope(dict(resource.attributes), _SCOPE)
        headers = dict(config.headers)
        timeout_s = config.export_timeout_ms / 1000
        self._spans_out = OTLPSpanExporter(endpoint=config.url("traces"), headers=headers,
                                           timeout=timeout_s)
        # The exporter's sender takes the bytes `_otlp` writes; its `export` would
        # take SDK spans. Private in the SDK pinned by the otel extra (pyproject).
        self._send = self._spans_out._client.export
        self._histograms: Histograms | None = None
        self._metrics_out: OTLPMetricExporter | None = None
        if config.export_metrics:
            self._histograms = Histograms(resource, _SCOPE)
            self._metrics_out = OTLPMetricExporter(endpoint=config.url("metrics"),
                                                   headers=headers, timeout=timeout_s)
        self._closed = False
        self._start_thread()
        # A forked child has the buffer but not the thread (a worker forked from a
        # process that traced); it starts afresh, as the SDK's processors do.
        restart = weakref.WeakMethod(self._start_thread)
        os.register_at_fork(after_in_child=lambda: (method := restart()) and method())

    def _start_thread(self) -> None:
        self._buffer: list[Frozen] = []  # ended spans, encoded in batches as they are sent
        self._buffer_lock = threading.Lock()
        self._export_lock = threading.Lock()  # one export at a time: the thread's or a flush
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="beam-agents-otlp", daemon=True)
        if not self._closed:
            self._thread.start()

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

    def start(self, name: str, *, parent: str, identity: tuple[bytes, int, str],
              attempt: int) -> Span:
        """Start an activation's span with derived ids; see the module docstring."""
        entity_key, seq, event_id = identity
        seed = b"%s|%d|%s|" % (self._config.run_id.encode(), seq, event_id.encode()) + entity_key
        parent_span = b""
        match = _TRACEPARENT.fullmatch(parent) if parent else None
        if match is not None and _valid_parent(match):
            trace_id = bytes.fromhex(match[2])
            parent_span = bytes.fromhex(match[3])
            sampled = bool(int(match[4], 16) & 1)
        else:
            trace_id = _digest(seed, 16)
            sampled = int.from_bytes(trace_id[8:], "big") < self._bound
        span_id = _digest(seed + b"|%d" % attempt, 8)
        if not sampled:
            return _ContextOnly(f"00-{trace_id.hex()}-{span_id.hex()}-00")
        span = _RecordingSpan(self, trace_id, span_id, parent_span, name, _INTERNAL)
        if attempt > 1:
            # The first attempt's id is computed, not stored (module docstring).
            span.links = [(trace_id, _digest(seed + b"|1", 8),
                           {"beam_agents.link": "first_attempt"})]
        return span

    def record(self, name: str, value: float, attributes: Attributes) -> None:
        """Add one sample to a ``gen_ai.client.*`` histogram; unknown names are ignored."""
        if self._histograms is not None:
            self._histograms.record(name, value, attributes)

    def buffer(self, span: SpanRecord) -> None:
        """Queue an ended span for export; a full buffer drops it, counted, never waits."""
        limit = self._config.max_queue_size
        if len(self._buffer) < limit:  # a peek: a full buffer drops without copying
            try:
                frozen = freeze(span)
            except Exception:  # a span never fails its activation
                _log.exception("a span could not be kept")
            else:
                with self._buffer_lock:
                    if len(self._buffer) < limit:
                        self._buffer.append(frozen)
                        if len(self._buffer) == _BATCH:
                            self._wake.set()
                        return
        self.dropped(1)

    def flush(self) -> None:
        """Send what is buffered, each export bounded by the export timeout."""
        if self._closed:
            return
        self._export(metrics=True)

    def shutdown(self) -> None:
        """Flush and stop the export thread; at process exit, or once per test."""
        if self._closed:
            return
        self.flush()
        self._closed = True
        self._wake.set()
        self._thread.join(timeout=self._config.export_timeout_ms / 1000)
        self._spans_out.shutdown()  # type: ignore[no-untyped-call]
        if self._metrics_out is not None:
            self._metrics_out.shutdown()
        with self._lock:
            if self._shared.get(self._config) is self:
                del self._shared[self._config]

    def _run(self) -> None:
        """Send full batches as they fill, the rest every schedule delay, metrics every interval.

        A wake for a full batch sends full batches only. Draining the buffer
        to the end instead chased the activations: each send let a few more
        spans in, and the next send took those, so B14's 3,600 spans went out
        in 16-26 requests where 8 do, at about 0.6 ms of CPU a request
        whatever its size (docs/benchmarks.md, B14).
        """
        delay = self._config.schedule_delay_ms / 1000
        interval = self._config.metrics_interval_ms / 1000
        next_metrics = time.monotonic() + interval
        next_partial = time.monotonic() + delay
        while not self._closed:
            self._wake.wait(max(0.0, min(next_partial, next_metrics) - time.monotonic()))
            self._wake.clear()
            if self._closed:
                return
            now = time.monotonic()
            due = now >= next_metrics
            if due:
                next_metrics = now + interval
            partial = now >= next_partial
            if partial:
                next_partial = now + delay
            try:
                self._export(metrics=due, partial=partial)
            except Exception:  # the thread must outlive an exporter's bug
                _log.exception("OTLP export raised")

    def _export(self, *, metrics: bool, partial: bool = True) -> None:
        """Send the buffer's full batches; with `partial`, all it held when this began."""
        with self._export_lock:
            with self._buffer_lock:
                left = len(self._buffer) if partial else 0
            while True:
                with self._buffer_lock:
                    take = min(left, _BATCH) or (_BATCH if len(self._buffer) >= _BATCH else 0)
                    batch = self._buffer[:take]
                    del self._buffer[:take]
                if not batch:
                    break
                left = max(0, left - len(batch))
                self._send_spans(batch)
            if metrics and self._histograms is not None and self._metrics_out is not None:
                data = self._histograms.data()
                if data is not None and self._metrics_out.export(
                        data, timeout_millis=self._config.export_timeout_ms) \
                        is not MetricExportResult.SUCCESS:
                    _log.debug("GenAI metrics were not exported")

    def _send_spans(self, batch: list[Frozen]) -> None:
        try:
            sent = self._send(encode_request(self._resource_scope,
                                             [encode_frozen(span) for span in batch])).success
        except Exception:  # an encoder or sender bug drops the batch, never the thread
            _log.exception("span export raised")
            sent = False
        if sent:
            with self._counts_lock:
                self.spans_exported += len(batch)
        else:
            self.dropped(len(batch))


def _valid_parent(match: re.Match[str]) -> bool:
    """W3C rules the SDK's propagator applies: no version ff, no all-zero id."""
    version, trace_id, span_id, _, rest = match.groups()
    return (version != "ff" and not (version == "00" and rest)
            and trace_id != "0" * 32 and span_id != "0" * 16)


def _digest(seed: bytes, size: int) -> bytes:
    value = hashlib.blake2b(seed, digest_size=size).digest()
    return value if any(value) else value[:-1] + b"\x01"  # an all-zero id is invalid


def _random_span_id() -> bytes:
    return (random.getrandbits(64) or 1).to_bytes(8, "big")
