"""The model facade an agent calls as ``ctx.model``: cache, journal, admission, breaker, provider.

One facade serves one activation, ``(entity_key, seq)``. Every call runs in
the order invariants 3, 11 and 12 fix:

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
import hashlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from beam_agents._bridge import RunSync
from beam_agents.errors import (
    ProviderUnavailable,
    QuotaExhaustedError,
    RateLimitedError,
    StateCorruptError,
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
)
from beam_agents.model._provider import ModelProvider
from beam_agents.model._replay_cache import ReplayCache
from beam_agents.model._types import Message, ModelRequest, ModelResponse

__all__ = ["METRICS_NAMESPACE", "ModelFacade"]

_log = logging.getLogger(__name__)

METRICS_NAMESPACE = "beam_agents.model"


class ModelFacade:
    """Memoised model access for one activation; replays are byte-identical (invariant 3).

    Two identical requests within one activation share one cache key (the
    key covers the request and ``(entity_key, seq)`` only), so the second
    call replays the first response instead of asking the model again. To
    get a second, independent answer in the same activation, make the
    request differ, e.g. pass a different ``seed`` or add a message.

    Args:
        cache: The activation's replay cache (staged in memory only).
        provider: The model backend, shared by the worker.
        breaker: The model's circuit breaker, shared by the worker.
        metrics: Where the ``beam_agents.model`` counters go.
        entity_key: The key of the entity this activation runs for.
        seq: The activation number being run.
        run_sync: How `complete` drives `acomplete` from sync code. The
            default, `asyncio.run`, starts a fresh event loop per call; a
            runtime that keeps a worker loop should pass its own.
        journal: The durable call journal, or None. Consulted after the
            replay cache and before the breaker, and written before a fresh
            response reaches the agent (invariants 3 and 9).
        journaled: This activation's journal entries, read once when it
            started (one range read per activation, not one per call).
        now_ms: The activation's event time, stamped on journal entries.
        journal_ttl_ms: How long a journal entry lives.
        event_digest: The sha256 of the activation's event; journal entries
            are keyed by the cache key bound to it (see `journal_key`), so
            only attempts of the same event replay them. Empty: the cache key.
        admission: The provider's admission on this worker, shared by every
            activation (invariant 11). None: a private, unpaced one
            (`ProviderAdmission.unpaced`).
        waits: Where the time this activation's calls wait for admission is
            kept, which the activation timeout leaves out.
        budget: The entity's token budget, or None for no cap (invariant 12).
    """

    def __init__(self, *, cache: ReplayCache, provider: ModelProvider,
                 breaker: CircuitBreaker, metrics: MetricsSink, entity_key: bytes, seq: int,
                 run_sync: RunSync | None = None, journal: CallJournal | None = None,
                 journaled: Mapping[str, JournalEntry] | None = None, now_ms: int = 0,
                 journal_ttl_ms: int = DEFAULT_JOURNAL_TTL_MS, event_digest: bytes = b"",
                 admission: ProviderAdmission | None = None, waits: WaitLedger | None = None,
                 budget: TokenBudget | None = None) -> None:
        if not isinstance(entity_key, bytes):
            raise TypeError(f"entity_key must be bytes, got {type(entity_key).__name__}")
        self._cache = cache
        self._provider = provider
        self._breaker = breaker
        self._metrics = metrics
        self._entity_key = entity_key
        self._seq = seq
        self._run_sync = run_sync
        self._journal = journal
        self._journaled = dict(journaled or {})
        self._now_ms = now_ms
        self._journal_ttl_ms = journal_ttl_ms
        self._event_digest = event_digest
        self._admission = admission if admission is not None else ProviderAdmission.unpaced(
            model_id=provider.model_id)
        self._waits = waits
        self._budget = budget
        self._divergence_logged = False
        self._key_locks: dict[str, asyncio.Lock] = {}

    @property
    def model_id(self) -> str:
        """The model this facade calls; part of every cache key."""
        return self._provider.model_id

    async def acomplete(self, messages: Sequence[Message], *,
                        tools: Sequence[Mapping[str, Any]] | None = None,
                        **sampling: Any) -> ModelResponse:
        """Answer `messages`, from the replay cache when this activation already asked.

        Args:
            messages: OpenAI-style ``{"role": ..., "content": ...}`` mappings.
            tools: Function specs, OpenAI form (``{"type": "function",
                "function": {...}}``) or bare (``{"name": ..., "parameters": ...}``).
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
        request = ModelRequest(model_id=self._provider.model_id, messages=messages,
                               tools=() if tools is None else tools, sampling=sampling)
        key = compute_cache_key(request.model_id, list(request.messages), list(request.tools),
                                dict(request.sampling), self._entity_key, self._seq)
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
            if self._budget is not None:
                # Its charge was lost with the commit the journal outlived
                # (invariant 12): charged again, it leaves the budget as a run
                # without the crash would have.
                self._budget.charge(tokens)
            return replayed
        self._inc("cache_misses" if entry is None else "digest_only_hits")
        response = await self._call_provider(request)
        paid = response.tokens_in + response.tokens_out
        data = response.to_bytes()
        # What an earlier attempt was answered, when only its digest was kept.
        recorded = entry.digest if entry is not None else (
            journaled.sha256 if journaled is not None else None)
        if self._journal is not None and journaled is None:
            stored = await self._write_journal(key, data)
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

    async def _write_journal(self, key: str, data: bytes) -> JournalEntry | None:
        """Journal a fresh response before the agent sees it; the entry that stands, if not ours."""
        assert self._journal is not None
        fresh = journal_entry(cache_key=journal_key(key, self._event_digest),
                              entity_key=self._entity_key, seq=self._seq,
                              response=data, now_ms=self._now_ms, ttl_ms=self._journal_ttl_ms,
                              max_response_bytes=MAX_JOURNAL_RESPONSE_BYTES)
        self._inc("journal_writes")
        written = await self._journal.write(fresh)
        return None if written.won else written.stored

    def complete(self, messages: Sequence[Message], *,
                 tools: Sequence[Mapping[str, Any]] | None = None,
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
        return run_sync(self.acomplete(messages, tools=tools, **sampling))

    async def _call_provider(self, request: ModelRequest) -> ModelResponse:
        """Pay for `request` once: budget, admission, breaker, then one provider attempt at a time.

        A 429 is answered by waiting for admission again, which the 429 has
        paused for the whole provider; every attempt is counted once, here
        (``provider_calls``), since the clients' own retries are off.
        """
        tokens = estimate_tokens(request, output_tokens=self._admission.output_estimate)
        if self._budget is not None:
            self._budget.check(tokens)
        while True:
            try:
                ticket = await self._admission.admit(tokens, self._waits)
            except QuotaExhaustedError:
                self._inc("quota_held")
                raise
            response = await self._attempt(request, ticket)
            if response is not None:
                return response

    async def _attempt(self, request: ModelRequest, ticket: Ticket) -> ModelResponse | None:
        """One admitted attempt; None when the provider rate-limited it and it must ask again."""
        admission, now = self._admission, asyncio.get_running_loop().time
        try:
            self._breaker.before_call()
        except ProviderUnavailable:
            admission.released(ticket)
            self._inc("breaker_rejections")
            raise
        self._inc("provider_calls")
        try:
            response = await self._provider.complete(request)
        except RateLimitedError as exc:
            # Flow control, not failure (invariant 11): the breaker hears
            # nothing, and the call waits out the pause and asks again.
            self._inc("rate_limited")
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
