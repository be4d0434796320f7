"""Model and circuit-breaker configuration: picklable values, validated on creation.

Configs travel inside pickled DoFns, so they hold plain values and no
clients. The library never reads environment variables: an entry point maps
its options onto `ModelConfig` in one place.

An API key should not be a config value either: whatever a config holds is
pickled into every worker's DoFn or Flink function and saved with the job's
graph. So `ModelConfig` names where the key lives (a Secret Manager secret
version, or a worker environment variable) and the host reads it where the
provider is built, in ``DoFn.setup()`` / Flink ``open()``
(`beam_agents.hosting.start_runtime`).
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from beam_agents._checks import require_int
from beam_agents.errors import ConfigError

__all__ = ["API_KEY_ENV", "API_KEY_SECRET", "API_KEY_SOURCES", "PROVIDERS", "BreakerConfig",
           "LocalModelConfig", "ModelConfig"]

PROVIDERS = frozenset({"local", "gemini", "openai"})

#: A Secret Manager secret version: the project by id or number, the secret id, and the
#: version as a number, ``latest`` or an alias.
API_KEY_SECRET = re.compile(
    r"projects/(?:[a-z][a-z0-9-]{4,28}[a-z0-9]|[0-9]{1,19})"
    r"/secrets/[A-Za-z0-9_-]{1,255}/versions/(?:[1-9][0-9]{0,18}|[A-Za-z][A-Za-z0-9_-]{0,62})")
#: A portable environment variable name (POSIX: letters, digits, underscores).
API_KEY_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")
#: The `ModelConfig` fields that say where the API key comes from; at most one is set.
API_KEY_SOURCES = ("api_key_secret", "api_key_env", "api_key")
_KEY_FLAGS = "--model_api_key_secret or --model_api_key_env"

# Which optional settings each provider reads; setting one the chosen
# provider ignores is almost always a mistake, so it is rejected. The local
# provider reads `ModelConfig.local` besides; no other provider does.
_PROVIDER_FIELDS: Mapping[str, frozenset[str]] = {
    "local": frozenset(),
    "gemini": frozenset({"project", "location", *API_KEY_SOURCES, "secret_manager_endpoint",
                         "base_url", "timeout_s"}),
    "openai": frozenset({*API_KEY_SOURCES, "secret_manager_endpoint", "base_url", "timeout_s"}),
}
#: The flag of each flow-control field, for messages that name what to fix.
_FLOW_FLAGS: Mapping[str, str] = {
    "local.quota_rps": "--model_quota", "max_rps": "--model_max_rps",
    "max_tpm": "--model_max_tpm",
    "price_in_per_mtok": "--model_price_in_per_mtok",
    "price_out_per_mtok": "--model_price_out_per_mtok",
}
_DEFAULT_LOCAL_MODEL_ID = "local"
_DEFAULT_OPENAI_BASE_URL = "https://api.openai.com"


def _require_number(name: str, value: object, low: float, high: float, *,
                    low_inclusive: bool, field: str | None = None) -> None:
    bound = f"{'[' if low_inclusive else '('}{low:g}, {high:g}]"
    field = name if field is None else field
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ConfigError(f"{name} must be a number in {bound}, got {value!r}", field=field)
    too_low = value < low if low_inclusive else value <= low
    if too_low or value > high or (isinstance(value, float) and not math.isfinite(value)):
        raise ConfigError(f"{name} must be a number in {bound}, got {value!r}", field=field)


def _check_keys(cls: type, data: Mapping[str, Any], prefix: str) -> None:
    allowed = {f.name for f in fields(cls)}
    unknown = sorted(str(k) for k in data if k not in allowed)
    if unknown:
        names = ", ".join(prefix + k for k in unknown)
        raise ConfigError(
            f"unknown {cls.__name__} keys: {names}; allowed: {', '.join(sorted(allowed))}",
            field=prefix + unknown[0],
        )


#: The cap on a breaker's doubling cooldown when `BreakerConfig.max_cooldown_s` is unset.
DEFAULT_MAX_COOLDOWN_S = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class BreakerConfig:
    """When a model's circuit breaker opens, and how long it stays open.

    While the breaker is open, no new activation starts on the worker: keys
    wait, and one activation at a time is let through as the trial once the
    cooldown has passed. A short outage therefore costs a second of waiting
    and one failed trial, not a retry of every key in flight; a long one is
    probed ever less often.

    Attributes:
        failure_threshold: Consecutive retriable failures that open the breaker,
            in [1, 1000].
        cooldown_s: Seconds the breaker stays open before its first trial call,
            in (0, 3600]. Each failed trial doubles it, up to `max_cooldown_s`.
        max_cooldown_s: The longest cooldown, in (0, 3600]; at least
            `cooldown_s`. None: 30 s, or `cooldown_s` if that is longer.
    """

    failure_threshold: int = 5
    cooldown_s: float = 1.0
    max_cooldown_s: float | None = None

    def __post_init__(self) -> None:
        require_int(self.failure_threshold, name="breaker.failure_threshold", low=1, high=1000,
                    field="breaker.failure_threshold")
        _require_number("breaker.cooldown_s", self.cooldown_s, 0, 3600, low_inclusive=False)
        if self.max_cooldown_s is not None:
            _require_number("breaker.max_cooldown_s", self.max_cooldown_s, 0, 3600,
                            low_inclusive=False)
            if self.max_cooldown_s < self.cooldown_s:
                raise ConfigError(
                    f"breaker.max_cooldown_s ({self.max_cooldown_s:g}) must be at least "
                    f"breaker.cooldown_s ({self.cooldown_s:g})", field="breaker.max_cooldown_s")

    @property
    def longest_cooldown_s(self) -> float:
        """The cap on the doubling cooldown: `max_cooldown_s`, or its default."""
        if self.max_cooldown_s is not None:
            return self.max_cooldown_s
        return max(DEFAULT_MAX_COOLDOWN_S, self.cooldown_s)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> BreakerConfig:
        """Build from a plain mapping; unknown keys raise ConfigError naming each."""
        _check_keys(cls, data, "breaker.")
        return cls(**data)


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalModelConfig:
    """The local provider's simulator: scripted replies, latency, an outage, a quota.

    None of it is read by another provider, so `ModelConfig` refuses a
    setting here that differs from its default unless the provider is
    ``"local"``. For demos, tests and benchmarks: a pipeline runs offline and
    shows suspension and flow control without a real provider.

    Attributes:
        script_path: JSONL file of scripted replies (``--model_script``).
        latency_ms: Artificial latency of each call, in [0, 60000]
            (``--model_latency_ms``); for benchmarks.
        outage_first_call: With `outage_calls`, a simulated transient outage
            (``--model_outage FIRST:COUNT``): calls number
            ``outage_first_call`` to ``outage_first_call + outage_calls - 1``
            (from 1, per worker) fail as a 503 would, with
            `ProviderUnavailable`; for demos and tests of suspension. 0 means
            no outage.
        outage_calls: How many calls the simulated outage fails, in [0, 1 000 000].
        outage_ms: Instead of `outage_calls`, how long the simulated outage
            lasts from its first call (``--model_outage FIRST:DURATION``), in
            [0, 3 600 000] ms: every call in that span fails, as during a
            provider's real outage, however few calls the circuit breaker lets
            through meanwhile.
        quota_rps: A simulated account quota (``--model_quota``), in requests
            per second per worker: past it the provider answers as a 429 with
            ``Retry-After: 1`` would, with `RateLimitedError`; for demos and
            tests of flow control. None: no quota.
    """

    script_path: str | None = None
    latency_ms: int = 0
    outage_first_call: int = 0
    outage_calls: int = 0
    outage_ms: int = 0
    quota_rps: float | None = None

    def __post_init__(self) -> None:
        if self.script_path is not None and (not isinstance(self.script_path, str)
                                             or not self.script_path):
            raise ConfigError("local.script_path must be a non-empty str or None",
                              field="local.script_path")
        require_int(self.latency_ms, name="local.latency_ms", low=0, high=60_000,
                    field="local.latency_ms")
        for name in ("outage_first_call", "outage_calls"):
            require_int(getattr(self, name), name=f"local.{name}", low=0, high=1_000_000,
                        field=f"local.{name}")
        require_int(self.outage_ms, name="local.outage_ms", low=0, high=3_600_000,
                    field="local.outage_ms")
        if self.outage_ms and self.outage_calls:
            raise ConfigError("set local.outage_calls (a run of calls) or local.outage_ms (a "
                              "span of time), not both", field="local.outage_ms")
        if self.quota_rps is not None:
            _require_number(f"local.quota_rps ({_FLOW_FLAGS['local.quota_rps']})",
                            self.quota_rps, 0, 1e6, low_inclusive=False, field="local.quota_rps")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> LocalModelConfig:
        """Build from a plain mapping; unknown keys raise ConfigError naming each."""
        _check_keys(cls, data, "local.")
        return cls(**data)


#: The `LocalModelConfig` fields, which `ModelConfig.from_mapping` still reads as flat keys.
_LOCAL_FIELDS = tuple(f.name for f in fields(LocalModelConfig))


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelConfig:
    """Which model an agent calls and how; validated, picklable, client-free.

    Attributes:
        provider: ``"local"`` (deterministic, embedded default), ``"gemini"``
            (google-genai: Vertex AI when `project` is set, otherwise the
            Gemini API with `api_key`) or ``"openai"`` (any OpenAI-compatible
            ``/v1/chat/completions`` endpoint: vLLM, Ollama, OpenAI).
        model_id: The model name; part of the replay cache key. Defaults to
            ``"local"`` for the local provider, required otherwise.
        project: Google Cloud project (gemini on Vertex AI).
        location: Vertex AI region, e.g. ``"us-central1"`` (required with project).
        api_key_secret: The Secret Manager secret version holding the API key,
            ``projects/PROJECT/secrets/SECRET/versions/VERSION``; the worker
            reads it when it builds the provider, so the key never travels in
            the job graph. The config holds only this name.
        api_key_env: The name of the worker's environment variable holding the
            API key, read when the worker builds the provider (local runs,
            Flink clusters). The config holds only the name.
        api_key: The API key itself (Gemini API key, or the bearer token of an
            OpenAI-compatible server). It is pickled with the config into the
            job graph, so prefer `api_key_secret` or `api_key_env`; never
            shown in ``repr``. At most one of the three is set.
        secret_manager_endpoint: Where `api_key_secret` is read instead of
            https://secretmanager.googleapis.com: a Private Service Connect or
            regional endpoint (``https://...``, with application default
            credentials), or a local Secret Manager peer (``http://...``,
            reached without credentials, so none leave the machine).
        base_url: Endpoint root without ``/v1`` (openai; defaults to
            https://api.openai.com), or an endpoint override (gemini). A
            trailing ``/v1`` or ``/`` is dropped.
        timeout_s: Per-request timeout in seconds, in (0, 600].
        max_rps: Requests per second this worker sends the provider at most
            (``--model_max_rps``), in (0, 1 000 000]; set it to the quota
            divided by the workers. None: learned from the provider's 429s.
            Either way a 429's Retry-After pauses the worker (invariant 11).
        max_tpm: Tokens per minute this worker sends at most
            (``--model_max_tpm``), estimated from each request and corrected
            by the usage the provider reports; in [1, 10**12]. None: no limit.
        price_in_per_mtok: Price of a million prompt tokens
            (``--model_price_in_per_mtok``), in [0, 1 000 000]; with it the
            summary estimates the spend. None: no estimate.
        price_out_per_mtok: Price of a million completion tokens
            (``--model_price_out_per_mtok``), likewise.
        breaker: The model's circuit-breaker settings.
        local: The local provider's simulator (script, latency, outage,
            quota); left at its defaults for any other provider.
    """

    provider: str = "local"
    model_id: str = ""
    project: str | None = None
    location: str | None = None
    api_key_secret: str | None = None
    api_key_env: str | None = None
    api_key: str | None = field(default=None, repr=False)
    secret_manager_endpoint: str | None = None
    base_url: str | None = None
    timeout_s: float = 60.0
    max_rps: float | None = None
    max_tpm: int | None = None
    price_in_per_mtok: float | None = None
    price_out_per_mtok: float | None = None
    breaker: BreakerConfig = field(default_factory=BreakerConfig)
    local: LocalModelConfig = field(default_factory=LocalModelConfig)

    def __post_init__(self) -> None:
        if self.provider not in PROVIDERS:
            raise ConfigError(f"provider must be one of {sorted(PROVIDERS)}, got "
                              f"{self.provider!r}", field="provider")
        for name in ("project", "location", *API_KEY_SOURCES, "secret_manager_endpoint",
                     "base_url"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ConfigError(f"{name} must be a non-empty str or None", field=name)
        if not isinstance(self.model_id, str):
            raise ConfigError("model_id must be a str", field="model_id")
        if not self.model_id:
            if self.provider != "local":
                raise ConfigError(f"model_id is required for provider {self.provider!r}",
                                  field="model_id")
            object.__setattr__(self, "model_id", _DEFAULT_LOCAL_MODEL_ID)
        _require_number("timeout_s", self.timeout_s, 0, 600, low_inclusive=False)
        if not isinstance(self.breaker, BreakerConfig):
            raise ConfigError("breaker must be a BreakerConfig", field="breaker")
        if not isinstance(self.local, LocalModelConfig):
            raise ConfigError("local must be a LocalModelConfig", field="local")
        self._check_flow_fields()
        self._check_provider_fields()
        self._check_key_source()
        if self.base_url is not None:
            object.__setattr__(self, "base_url", _normalise_base_url(self.base_url))
        elif self.provider == "openai":
            object.__setattr__(self, "base_url", _DEFAULT_OPENAI_BASE_URL)

    def __setstate__(self, state: list[Any]) -> None:
        # A config pickled before `local` existed (into a job graph or a
        # template) holds the six local settings flat, after timeout_s; they are
        # read into `local`, so that graph still loads.
        names = [f.name for f in fields(self)]
        if len(state) == len(names) - 1 + len(_LOCAL_FIELDS):
            at = names.index("timeout_s") + 1
            flat = state[at:at + len(_LOCAL_FIELDS)]
            local = LocalModelConfig(**dict(zip(_LOCAL_FIELDS, flat, strict=True)))
            state = [*state[:at], *state[at + len(_LOCAL_FIELDS):], local]
        for name, value in zip(names, state, strict=True):
            object.__setattr__(self, name, value)

    def _check_flow_fields(self) -> None:
        # The message names the flag, so a bad value on the command line (or
        # in a JSON config) reads as the thing to fix (invariant 11's knobs).
        for name, high, low_inclusive in (("max_rps", 1e6, False),
                                          ("price_in_per_mtok", 1e6, True),
                                          ("price_out_per_mtok", 1e6, True)):
            value = getattr(self, name)
            if value is not None:
                _require_number(f"{name} ({_FLOW_FLAGS[name]})", value, 0, high,
                                low_inclusive=low_inclusive, field=name)
        if self.max_tpm is not None:
            require_int(self.max_tpm, name=f"max_tpm ({_FLOW_FLAGS['max_tpm']})", low=1,
                        high=10**12, field="max_tpm")

    def _check_provider_fields(self) -> None:
        defaults = {f.name: f.default for f in fields(self)}
        allowed = _PROVIDER_FIELDS[self.provider]
        for name in ("project", "location", *API_KEY_SOURCES, "secret_manager_endpoint",
                     "base_url", "timeout_s"):
            if name not in allowed and getattr(self, name) != defaults[name]:
                raise ConfigError(f"{name} is not used by provider {self.provider!r}; "
                                  f"remove it (that provider reads: {sorted(allowed)})",
                                  field=name)
        changed = [f.name for f in fields(self.local)
                   if getattr(self.local, f.name) != f.default]
        if self.provider != "local" and changed:
            raise ConfigError(f"local.{changed[0]} is not used by provider {self.provider!r}: "
                              "the local settings simulate a model; remove it",
                              field=f"local.{changed[0]}")
        if self.provider == "gemini":
            keyed = [name for name in API_KEY_SOURCES if getattr(self, name) is not None]
            if self.project is not None:
                if self.location is None:
                    raise ConfigError("location is required with project (Vertex AI), e.g. "
                                      "'us-central1'", field="location")
                if keyed:
                    raise ConfigError(f"set either project+location (Vertex AI, application "
                                      f"default credentials) or {keyed[0]}, not both",
                                      field=keyed[0])
            elif not keyed:
                raise ConfigError(f"gemini needs project+location (Vertex AI) or an API key "
                                  f"(Gemini API): {_KEY_FLAGS}", field="project")
            elif self.location is not None:
                raise ConfigError("location is only used with project (Vertex AI)",
                                  field="location")

    def _check_key_source(self) -> None:
        # A rejected value is never echoed: a key pasted into the wrong flag
        # must not end up in a log or a launcher's error page.
        keyed = [name for name in API_KEY_SOURCES if getattr(self, name) is not None]
        if len(keyed) > 1:
            raise ConfigError(f"set one API key source, not {' and '.join(keyed)}: {_KEY_FLAGS} "
                              "(read on the worker), or api_key", field=keyed[1])
        if self.api_key_secret is not None and not API_KEY_SECRET.fullmatch(self.api_key_secret):
            raise ConfigError(
                "api_key_secret (--model_api_key_secret) must name a Secret Manager secret "
                "version, projects/PROJECT/secrets/SECRET/versions/VERSION, VERSION a number, "
                f"'latest' or an alias; the value given ({len(self.api_key_secret)} characters) "
                "is not shown, in case it is the key itself", field="api_key_secret")
        if self.api_key_env is not None and not API_KEY_ENV.fullmatch(self.api_key_env):
            raise ConfigError(
                "api_key_env (--model_api_key_env) must be an environment variable name: "
                "letters, digits and underscores, not starting with a digit; the value given "
                f"({len(self.api_key_env)} characters) is not shown, in case it is the key "
                "itself", field="api_key_env")
        endpoint = self.secret_manager_endpoint
        if endpoint is not None:
            if self.api_key_secret is None:
                raise ConfigError("secret_manager_endpoint (--secret_manager_endpoint) is only "
                                  "used with api_key_secret (--model_api_key_secret)",
                                  field="secret_manager_endpoint")
            if not endpoint.startswith(("http://", "https://")) or not endpoint.split("://")[1]:
                raise ConfigError(f"secret_manager_endpoint must start with http:// or https://, "
                                  f"got {endpoint!r}", field="secret_manager_endpoint")
            object.__setattr__(self, "secret_manager_endpoint", endpoint.rstrip("/"))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> ModelConfig:
        """Build from a plain mapping (``breaker`` and ``local`` may be nested mappings).

        The local provider's settings at the top level (``latency_ms`` beside
        ``provider``), as configs written before `LocalModelConfig` have them,
        are still read, each with a DeprecationWarning naming its new key.

        Raises:
            ConfigError: On unknown keys (each one named), a local setting given
                both flat and under ``local``, or invalid values.
        """
        values = dict(data)
        flat = {name: values.pop(name) for name in _LOCAL_FIELDS if name in values}
        _check_keys(cls, values, "")
        if flat:
            values["local"] = _with_flat_local(values.get("local"), flat)
        breaker = values.get("breaker")
        if isinstance(breaker, Mapping):
            values["breaker"] = BreakerConfig.from_mapping(breaker)
        local = values.get("local")
        if isinstance(local, Mapping):
            values["local"] = LocalModelConfig.from_mapping(local)
        return cls(**values)


def _with_flat_local(local: object, flat: Mapping[str, Any]) -> Mapping[str, Any]:
    """Fold a config's flat local settings into its ``local`` mapping, warning for each."""
    if local is None:
        local = {}
    if not isinstance(local, Mapping):
        raise ConfigError("set the local provider's settings under model.local only",
                          field="local")
    for name in flat:
        if name in local:
            raise ConfigError(f"model.{name} and model.local.{name} are both set; keep "
                              f"model.local.{name}", field=f"local.{name}")
        warnings.warn(f"model.{name} is deprecated: set model.local.{name} instead; the flat "
                      "key goes in the next release", DeprecationWarning, stacklevel=3)
    return {**local, **flat}


def _normalise_base_url(url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"base_url must start with http:// or https://, got {url!r}",
                          field="base_url")
    url = url.rstrip("/")
    return url.removesuffix("/v1")
