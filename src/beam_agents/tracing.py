"""The tracing port: how the pure core describes an activation as spans, without OpenTelemetry.

The core names what happened in the OpenTelemetry GenAI vocabulary
(``invoke_agent``, ``chat``, ``execute_tool``, ``gen_ai.*`` attributes) and
hands it to a `Tracer`; the exporter lives at the edge
(`beam_agents.otel.OtelTracer`), so ``memory/``, ``model/`` and ``runtime/``
import no OpenTelemetry. `NOOP_TRACER`, the default, costs a method call per
span; `RecordingTracer` keeps finished spans in memory for tests.

One activation is one ``invoke_agent`` span (`ActivationTrace`); each model
call is a ``chat`` child (`CallTrace`), and a tool call is one more child,
``execute_tool`` (`ActivationTrace.tool`). A call served from the replay
cache or the journal is a ``chat`` span marked ``beam_agents.call.replayed``
whose tokens are reported as replayed, never as ``gen_ai.usage.*`` (which
readers sum as spend): invariant 12. Admission waits and 429s are events on
the call's span, with the time waited.

Span ids: `Tracer.start` takes the activation's identity (entity key, seq,
event id) and its attempt, so an exporter can derive the ids instead of
drawing them: every attempt of one event lands in one trace, and a retry
after a suspension links to its first attempt without keeping anything in
keyed state.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from beam_agents.errors import ConfigError

__all__ = [
    "NOOP_SPAN",
    "NOOP_TRACER",
    "TRACEPARENT",
    "ActivationTrace",
    "AttributeValue",
    "CallTrace",
    "NoopTracer",
    "RecordedSpan",
    "RecordingTracer",
    "Span",
    "Tracer",
    "TracingConfig",
    "provider_system",
]

AttributeValue = str | bool | int | float | Sequence[str]
Attributes = Mapping[str, AttributeValue]

#: The name a W3C trace context travels under: an event attribute, a JSON
#: line's field, a Pub/Sub attribute, a Kafka header.
TRACEPARENT = "traceparent"

#: ``gen_ai.provider.name`` of each ``--model_provider`` (GenAI semantic conventions).
_PROVIDERS = {"gemini": "gcp.gemini", "openai": "openai", "local": "beam_agents.local"}


def provider_system(provider: str) -> str:
    """The ``gen_ai.provider.name`` value for a ``ModelConfig.provider``."""
    return _PROVIDERS.get(provider, provider)


@runtime_checkable
class Span(Protocol):
    """One span in progress; every method is cheap, thread-safe and never raises.

    A span that is not recording (tracing off, or not sampled) still has a
    `traceparent` when an exporter is configured, so the context travels on
    with its sampled flag cleared; callers skip building attributes for it.
    """

    @property
    def recording(self) -> bool:
        """Whether attributes and events set on this span are kept."""

    @property
    def traceparent(self) -> str:
        """This span's W3C ``traceparent`` header, or "" when there is no context."""

    def child(self, name: str, *, client: bool = False) -> Span:
        """Start a child span now (``client``: a call out of the process, like a model call)."""

    def set_attributes(self, attributes: Attributes) -> None:
        """Set attributes on the span."""

    def add_event(self, name: str, attributes: Attributes) -> None:
        """Add a timestamped event (an admission wait, a 429) to the span."""

    def end(self, *, error_type: str | None = None) -> None:
        """End the span, as failed with ``error.type`` when `error_type` is given."""


@runtime_checkable
class Tracer(Protocol):
    """Starts activation spans and records GenAI metrics; must never raise or block.

    An exporter behind it buffers and sends in the background: an unreachable
    endpoint drops spans (and counts them), it never slows an activation.
    """

    @property
    def capture_content(self) -> bool:
        """Whether prompts and responses go on spans (they may be personal data)."""

    @property
    def clear_keys(self) -> bool:
        """Whether the entity key itself goes on spans, instead of its sha256."""

    def start(self, name: str, *, parent: str, identity: tuple[bytes, int, str],
              attempt: int) -> Span:
        """Start an activation's span.

        Args:
            name: The span name (``invoke_agent {agent}``).
            parent: The producer's ``traceparent``, or "".
            identity: ``(entity_key, seq, event_id)``: what every attempt of
                one activation shares.
            attempt: The attempt, from 1; a later attempt links to the first.
        """

    def record(self, name: str, value: float, attributes: Attributes) -> None:
        """Add one sample to the histogram `name` (``gen_ai.client.token.usage``, ...)."""

    def flush(self) -> None:
        """Send what is buffered, bounded by the exporter's timeout; the host calls it on close."""


