"""Value objects of a model call: messages, tools, requests and responses.

Messages are OpenAI-style mappings (``{"role": "user", "content": "..."}``);
the facade validates them here, before anything is hashed, so a malformed
conversation fails with a message naming the offending index instead of
reaching a provider. A `ModelResponse` has one canonical byte encoding
(sorted keys, compact separators, UTF-8, NaN rejected): the replay cache
stores exactly those bytes, and digest comparisons on replay (invariant 3)
are comparisons of that encoding.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from beam_agents._canonical import canonical_json

__all__ = [
    "MESSAGE_KEYS",
    "ROLES",
    "SAMPLING_KEYS",
    "Message",
    "ModelRequest",
    "ModelResponse",
    "RateLimits",
    "ToolCall",
    "tool_function",
]

#: An OpenAI-style chat message.
Message = Mapping[str, Any]

ROLES = frozenset({"system", "user", "assistant", "tool"})
MESSAGE_KEYS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id"})
#: Sampling parameters every provider understands (or translates).
SAMPLING_KEYS = frozenset(
    {"temperature", "top_p", "top_k", "max_tokens", "stop", "seed",
     "presence_penalty", "frequency_penalty"}
)
_INT_SAMPLING_KEYS = frozenset({"max_tokens", "seed", "top_k"})
_POSITIVE_SAMPLING_KEYS = frozenset({"max_tokens", "top_k"})
_RESPONSE_FORMAT_VERSION = 1


def _plain_json(value: object, where: str) -> Any:
    """Return a JSON-shaped deep copy of `value` (dicts and lists); raise TypeError otherwise."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{where} has a non-string key {key!r}; JSON keys are strings")
            out[key] = _plain_json(item, f"{where}.{key}")
        return out
    if isinstance(value, (list, tuple)):
        return [_plain_json(item, f"{where}[{i}]") for i, item in enumerate(value)]
    raise TypeError(f"{where} is a {type(value).__name__}, which is not JSON data")


def _validate_message(index: int, message: object) -> dict[str, Any]:
    where = f"messages[{index}]"
    if not isinstance(message, Mapping):
        raise TypeError(f"{where} must be a mapping like {{'role': 'user', 'content': '...'}}, "
                        f"got {type(message).__name__}")
    unknown = sorted(set(message) - MESSAGE_KEYS)
    if unknown:
        raise ValueError(f"{where} has unknown keys {unknown}; allowed: {sorted(MESSAGE_KEYS)}")
    role = message.get("role")
    if role not in ROLES:
        raise ValueError(f"{where}.role is {role!r}; expected one of {sorted(ROLES)}")
    content = message.get("content")
    if content is None:
        # OpenAI allows an assistant turn that only carries tool calls.
        if not (role == "assistant" and message.get("tool_calls")):
            raise ValueError(f"{where}.content is missing; only an assistant message with "
                             "tool_calls may omit it")
    elif not isinstance(content, str):
        raise TypeError(f"{where}.content must be a str, got {type(content).__name__}")
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        raise ValueError(f"{where} has role 'tool' but no str tool_call_id naming the call "
                         "it answers")
    tool_calls = message.get("tool_calls")
    if tool_calls is not None and (
            role != "assistant" or not isinstance(tool_calls, list)
            or not all(isinstance(call, Mapping) for call in tool_calls)):
        raise ValueError(f"{where}.tool_calls must be a list of mappings on an assistant "
                         "message")
    return dict(_plain_json(message, where))


def tool_function(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    """Return the function spec of a tool, in OpenAI form or bare (``{"name": ...}``)."""
    inner = tool.get("function")
    return inner if isinstance(inner, Mapping) else tool


def _validate_tool(index: int, tool: object) -> dict[str, Any]:
    where = f"tools[{index}]"
    if not isinstance(tool, Mapping):
        raise TypeError(f"{where} must be a mapping, got {type(tool).__name__}")
    spec = tool_function(tool)
    if not isinstance(spec.get("name"), str) or not spec["name"]:
        raise ValueError(f"{where} has no function name; use {{'type': 'function', "
                         "'function': {'name': ..., 'parameters': {...}}}")
    params = spec.get("parameters")
    if params is not None and not isinstance(params, Mapping):
        raise TypeError(f"{where}.parameters must be a JSON Schema object")
    return dict(_plain_json(tool, where))


def _validate_sampling(sampling: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(sampling) - SAMPLING_KEYS)
    if unknown:
        raise ValueError(f"unknown sampling parameters {unknown}; allowed: "
                         f"{sorted(SAMPLING_KEYS)}")
    for key, value in sampling.items():
        if key == "stop":
            if not (isinstance(value, str) or (isinstance(value, (list, tuple))
                                               and all(isinstance(s, str) for s in value))):
                raise TypeError(f"sampling parameter stop must be a str or a list of str, "
                                f"got {value!r}")
            continue
        integral = key in _INT_SAMPLING_KEYS
        kinds: tuple[type, ...] = (int,) if integral else (int, float)
        if not isinstance(value, kinds) or isinstance(value, bool):
            raise TypeError(f"sampling parameter {key} must be "
                            f"{'an int' if integral else 'a number'}, got {value!r}")
        if key in _POSITIVE_SAMPLING_KEYS and isinstance(value, int) and value <= 0:
            raise ValueError(f"sampling parameter {key} must be > 0, got {value!r}")
    return dict(_plain_json(dict(sampling), "sampling"))


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRequest:
    """One validated model call: what the cache key hashes and what a provider sends.

    Construction validates and deep-copies: `messages` and `tools` are stored
    as tuples of plain dicts, `sampling` as a plain dict.
    """

    model_id: str
    messages: Sequence[Message]
    tools: Sequence[Mapping[str, Any]] = ()
    sampling: Mapping[str, Any] = field(default_factory=dict)
    #: A JSON schema the answer's text must match (structured output), or None.
    response_schema: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.messages, (str, bytes)) or not isinstance(self.messages, Sequence):
            raise TypeError("messages must be a list of {'role': ..., 'content': ...} mappings")
        if not self.messages:
            raise ValueError("messages is empty; a model call needs at least one message")
        messages = tuple(_validate_message(i, m) for i, m in enumerate(self.messages))
        if isinstance(self.tools, (str, bytes)) or not isinstance(self.tools, Sequence):
            raise TypeError("tools must be a list of tool (function) specs")
        tools = tuple(_validate_tool(i, t) for i, t in enumerate(self.tools))
        object.__setattr__(self, "messages", messages)
        object.__setattr__(self, "tools", tools)
        object.__setattr__(self, "sampling", _validate_sampling(self.sampling))
        if self.response_schema is not None:
            if not isinstance(self.response_schema, Mapping):
                raise TypeError("response_schema must be a JSON schema (a mapping)")
            object.__setattr__(self, "response_schema",
                               _plain_json(self.response_schema, "response_schema"))


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """A function call the model asked for; `arguments` is a JSON object."""

    id: str
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("ToolCall.name must be a non-empty str")
        if not isinstance(self.id, str):
            raise TypeError("ToolCall.id must be a str")
        if not isinstance(self.arguments, Mapping):
            raise TypeError("ToolCall.arguments must be a JSON object (a mapping)")
        object.__setattr__(self, "arguments", _plain_json(self.arguments, "arguments"))

    def to_json(self) -> dict[str, Any]:
        """Return the JSON form used inside `ModelResponse.to_bytes`."""
        return {"id": self.id, "name": self.name, "arguments": dict(self.arguments)}


