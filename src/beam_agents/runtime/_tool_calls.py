"""Durable tool calls: a recorded tool result is never run again (invariant 13).

An agent's code runs again on every retry: a suspension after a provider
outage, a bundle retry, a crash, a restore, a rerun. A tool that changes the
world (opens a ticket, issues a refund) must not change it again each time.
So ``ctx.tools`` (`ToolCalls`) records each call's result the way the model
facade records a paid call:

* in the replay cache, under a key scoped to ``(entity_key, seq)`` and the
  call's *ordinal* (its place among the activation's tool calls), which a
  suspended activation commits and its retry reads;
* in the call journal, before the agent sees the result, which a bundle
  retry, a crash, a restore, an upgrade and a rerun read.

A replay finds the record and returns it; the tool does not run. Each call
also carries an idempotency key derived from ``(entity_key, seq, ordinal)``
alone, handed to a tool that takes ``idempotency_key``: a call cut off
between its effect and its record runs again with the same key, which an API
that honours idempotency keys turns into the same effect once. A tool that
declares ``reconcile`` is asked first instead: its start is journaled before
it runs, and a start with no result means "ask whether it happened".

The result the agent sees is always the recorded one, decoded from the
record's bytes, so a first run and its replays see equal values.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pydantic

from beam_agents._bridge import RunSync
from beam_agents._canonical import canonical_json
from beam_agents.errors import (
    BeamAgentsError,
    StateCorruptError,
    ToolCallLimitError,
    ToolFailedError,
    ToolLoopError,
    ToolNotRecordedError,
    ToolUnavailable,
)
from beam_agents.metrics import MetricsSink
from beam_agents.model import (
    CallJournal,
    Message,
    ModelFacade,
    ModelResponse,
    ReplayCache,
    compute_cache_key,
)
from beam_agents.model._journal import (
    MAX_JOURNAL_RESPONSE_BYTES,
    JournalEntry,
    journal_entry,
    journal_key,
)
from beam_agents.runtime._tools import Tool, call_function
from beam_agents.tracing import NOOP_SPAN, NOOP_TRACER, ActivationTrace

__all__ = ["TOOLS_NAMESPACE", "ToolCalls", "ToolLoopResult", "idempotency_key"]

_log = logging.getLogger(__name__)

TOOLS_NAMESPACE = "beam_agents.tools"
_RECORD_VERSION = 1


def idempotency_key(entity_key: bytes, seq: int, ordinal: int) -> str:
    """The idempotency key of tool call `ordinal` (from 0) of activation `seq` of an entity.

    Stable across retries, crashes, restores and upgrades of the same
    activation, and different for every other call: 32 hex digits.
    """
    digest = hashlib.sha256(b"beam-agents tool call\0%d\0%d\0" % (seq, ordinal) + entity_key)
    return digest.hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class ToolLoopResult:
    """What a tool loop ended with: the final answer and the whole conversation.

    Attributes:
        answer: The model's last response, which asked for no more tools.
        messages: The conversation: yours, then each assistant turn and the
            tool results fed back, ending with the answer.
        steps: How many model turns it took.
    """

    answer: ModelResponse
    messages: tuple[Message, ...]
    steps: int

    @property
    def text(self) -> str:
        """The final answer's text."""
        return self.answer.text


