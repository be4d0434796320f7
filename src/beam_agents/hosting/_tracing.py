"""``--otel_*`` flags and the standard ``OTEL_*`` variables become a `TracingConfig`.

The library reads no environment (STYLE); the entry points (``beam-agents
run``, the Dataflow and Flink templates) call `otel_flags_from_env` once and
put what it returns before their own flags, so a flag given on the command
line wins over its variable. A variable read on the launcher reaches every
worker inside the pickled config: a Dataflow worker does not share the
launcher's environment.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

from beam_agents.errors import ConfigError
from beam_agents.tracing import TracingConfig

__all__ = ["otel_flags_from_env", "tracing_config_from_flags"]

#: Each standard variable the entry points map, and the flag it sets.
_FROM_ENV = (
    ("OTEL_EXPORTER_OTLP_ENDPOINT", "otel_exporter_otlp_endpoint"),
    ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "otel_exporter_otlp_traces_endpoint"),
    ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "otel_exporter_otlp_metrics_endpoint"),
    ("OTEL_EXPORTER_OTLP_HEADERS", "otel_exporter_otlp_headers"),
    ("OTEL_METRICS_EXPORTER", "otel_metrics_exporter"),
    ("OTEL_SERVICE_NAME", "otel_service_name"),
    ("OTEL_RESOURCE_ATTRIBUTES", "otel_resource_attributes"),
)
#: The samplers whose argument is a ratio; any other OTEL_TRACES_SAMPLER is refused.
_RATIO_SAMPLERS = {"traceidratio", "parentbased_traceidratio"}
_FIXED_SAMPLERS = {"always_on": "1", "parentbased_always_on": "1",
                   "always_off": "0", "parentbased_always_off": "0"}


def otel_flags_from_env(environ: Mapping[str, str]) -> list[str]:
    """The ``--otel_*`` flags the standard ``OTEL_*`` variables in `environ` stand for.

    ``OTEL_SDK_DISABLED=true`` turns tracing off whatever else is set;
    ``OTEL_TRACES_SAMPLER`` (with ``OTEL_TRACES_SAMPLER_ARG``) sets the ratio.

    Raises:
        ConfigError: ``OTEL_TRACES_SAMPLER`` names a sampler other than the
            ratio and always-on/off ones.
    """
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    argv: list[str] = []
    for variable, flag in _FROM_ENV:
        value = environ.get(variable, "").strip()
        if value:
            argv.append(f"--{flag}={value}")
    sampler = environ.get("OTEL_TRACES_SAMPLER", "").strip().lower()
    ratio = environ.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
    if sampler in _FIXED_SAMPLERS:
        argv.append(f"--otel_sample_ratio={_FIXED_SAMPLERS[sampler]}")
    elif sampler in _RATIO_SAMPLERS or (not sampler and ratio):
        if ratio:
            argv.append(f"--otel_sample_ratio={ratio}")
    elif sampler:
        raise ConfigError(f"OTEL_TRACES_SAMPLER={sampler} is not supported; use "
                          "parentbased_traceidratio with OTEL_TRACES_SAMPLER_ARG, or "
                          "always_on/always_off", field="OTEL_TRACES_SAMPLER")
    return argv


def _pairs(flag: str, text: str | None) -> tuple[tuple[str, str], ...]:
    """``k=v,k2=v2`` (the OTEL_* list form, values percent-decoded) as pairs."""
    from urllib.parse import unquote  # noqa: PLC0415 - only when given

    out = []
    for item in (text or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--{flag} must be key=value,key=value, got {item!r}", field=flag)
        out.append((unquote(key.strip()), unquote(value.strip())))
    return tuple(out)


def _choice(flag: str, text: str | None, choices: tuple[str, ...]) -> str:
    value = (text or choices[0]).strip().lower()
    if value not in choices:
        raise ConfigError(f"--{flag} must be one of {', '.join(choices)}, got {text!r}",
                          field=flag)
    return value


def tracing_config_from_flags(given: Callable[[str], Any], *,
                              new_run_id: Callable[[], str] = lambda: uuid.uuid4().hex,
                              ) -> TracingConfig | None:
    """The `TracingConfig` the ``--otel_*`` flags describe; None without an endpoint.

    Raises:
        ConfigError: a value is malformed or out of range; names the flag.
    """
    endpoint = given("otel_exporter_otlp_endpoint")
    traces = given("otel_exporter_otlp_traces_endpoint")
    if not endpoint and not traces:
        return None
    ratio_text = given("otel_sample_ratio")
    try:
        ratio = 1.0 if ratio_text is None else float(str(ratio_text).strip())
    except ValueError:
        raise ConfigError(f"--otel_sample_ratio must be a number from 0 to 1, got "
                          f"{ratio_text!r}", field="otel_sample_ratio") from None
    capture = _choice("otel_capture_content", given("otel_capture_content"),
                      ("false", "true"))
    keys = _choice("otel_entity_keys", given("otel_entity_keys"), ("hash", "clear"))
    metrics = _choice("otel_metrics_exporter", given("otel_metrics_exporter"),
                      ("otlp", "none"))
    base = endpoint or str(traces).rsplit("/v1/", 1)[0]
    return TracingConfig(
        endpoint=base, traces_endpoint=traces or None,
        metrics_endpoint=given("otel_exporter_otlp_metrics_endpoint") or None,
        export_metrics=metrics == "otlp",
        headers=_pairs("otel_exporter_otlp_headers", given("otel_exporter_otlp_headers")),
        sample_ratio=ratio, capture_content=capture == "true", clear_keys=keys == "clear",
        service_name=given("otel_service_name") or "beam-agents",
        resource_attributes=_pairs("otel_resource_attributes",
                                   given("otel_resource_attributes")),
        run_id=given("otel_run_id") or new_run_id())
