"""OpenAI-compatible chat completions over HTTP (vLLM, Ollama, OpenAI) via httpx.

Error mapping (the `ModelProvider` contract):

* 429 raises `RateLimitedError` with the wait the server asked for
  (``retry-after-ms``, or ``Retry-After`` in seconds or as an HTTP date),
  except an ``insufficient_quota`` one (a billing or daily limit, not a rate),
  which raises `QuotaExhaustedError`. Both are flow control (invariant 11).
* 408 and 5xx, timeouts and transport errors (refused connection, reset,
  broken protocol) raise `ProviderUnavailable` (retriable).
* Any other non-2xx status raises `ProviderRejected`: the request itself, the
  key or the base_url is wrong, and retrying will not help.
* A 2xx whose body is not a chat completion (not JSON, no ``choices``,
  tool-call arguments that are not a JSON object) raises
  `ProviderUnavailable`: in practice this is a truncated body, a proxy's
  error page or a model emitting broken JSON, all of which a later attempt
  can get past, and counting it on the breaker is what we want when a
  gateway keeps returning garbage.

httpx never retries by default; the transport is still built with
``retries=0`` to make that explicit, since the runtime owns retries.

A success carries the ``x-ratelimit-remaining-*`` / ``x-ratelimit-reset-*``
headers, where the server sends them, as `ModelResponse.limits`.

Error messages quote up to 300 characters of the reply body, with the API
key cut out first: a gateway that echoes the request's ``Authorization``
header back in its 401 page must not put the key into a dead letter.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import httpx

from beam_agents.errors import (
    ModelError,
    ProviderRejected,
    ProviderUnavailable,
    QuotaExhaustedError,
    RateLimitedError,
)
from beam_agents.model._provider import account_digest
from beam_agents.model._types import ModelRequest, ModelResponse, ToolCall, tool_function
from beam_agents.model.providers._gated_http import gated_transport
from beam_agents.model.providers._loop_clients import LoopClients
from beam_agents.model.providers._rate_limits import rate_limits, retry_after_s

__all__ = ["OpenAICompatibleProvider"]

_RETRIABLE_STATUSES = frozenset({408})
#: The error codes of a 429 that says the account is out of quota, not over a rate.
_QUOTA_CODES = frozenset({"insufficient_quota"})
_BODY_SNIPPET_CHARS = 300


class OpenAICompatibleProvider:
    """Calls ``{base_url}/v1/chat/completions`` once per request; typed errors only.

    The httpx client is built lazily, one per event loop that uses the
    provider: an httpx client cannot move between loops, and a sync agent
    driven by ``asyncio.run`` (or one loop per worker thread) gets a fresh
    loop per call. Clients of loops that are gone are dropped with them.

    ``transport`` is a test seam, the one httpx itself offers: an
    ``httpx.MockTransport`` answers the requests in-process, with no server,
    and the module's error mapping still applies. Every client this provider
    builds (one per loop) shares it, and :meth:`aclose` closes it along with
    the client. Without it each client gets its own
    ``httpx.AsyncHTTPTransport(retries=0)``.
    """

    def __init__(self, *, model_id: str, base_url: str, api_key: str | None = None,
                 timeout_s: float = 60.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.model_id = model_id
        self._url = base_url.rstrip("/") + "/v1/chat/completions"
        self._api_key = api_key
        self._timeout_s = timeout_s
        self._transport = transport
        self._clients = LoopClients(self._build_client, httpx.AsyncClient.aclose)

    @property
    def account(self) -> str:
        """The quota this provider draws on: a digest of the endpoint, the key and the model."""
        return account_digest("openai", self._url, self._api_key, self.model_id)

    @property
    def url(self) -> str:
        """The chat completions endpoint this provider posts to."""
        return self._url

    def _build_client(self) -> httpx.AsyncClient:
        headers = {"Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        transport = self._transport
        if transport is None:
            transport = gated_transport()
        return httpx.AsyncClient(
            transport=transport,
            timeout=httpx.Timeout(self._timeout_s),
            headers=headers,
        )

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """Translate `request` into the chat completions JSON body."""
        body: dict[str, Any] = {"model": self.model_id,
                                "messages": [dict(m) for m in request.messages]}
        if request.tools:
            body["tools"] = [{"type": "function", "function": dict(tool_function(t))}
                             for t in request.tools]
        body.update(request.sampling)
        if request.response_schema is not None:
            schema = dict(request.response_schema)
            body["response_format"] = {"type": "json_schema", "json_schema": {
                "name": str(schema.get("title") or "response"), "schema": schema}}
        return body

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """POST the request once and translate the reply (see the module's error mapping)."""
        try:
            reply = await self._clients.current().post(self._url, json=self.build_body(request))
        except httpx.TimeoutException as exc:
            raise ProviderUnavailable(
                f"{self.model_id} at {self._url} did not answer within {self._timeout_s}s",
                model_id=self.model_id) from exc
        except httpx.TransportError as exc:
            raise ProviderUnavailable(
                f"cannot reach {self.model_id} at {self._url}: {type(exc).__name__}: {exc}",
                model_id=self.model_id) from exc
        if reply.status_code // 100 != 2:
            raise self._status_error(reply)
        try:
            doc = reply.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise self._malformed(f"body is not JSON: {self._snippet(reply)!r}",
                                  reply.status_code) from exc
        response = self.parse_completion(doc)
        limits = rate_limits(reply.headers)
        return response if limits is None else dataclasses.replace(response, limits=limits)

    def parse_completion(self, doc: object) -> ModelResponse:
        """Translate a chat completions JSON document into a `ModelResponse`.

        Raises:
            ProviderUnavailable: The document is not a chat completion.
        """
        try:
            if not isinstance(doc, Mapping):
                raise TypeError("the body is not a JSON object")
            choice = doc["choices"][0]
            message = choice["message"]
            text = message.get("content") or ""
            if not isinstance(text, str):
                raise TypeError("message.content is not a string")
            calls = tuple(self._tool_call(i, raw)
                          for i, raw in enumerate(message.get("tool_calls") or ()))
            usage_doc = doc.get("usage") or {}
            usage = {k: v for k, v in usage_doc.items()
                     if isinstance(v, int) and not isinstance(v, bool)}
            finish = choice.get("finish_reason")
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            raise self._malformed(f"not a chat completion ({type(exc).__name__}: {exc})",
                                  200) from exc
        return ModelResponse(text=text, model_id=self.model_id, tool_calls=calls,
                             finish_reason=finish if isinstance(finish, str) else None,
                             usage=usage, response_id=_response_id(doc.get("id")))

    @staticmethod
    def _tool_call(index: int, raw: Mapping[str, Any]) -> ToolCall:
        function = raw["function"]
        arguments = function.get("arguments") or "{}"
        if isinstance(arguments, str):
            arguments = json.loads(arguments)
        if not isinstance(arguments, Mapping):
            raise ValueError(f"tool_calls[{index}].function.arguments is not a JSON object")
        return ToolCall(id=str(raw.get("id") or f"call_{index}"), name=function["name"],
                        arguments=arguments)

    def _status_error(self, reply: httpx.Response) -> ModelError:
        status = reply.status_code
        snippet = self._snippet(reply)
        if status == 429:
            if _error_code(reply) in _QUOTA_CODES:
                return QuotaExhaustedError(
                    f"{self.model_id} at {self._url} answered 429: the account's quota is "
                    f"used up: {snippet}", model_id=self.model_id)
            wait = retry_after_s(reply.headers)
            asked = "no wait given" if wait is None else f"retry after {wait:g}s"
            return RateLimitedError(f"{self.model_id} at {self._url} answered 429 ({asked}): "
                                    f"{snippet}", model_id=self.model_id, retry_after_s=wait)
        if status in _RETRIABLE_STATUSES or status >= 500:
            return ProviderUnavailable(
                f"{self.model_id} at {self._url} answered HTTP {status} (retriable): {snippet}",
                model_id=self.model_id, status=status)
        return ProviderRejected(
            f"{self.model_id} at {self._url} rejected the request with HTTP {status}: "
            f"{snippet}. Check the model id, api_key, base_url and request.",
            model_id=self.model_id, status=status)

    def _snippet(self, reply: httpx.Response) -> str:
        # Redact before cutting, so no prefix of the key survives at the edge.
        text = reply.text
        if self._api_key:
            text = text.replace(self._api_key, "[redacted]")
        return text[:_BODY_SNIPPET_CHARS]

    def _malformed(self, why: str, status: int) -> ProviderUnavailable:
        return ProviderUnavailable(f"{self.model_id} at {self._url} sent a malformed "
                                   f"response: {why}", model_id=self.model_id, status=status)

    async def aclose(self) -> None:
        """Close the running loop's client and forget the others; safe to call twice."""
        await self._clients.aclose()


def _error_code(reply: httpx.Response) -> str | None:
    """``error.code`` (or ``error.type``) of an OpenAI error body, if it has one."""
    try:
        error = reply.json().get("error")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        return None
    if not isinstance(error, Mapping):
        return None
    for name in ("code", "type"):
        value = error.get(name)
        if isinstance(value, str) and value in _QUOTA_CODES:
            return value
    code = error.get("code")
    return code if isinstance(code, str) else None


def _response_id(value: object) -> str | None:
    """The completion's ``id`` when it is a string (not every compatible server sends one)."""
    return value if isinstance(value, str) and value else None
