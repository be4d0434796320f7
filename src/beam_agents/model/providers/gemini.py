"""Gemini via google-genai: Vertex AI (project + location) or the Gemini API (api key).

Translation at the boundary:

* messages: ``system`` turns join into ``system_instruction``; ``user`` and
  ``assistant`` become contents with roles ``user`` and ``model``;
  assistant ``tool_calls`` become ``function_call`` parts and ``tool`` turns
  become ``function_response`` parts (``{"output": content}``).
* tools become one `types.Tool` of function declarations (JSON Schema
  parameters); the SDK's automatic function calling is disabled, because
  the agent, not the SDK, runs tools.
* sampling: ``temperature``, ``top_p``, ``top_k``, ``seed``, penalties as is;
  ``max_tokens`` becomes ``max_output_tokens`` and ``stop`` becomes
  ``stop_sequences``.
* responses: text parts of the first candidate (thoughts skipped), function
  calls as `ToolCall`, the finish reason lower-cased (``"stop"``,
  ``"max_tokens"``, ``"safety"``), usage under the OpenAI names
  (``prompt_tokens``, ``completion_tokens``, ``total_tokens``).

Errors: a 429 (``RESOURCE_EXHAUSTED``) raises `RateLimitedError` with the
``retryDelay`` of its ``google.rpc.RetryInfo`` (or a ``Retry-After``), unless
its ``google.rpc.QuotaFailure`` names a per-day quota, which raises
`QuotaExhaustedError`: a daily limit is not a rate (invariant 11).
`google.genai.errors.APIError` with 408 or 5xx, timeouts and
transport errors raise `ProviderUnavailable`; other 4xx, a blocked prompt,
missing credentials and request values the SDK refuses raise
`ProviderRejected`. SDK retries are off (``HttpRetryOptions(attempts=1)``,
which also stops the SDK's implicit reconnect retry): the runtime owns
retries.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx
from google import genai
from google.auth import exceptions as auth_errors
from google.genai import errors as genai_errors
from google.genai import types

from beam_agents.errors import (
    ModelError,
    ProviderRejected,
    ProviderUnavailable,
    QuotaExhaustedError,
    RateLimitedError,
)
from beam_agents.model._provider import account_digest
from beam_agents.model._send_gate import RequestHeldBack
from beam_agents.model._types import ModelRequest, ModelResponse, ToolCall, tool_function
from beam_agents.model.providers._gated_http import gated_transport
from beam_agents.model.providers._loop_clients import LoopClients
from beam_agents.model.providers._rate_limits import (
    quota_failure_ids,
    retry_after_s,
    retry_info_delay_s,
)

__all__ = ["GeminiProvider", "build_config", "build_contents", "translate_error",
           "translate_response"]

_SAMPLING_NAMES = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k",
                   "seed": "seed", "max_tokens": "max_output_tokens",
                   "presence_penalty": "presence_penalty",
                   "frequency_penalty": "frequency_penalty"}


def _call_arguments(raw: object, where: str) -> dict[str, Any]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw or "{}")
        except json.JSONDecodeError as exc:
            raise ProviderRejected(f"{where}.arguments is not valid JSON") from exc
    if not isinstance(raw, Mapping):
        raise ProviderRejected(f"{where}.arguments must be a JSON object")
    return dict(raw)


def build_contents(request: ModelRequest) -> tuple[list[types.Content], str | None]:
    """Translate our messages into Gemini contents and a system instruction."""
    system: list[str] = []
    contents: list[types.Content] = []
    call_names: dict[str, str] = {}
    for i, message in enumerate(request.messages):
        role, text = message["role"], message.get("content")
        if role == "system":
            system.append(text or "")
        elif role == "user":
            contents.append(types.Content(role="user", parts=[types.Part(text=text)]))
        elif role == "assistant":
            parts = [types.Part(text=text)] if text else []
            for j, call in enumerate(message.get("tool_calls") or ()):
                function = call.get("function", call)
                call_id = call.get("id")
                name = function.get("name")
                if not isinstance(name, str):
                    raise ProviderRejected(f"messages[{i}].tool_calls[{j}] has no name")
                if isinstance(call_id, str):
                    call_names[call_id] = name
                args = _call_arguments(function.get("arguments"),
                                       f"messages[{i}].tool_calls[{j}]")
                parts.append(types.Part(function_call=types.FunctionCall(
                    id=call_id, name=name, args=args)))
            contents.append(types.Content(role="model", parts=parts))
        else:  # tool: answers an earlier call, named by the call or the message
            call_id = message["tool_call_id"]
            name = message.get("name") or call_names.get(call_id)
            if name is None:
                raise ProviderRejected(f"messages[{i}] answers tool call {call_id!r}, which "
                                       "no earlier assistant message made; add 'name'")
            contents.append(types.Content(role="user", parts=[types.Part(
                function_response=types.FunctionResponse(
                    id=call_id, name=name, response={"output": text}))]))
    return contents, ("\n\n".join(system) if system else None)


def build_config(request: ModelRequest, system_instruction: str | None
                 ) -> types.GenerateContentConfig:
    """Translate tools and sampling into a `GenerateContentConfig`."""
    options: dict[str, Any] = {
        "automatic_function_calling": types.AutomaticFunctionCallingConfig(disable=True),
    }
    if system_instruction is not None:
        options["system_instruction"] = system_instruction
    for ours, theirs in _SAMPLING_NAMES.items():
        if ours in request.sampling:
            options[theirs] = request.sampling[ours]
    stop = request.sampling.get("stop")
    if stop is not None:
        options["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    if request.tools:
        declarations = []
        for tool in request.tools:
            spec = tool_function(tool)
            declarations.append(types.FunctionDeclaration(
                name=spec["name"], description=spec.get("description"),
                parameters_json_schema=spec.get("parameters")))
        options["tools"] = [types.Tool(function_declarations=declarations)]
    if request.response_schema is not None:
        # Gemini's own structured output: JSON, in the shape asked for.
        options["response_mime_type"] = "application/json"
        options["response_json_schema"] = dict(request.response_schema)
    return types.GenerateContentConfig(**options)


def translate_response(response: types.GenerateContentResponse, model_id: str
                       ) -> ModelResponse:
    """Translate an SDK response (first candidate) into a `ModelResponse`.

    Raises:
        ProviderRejected: The prompt was blocked (no candidates, a block reason).
        ProviderUnavailable: No candidate and no reason given.
    """
    if not response.candidates:
        feedback = response.prompt_feedback
        if feedback is not None and feedback.block_reason is not None:
            reason = _enum_name(feedback.block_reason)
            raise ProviderRejected(f"{model_id} blocked the prompt ({reason}): "
                                   f"{feedback.block_reason_message or 'no message'}",
                                   model_id=model_id)
        raise ProviderUnavailable(f"{model_id} returned no candidates", model_id=model_id)
    candidate = response.candidates[0]
    texts: list[str] = []
    calls: list[ToolCall] = []
    parts = candidate.content.parts if candidate.content is not None else None
    for part in parts or ():
        if part.text is not None and not part.thought:
            texts.append(part.text)
        call = part.function_call
        if call is not None and call.name:
            calls.append(ToolCall(id=call.id or f"call_{len(calls)}", name=call.name,
                                  arguments=call.args or {}))
    usage: dict[str, int] = {}
    meta = response.usage_metadata
    if meta is not None:
        for ours, value in (("prompt_tokens", meta.prompt_token_count),
                            ("completion_tokens", meta.candidates_token_count),
                            ("total_tokens", meta.total_token_count)):
            if value is not None:
                usage[ours] = value
    finish = candidate.finish_reason
    return ModelResponse(text="".join(texts), model_id=model_id, tool_calls=tuple(calls),
                         finish_reason=None if finish is None else _enum_name(finish).lower(),
                         usage=usage, response_id=getattr(response, "response_id", None) or None)


def _enum_name(value: object) -> str:
    return str(getattr(value, "value", value))


def translate_error(exc: Exception, model_id: str) -> ModelError:
    """Map an exception raised by the SDK or its transport onto our error tree."""
    if isinstance(exc, genai_errors.APIError):
        code = exc.code
        text = f"{model_id} answered {code} {exc.status or ''}: {exc.message or exc}"
        if code == 429 or exc.status == "RESOURCE_EXHAUSTED":
            return _resource_exhausted(exc, model_id, text)
        if isinstance(code, int) and 400 <= code < 500 and code != 408:
            return ProviderRejected(text, model_id=model_id, status=code)
        return ProviderUnavailable(text + " (retriable)", model_id=model_id,
                                   status=code if isinstance(code, int) else None)
    if isinstance(exc, (httpx.TimeoutException, TimeoutError)):
        return ProviderUnavailable(f"{model_id} did not answer in time: {exc!r}",
                                   model_id=model_id)
    if isinstance(exc, (httpx.TransportError, auth_errors.TransportError,
                        auth_errors.RefreshError, OSError)):
        return ProviderUnavailable(f"cannot reach {model_id}: {exc!r}", model_id=model_id)
    if isinstance(exc, auth_errors.DefaultCredentialsError):
        return ProviderRejected(f"no Google credentials for {model_id}: {exc}. Configure "
                                "application default credentials or an api_key.",
                                model_id=model_id)
    if isinstance(exc, (ValueError, TypeError)):
        return ProviderRejected(f"the SDK refused the request to {model_id}: {exc!r}",
                                model_id=model_id)
    return ProviderUnavailable(f"unexpected {type(exc).__name__} calling {model_id}: {exc}",
                               model_id=model_id)


def _resource_exhausted(exc: genai_errors.APIError, model_id: str, text: str) -> ModelError:
    """A 429: a rate limit with its RetryInfo, or a per-day quota used up."""
    daily = [quota for quota in quota_failure_ids(exc.details) if "PerDay" in quota]
    if daily:
        return QuotaExhaustedError(f"{text} (the daily quota {daily[0]} is used up)",
                                   model_id=model_id)
    wait = retry_info_delay_s(exc.details)
    headers = getattr(exc.response, "headers", None)
    if wait is None and headers is not None:
        try:
            wait = retry_after_s(headers)
        except AttributeError:  # a response whose headers are not a mapping
            wait = None
    return RateLimitedError(text, model_id=model_id, retry_after_s=wait)


class GeminiProvider:
    """Calls Gemini once per request through ``client.aio.models.generate_content``.

    One SDK client is built lazily per event loop that uses the provider
    (its httpx client cannot move between loops) and closed by `aclose`.
    """

    def __init__(self, *, model_id: str, project: str | None = None,
                 location: str | None = None, api_key: str | None = None,
                 base_url: str | None = None, timeout_s: float = 60.0) -> None:
        if (project is None) == (api_key is None):
            raise ValueError("GeminiProvider needs project+location (Vertex AI) or api_key")
        self.model_id = model_id
        self._project, self._location, self._api_key = project, location, api_key
        self._base_url = base_url
        self._timeout_s = timeout_s
        self._clients = LoopClients(self._build_client, _close_client)

    @property
    def account(self) -> str:
        """The quota this provider draws on: a digest of the project or key, and the model."""
        return account_digest("gemini", self._project, self._location, self._api_key,
                              self._base_url, self.model_id)

    def http_options(self) -> types.HttpOptions:
        """The SDK HTTP options: our timeout (in ms), no SDK retries, and the gated transport.

        A transport of our own also keeps the SDK on httpx (it prefers aiohttp
        where that is installed), whose connections take the send gate's last
        look before a request leaves (invariant 11).
        """
        return types.HttpOptions(
            base_url=self._base_url,
            timeout=round(self._timeout_s * 1000),
            retry_options=types.HttpRetryOptions(attempts=1),
            async_client_args={"transport": gated_transport()},
        )

    def _build_client(self) -> genai.Client:
        if self._project is not None:
            return genai.Client(vertexai=True, project=self._project, location=self._location,
                                http_options=self.http_options())
        # vertexai=False explicitly: left unset, the SDK would consult
        # GOOGLE_GENAI_USE_VERTEXAI.
        return genai.Client(vertexai=False, api_key=self._api_key,
                            http_options=self.http_options())

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send `request` once; see the module docstring for the error mapping."""
        contents, system = build_contents(request)
        config = build_config(request, system)
        try:
            response = await self._clients.current().aio.models.generate_content(
                model=self.model_id, contents=contents, config=config)
        except (ModelError, RequestHeldBack):
            raise  # ours already; a held-back request was never sent (invariant 11)
        except Exception as exc:
            raise translate_error(exc, self.model_id) from exc
        return translate_response(response, self.model_id)

    async def aclose(self) -> None:
        """Close the running loop's client and forget the others; safe to call twice."""
        await self._clients.aclose()


async def _close_client(client: genai.Client) -> None:
    await client.aio.aclose()
