"""The model facade an agent calls as ``ctx.model``: cache, journal, admission, breaker, provider.

One facade serves one activation, ``(entity_key, seq)``, over a
`ModelClient` built once per worker: the provider, its breaker and admission,
the journal, the metrics sink, none of which changes between activations.
Every call runs in the order invariants 3, 11 and 12 fix:

1. compute the cache key over the request and ``(entity_key, seq)``;
2. look it up in the replay cache, then the journal; a full hit is returned
   as is, without touching the breaker or the provider, so a replayed
   activation sees the responses of its first run even while the provider is
   down; its tokens count as replayed, never as paid;
3. on a miss, check the entity's token budget with the request's estimate,
   wait for the provider's admission (its rate, its tokens, a Retry-After in
   force), ask the circuit breaker, and call the provider once; a 429 pauses
   the provider's admission and the call waits and asks again, without a word
   to the breaker (flow control is not failure);
4. count the tokens paid, charge the budget with them, and stage the
   canonical response bytes in the cache.

A digest-only entry (a response too large to keep, seed 002) cannot be
replayed, so the provider is called again and the fresh response is compared
with the stored digest; a mismatch is counted as
``beam_agents.model:replay_divergence`` and logged once per facade, never
silently accepted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from beam_agents._bridge import RunSync
from beam_agents.errors import (
    ProviderUnavailable,
    QuotaExhaustedError,
    RateLimitedError,
    StateCorruptError,
    StructuredOutputError,
)
from beam_agents.metrics import MetricsSink
from beam_agents.model._admission import (
    ProviderAdmission,
    Ticket,
    WaitLedger,
    estimate_tokens,
)
from beam_agents.model._breaker import CircuitBreaker
from beam_agents.model._budget import TokenBudget
from beam_agents.model._cache_key import compute_cache_key
from beam_agents.model._journal import (
    DEFAULT_JOURNAL_TTL_MS,
    MAX_JOURNAL_RESPONSE_BYTES,
    CallJournal,
    JournalEntry,
    journal_entry,
    journal_key,
    request_summary,
)
from beam_agents.model._provider import ModelProvider
from beam_agents.model._replay_cache import ReplayCache
from beam_agents.model._send_gate import RequestHeldBack, armed
from beam_agents.model._structured import ResponseShape, retry_message, shape_of
from beam_agents.model._types import Message, ModelRequest, ModelResponse
from beam_agents.tracing import NOOP_SPAN, NOOP_TRACER, ActivationTrace, CallTrace

__all__ = ["METRICS_NAMESPACE", "ModelClient", "ModelFacade"]

_log = logging.getLogger(__name__)

METRICS_NAMESPACE = "beam_agents.model"


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ModelClient:
    """What every activation on a worker reaches the model through; built once per worker.

    A host (`ActivationRuntime`) builds one when the worker starts, from
    clients it built itself, and hands it to each activation's `ModelFacade`.
    It holds live clients, so it is never pickled or compared by value.

    Attributes:
        provider: The model backend.
        breaker: The model's circuit breaker.
        metrics: Where the ``beam_agents.model`` counters go.
        run_sync: How `ModelFacade.complete` drives `ModelFacade.acomplete`
            from sync code. None: `asyncio.run`, a fresh event loop per call;
            a runtime that keeps a worker loop passes its own.
        journal: The durable call journal, or None. Consulted after the
            replay cache and before the breaker, and written before a fresh
            response reaches the agent (invariants 3 and 9).
        journal_ttl_ms: How long a journal entry lives.
        admission: The provider's admission on this worker, shared by every
            activation (invariant 11). None: each facade gets a private,
            unpaced one (`ProviderAdmission.unpaced`).
    """

    provider: ModelProvider
    breaker: CircuitBreaker
    metrics: MetricsSink
    run_sync: RunSync | None = None
    journal: CallJournal | None = None
    journal_ttl_ms: int = DEFAULT_JOURNAL_TTL_MS
    admission: ProviderAdmission | None = None


_CLIENT_FIELDS = frozenset(field.name for field in dataclasses.fields(ModelClient))


def _client_from_keywords(worker: Mapping[str, Any]) -> ModelClient:
    """The `ModelClient` the facade's older keyword form describes, with a DeprecationWarning."""
    if unknown := sorted(set(worker) - _CLIENT_FIELDS):
        raise TypeError(f"ModelFacade got unexpected keyword arguments: {', '.join(unknown)}")
    if missing := sorted({"provider", "breaker", "metrics"} - set(worker)):
        raise TypeError(f"ModelFacade needs client=ModelClient(...); missing: "
                        f"{', '.join(missing)}")
    warnings.warn(f"ModelFacade({', '.join(f'{name}=' for name in sorted(worker))}...) is "
                  "deprecated: pass client=ModelClient(...), built once per worker; the "
                  "keywords go in the next release", DeprecationWarning, stacklevel=3)
    return ModelClient(**worker)