class _NoopSpan:
    """A span that keeps nothing and carries no context."""

    __slots__ = ()
    recording = False
    traceparent = ""

    def child(self, name: str, *, client: bool = False) -> Span:
        return self

    def set_attributes(self, attributes: Attributes) -> None:
        """Do nothing."""

    def add_event(self, name: str, attributes: Attributes) -> None:
        """Do nothing."""

    def end(self, *, error_type: str | None = None) -> None:
        """Do nothing."""


NOOP_SPAN: Span = _NoopSpan()


class NoopTracer:
    """Tracing off: no span is kept, no context is made, nothing is recorded."""

    capture_content = False
    clear_keys = False

    def start(self, name: str, *, parent: str, identity: tuple[bytes, int, str],
              attempt: int) -> Span:
        """Return `NOOP_SPAN`."""
        return NOOP_SPAN

    def record(self, name: str, value: float, attributes: Attributes) -> None:
        """Do nothing."""

    def flush(self) -> None:
        """Do nothing."""


NOOP_TRACER: Tracer = NoopTracer()


def _key_attributes(entity_key: bytes, clear: bool) -> dict[str, AttributeValue]:
    # The key may be personal data (a user id): its sha256 by default, the
    # same digest Pub/Sub attributes carry for an oversize key.
    digest = hashlib.sha256(entity_key).hexdigest()
    out: dict[str, AttributeValue] = {"beam_agents.entity.key_sha256": digest,
                                      "gen_ai.conversation.id": digest}
    if clear:
        out["beam_agents.entity.key"] = entity_key.decode("utf-8", "backslashreplace")
    return out