@dataclass(frozen=True, slots=True, kw_only=True)
class RateLimits:
    """What a provider's rate-limit headers said about the account, on one answer.

    OpenAI-style ``x-ratelimit-remaining-*`` / ``x-ratelimit-reset-*``; None
    where the provider sent nothing. Admission reads it to pause before the
    account runs dry instead of after a 429 (invariant 11).
    """

    remaining_requests: int | None = None
    reset_requests_s: float | None = None
    remaining_tokens: int | None = None
    reset_tokens_s: float | None = None
    #: The account's limits, per minute (``x-ratelimit-limit-requests`` / ``-tokens``).
    limit_requests: int | None = None
    limit_tokens: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelResponse:
    """What a model returned; `cached` tells whether the replay cache served it.

    `limits` (the account's rate-limit headers on this answer) and `cached`
    describe how it was served, not what the model said: neither is encoded,
    so a replay is byte-identical to the first answer.
    """

    text: str
    model_id: str
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    usage: Mapping[str, int] = field(default_factory=dict)
    cached: bool = False
    limits: RateLimits | None = field(default=None, compare=False)
    #: With a ``response_schema``: the answer parsed and checked against it (a
    #: dict, or an instance of the pydantic model asked for). Not encoded.
    parsed: Any = field(default=None, compare=False)
    #: The provider's id for this answer (OpenAI's ``id``, Gemini's
    #: ``responseId``), for ``gen_ai.response.id`` on the span of the paid
    #: call. Not encoded, like `limits`: a replay is byte-identical to the
    #: first answer and its span carries no id, as nothing was answered again.
    response_id: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise TypeError(f"ModelResponse.text must be a str, got {type(self.text).__name__}")
        for name, count in self.usage.items():
            if not isinstance(count, int) or isinstance(count, bool):
                raise TypeError(f"ModelResponse.usage[{name!r}] must be an int")
        object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        object.__setattr__(self, "usage", dict(self.usage))

    @property
    def tokens_in(self) -> int:
        """Prompt tokens the provider reported (``usage["prompt_tokens"]``), 0 if none."""
        return int(self.usage.get("prompt_tokens", 0))

    @property
    def tokens_out(self) -> int:
        """Completion tokens the provider reported (``usage["completion_tokens"]``), 0 if none."""
        return int(self.usage.get("completion_tokens", 0))

    def to_bytes(self) -> bytes:
        """Return the canonical encoding; equal responses give byte-identical output.

        `cached` is not encoded: it describes how a response was served, not
        what the model said, so a replayed response hashes like the original.
        """
        return canonical_json({
            "v": _RESPONSE_FORMAT_VERSION,
            "text": self.text,
            "model_id": self.model_id,
            "tool_calls": [call.to_json() for call in self.tool_calls],
            "finish_reason": self.finish_reason,
            "usage": dict(self.usage),
        })

    @classmethod
    def from_bytes(cls, data: bytes, *, cached: bool = False) -> ModelResponse:
        """Decode `to_bytes` output; raise ValueError on anything else."""
        try:
            doc = json.loads(data.decode("utf-8"))
            if doc.get("v") != _RESPONSE_FORMAT_VERSION:
                raise ValueError(f"unsupported response format version {doc.get('v')!r}")
            return cls(
                text=doc["text"],
                model_id=doc["model_id"],
                tool_calls=tuple(
                    ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"])
                    for c in doc["tool_calls"]
                ),
                finish_reason=doc["finish_reason"],
                usage=doc["usage"],
                cached=cached,
            )
        except (UnicodeDecodeError, json.JSONDecodeError, AttributeError, KeyError,
                TypeError) as exc:
            raise ValueError(f"not an encoded ModelResponse: {exc}") from exc
