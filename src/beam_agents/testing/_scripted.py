"""A scripted `ModelProvider` for agent tests: replies written in code, calls counted.

`ScriptedModel` answers call ``n`` with reply ``n`` of its script, or asks a
function for the reply, and records every request it receives. A reply is a
str (the response text), a `ModelResponse` (returned as given), or an
exception instance, raised on that call to simulate a provider failure::

    model = ScriptedModel(["Hello!", ProviderUnavailable("503"), "Hello again"])

It is deterministic: no clock, no randomness, no network. Because the model
facade consults the replay cache first (invariant 3), a replayed activation
does not reach the provider, and `ScriptedModel.calls` shows exactly that.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from beam_agents.model import ModelRequest, ModelResponse, ToolCall

__all__ = ["Reply", "ScriptExhaustedError", "ScriptedModel", "calls_tool"]

#: One scripted answer: response text, a full response, or an exception to raise.
Reply = str | ModelResponse | BaseException

_PREVIEW_CHARS = 80


class ScriptExhaustedError(AssertionError):
    """A `ScriptedModel` was called more often than its script has replies.

    It is an `AssertionError` because it means the test's expectations were
    wrong, not that a provider failed. Inside an activation it becomes the
    `Failed` outcome's error record (stage AGENT) like any other exception.

    Attributes:
        scripted: How many replies the script holds.
        call: The 1-based number of the call that found none.
    """

    def __init__(self, *, scripted: int, call: int, last_user: str) -> None:
        preview = last_user if len(last_user) <= _PREVIEW_CHARS else (
            last_user[:_PREVIEW_CHARS] + "...")
        super().__init__(
            f"ScriptedModel has {scripted} scripted repl{'y' if scripted == 1 else 'ies'} "
            f"but was called {call} times; add a reply for call {call} "
            f"(its last user message: {preview!r})")
        self.scripted = scripted
        self.call = call


def calls_tool(name: str, arguments: dict[str, Any] | None = None,
               *more: tuple[str, dict[str, Any]], text: str = "",
               model_id: str = "scripted") -> ModelResponse:
    """A scripted reply in which the model asks for tool calls: ``calls_tool("lookup", {...})``.

    More calls in the same turn follow as ``(name, arguments)`` pairs; each
    gets the id ``call_<n>``.
    """
    wanted = [(name, arguments or {}), *more]
    return ModelResponse(text=text, model_id=model_id, finish_reason="tool_calls",
                         tool_calls=tuple(ToolCall(id=f"call_{n}", name=each, arguments=args)
                                          for n, (each, args) in enumerate(wanted)),
                         usage={"prompt_tokens": 10, "completion_tokens": 5})


def _check_reply(reply: object, where: str) -> Reply:
    if isinstance(reply, str | ModelResponse | BaseException):
        return reply
    if isinstance(reply, type) and issubclass(reply, BaseException):
        raise TypeError(f"{where} is the exception class {reply.__name__}; pass an instance, "
                        f"e.g. {reply.__name__}('...')")
    raise TypeError(f"{where} must be a str, a ModelResponse or an exception instance, "
                    f"got {type(reply).__name__}")


def _last_user(request: ModelRequest) -> str:
    for message in reversed(request.messages):
        if message.get("role") == "user":
            return str(message.get("content") or "")
    return ""


class ScriptedModel:
    """A `ModelProvider` that answers from a script and counts its calls; deterministic.

    Call ``n`` (from 1) takes reply ``n`` of a sequence script, or the reply a
    callable script returns for the request. Running out of replies fails
    loudly with `ScriptExhaustedError` rather than repeating the last one, so
    a test notices an unexpected model call. Every call, including one that
    raises, counts in `calls` and `requests`.

    `aclose` releases nothing and keeps the counters and the script position,
    so one instance can serve a sequence of runtimes (each closes its provider)
    and be inspected afterwards. The counters are guarded by a lock, so
    concurrent awaits (``asyncio.gather`` in an agent) each take one reply.

    Args:
        script: The replies in call order, or a function from the
            `ModelRequest` to its reply. A reply is a str (the text; the
            finish reason is ``"stop"``), a `ModelResponse` (returned as
            given), or an exception instance (raised, e.g.
            ``ProviderUnavailable("503")``).
        model_id: The reported model id; part of the replay cache key.

    Raises:
        TypeError: A scripted reply, or `script` itself, has the wrong type;
            the message names the index.
    """

    def __init__(self, script: Sequence[Reply] | Callable[[ModelRequest], Reply], *,
                 model_id: str = "scripted") -> None:
        if not isinstance(model_id, str) or not model_id:
            raise TypeError(f"model_id must be a non-empty str, got {model_id!r}")
        self.model_id = model_id
        self._respond: Callable[[ModelRequest], Reply] | None = None
        self._replies: tuple[Reply, ...] = ()
        if isinstance(script, str | bytes) or not (
                callable(script) or isinstance(script, Sequence)):
            raise TypeError("script must be a list of replies or a function of the request, "
                            f"got {type(script).__name__}")
        if callable(script):
            self._respond = script
        else:
            self._replies = tuple(_check_reply(reply, f"script[{index}]")
                                  for index, reply in enumerate(script))
        self._lock = threading.Lock()
        self._requests: list[ModelRequest] = []

    @property
    def calls(self) -> int:
        """How many times `complete` was called, failed calls included."""
        with self._lock:
            return len(self._requests)

    @property
    def requests(self) -> tuple[ModelRequest, ...]:
        """The requests received, in call order."""
        with self._lock:
            return tuple(self._requests)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Record `request` and answer with the next reply.

        Raises:
            ScriptExhaustedError: A sequence script has no reply left.
            TypeError: A callable script returned something that is not a reply.
            BaseException: The exception the script gave for this call.
        """
        with self._lock:
            self._requests.append(request)
            call = len(self._requests)
        if self._respond is not None:
            reply = _check_reply(self._respond(request), f"the script's reply to call {call}")
        elif call <= len(self._replies):
            reply = self._replies[call - 1]
        else:
            raise ScriptExhaustedError(scripted=len(self._replies), call=call,
                                       last_user=_last_user(request))
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, str):
            return ModelResponse(text=reply, model_id=self.model_id, finish_reason="stop")
        return reply

    async def aclose(self) -> None:
        """Release nothing; the counters and the script position are kept."""