class ActivationTrace:
    """One activation's ``invoke_agent`` span, and the GenAI vocabulary of its children.

    Built by the runtime per attempt; the model facade opens a `CallTrace` per
    call through it. Totals of paid and replayed tokens go on the activation's
    span when it ends.
    """

    __slots__ = ("_model", "_provider", "_replayed_tokens", "_tokens_in", "_tokens_out",
                 "span", "tracer")

    def __init__(self, tracer: Tracer, span: Span, *, provider: str, model_id: str) -> None:
        self.tracer = tracer
        self.span = span
        self._provider = provider
        self._model = model_id
        self._tokens_in = 0
        self._tokens_out = 0
        self._replayed_tokens = 0

    @classmethod
    def start(cls, tracer: Tracer, *, agent: str, agent_version: int, provider: str,
              model_id: str, entity_key: bytes, seq: int, event_id: str, attempt: int,
              parent: str) -> ActivationTrace:
        """Start the span of one attempt at one activation."""
        span = tracer.start(f"invoke_agent {agent}", parent=parent,
                            identity=(entity_key, seq, event_id), attempt=attempt)
        if span.recording:
            attributes: dict[str, AttributeValue] = {
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent,
                "gen_ai.agent.version": str(agent_version),
                "gen_ai.provider.name": provider, "gen_ai.request.model": model_id,
                "beam_agents.seq": seq, "beam_agents.event.id": event_id,
                "beam_agents.attempt": attempt,
                **_key_attributes(entity_key, tracer.clear_keys)}
            span.set_attributes(attributes)
        return cls(tracer, span, provider=provider, model_id=model_id)

    @property
    def traceparent(self) -> str:
        """The context intents and dead letters carry onward."""
        return self.span.traceparent

    def base_attributes(self, operation: str) -> dict[str, AttributeValue]:
        """The attributes every span and histogram of an operation carries."""
        return {"gen_ai.operation.name": operation, "gen_ai.provider.name": self._provider,
                "gen_ai.request.model": self._model}

    def replayed(self, request: Any, response: Any, *, source: Literal["cache", "journal"],
                 cache_key: str) -> None:
        """A call answered from the replay cache or the journal: nothing was paid (invariant 12)."""
        tokens = response.tokens_in + response.tokens_out
        self._replayed_tokens += tokens
        span = self.span.child(f"chat {self._model}", client=True)
        if span.recording:
            attributes = self.base_attributes("chat")
            attributes.update({
                "gen_ai.response.model": response.model_id,
                "gen_ai.response.finish_reasons": (response.finish_reason or "unknown",),
                "beam_agents.call.replayed": True, "beam_agents.call.source": source,
                "beam_agents.call.cache_key": cache_key,
                "beam_agents.usage.replayed_input_tokens": response.tokens_in,
                "beam_agents.usage.replayed_output_tokens": response.tokens_out})
            if self.tracer.capture_content:
                attributes.update(_content(request, response))
            span.set_attributes(attributes)
        span.end()

    def call(self, request: Any, *, cache_key: str) -> CallTrace:
        """A call that goes to the provider; end it with `CallTrace.end`."""
        span = self.span.child(f"chat {self._model}", client=True)
        if span.recording:
            attributes = self.base_attributes("chat")
            attributes.update({"beam_agents.call.replayed": False,
                               "beam_agents.call.source": "provider",
                               "beam_agents.call.cache_key": cache_key})
            attributes.update(_sampling(request))
            span.set_attributes(attributes)
        return CallTrace(self, span, request)

    def tool(self, name: str, *, call_id: str = "", replayed: bool = False) -> CallTrace:
        """A tool call, one more child (``execute_tool {name}``); end it with `end_tool`."""
        span = self.span.child(f"execute_tool {name}")
        if span.recording:
            span.set_attributes({"gen_ai.operation.name": "execute_tool",
                                 "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id,
                                 "gen_ai.tool.type": "function",
                                 "beam_agents.call.replayed": replayed})
        return CallTrace(self, span, None)

    def event(self, name: str, attributes: Attributes) -> None:
        """An event on the activation's own span (a suspension's reason, a divergence)."""
        if self.span.recording:
            self.span.add_event(name, attributes)

    def add_paid(self, tokens_in: int, tokens_out: int) -> None:
        """Add a paid call's tokens to the activation's totals."""
        self._tokens_in += tokens_in
        self._tokens_out += tokens_out

    def end(self, outcome: Literal["committed", "suspended", "dead_lettered"], *,
            intents: int = 0, stage: str = "", error_type: str | None = None,
            retriable: bool = False) -> None:
        """End the activation's span with its outcome and its token totals."""
        span = self.span
        if span.recording:
            attributes: dict[str, AttributeValue] = {
                "beam_agents.outcome": outcome,
                "gen_ai.usage.input_tokens": self._tokens_in,
                "gen_ai.usage.output_tokens": self._tokens_out,
                "beam_agents.usage.replayed_tokens": self._replayed_tokens}
            if outcome == "committed":
                attributes["beam_agents.intents"] = intents
            else:
                attributes["beam_agents.error.stage"] = stage
                attributes["beam_agents.error.retriable"] = retriable
            span.set_attributes(attributes)
        # A suspension is not an error of the trace: the retry goes on.
        span.end(error_type=error_type if outcome == "dead_lettered" else None)


