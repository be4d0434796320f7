"""The OpenTelemetry edge: the `Tracer` port exported over OTLP (the ``otel`` extra).

The core describes activations in the GenAI vocabulary through
`beam_agents.tracing`; only this package imports OpenTelemetry. Hosts reach
it through `beam_agents.hosting.start_runtime`, when ``AgentConfig.tracing``
is set; docs/operations.md, "Traces".
"""

from beam_agents.otel._tracer import OtelTracer

__all__ = ["OtelTracer"]
