"""The model provider port: the one seam between the core and a model backend.

Backends live in `beam_agents.model.providers` and are the only modules that
import an SDK or an HTTP client. The core sees `ModelRequest` in and
`ModelResponse` or a typed `ModelError` out.
"""

from __future__ import annotations

import hashlib
from typing import Protocol, runtime_checkable

from beam_agents.model._types import ModelRequest, ModelResponse

__all__ = ["ModelProvider", "account_digest", "provider_account"]


@runtime_checkable
class ModelProvider(Protocol):
    """Sends one request to a model and returns its answer; one attempt per call.

    Contract:

    * **One attempt.** `complete` makes at most one request to the backend.
      Client-library retries are switched off: the runtime owns retries
      (Beam retries bundles, the errors output redrives), and hidden retries
      would multiply spend and hide outages from the circuit breaker.
    * **Typed failures only.** A retriable failure — 429, 5xx, a timeout, a
      connection error — raises `beam_agents.errors.ProviderUnavailable`; a
      request the backend refuses (any other 4xx) raises
      `beam_agents.errors.ProviderRejected`. Raw SDK or transport exceptions
      never escape (chain them with ``raise ... from exc``).
    * **No caching, no breaking.** The model facade does replay caching
      (invariant 3) and circuit breaking; a provider just calls.
    * **Resources.** A provider builds its client lazily, inside the event loop
      that uses it, and the owner (the runner adapter's teardown) calls
      `aclose` once. A provider is built from a picklable `ModelConfig` at
      worker setup, never pickled itself.
    * **Concurrency.** `complete` may be awaited concurrently from one event
      loop.
    * **The last look.** A provider that can, calls
      `beam_agents.model.check_before_send` right before a request's first
      byte leaves, and lets what it raises propagate: nothing is sent after
      a 429 was read and before its Retry-After (invariant 11).
    * **Its account.** A provider may name the quota it draws on with an
      ``account`` attribute (a digest of the endpoint, the key and the model,
      never the key itself); learned rates are kept per account. Without
      one, `provider_account` uses the model id.

    Attributes:
        model_id: The model this provider calls. It is part of the replay
            cache key, so two providers with the same id must be
            interchangeable.
    """

    model_id: str

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send `request` once and translate the backend's answer.

        Raises:
            ProviderUnavailable: Rate limiting, 5xx, timeout or connection
                failure; retrying later may succeed.
            ProviderRejected: The backend refused this request; retrying the
                same request will not help.
        """
        ...

    async def aclose(self) -> None:
        """Release the client and its connections; safe to call twice."""
        ...


def account_digest(*parts: str | None) -> str:
    """Name an account by a digest of what identifies it (an endpoint, a key, a model)."""
    joined = "\0".join(part or "" for part in parts)
    return hashlib.sha256(joined.encode()).hexdigest()[:32]


def provider_account(provider: ModelProvider) -> str:
    """The quota `provider` draws on: its ``account``, else its model id."""
    account = getattr(provider, "account", None)
    return account if isinstance(account, str) and account else f"model:{provider.model_id}"