class CallTrace:
    """One call's span: admission waits and 429s as events, the answer as attributes."""

    __slots__ = ("_activation", "_request", "span")

    def __init__(self, activation: ActivationTrace, span: Span, request: Any) -> None:
        self._activation = activation
        self.span = span
        self._request = request

    def waited(self, seconds: float) -> None:
        """The call waited `seconds` for the provider's admission (its rate, a Retry-After)."""
        if self.span.recording:
            self.span.add_event("beam_agents.admission.wait",
                                {"beam_agents.wait_ms": round(seconds * 1000, 3)})

    def rate_limited(self, retry_after_s: float | None) -> None:
        """The provider answered 429; the call waits out the pause and asks again (invariant 11)."""
        if self.span.recording:
            attributes: dict[str, AttributeValue] = {"http.response.status_code": 429}
            if retry_after_s is not None:
                attributes["beam_agents.retry_after_ms"] = round(retry_after_s * 1000)
            self.span.add_event("beam_agents.rate_limited", attributes)

    def held_back(self) -> None:
        """A 429 arrived after admission: the call was never sent, and asks again."""
        if self.span.recording:
            self.span.add_event("beam_agents.held_back", {})

    def end(self, response: Any = None, *, error_type: str | None = None,
            duration_s: float | None = None) -> None:
        """End a model call with its response (tokens paid), or as failed with `error_type`."""
        activation = self._activation
        if activation.tracer is NOOP_TRACER:
            return  # tracing off: no span, no histogram, so no attributes to build
        base = activation.base_attributes("chat")
        if response is not None:
            activation.add_paid(response.tokens_in, response.tokens_out)
            if self.span.recording:
                attributes: dict[str, AttributeValue] = {
                    "gen_ai.response.model": response.model_id,
                    "gen_ai.response.finish_reasons": (response.finish_reason or "unknown",),
                    "gen_ai.usage.input_tokens": response.tokens_in,
                    "gen_ai.usage.output_tokens": response.tokens_out}
                response_id = getattr(response, "response_id", None)
                if response_id:
                    attributes["gen_ai.response.id"] = response_id
                if activation.tracer.capture_content:
                    attributes.update(_content(self._request, response))
                self.span.set_attributes(attributes)
            tracer = activation.tracer
            tracer.record("gen_ai.client.token.usage", response.tokens_in,
                          {**base, "gen_ai.token.type": "input",
                           "gen_ai.response.model": response.model_id})
            tracer.record("gen_ai.client.token.usage", response.tokens_out,
                          {**base, "gen_ai.token.type": "output",
                           "gen_ai.response.model": response.model_id})
        if duration_s is not None:
            labels = dict(base) if error_type is None else {**base, "error.type": error_type}
            activation.tracer.record("gen_ai.client.operation.duration", duration_s, labels)
        self.span.end(error_type=error_type)

    def event(self, name: str) -> None:
        """An event on this call's span (a tool call reconciled instead of run)."""
        if self.span.recording:
            self.span.add_event(name, {})

    def end_tool(self, result: Any = None, *, error_type: str | None = None) -> None:
        """End a tool call, with its result when content capture is on."""
        if self.span.recording and result is not None and self._activation.tracer.capture_content:
            self.span.set_attributes({"gen_ai.tool.call.result": _text(result)})
        self.span.end(error_type=error_type)


def _sampling(request: Any) -> dict[str, AttributeValue]:
    """The request's sampling parameters under their ``gen_ai.request.*`` names."""
    out: dict[str, AttributeValue] = {}
    for key, value in dict(request.sampling).items():
        if key == "stop":
            out["gen_ai.request.stop_sequences"] = (value,) if isinstance(value, str) \
                else tuple(str(item) for item in value)
        elif isinstance(value, bool | int | float):
            out[f"gen_ai.request.{key}"] = value
    return out


def _content(request: Any, response: Any) -> dict[str, AttributeValue]:
    """Prompt and answer, as the conventions' opt-in ``gen_ai.*.messages`` JSON."""
    return {"gen_ai.input.messages": _text(list(request.messages)),
            "gen_ai.output.messages": _text([{"role": "assistant", "content": response.text,
                                              "finish_reason": response.finish_reason}])}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str,
                                                           ensure_ascii=False)


@dataclass(slots=True)
class RecordedSpan:
    """A finished span as `RecordingTracer` keeps it."""

    name: str
    parent: RecordedSpan | None
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    events: list[tuple[str, dict[str, AttributeValue]]] = field(default_factory=list)
    error_type: str | None = None
    ended: bool = False
    client: bool = False
    link_attempt: int | None = None
    traceparent: str = ""


class _RecordingSpan:
    def __init__(self, tracer: RecordingTracer, record: RecordedSpan) -> None:
        self._tracer = tracer
        self.record = record
        self.recording = True
        self.traceparent = record.traceparent

    def child(self, name: str, *, client: bool = False) -> Span:
        record = RecordedSpan(name=name, parent=self.record, client=client,
                              traceparent=self.traceparent)
        return _RecordingSpan(self._tracer, record)

    def set_attributes(self, attributes: Attributes) -> None:
        self.record.attributes.update(attributes)

    def add_event(self, name: str, attributes: Attributes) -> None:
        self.record.events.append((name, dict(attributes)))

    def end(self, *, error_type: str | None = None) -> None:
        self.record.error_type = error_type
        self.record.ended = True
        self._tracer.spans.append(self.record)


