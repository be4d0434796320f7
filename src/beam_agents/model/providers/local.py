"""The embedded default model: deterministic, offline, stdlib only.

`LocalModel` answers from a small template derived from the last user
message and the conversation length, so the same request always gets the
same reply and a pipeline runs end to end without credentials or network.

Scripted replies
----------------
With ``ModelConfig.local.script_path`` (``--model_script``) it first
consults a JSONL script. Each non-blank line that does not start with ``#``
is one JSON object::

    {"match": "refund", "text": "I can help with that refund.",
     "tool_calls": [{"name": "lookup_order", "arguments": {"order_id": "42"}}],
     "finish_reason": "tool_calls"}

* ``match`` (str): a case-sensitive, non-empty substring of the last user
  message. A line without ``match`` answers every request (a catch-all, put
  it last); ``"match": ""`` is refused, since an empty pattern reads as
  "matches nothing" as easily as "everything". The first matching line wins;
  when none matches, the template answers.
* ``text`` (str, default ``""``) and ``tool_calls`` (list of ``{"name",
  "arguments"?, "id"?}``; ids default to ``call_<n>``): at least one is
  needed.
* ``finish_reason`` (str): defaults to ``"tool_calls"`` when the line has
  tool calls, else ``"stop"``.

A malformed line raises `ConfigError` naming the file and the line number.

A simulated quota
-----------------
With ``ModelConfig.local.quota_rps`` (``--model_quota``) the model behaves
like an API behind an account quota: past that many requests per second (a
bucket of one second's worth) it answers at once with `RateLimitedError` and
a ``Retry-After`` of one second, as an HTTP server's 429 would, so demos and
tests can show flow control without a server.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiolimiter import AsyncLimiter

from beam_agents.errors import ConfigError, ProviderUnavailable, RateLimitedError
from beam_agents.model._types import Message, ModelRequest, ModelResponse, ToolCall

__all__ = ["LocalModel", "ScriptedReply", "load_script", "template_reply"]

_SCRIPT_KEYS = frozenset({"match", "text", "tool_calls", "finish_reason"})
_TOOL_CALL_KEYS = frozenset({"id", "name", "arguments"})
_TOPIC_CHARS = 80
_OPENERS = ("Thanks for reaching out.", "Got it.", "Happy to help with that.", "Understood.")
_CLOSINGS = (
    "Let me know if anything here is missing or if you'd like more detail.",
    "Tell me if you want me to go deeper on any part of this.",
    "If I've misread what you need, just correct me and I'll adjust.",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScriptedReply:
    """One line of a LocalModel script: a substring to match ("": any request) and the reply."""

    match: str
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str = "stop"


def _script_error(path: str, line_no: int, why: str) -> ConfigError:
    return ConfigError(f"{path}:{line_no}: bad LocalModel script line: {why}",
                       field="local.script_path")


def _parse_tool_calls(raw: object, path: str, line_no: int) -> tuple[ToolCall, ...]:
    if not isinstance(raw, list):
        raise _script_error(path, line_no, "tool_calls must be a list")
    calls = []
    for i, item in enumerate(raw):
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise _script_error(path, line_no, f"tool_calls[{i}] needs a str name")
        unknown = sorted(set(item) - _TOOL_CALL_KEYS)
        if unknown:
            raise _script_error(path, line_no, f"tool_calls[{i}] has unknown keys {unknown}")
        arguments = item.get("arguments", {})
        if not isinstance(arguments, Mapping):
            raise _script_error(path, line_no, f"tool_calls[{i}].arguments must be an object")
        call_id = item.get("id", f"call_{i}")
        if not isinstance(call_id, str):
            raise _script_error(path, line_no, f"tool_calls[{i}].id must be a str")
        calls.append(ToolCall(id=call_id, name=item["name"], arguments=arguments))
    return tuple(calls)


def _parse_line(doc: object, path: str, line_no: int) -> ScriptedReply:
    if not isinstance(doc, dict):
        raise _script_error(path, line_no, "each line must be a JSON object")
    unknown = sorted(set(doc) - _SCRIPT_KEYS)
    if unknown:
        raise _script_error(path, line_no, f"unknown keys {unknown}; allowed: "
                                           f"{sorted(_SCRIPT_KEYS)}")
    match, text = doc.get("match", ""), doc.get("text", "")
    if not isinstance(match, str):
        raise _script_error(path, line_no, "'match' must be a str")
    if "match" in doc and not match:
        raise _script_error(path, line_no, "'match' is empty; give a non-empty substring of "
                            "the last user message, or leave 'match' out for a reply to every "
                            "request")
    if not isinstance(text, str):
        raise _script_error(path, line_no, "'text' must be a str")
    calls = _parse_tool_calls(doc.get("tool_calls", []), path, line_no)
    if not text and not calls:
        raise _script_error(path, line_no, "a reply needs 'text' or 'tool_calls'")
    finish = doc.get("finish_reason", "tool_calls" if calls else "stop")
    if not isinstance(finish, str):
        raise _script_error(path, line_no, "'finish_reason' must be a str")
    return ScriptedReply(match=match, text=text, tool_calls=calls, finish_reason=finish)


def load_script(path: str) -> tuple[ScriptedReply, ...]:
    """Read a JSONL script (format in the module docstring).

    Raises:
        ConfigError: The file cannot be read, or a line is malformed (names
            the file and the 1-based line number).
    """
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read LocalModel script {path}: {exc}",
                          field="local.script_path") from exc
    replies = []
    for line_no, line in enumerate(lines, start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            doc = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise _script_error(path, line_no, f"invalid JSON ({exc.msg})") from exc
        replies.append(_parse_line(doc, path, line_no))
    return tuple(replies)


def _words(messages: Sequence[Message]) -> int:
    return sum(len(str(m.get("content") or "").split()) for m in messages)


def _topic(text: str) -> str:
    for end, char in enumerate(text):
        if char in ".?!" and end > 0:
            text = text[: end + 1]
            break
    if len(text) <= _TOPIC_CHARS:
        return text
    cut = text[:_TOPIC_CHARS].rsplit(" ", 1)[0]
    return cut + "..."


def template_reply(messages: Sequence[Message]) -> str:
    """Return the templated reply for a conversation; a pure function of its input."""
    user_turns = [m for m in messages if m.get("role") == "user"]
    source = user_turns[-1] if user_turns else messages[-1]
    text = " ".join(str(source.get("content") or "").split())
    if not text:
        return ("I didn't receive any text in your message. Could you tell me what you need "
                "help with?")
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    topic = _topic(text)
    if topic.endswith("?"):
        middle = f'You asked: "{topic}" Here is how I would approach it, step by step.'
    else:
        middle = f'Summary of your request: "{topic}" I will keep my answer focused on that.'
    earlier = max(len(user_turns) - 1, 0)
    if earlier == 0:
        context = "This is the start of our conversation, so I am working from this message."
    else:
        plural = "" if earlier == 1 else "s"
        context = (f"I am also taking into account your {earlier} earlier message{plural} "
                   "in this conversation.")
    return " ".join((_OPENERS[digest[0] % len(_OPENERS)], middle, context,
                     _CLOSINGS[digest[1] % len(_CLOSINGS)]))


class LocalModel:
    """A deterministic `ModelProvider`: same request, same response; no network.

    Args:
        model_id: Reported model id (part of the cache key).
        script: Scripted replies, tried in order before the template.
        latency_ms: Artificial latency per call, for benchmarks.
        outage: Call numbers (from 1) that fail with `ProviderUnavailable`
            after the latency, as during a provider's transient outage.
        outage_ms: With it, the outage is a span of time instead: every call
            from the first of `outage` on fails until this many milliseconds
            have passed since that call arrived (`clock`).
        quota_rps: A simulated account quota, requests per second; past it a
            call is refused at once with `RateLimitedError` (Retry-After 1 s).
        sleep: Awaitable sleep used for the latency; injectable for tests.
        clock: Monotonic seconds, for a timed outage; injectable for tests.

    Attributes:
        rate_limited: Calls the simulated quota refused.
    """

    def __init__(self, model_id: str = "local", *, script: Sequence[ScriptedReply] = (),
                 latency_ms: int = 0, outage: range = range(0), outage_ms: int = 0,
                 quota_rps: float | None = None,
                 sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.model_id = model_id
        self._script = tuple(script)
        self._latency_ms = latency_ms
        self._outage = outage
        self._outage_ms = outage_ms
        self._outage_began: float | None = None
        self._clock = clock
        self._quota = (AsyncLimiter(max(1.0, quota_rps), max(1.0, quota_rps) / quota_rps)
                       if quota_rps is not None else None)
        self._calls = 0
        self._sleep = sleep
        self.rate_limited = 0

    @classmethod
    def from_script_file(cls, path: str, *, model_id: str = "local", latency_ms: int = 0,
                         outage: range = range(0), outage_ms: int = 0,
                         quota_rps: float | None = None) -> LocalModel:
        """Build a LocalModel replaying the JSONL script at `path`."""
        return cls(model_id, script=load_script(path), latency_ms=latency_ms, outage=outage,
                   outage_ms=outage_ms, quota_rps=quota_rps)

    def reply(self, request: ModelRequest) -> ModelResponse:
        """Return the response for `request` without any latency.

        A scripted reply wins; otherwise the template answers, and a request
        with a response schema is answered in that shape (`schema_instance`).
        """
        user_turns = [m for m in request.messages if m.get("role") == "user"]
        last_user = str(user_turns[-1].get("content") or "") if user_turns else ""
        usage_in = _words(request.messages)
        for line in self._script:
            if line.match in last_user:
                return self._response(line.text, line.tool_calls, line.finish_reason, usage_in)
        text = template_reply(request.messages)
        if request.response_schema is not None:
            digest = hashlib.sha256(text.encode()).digest()
            text = json.dumps(schema_instance(request.response_schema, text, digest),
                              sort_keys=True)
        return self._response(text, (), "stop", usage_in)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer after the configured latency; raises only inside a simulated outage.

        Raises:
            RateLimitedError: The simulated quota is used up for now.
            ProviderUnavailable: This call's number is in the configured outage.
        """
        if self._quota is not None:
            if not self._quota.has_capacity(1):
                self.rate_limited += 1
                raise RateLimitedError(f"simulated quota: {self.model_id} answered 429, over its "
                                       "quota of requests per second (Retry-After: 1)",
                                       model_id=self.model_id, retry_after_s=1.0)
            await self._quota.acquire(1)
        self._calls += 1
        call = self._calls
        down = self._down(call)
        if self._latency_ms:
            await self._sleep(self._latency_ms / 1000)
        if down:
            span = (f"{self._outage_ms} ms from call {self._outage.start}" if self._outage_ms
                    else f"calls {self._outage.start}-{self._outage.stop - 1}")
            raise ProviderUnavailable(
                f"simulated outage: call {call} answered 503 (the outage covers {span})",
                model_id=self.model_id, status=503)
        return self.reply(request)

    def _down(self, call: int) -> bool:
        """Whether the simulated outage covers `call`, which has just arrived."""
        if not self._outage_ms:
            return call in self._outage
        if not self._outage or call < self._outage.start:
            return False
        now = self._clock()
        if self._outage_began is None:
            self._outage_began = now
        return now - self._outage_began < self._outage_ms / 1000

    async def aclose(self) -> None:
        """Nothing to release."""

    def _response(self, text: str, calls: tuple[ToolCall, ...], finish: str,
                  prompt_words: int) -> ModelResponse:
        completion = len(text.split())
        # Word counts stand in for tokens: deterministic and good enough for
        # the accounting that benchmarks and demos print.
        usage = {"prompt_tokens": prompt_words, "completion_tokens": completion,
                 "total_tokens": prompt_words + completion}
        return ModelResponse(text=text, model_id=self.model_id, tool_calls=calls,
                             finish_reason=finish, usage=usage)