class ToolCalls:
    """``ctx.tools``: call the agent's tools durably, or let the model call them in a loop.

    One per activation. Not thread-safe beyond what its owner does: calls
    are made on the runtime's event loop (``acall``), or from a sync agent's
    thread through ``call``, which runs them there.
    """

    def __init__(self, *, tools: Sequence[Tool], cache: ReplayCache,
                 journal: CallJournal | None, journaled: Mapping[str, JournalEntry] | None,
                 entity_key: bytes, seq: int, now_ms: int, journal_ttl_ms: int,
                 event_digest: bytes, metrics: MetricsSink, max_calls: int,
                 run_sync: RunSync | None,
                 run_in_thread: Callable[[Callable[[], Any]], Awaitable[Any]],
                 dry_run: bool = False, trace: ActivationTrace | None = None) -> None:
        self._tools = {t.name: t for t in tools}
        self._cache = cache
        self._journal = journal
        self._journaled = dict(journaled or {})
        self._entity_key = entity_key
        self._seq = seq
        self._now_ms = now_ms
        self._ttl_ms = journal_ttl_ms
        self._event_digest = event_digest
        self._metrics = metrics
        self._max_calls = max_calls
        self._run_sync = run_sync
        self._run_in_thread = run_in_thread
        self._ordinal = 0
        self._unrecorded_warned = False
        self._dry_run = dry_run  # replay: a call with no record is not run
        # Each call is an ``execute_tool`` child of the activation's span.
        self._trace = trace if trace is not None else ActivationTrace(
            NOOP_TRACER, NOOP_SPAN, provider="", model_id="")

    @property
    def names(self) -> tuple[str, ...]:
        """The tools the agent may call, by name."""
        return tuple(self._tools)

    def specs(self, names: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The tools as a model sees them, for ``ctx.model.complete(..., tools=...)``."""
        return [self._tool(name).spec() for name in (names or self._tools)]

    def call(self, name: str, args: Mapping[str, Any] | None = None, /, **kwargs: Any) -> Any:
        """Call tool `name` once; from a sync agent. See `acall`."""
        if self._run_sync is None:
            return asyncio.run(self.acall(name, args, **kwargs))
        return self._run_sync(self.acall(name, args, **kwargs))

    async def acall(self, name: str, args: Mapping[str, Any] | None = None, /,
                    **kwargs: Any) -> Any:
        """Call tool `name` with `args` (or keywords); its recorded result if it has one.

        Returns:
            The tool's result as recorded (JSON data: a pydantic model comes
            back as its dict).

        Raises:
            ValueError: No tool has that name, or the arguments do not match its schema.
            ToolCallLimitError: The activation is past ``--max_tool_calls_per_activation``.
            ToolUnavailable: The tool asked to be tried later; the activation suspends.
            ToolFailedError: The tool raised anything else, or returned what is not JSON.
        """
        given = {**(args or {}), **kwargs}
        ordinal = self._ordinal
        if ordinal >= self._max_calls:
            raise ToolCallLimitError(tool=name, limit=self._max_calls)
        self._ordinal += 1
        key = compute_cache_key(f"beam_agents.tool/{name}", _jsonable(given), None,
                                {"ordinal": ordinal}, self._entity_key, self._seq)
        recorded = self._recorded(key)
        call_key = idempotency_key(self._entity_key, self._seq, ordinal)
        if recorded is not None:
            self._inc("tool_calls_replayed")
            self._trace.tool(name, call_id=call_key, replayed=True).end_tool(recorded)
            return recorded
        if self._dry_run:
            raise ToolNotRecordedError(tool=name)
        tool = self._tool(name)
        arguments = tool.arguments(given)
        span = self._trace.tool(name, call_id=call_key)
        try:
            if tool.reconcile is not None:
                reconciled = await self._reconciled(tool, key, call_key)
                if reconciled is not None:
                    span.event("beam_agents.tool.reconciled")
                    result = await self._record(key, reconciled, tool)
                    span.end_tool(result)
                    return result
            if tool.wants_key:
                arguments["idempotency_key"] = call_key
            self._inc("tool_calls")
            result = await self._record(key, await self._run(tool, arguments), tool)
        except BaseException as exc:
            span.end_tool(error_type=type(exc).__name__)
            raise
        span.end_tool(result)
        return result

    async def run_loop(self, model: ModelFacade, messages: Sequence[Message], *,
                       tools: Sequence[str] | None = None, max_steps: int = 8,
                       **sampling: Any) -> ToolLoopResult:
        """Ask the model, run the tools it asks for, feed back their results, until it answers.

        Every model turn is a recorded call of its own and every tool call a
        durable one, so a retry of the activation replays the loop without
        paying or running anything twice. Tool calls of one turn run side by
        side (async tools truly so). A call the model gets wrong (an unknown
        tool, arguments that do not match) is answered with the error, for
        the model to correct, as the providers' own loops do.

        Raises:
            ToolLoopError: After `max_steps` model turns it still asked for tools.
        """
        specs = self.specs(tools)
        conversation: list[Message] = [dict(m) for m in messages]
        for step in range(1, max_steps + 1):
            answer = await model.acomplete(conversation, tools=specs, **sampling)
            if not answer.tool_calls:
                conversation.append({"role": "assistant", "content": answer.text})
                return ToolLoopResult(answer=answer, messages=tuple(conversation), steps=step)
            conversation.append({"role": "assistant", "content": answer.text or None,
                                 "tool_calls": [{"id": c.id, "type": "function", "function": {
                                     "name": c.name,
                                     "arguments": canonical_json(c.arguments).decode()}}
                                                for c in answer.tool_calls]})
            # Ordinals are taken in the order the model listed the calls, before
            # any of them awaits, so a replay numbers them alike.
            results = await asyncio.gather(*(self._loop_call(c.name, c.arguments)
                                             for c in answer.tool_calls))
            conversation.extend({"role": "tool", "tool_call_id": c.id, "content": content}
                                for c, content in zip(answer.tool_calls, results, strict=True))
        pending = tuple(c.name for c in answer.tool_calls)
        raise ToolLoopError(max_steps=max_steps, pending=pending)

    def loop(self, model: ModelFacade, messages: Sequence[Message], *,
             tools: Sequence[str] | None = None, max_steps: int = 8,
             **sampling: Any) -> ToolLoopResult:
        """`run_loop`, for a sync agent."""
        coroutine = self.run_loop(model, messages, tools=tools, max_steps=max_steps, **sampling)
        return asyncio.run(coroutine) if self._run_sync is None else self._run_sync(coroutine)

    async def _loop_call(self, name: str, arguments: Mapping[str, Any]) -> str:
        """One tool call of the loop; a mistake of the model's is its answer, not a failure."""
        if name not in self._tools:
            return canonical_json({"error": f"no tool named {name!r}; the tools are "
                                            f"{sorted(self._tools)}"}).decode()
        try:
            result = await self.acall(name, arguments)
        except ValueError as exc:
            return canonical_json({"error": str(exc)}).decode()
        return canonical_json({"result": result}).decode()

    def _tool(self, name: str) -> Tool:
        found = self._tools.get(name)
        if found is None:
            raise ValueError(f"no tool named {name!r}; this agent declares "
                             f"{sorted(self._tools) or 'no tools'} (see beam_agents.agent)")
        return found

    def _recorded(self, key: str) -> Any | None:
        """The result recorded under `key`, from the replay cache or the journal; else None."""
        entry = self._cache.get(key)
        if entry is not None and not entry.digest_only:
            return _decoded(entry.response, key, cell="llm_cache")
        journaled = self._journaled.get(journal_key(key, self._event_digest))
        if journaled is not None and not journaled.digest_only:
            self._inc("tool_journal_hits")
            if entry is None:
                self._cache.put(key, journaled.response)
            return _decoded(journaled.response, key, cell="call_journal")
        return None

    async def _reconciled(self, tool: Tool, key: str, call_key: str) -> Any | None:
        """For a tool with ``reconcile``: ask it about a call started and never recorded.

        The start is journaled before the tool runs (first write wins), so a
        start found here, with no result, is a call a crash cut off.
        """
        if self._journal is None:
            return None
        start = journal_key(_start_key(key), self._event_digest)
        if start in self._journaled:
            self._inc("tool_calls_reconciled")
            reconcile = tool.reconcile
            assert reconcile is not None
            answer = reconcile(call_key) if asyncio.iscoroutinefunction(reconcile) else \
                await self._run_in_thread(lambda: reconcile(call_key))
            return await answer if asyncio.iscoroutine(answer) else answer
        marker = journal_entry(cache_key=start, entity_key=self._entity_key, seq=self._seq,
                               response=canonical_json({"started": call_key}),
                               now_ms=self._now_ms, ttl_ms=self._ttl_ms,
                               max_response_bytes=MAX_JOURNAL_RESPONSE_BYTES)
        await self._journal.write(marker)
        return None

    async def _run(self, tool: Tool, arguments: dict[str, Any]) -> Any:
        try:
            return await call_function(tool.function, arguments, self._run_in_thread)
        except ToolUnavailable as exc:
            self._inc("tool_errors")
            raise ToolUnavailable(str(exc), tool=tool.name) from exc
        except BeamAgentsError:
            self._inc("tool_errors")
            raise  # ours already (a model call the tool made, say): its own stage
        except Exception as exc:
            self._inc("tool_errors")
            raise ToolFailedError(f"tool {tool.name!r} raised {type(exc).__name__}: {exc}",
                                  tool=tool.name) from exc

    async def _record(self, key: str, result: Any, tool: Tool) -> Any:
        """Journal, then stage, `result`; return it as the record holds it."""
        try:
            data = canonical_json({"v": _RECORD_VERSION, "result": _jsonable(result)})
        except (TypeError, ValueError) as exc:
            raise ToolFailedError(f"tool {tool.name!r} returned a value that is not JSON data "
                                  f"({exc}); return dicts, lists, strings, numbers, booleans "
                                  "or None", tool=tool.name) from exc
        if self._journal is not None:
            entry = journal_entry(cache_key=journal_key(key, self._event_digest),
                                  entity_key=self._entity_key, seq=self._seq, response=data,
                                  now_ms=self._now_ms, ttl_ms=self._ttl_ms,
                                  max_response_bytes=MAX_JOURNAL_RESPONSE_BYTES)
            written = await self._journal.write(entry)
            if not written.won and not written.stored.digest_only:
                data = written.stored.response  # another attempt recorded it first: its stands
        stored = self._cache.put(key, data)
        if stored.digest_only and self._journal is None and not self._unrecorded_warned:
            self._unrecorded_warned = True
            _log.warning("tool %s returned %d bytes, too many for the replay cache; without "
                         "--call_journal a retry of this activation runs it again",
                         tool.name, len(data))
        return _decoded(data, key, cell="tool result")

    def _inc(self, name: str) -> None:
        self._metrics.inc(TOOLS_NAMESPACE, name)


def _start_key(key: str) -> str:
    """The journal key of a call's start marker: derived from, and distinct from, its result's."""
    return hashlib.sha256(b"started\0" + bytes.fromhex(key)).hexdigest()


def _jsonable(value: Any) -> Any:
    """Tool arguments or a result as JSON data: pydantic models as their dicts."""
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _decoded(data: bytes, key: str, *, cell: str) -> Any:
    try:
        document = json.loads(data)
        if document.get("v") != _RECORD_VERSION:
            raise ValueError(f"unknown record version {document.get('v')!r}")
        return document["result"]
    except (ValueError, KeyError, AttributeError) as exc:
        raise StateCorruptError(f"{cell} record of tool call {key} does not decode: {exc}",
                                cell=cell) from exc