class ModelFacade:
    """Memoised model access for one activation; replays are byte-identical (invariant 3).

    Two identical requests within one activation share one cache key (the
    key covers the request and ``(entity_key, seq)`` only), so the second
    call replays the first response instead of asking the model again. To
    get a second, independent answer in the same activation, make the
    request differ, e.g. pass a different ``seed`` or add a message.

    The provider, breaker, metrics sink, journal and admission come from the
    worker's `ModelClient`. The older form, those passed one by one
    (``ModelFacade(cache=..., provider=..., breaker=..., metrics=..., ...)``),
    still works through 0.1.0, with a DeprecationWarning.

    Args:
        client: What the worker's activations share to reach the model.
        cache: The activation's replay cache (staged in memory only).
        entity_key: The key of the entity this activation runs for.
        seq: The activation number being run.
        journaled: This activation's journal entries, read once when it
            started (one range read per activation, not one per call).
        now_ms: The activation's event time, stamped on journal entries.
        event_digest: The sha256 of the activation's event; journal entries
            are keyed by the cache key bound to it (see `journal_key`), so
            only attempts of the same event replay them. Empty: the cache key.
        waits: Where the time this activation's calls wait for admission is
            kept, which the activation timeout leaves out.
        budget: The entity's token budget, or None for no cap (invariant 12).
        trace: The activation's span; each call is a ``chat`` child of it, a
            replayed one marked so (`beam_agents.tracing`). None: no spans.
    """

    def __init__(self, *, client: ModelClient | None = None, cache: ReplayCache,
                 entity_key: bytes, seq: int,
                 journaled: Mapping[str, JournalEntry] | None = None, now_ms: int = 0,
                 event_digest: bytes = b"", waits: WaitLedger | None = None,
                 budget: TokenBudget | None = None, trace: ActivationTrace | None = None,
                 **worker: Any) -> None:
        if client is None:
            client = _client_from_keywords(worker)
        elif worker:
            raise TypeError(f"ModelFacade got client and also {', '.join(sorted(worker))}; "
                            "pass them in the ModelClient")
        if not isinstance(entity_key, bytes):
            raise TypeError(f"entity_key must be bytes, got {type(entity_key).__name__}")
        provider = client.provider
        self._cache = cache
        self._provider = provider
        self._breaker = client.breaker
        self._metrics = client.metrics
        self._entity_key = entity_key
        self._seq = seq
        self._run_sync = client.run_sync
        self._journal = client.journal
        self._journaled = dict(journaled or {})
        self._now_ms = now_ms
        self._journal_ttl_ms = client.journal_ttl_ms
        self._event_digest = event_digest
        self._admission = (client.admission if client.admission is not None
                           else ProviderAdmission.unpaced(model_id=provider.model_id))
        self._waits = waits
        self._budget = budget
        self._trace = trace if trace is not None else ActivationTrace(
            NOOP_TRACER, NOOP_SPAN, provider="", model_id=provider.model_id)
        self._divergence_logged = False
        self._key_locks: dict[str, asyncio.Lock] = {}
        self._tool_loop: Callable[..., Awaitable[Any]] | None = None

    def use_tools(self, loop: Callable[..., Awaitable[Any]]) -> None:
        """Give `run_tools` the activation's tool loop (``ctx.tools``), which records each call."""
        self._tool_loop = loop

    async def arun_tools(self, messages: Sequence[Message], *,
                         tools: Sequence[str] | None = None, max_steps: int = 8,
                         **sampling: Any) -> Any:
        """Ask, run the tools the model asks for, feed their results back, until it answers.

        Each model turn is a recorded call and each tool call a recorded one
        (invariants 9 and 13), so a retried activation replays the whole loop.

        Args:
            messages: The conversation so far.
            tools: Names of the agent's tools to offer; all of them by default.
            max_steps: The most model turns; past it, `ToolLoopError`.
            **sampling: As for `acomplete`.

        Returns:
            A ``ToolLoopResult``: ``.answer``, ``.text``, ``.messages``, ``.steps``.
        """
        if self._tool_loop is None:
            raise RuntimeError("run_tools needs an activation's tools (ctx.model in an agent)")
        return await self._tool_loop(self, messages, tools=tools, max_steps=max_steps,
                                     **sampling)

    def run_tools(self, messages: Sequence[Message], *, tools: Sequence[str] | None = None,
                  max_steps: int = 8, **sampling: Any) -> Any:
        """Do what `arun_tools` does, for synchronous agents."""
        coroutine = self.arun_tools(messages, tools=tools, max_steps=max_steps, **sampling)
        return asyncio.run(coroutine) if self._run_sync is None else self._run_sync(coroutine)

    @property
    def model_id(self) -> str:
        """The model this facade calls; part of every cache key."""
        return self._provider.model_id

    async def acomplete(self, messages: Sequence[Message], *,
                        tools: Sequence[Mapping[str, Any]] | None = None,
                        response_schema: Any = None, schema_attempts: int = 3,
                        **sampling: Any) -> ModelResponse:
        """Answer `messages`, from the replay cache when this activation already asked.

        Args:
            messages: OpenAI-style ``{"role": ..., "content": ...}`` mappings.
            tools: Function specs, OpenAI form (``{"type": "function",
                "function": {...}}``) or bare (``{"name": ..., "parameters": ...}``).
            response_schema: A JSON schema (a dict) or a pydantic model class
                the answer must match; the response's ``parsed`` holds it checked.
                An answer that does not match is asked again with the errors.
            schema_attempts: How many answers to ask for, at most, before
                `StructuredOutputError`.
            **sampling: ``temperature``, ``top_p``, ``top_k``, ``max_tokens``,
                ``stop``, ``seed``, ``presence_penalty``, ``frequency_penalty``.

        Returns:
            The response; ``cached`` is True when the replay cache served it.

        Raises:
            TypeError: Malformed messages/tools, or non-JSON values in them.
            ValueError: Unknown roles or sampling keys, NaN/Infinity.
            ProviderUnavailable: Breaker open, or a retriable provider failure.
            ProviderRejected: The provider refused the request.
            StateCorruptError: The cached response for this call does not decode.
        """
        if response_schema is not None:
            return await self._structured(messages, tools, shape_of(response_schema),
                                          schema_attempts, sampling)
        return await self._ask(ModelRequest(model_id=self._provider.model_id, messages=messages,
                                            tools=() if tools is None else tools,
                                            sampling=sampling))

    async def _structured(self, messages: Sequence[Message],
                          tools: Sequence[Mapping[str, Any]] | None, shape: ResponseShape,
                          attempts: int, sampling: Mapping[str, Any]) -> ModelResponse:
        """Ask until an answer matches `shape`, telling the model what was wrong each time."""
        conversation = list(messages)
        errors = ""
        for _ in range(max(1, attempts)):
            response = await self._ask(ModelRequest(
                model_id=self._provider.model_id, messages=conversation,
                tools=() if tools is None else tools, sampling=sampling,
                response_schema=shape.schema))
            if response.tool_calls:
                return response  # the model wants a tool first; the answer comes later
            value, problem = shape.check(response.text)
            if problem is None:
                return dataclasses.replace(response, parsed=value)
            errors = problem
            self._inc("schema_retries")
            conversation += [{"role": "assistant", "content": response.text},
                             retry_message(problem)]
        raise StructuredOutputError(
            f"{self._provider.model_id} answered {attempts} times without matching the "
            f"response schema; the last answer's problems: {errors}",
            model_id=self._provider.model_id, attempts=attempts, errors=errors)

    async def _ask(self, request: ModelRequest) -> ModelResponse:
        """One model call of this activation: replayed if asked before, else paid once."""
        shaped = ({} if request.response_schema is None
                  else {"response_schema": request.response_schema})
        key = compute_cache_key(request.model_id, list(request.messages), list(request.tools),
                                {**request.sampling, **shaped}, self._entity_key, self._seq)
        # Identical requests awaited concurrently (asyncio.gather) queue on one
        # lock, so the second finds the first's response staged and replays
        # it, exactly as it would sequentially.
        async with self._key_locks.setdefault(key, asyncio.Lock()):
            return await self._lookup_or_call(key, request)

    async def _lookup_or_call(self, key: str, request: ModelRequest) -> ModelResponse:
        entry = self._cache.get(key)
        if entry is not None and not entry.digest_only:
            self._inc("cache_hits")
            cached = _decoded(entry.response, f"llm_cache entry {key}", cell="llm_cache")
            self._inc("tokens_replayed", cached.tokens_in + cached.tokens_out)
            self._trace.replayed(request, cached, source="cache", cache_key=key)
            return cached
        journaled = self._journaled.get(journal_key(key, self._event_digest))
        if journaled is not None and not journaled.digest_only:
            # Paid for by an attempt whose commit was lost (a bundle retry, a
            # crash, a restore, a rerun): replay it, do not pay again (invariant 9).
            self._inc("journal_hits")
            if entry is None:
                self._cache.put(key, journaled.response)
            replayed = _decoded(journaled.response, f"journal entry {key}", cell="call_journal")
            tokens = replayed.tokens_in + replayed.tokens_out
            self._inc("tokens_replayed", tokens)
            self._trace.replayed(request, replayed, source="journal", cache_key=key)
            if self._budget is not None:
                # Its charge was lost with the commit the journal outlived
                # (invariant 12): charged again, it leaves the budget as a run
                # without the crash would have.
                self._budget.charge(tokens)
            return replayed
        self._inc("cache_misses" if entry is None else "digest_only_hits")
        call = self._trace.call(request, cache_key=key)
        started = asyncio.get_running_loop().time()
        try:
            response = await self._call_provider(request, call)
        except BaseException as exc:
            call.end(error_type=type(exc).__name__,
                     duration_s=asyncio.get_running_loop().time() - started)
            raise
        call.end(response, duration_s=asyncio.get_running_loop().time() - started)
        paid = response.tokens_in + response.tokens_out
        data = response.to_bytes()
        # What an earlier attempt was answered, when only its digest was kept.
        recorded = entry.digest if entry is not None else (
            journaled.sha256 if journaled is not None else None)
        if self._journal is not None and journaled is None:
            stored = await self._write_journal(key, data, request)
            if stored is not None:
                # Another attempt journaled this call first: its answer is the
                # record, and a full one is what this attempt replays too.
                recorded = stored.sha256
                if not stored.digest_only and stored.response != data:
                    self._report_divergence(key, stored.sha256.hex(), data)
                    data = stored.response
                    response = _decoded(data, f"journal entry {key}", cell="call_journal")
                    recorded = None
        if entry is None:
            self._cache.put(key, data)
        if recorded is not None and hashlib.sha256(data).digest() != recorded:
            # The stored digest is left in place: it is the record of what
            # the first run was answered, and overwriting it with this
            # response would let a third run "agree" with a divergent one.
            self._report_divergence(key, recorded.hex(), data)
        if self._budget is not None:
            # Last, once the call is journaled and staged: a budget this call
            # passed fails the activation (stage BUDGET), and a redrive in the
            # next window replays the answer instead of paying for it again.
            self._budget.charge(paid)
        return response

    async def _write_journal(self, key: str, data: bytes,
                             request: ModelRequest) -> JournalEntry | None:
        """Journal a fresh response before the agent sees it; the entry that stands, if not ours."""
        assert self._journal is not None
        fresh = journal_entry(cache_key=journal_key(key, self._event_digest),
                              entity_key=self._entity_key, seq=self._seq,
                              response=data, now_ms=self._now_ms, ttl_ms=self._journal_ttl_ms,
                              max_response_bytes=MAX_JOURNAL_RESPONSE_BYTES,
                              request=request_summary(request))
        self._inc("journal_writes")
        written = await self._journal.write(fresh)
        return None if written.won else written.stored

    def complete(self, messages: Sequence[Message], *,
                 tools: Sequence[Mapping[str, Any]] | None = None,
                 response_schema: Any = None, schema_attempts: int = 3,
                 **sampling: Any) -> ModelResponse:
        """Do what `acomplete` does, for synchronous agents.

        Raises:
            RuntimeError: Called on a thread whose event loop is running and no
                ``run_sync`` was injected; an async agent must
                ``await ctx.model.acomplete(...)``.
        """
        run_sync = self._run_sync
        if run_sync is None:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                run_sync = asyncio.run
            else:
                raise RuntimeError(
                    "ctx.model.complete() was called inside a running event loop; an async "
                    "agent must use `await ctx.model.acomplete(...)` instead"
                ) from None
        return run_sync(self.acomplete(messages, tools=tools, response_schema=response_schema,
                                       schema_attempts=schema_attempts, **sampling))

    async def _call_provider(self, request: ModelRequest, call: CallTrace) -> ModelResponse:
        """Pay for `request` once: budget, admission, breaker, then one provider attempt at a time.

        A 429 is answered by waiting for admission again, which the 429 has
        paused for the whole provider; every attempt is counted once, here
        (``provider_calls``), since the clients' own retries are off.
        """
        tokens = estimate_tokens(request, output_tokens=self._admission.output_estimate)
        if self._budget is not None:
            self._budget.check(tokens)
        while True:
            asked = asyncio.get_running_loop().time()
            try:
                ticket = await self._admission.admit(tokens, self._waits)
            except QuotaExhaustedError:
                self._inc("quota_held")
                raise
            waited = asyncio.get_running_loop().time() - asked
            if waited > 0.001:
                call.waited(waited)
            response = await self._attempt(request, ticket, call)
            if response is not None:
                return response

    async def _attempt(self, request: ModelRequest, ticket: Ticket,
                       call: CallTrace) -> ModelResponse | None:
        """One admitted attempt; None when the provider rate-limited it and it must ask again."""
        admission, now = self._admission, asyncio.get_running_loop().time
        try:
            self._breaker.before_call()
        except ProviderUnavailable:
            admission.released(ticket)
            self._inc("breaker_rejections")
            raise
        try:
            response = await self._send(request, ticket)
        except RequestHeldBack:
            # A 429 was read after this call was admitted: it was never sent,
            # and waits for admission again (invariant 11).
            admission.held_back(ticket)
            self._breaker.record_inconclusive()
            self._inc("held_back")
            call.held_back()
            return None
        except RateLimitedError as exc:
            # Flow control, not failure (invariant 11): the breaker hears
            # nothing, and the call waits out the pause and asks again.
            self._inc("rate_limited")
            call.rate_limited(exc.retry_after_s)
            self._breaker.record_inconclusive()
            admission.rate_limited(ticket, exc.retry_after_s, now=now())
            return None
        except QuotaExhaustedError:
            self._inc("quota_exhausted")
            self._breaker.record_inconclusive()
            admission.quota_exhausted(ticket, now=now())
            raise
        except ProviderUnavailable:
            admission.released(ticket)
            self._inc("provider_errors")
            self._breaker.record_failure()
            raise
        except Exception:
            # A ProviderRejected says nothing about the provider's health, and
            # a raw exception (a provider breaking its contract) is a bug, not
            # evidence that the model is down: neither counts as a failure.
            admission.released(ticket)
            self._inc("provider_errors")
            self._breaker.record_inconclusive()
            raise
        except BaseException:
            # Cancellation (an activation timeout): free a half-open trial slot.
            admission.released(ticket)
            self._breaker.record_inconclusive()
            raise
        self._breaker.record_success()
        admission.succeeded(ticket, response, now=now())
        self._inc("paid_calls")
        self._inc("tokens_in", response.tokens_in)
        self._inc("tokens_out", response.tokens_out)
        return response

    async def _send(self, request: ModelRequest, ticket: Ticket) -> ModelResponse:
        """One provider attempt, stopped before it is sent if a pause began since admission.

        The facade looks itself, for providers that do not say when they
        write; the HTTP providers look again at their first write (`armed`).
        Every attempt that may have reached the provider counts as
        ``provider_calls``; one held back does not.
        """
        check = partial(self._admission.check_send, ticket)
        check()
        sent = True
        try:
            with armed(check):
                return await self._provider.complete(request)
        except RequestHeldBack:
            sent = False
            raise
        finally:
            if sent:
                self._inc("provider_calls")

    def _report_divergence(self, key: str, stored_hex: str, fresh: bytes) -> None:
        self._inc("replay_divergence")
        if not self._divergence_logged:
            self._divergence_logged = True
            _log.warning(
                "replay divergence: model %s answered differently on replay of seq %d "
                "(cache key %s, stored sha256 %s, fresh sha256 %s); the fresh response is "
                "used. The model is not deterministic for this request; pin sampling "
                "(temperature=0, seed) if replays must agree.",
                self._provider.model_id, self._seq, key, stored_hex,
                hashlib.sha256(fresh).hexdigest(),
            )

    def _inc(self, name: str, value: int = 1) -> None:
        if value:
            self._metrics.inc(METRICS_NAMESPACE, name, value)


def _decoded(data: bytes, what: str, *, cell: str) -> ModelResponse:
    try:
        return ModelResponse.from_bytes(data, cached=True)
    except ValueError as exc:
        # Only this library writes these bytes, so this is corrupt state
        # (invariant 8), reported as such rather than papered over.
        raise StateCorruptError(f"{what} does not decode: {exc}", cell=cell) from exc
