"""Secret Manager access for the hosts: the one module that imports its client.

`beam_agents.hosting.start_runtime` calls `read_secret_version` on the worker
(``DoFn.setup()`` / Flink ``open()``) when a `ModelConfig` names
``api_key_secret``, and hands the value straight to the provider it builds.
Reading it there, and not where the job is launched, is the point: the value
is never part of a config, so it is never pickled into the job graph.

The client speaks REST: one request per worker, no gRPC channel to keep.

* The default endpoint, and an ``https://`` override (a Private Service
  Connect or regional endpoint), authenticate with application default
  credentials: on Dataflow the worker service account, which needs
  ``roles/secretmanager.secretAccessor`` on the secret.
* An ``http://`` override is a local peer (an emulator, a test server) and is
  sent no credentials, so no real token crosses plain HTTP.

Errors name the secret version and the fix and never hold the value:

* the name, the permission or the version's state is wrong (a 4xx other
  than 429: no such version, no access, a disabled or destroyed version),
  there are no credentials, or the payload is empty or not UTF-8 text:
  `ConfigError`, field ``api_key_secret``;
* the service is unreachable, rate-limiting, failing or timing out after the
  client's own retries, or the payload's CRC32C does not match:
  `ProviderUnavailable` (retriable; the runner retries the worker's setup).
"""

from __future__ import annotations

from typing import Any

from beam_agents.errors import BeamAgentsError, ConfigError, ProviderUnavailable

__all__ = ["crc32c", "read_secret_version"]

_FIELD = "api_key_secret"
_ACCESSOR = "roles/secretmanager.secretAccessor"


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_CRC32C_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of `data`, the checksum Secret Manager sends with a payload.

    Pure Python, so checking a key costs no extra dependency; keys are short.
    """
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def read_secret_version(name: str, *, endpoint: str | None = None,
                        timeout_s: float = 30.0) -> str:
    """Access the secret version `name` once and return its payload as text, trimmed.

    Surrounding whitespace is dropped: ``echo KEY | gcloud secrets versions
    add`` stores a trailing newline, which no API key contains.

    Args:
        name: ``projects/P/secrets/S/versions/V``, already validated by `ModelConfig`.
        endpoint: ``http(s)://host[:port]`` to use instead of Google's endpoint.
        timeout_s: Per-attempt timeout of the access call.

    Raises:
        ConfigError: the version cannot be read as configured, or holds no text.
        ProviderUnavailable: Secret Manager cannot be reached or sent a corrupt payload.
    """
    try:
        data, expected_crc = _access(name, endpoint, timeout_s)
    except BeamAgentsError:
        raise
    except Exception as exc:
        raise _translate(exc, name) from exc
    if expected_crc is not None and crc32c(data) != expected_crc:
        raise ProviderUnavailable(f"Secret Manager sent {name} with a CRC32C that does not "
                                  "match its payload (corrupted in transit; retriable)")
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ConfigError(f"secret version {name} is not UTF-8 text; store the API key "
                          "itself as the secret's value", field=_FIELD) from None
    if not text:
        raise ConfigError(f"secret version {name} is empty; add a version holding the API "
                          "key (gcloud secrets versions add SECRET --data-file=-)", field=_FIELD)
    return text


def _access(name: str, endpoint: str | None, timeout_s: float) -> tuple[bytes, int | None]:
    # Imported here: importing beam_agents.hosting must not load a cloud client.
    from google.api_core.client_options import ClientOptions  # noqa: PLC0415
    from google.auth.credentials import AnonymousCredentials  # noqa: PLC0415
    from google.cloud import secretmanager  # noqa: PLC0415

    options: dict[str, Any] = {"transport": "rest"}
    if endpoint is not None:
        options["client_options"] = ClientOptions(api_endpoint=endpoint)
        if endpoint.startswith("http://"):
            options["credentials"] = AnonymousCredentials()  # type: ignore[no-untyped-call]
    with secretmanager.SecretManagerServiceClient(**options) as client:
        response = client.access_secret_version(name=name, timeout=timeout_s)
    payload = response.payload
    crc = payload.data_crc32c if "data_crc32c" in payload else None
    return bytes(payload.data), crc


def _translate(exc: Exception, name: str) -> BeamAgentsError:
    """Map a client, auth or transport failure onto our error tree (see the module docstring)."""
    from google.api_core import exceptions as api  # noqa: PLC0415
    from google.auth import exceptions as auth  # noqa: PLC0415

    where = f"cannot read the model API key from Secret Manager version {name}"
    if isinstance(exc, api.TooManyRequests):
        return ProviderUnavailable(f"{where}: {type(exc).__name__}: {_said(exc)} (retriable)")
    if isinstance(exc, api.Unauthorized | api.Forbidden):
        return ConfigError(f"{where}: {type(exc).__name__}: {_said(exc)}. Grant {_ACCESSOR} "
                           "on the secret to the identity the workers run as (on Dataflow, "
                           "the worker service account)", field=_FIELD)
    if isinstance(exc, api.NotFound):
        return ConfigError(f"{where}: NotFound: {_said(exc)}. Check the project, secret and "
                           "version, and that the secret has a version (gcloud secrets versions "
                           "add SECRET --data-file=-)", field=_FIELD)
    if isinstance(exc, api.ClientError):
        return ConfigError(f"{where}: {type(exc).__name__}: {_said(exc)}. A disabled or "
                           "destroyed version cannot be read: enable it or name another",
                           field=_FIELD)
    if isinstance(exc, auth.DefaultCredentialsError):
        return ConfigError(f"{where}: no Google credentials on this worker ({exc}). Configure "
                           "application default credentials, or use --model_api_key_env",
                           field=_FIELD)
    return ProviderUnavailable(f"{where}: {type(exc).__name__}: {exc} (retriable)")


def _said(exc: Any) -> str:
    # The service's own words ("GET <url>: Secret [...] not found."), without the final stop.
    return str(exc.message).rstrip(".")