class RecordingTracer:
    """Keeps finished spans and histogram samples in memory, for tests of agents and hosts."""

    def __init__(self, *, capture_content: bool = False, clear_keys: bool = False) -> None:
        self.capture_content = capture_content
        self.clear_keys = clear_keys
        self.spans: list[RecordedSpan] = []
        self.samples: list[tuple[str, float, dict[str, AttributeValue]]] = []
        self.flushes = 0

    def start(self, name: str, *, parent: str, identity: tuple[bytes, int, str],
              attempt: int) -> Span:
        """Start a recorded activation span; its `traceparent` names its identity and attempt."""
        entity_key, seq, event_id = identity
        digest = hashlib.sha256(b"%d|%s|%s|%d" % (seq, event_id.encode(), entity_key,
                                                  attempt)).hexdigest()
        record = RecordedSpan(name=name, parent=None,
                              link_attempt=1 if attempt > 1 else None,
                              traceparent=f"00-{digest[:32]}-{digest[32:48]}-01")
        if parent:
            record.attributes["parent.traceparent"] = parent
        return _RecordingSpan(self, record)

    def record(self, name: str, value: float, attributes: Attributes) -> None:
        """Keep one histogram sample."""
        self.samples.append((name, value, dict(attributes)))

    def flush(self) -> None:
        """Count the call."""
        self.flushes += 1

    def named(self, prefix: str) -> list[RecordedSpan]:
        """The finished spans whose name starts with `prefix`, in the order they ended."""
        return [span for span in self.spans if span.name.startswith(prefix)]


@dataclass(frozen=True, slots=True, kw_only=True)
class TracingConfig:
    """Where and how spans and GenAI metrics are exported; picklable, holds no client.

    Built by the entry points from ``--otel_*`` flags and the standard
    ``OTEL_*`` variables (`beam_agents.hosting`); the library reads neither.

    Attributes:
        endpoint: The OTLP/HTTP base URL (``http://127.0.0.1:4318``); traces
            go to ``/v1/traces`` and metrics to ``/v1/metrics`` under it.
        traces_endpoint: A full URL for traces instead (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``).
        metrics_endpoint: A full URL for metrics instead.
        export_metrics: Whether ``gen_ai.client.*`` histograms are exported.
        headers: Extra HTTP headers on every export (``OTEL_EXPORTER_OTLP_HEADERS``).
        sample_ratio: The share of activations traced, in [0, 1]; an
            activation whose producer's context is sampled follows it.
        capture_content: Put prompts and answers on spans (personal data!).
        clear_keys: Put the entity key itself on spans, not only its sha256.
        service_name: ``service.name`` of the resource.
        resource_attributes: More resource attributes (``OTEL_RESOURCE_ATTRIBUTES``).
        run_id: Seeds the span ids of activations, so every attempt of one
            event lands in one trace and a retry links to its first attempt;
            one per job launch, shared by its workers.
        max_queue_size: Spans a worker buffers for export; past it they are
            dropped and counted, never waited for.
        export_timeout_ms: How long one export may take, retries included.
        schedule_delay_ms: How long spans wait in the buffer before a send.
        metrics_interval_ms: How often metrics are exported.
    """

    endpoint: str
    traces_endpoint: str | None = None
    metrics_endpoint: str | None = None
    export_metrics: bool = True
    headers: tuple[tuple[str, str], ...] = ()
    sample_ratio: float = 1.0
    capture_content: bool = False
    clear_keys: bool = False
    service_name: str = "beam-agents"
    resource_attributes: tuple[tuple[str, str], ...] = ()
    run_id: str = ""
    max_queue_size: int = 2048
    export_timeout_ms: int = 10_000
    schedule_delay_ms: int = 1_000
    metrics_interval_ms: int = 60_000

    def __post_init__(self) -> None:
        for name in ("endpoint", "traces_endpoint", "metrics_endpoint"):
            value = getattr(self, name)
            if value is not None and not str(value).startswith(("http://", "https://")):
                raise ConfigError(f"TracingConfig.{name} must be an http:// or https:// URL, "
                                  f"got {value!r}", field=f"otel_exporter_otlp_{name}")
        if isinstance(self.sample_ratio, bool) or not isinstance(self.sample_ratio, int | float) \
                or not 0.0 <= self.sample_ratio <= 1.0:
            raise ConfigError(f"TracingConfig.sample_ratio must be a number in [0, 1], got "
                              f"{self.sample_ratio!r}", field="otel_sample_ratio")
        for name, low in (("max_queue_size", 1), ("export_timeout_ms", 1),
                          ("schedule_delay_ms", 1), ("metrics_interval_ms", 100)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"TracingConfig.{name} must be an int >= {low}, got {value!r}",
                                  field=name)

    def url(self, signal: Literal["traces", "metrics"]) -> str:
        """The URL one signal is exported to."""
        full = self.traces_endpoint if signal == "traces" else self.metrics_endpoint
        return full or f"{self.endpoint.rstrip('/')}/v1/{signal}"