def schema_instance(schema: Mapping[str, Any], text: str, digest: bytes, depth: int = 0,
                    root: Mapping[str, Any] | None = None) -> Any:
    """A value of `schema`, chosen from `text` and `digest`: the local model's structured answer.

    Deterministic, like every local answer: an enum picks by the digest, a
    string is the start of the template text, numbers and booleans come from
    the digest, objects get every property, arrays one item.
    """
    root = schema if root is None else root
    if depth > 8:
        return None
    reference = schema.get("$ref")
    if isinstance(reference, str) and reference.startswith("#/"):
        target: Any = root
        for part in reference[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, Mapping) else {}
        return schema_instance(target, text, digest, depth + 1, root)
    for choice in ("anyOf", "oneOf"):
        options = schema.get(choice)
        if isinstance(options, list) and options:
            return schema_instance(options[0], text, digest, depth + 1, root)
    if schema.get("enum"):
        return schema["enum"][digest[depth % len(digest)] % len(schema["enum"])]
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties") or {}
        return {name: schema_instance(sub, text, digest, depth + 1, root)
                for name, sub in properties.items() if isinstance(sub, Mapping)}
    if kind == "array":
        items = schema.get("items")
        return [schema_instance(items, text, digest, depth + 1, root)] if isinstance(
            items, Mapping) else []
    if kind == "integer":
        low = int(schema.get("minimum", 0))
        return low + digest[depth % len(digest)] % 10
    if kind == "number":
        return float(schema.get("minimum", 0)) + digest[depth % len(digest)] / 255
    if kind == "boolean":
        return bool(digest[depth % len(digest)] % 2)
    if kind == "null":
        return None
    return text[: int(schema.get("maxLength", 80))]
