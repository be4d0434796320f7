"""The activation core: (state bytes, event, config, clients) -> outcome.

Runner adapters read keyed state, call `ActivationRuntime.activate`, and apply
the outcome; they decide nothing. The core never raises for an agent's
failure: like an SDK's activation handler, it reports failures as data, one
`ErrorRecord` inside `Failed` (invariants 1 and 8).

The order is DESIGN's activation protocol:

1. ``seq = committed_seq + 1``; ``now_ms`` is the event time (invariant 2);
2. the facades are built over the state bytes; a corrupt blob fails the
   activation with stage STATE_CORRUPT and the state is left as it was;
3. the agent runs, sync (on a worker thread) or async, under a timeout;
4. the commit tail flushes staged long-term upserts (the one sanctioned
   external write, invariant 5) and serializes only the dirty blobs;
5. any failure abandons long-term writes and yields one error record; a
   retriable one also hands back the replay cache with the responses the
   attempt paid for, which is all a suspension commits (invariant 1). The
   token budget's charges are handed back with any outcome: what was paid
   stays paid (invariant 12).

Time an activation's calls spend waiting for the provider's admission (its
quota, a Retry-After) is left out of its timeout: the timeout bounds the
agent and the provider's answers, and a tight quota slows the run instead of
timing it out (invariant 11).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import inspect
import logging
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from beam_agents._proto.error_record_pb2 import ErrorRecord
from beam_agents._proto.event_pb2 import AgentEvent
from beam_agents._proto.intent_pb2 import Intent
from beam_agents.errors import ActivationTimeoutError, QuotaExhaustedError, RateLimitedError
from beam_agents.memory import BufferedLongtermStore, LongtermHandle, Memory, TaskRegistry
from beam_agents.metrics import MetricsSink, NoopMetrics
from beam_agents.model import (
    BreakerRegistry,
    CallJournal,
    CircuitBreaker,
    ModelClient,
    ModelFacade,
    ModelProvider,
    ProviderAdmission,
    RateMemory,
    ReplayCache,
    TokenBudget,
    WaitLedger,
)
from beam_agents.model._journal import JournalEntry
from beam_agents.runtime._agent import Agent
from beam_agents.runtime._config import AgentConfig
from beam_agents.runtime._context import AgentContext
from beam_agents.runtime._errors import error_record, stage_of
from beam_agents.runtime._tool_calls import ToolCalls
from beam_agents.runtime._tools import Tool, ToolSource
from beam_agents.runtime._versions import MemoryVersioning
from beam_agents.runtime._waits import PendingWaits, WaitAnswer, WaitTimeout, timeout_event
from beam_agents.tracing import (
    NOOP_SPAN,
    NOOP_TRACER,
    TRACEPARENT,
    ActivationTrace,
    Tracer,
    provider_system,
)

__all__ = ["ActivationRuntime", "Committed", "Failed", "KeyedState", "Outcome"]

T = TypeVar("T")
NAMESPACE = "beam_agents.runtime"
MEMORY_NAMESPACE = "beam_agents.memory"
_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyedState:
    """What keyed state holds for one entity: three blobs and the last committed seq."""

    memory: bytes | None = None
    llm_cache: bytes | None = None
    seq: int = 0
    budget: bytes | None = None
    waits: bytes | None = None

    def after(self, outcome: Committed) -> KeyedState:
        """The state the entity's next event runs from, once `outcome` is committed.

        What a host's cells hold after it applies the outcome as `KeyedEngine`
        does: the outcome's seq, and each blob it carries. A blob the
        activation left unchanged is None in the outcome and kept from here,
        never dropped: a driver of `ActivationRuntime.activate` that wrote the
        None would start the next event from empty memory. The replay cache
        is the exception: its entries serve only the committed seq, which no
        later event runs with, so the next event starts from an empty one.
        """
        return KeyedState(
            memory=self.memory if outcome.memory is None else outcome.memory,
            seq=outcome.seq,
            budget=self.budget if outcome.budget is None else outcome.budget,
            waits=self.waits if outcome.waits is None else outcome.waits)


@dataclass(frozen=True, slots=True, kw_only=True)
class Committed:
    """A successful activation: write the non-None blobs and `seq`, then emit `intents`."""

    seq: int
    memory: bytes | None
    llm_cache: bytes | None
    intents: tuple[Intent, ...]
    budget: bytes | None = None
    #: The waits cell's new bytes, when the activation recorded or consumed a wait.
    waits: bytes | None = None
    #: AgentEvent bytes of the timeouts of the waits it recorded, for the engine to queue.
    timeouts: tuple[bytes, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Failed:
    """A failed activation: emit `error` on the errors output and change nothing else.

    Attributes:
        error: The dead letter; ``error.retriable`` says whether a retry may succeed.
        llm_cache: Set only for a retriable failure whose attempt paid for
            model calls: the cache blob holding them. A host that suspends the
            activation instead of dead-lettering it writes this and nothing
            else, so the retry, which runs with the same seq, replays those
            calls instead of paying again (invariants 1 and 9).
        budget: The token budget's cell when the attempt charged it: written
            with any outcome, suspension or dead letter, because tokens paid
            stay paid (invariant 12).
        flow_control: The provider's quota was out (not a failure of the
            provider or the agent): the host suspends with the long backoff
            and the attempt does not count toward ``--max_attempts``
            (invariant 11).
    """

    error: ErrorRecord
    llm_cache: bytes | None = None
    budget: bytes | None = None
    flow_control: bool = False


Outcome = Committed | Failed


class ActivationRuntime:
    """Runs activations for one worker (a DoFn instance, a Flink subtask, a CLI run).

    It owns one event loop, running in a thread of its own, on which async
    agents, providers and stores run, and a pool of ``config.agent_threads``
    threads for sync agents, so that a sync agent can still be timed out and
    can call ``ctx.model.complete`` while the loop serves the provider. Sync
    tools run on a pool of their own: a sync agent blocks its thread while its
    tool runs, so a shared pool would deadlock once every thread held an agent
    waiting for a tool. Many
    activations of different keys can run on it at once (`submit`); the
    `Scheduler` decides which. Clients (provider, store) are built by the host
    and handed in; the runtime closes them in `close`.

    Args:
        config: The agent configuration.
        agent: The callable ``config.agent`` names, resolved by the host.
        provider: The model provider ``config.model`` names, built by the host.
        clock: Monotonic seconds for the circuit breakers; injected (invariant 2).
        store: The long-term store, when ``config.longterm_memory`` is set.
        journal: The durable call journal, when ``config.call_journal`` is set.
        metrics: Where counters go.
        rates: Where this worker's learned share of the provider's quota is
            kept between runs (in the journal); None: learned afresh each run.
        tools: Tools the agent may call besides those it declares.
        tool_sources: Where more tools are listed, once, before the first
            activation needs them (the agent's MCP servers); closed in `close`.
        dry_tools: Run no tool: a call with no record raises
            `ToolNotRecordedError` (``beam-agents replay``).
        tracer: Where each activation's spans go (`beam_agents.tracing`);
            None: nowhere. The runtime flushes it on `close`.
    """

    def __init__(self, config: AgentConfig, *, agent: Callable[..., Any],
                 provider: ModelProvider, clock: Callable[[], float],
                 store: BufferedLongtermStore | None = None,
                 journal: CallJournal | None = None,
                 metrics: MetricsSink | None = None, rates: RateMemory | None = None,
                 tools: Sequence[Tool] = (), tool_sources: Sequence[ToolSource] = (),
                 dry_tools: bool = False, tracer: Tracer | None = None) -> None:
        self._config = config
        self._agent = agent
        self._versions = MemoryVersioning.of(agent, config.agent_name)
        function = agent.function if isinstance(agent, Agent) else agent
        self._is_async = inspect.iscoroutinefunction(function) or (
            not inspect.isfunction(function)
            and inspect.iscoroutinefunction(type(function).__call__))
        # The tools it declares, and those its MCP servers listed when the worker started.
        self._tools = (*(agent.tools if isinstance(agent, Agent) else ()), *tools)
        self._provider = provider
        self._store = store
        self._journal = journal
        self._metrics: MetricsSink = metrics if metrics is not None else NoopMetrics()
        self._clock = clock
        self._breakers = BreakerRegistry(clock=clock)
        model = config.model
        # One admission per provider per worker: a 429 is about the account,
        # so it pauses every activation's calls, not one key's (invariant 11).
        self._admission = ProviderAdmission(
            model_id=provider.model_id, max_rps=model.max_rps, max_tpm=model.max_tpm,
            probe_interval_s=config.retry.retry_max_ms / 1000)
        self._rates = rates
        # Built once: what every activation's model facade shares (the
        # provider, its breaker and admission, the journal); each facade adds
        # only what its activation owns.
        self._model_client = ModelClient(
            provider=provider, breaker=self.breaker, metrics=self._metrics,
            run_sync=self._bridge, journal=journal, journal_ttl_ms=config.call_journal_ttl_ms,
            admission=self._admission)
        self._tracer: Tracer = tracer if tracer is not None else NOOP_TRACER
        self._recalled: asyncio.Future[None] | None = None
        self._tool_sources = tuple(tool_sources)
        self._dry_tools = dry_tools
        self._listed: asyncio.Future[None] | None = None
        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                             name="beam-agents-loop")
        self._loop_thread.start()
        self._threads = concurrent.futures.ThreadPoolExecutor(
            max_workers=config.agent_threads, thread_name_prefix="beam-agents-agent")
        self._tool_threads = concurrent.futures.ThreadPoolExecutor(
            max_workers=config.agent_threads, thread_name_prefix="beam-agents-tool")
        self._closed = False
        self._superseded_warned = False

    @property
    def config(self) -> AgentConfig:
        """The configuration this runtime runs."""
        return self._config

    @property
    def metrics(self) -> MetricsSink:
        """Where this runtime's counters go."""
        return self._metrics

    @property
    def clock(self) -> Callable[[], float]:
        """The injected monotonic clock, in seconds."""
        return self._clock

    @property
    def tracer(self) -> Tracer:
        """Where this runtime's spans go; hosts flush it at teardown (`Tracer.flush`)."""
        return self._tracer

    @property
    def admission(self) -> ProviderAdmission:
        """The provider's admission on this worker, shared by every activation."""
        return self._admission

    @property
    def breaker(self) -> CircuitBreaker:
        """The provider's circuit breaker on this worker; it also gates activation starts."""
        return self._breakers.get(self._provider.model_id, self._config.model.breaker)

    @property
    def store(self) -> BufferedLongtermStore | None:
        """The long-term store, or None when ``config.longterm_memory`` is unset (M18)."""
        return self._store

    def activate(self, state: KeyedState, event: AgentEvent, *, attempt: int = 1) -> Outcome:
        """Run one activation to an outcome; never raises for the agent's failures."""
        return self.run(self.activate_async(state, event, attempt=attempt))

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the runtime's loop and wait for its result, from a host thread."""
        return self.submit(coro).result()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start `coro` on the runtime's loop and return at once; thread-safe.

        Raises:
            RuntimeError: Called from the loop itself, or after `close`.
        """
        if threading.current_thread() is self._loop_thread or self._closed:
            coro.close()
            raise RuntimeError("ActivationRuntime.submit from its own loop or after close()")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _bridge(self, coro: Coroutine[Any, Any, T]) -> T:
        """Let sync agent code (on a pool thread) wait for a coroutine on the loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run_coroutine_threadsafe(coro, self._loop).result()
        coro.close()
        raise RuntimeError("a blocking call was made from async agent code; await the async "
                           "variant instead (ctx.model.acomplete, longterm.aload, ...)")

    async def activate_async(self, state: KeyedState, event: AgentEvent, *,
                             attempt: int = 1) -> Outcome:
        """The activation protocol; see the module docstring.

        Args:
            state: The key's committed state.
            event: The event to run.
            attempt: Which attempt at this event this is (from 1); a retry of
                a suspended activation runs with the same state, so the same
                seq, and replays the calls the earlier attempts paid for.
        """
        seq = state.seq + 1
        now_ms = event.event_time_ms
        self._metrics.inc(NAMESPACE, "activations")
        cache: ReplayCache | None = None
        budget: TokenBudget | None = None
        waits = WaitLedger()
        trace, traceparent = self._start_trace(event, seq, attempt)

        def failed(exc: BaseException, *, flushing: bool = False) -> Failed:
            stage = stage_of(exc, flushing=flushing)
            record = error_record(
                exc, stage=stage, entity_key=event.entity_key, seq=seq,
                event=event.SerializeToString(deterministic=True), event_id=event.event_id,
                traceback_bytes=self._config.traceback_bytes)
            record.attempts = attempt
            if record.retriable:
                # The host decides whether this attempt suspends or, as its last,
                # becomes a dead letter; it counts the dead letter (count_dead_letter).
                self._metrics.inc(NAMESPACE, "retriable_failures")
            else:
                count_dead_letter(self._metrics, record)
            paid = cache.to_bytes() if record.retriable and cache is not None and cache.dirty \
                else None
            return Failed(error=record, llm_cache=paid, budget=_charged(budget),
                          flow_control=self._end_trace(trace, record, exc, traceparent))

        handle = None
        if self._rates is not None:
            await self._recall_rate()
        try:
            if self._tool_sources:
                await self._list_tools()
            pending = PendingWaits(state.waits, limit=self._config.max_pending_waits)
            answer, timed_out = _waits_met(pending, event)
            if event.wait_timed_out and timed_out is None:
                return self._moot(trace, state)
            if self._store is not None:
                handle = self._longterm_handle(event.entity_key, seq, now_ms)
            # One read per activation: every call its earlier attempts paid for
            # (invariant 9). A journal that cannot be read suspends the activation.
            journaled = (await self._journal.read(event.entity_key, seq)
                         if self._journal is not None else None)
            memory = Memory(state.memory, now_ms=now_ms, compactor=self._config.compactor,
                            metrics=self._metrics, longterm=handle)
            await self._versions.upgrade(memory, self._metrics)
            cache = ReplayCache(state.llm_cache, now_ms=now_ms)
            if self._config.max_tokens_per_entity is not None:
                budget = TokenBudget(state.budget, entity_key=event.entity_key, now_ms=now_ms,
                                     max_tokens=self._config.max_tokens_per_entity,
                                     window_ms=self._config.budget_window_ms)
            model, tools = self._recorded_calls(event, seq, cache, journaled=journaled,
                                                budget=budget, waits=waits, trace=trace)
            ctx = AgentContext(event=event, seq=seq, memory=memory, model=model, tools=tools,
                               max_intent_bytes=self._config.max_intent_bytes,
                               waits=pending, answer=answer, timed_out=timed_out,
                               traceparent=traceparent)
            await self._run_agent(ctx, waits)
        except Exception as exc:  # every agent failure becomes a dead letter (invariant 8)
            self._count_waits(waits)
            if handle is not None:
                await _quietly(handle.abandon())
            return failed(exc)
        self._count_waits(waits)
        if handle is not None:
            flush_error = await self._flush(handle, event.entity_key, seq)
            if flush_error is not None:
                return failed(flush_error, flushing=True)
        self._metrics.inc(NAMESPACE, "committed")
        trace.end("committed", intents=len(ctx.intents))
        await self._keep_rate()
        return Committed(
            seq=seq,
            memory=memory.to_bytes() if memory.dirty else None,
            llm_cache=cache.to_bytes() if cache.dirty else None,
            intents=ctx.intents,
            budget=_charged(budget),
            waits=pending.to_bytes() if pending.dirty else None,
            timeouts=tuple(timeout_event(event.entity_key, wait).SerializeToString(
                deterministic=True) for wait in pending.added),
        )

    async def _flush(self, handle: LongtermHandle, entity_key: bytes, seq: int
                     ) -> Exception | None:
        """Commit the long-term writes; the failure, if any, fails the activation closed (M22)."""
        try:
            receipt = await handle.commit()
        except Exception as exc:
            await _quietly(handle.abandon())
            return exc
        if receipt.superseded:
            self._superseded(entity_key, seq, receipt.superseded)
        return None

    def _superseded(self, entity_key: bytes, seq: int, keys: Sequence[str]) -> None:
        """Writes the seq guard refused: counted, the first entity named, warned once (invariant 5).

        The store held a newer seq for them, which happens when this run's keyed
        state is behind the store's (a batch run without ``--state_snapshot``,
        a redrive of old dead letters): the activation committed, its rows did not.
        """
        self._metrics.inc(MEMORY_NAMESPACE, "longterm_writes_superseded", len(keys))
        who = entity_key.decode("utf-8", "backslashreplace")
        self._metrics.note(MEMORY_NAMESPACE, "longterm_superseded_first", f"{who} (seq {seq})")
        if not self._superseded_warned:
            self._superseded_warned = True
            _log.warning(
                "long-term write(s) %s of entity %r at seq %d were superseded: the store holds "
                "a newer seq, so they were not written. This run's keyed state is behind the "
                "store's; give the run --state_snapshot so each key continues its seq "
                "(docs/operations.md, \"State between batch runs\"). Warned once per worker; "
                "the summary counts them all.", ", ".join(keys[:3]), who, seq)

    def _moot(self, trace: ActivationTrace, state: KeyedState) -> Committed:
        """A timeout whose wait was answered first: nothing to run (invariant 14)."""
        self._metrics.inc(NAMESPACE, "wait_timeouts_moot")
        trace.end("committed")
        return Committed(seq=state.seq, memory=None, llm_cache=None, intents=())

    def _recorded_calls(self, event: AgentEvent, seq: int, cache: ReplayCache, *,
                        journaled: Mapping[str, JournalEntry] | None,
                        budget: TokenBudget | None, waits: WaitLedger,
                        trace: ActivationTrace) -> tuple[ModelFacade, ToolCalls]:
        """The activation's model and tools, both recorded in its cache and the journal."""
        digest = (hashlib.sha256(event.SerializeToString(deterministic=True)).digest()
                  if self._journal is not None else b"")
        config, now_ms = self._config, event.event_time_ms
        model = ModelFacade(
            client=self._model_client, cache=cache, entity_key=event.entity_key, seq=seq,
            journaled=journaled, now_ms=now_ms, event_digest=digest, waits=waits,
            budget=budget, trace=trace)
        tools = ToolCalls(
            tools=self._tools, cache=cache, journal=self._journal, journaled=journaled,
            entity_key=event.entity_key, seq=seq, now_ms=now_ms,
            journal_ttl_ms=config.call_journal_ttl_ms, event_digest=digest,
            metrics=self._metrics, max_calls=config.max_tool_calls_per_activation,
            run_sync=self._bridge, run_in_thread=self._in_thread, dry_run=self._dry_tools,
            trace=trace)
        model.use_tools(tools.run_loop)
        return model, tools

    def _in_thread(self, work: Callable[[], T]) -> asyncio.Future[T]:
        """Run a sync tool off the event loop, on the tool threads (never the agents')."""
        return self._loop.run_in_executor(self._tool_threads, work)

    async def _list_tools(self) -> None:
        """Once per worker: the tools its sources list; a failure is retried by the next one."""
        if self._listed is None or (self._listed.done() and self._listed.exception()):
            self._listed = asyncio.ensure_future(self._add_listed_tools())
        await asyncio.shield(self._listed)

    async def _add_listed_tools(self) -> None:
        listed = [tool for source in self._tool_sources for tool in await source.tools()]
        self._tools = (*self._tools, *listed)

    def _start_trace(self, event: AgentEvent, seq: int,
                     attempt: int) -> tuple[ActivationTrace, str]:
        """This attempt's ``invoke_agent`` span, and the context its outputs carry onward.

        The span is a child of the producer's when the event carries its
        ``traceparent``. Outputs carry the span's context or, with tracing
        off, the producer's, passed through untouched.
        """
        parent = event.attributes.get(TRACEPARENT, "")
        if self._tracer is NOOP_TRACER:  # tracing off: the producer's context passes through
            return ActivationTrace(NOOP_TRACER, NOOP_SPAN, provider="", model_id=""), parent
        trace = ActivationTrace.start(
            self._tracer, agent=self._config.agent_name, agent_version=self._versions.version,
            provider=provider_system(self._config.model.provider), model_id=self._provider.model_id,
            entity_key=event.entity_key, seq=seq, event_id=event.event_id, attempt=attempt,
            parent=parent)
        return trace, trace.traceparent or parent

    def _end_trace(self, trace: ActivationTrace, record: ErrorRecord, exc: BaseException,
                   traceparent: str) -> bool:
        """End a failed attempt's span as the engine will apply it; whether it is flow control.

        The outcome is `KeyedEngine`'s: flow control and a retriable failure
        before the last attempt suspend, anything else is a dead letter.
        """
        record.traceparent = traceparent
        flow_control = isinstance(exc, QuotaExhaustedError | RateLimitedError)
        suspends = flow_control or (
            record.retriable and not self._config.retry.gives_up_after(record.attempts))
        trace.end("suspended" if suspends else "dead_lettered",
                  stage=ErrorRecord.Stage.Name(record.stage), error_type=record.error_type,
                  retriable=record.retriable)
        return flow_control

    async def _recall_rate(self) -> None:
        """Before the worker's first call: start from the share its last run learned."""
        if self._recalled is None:
            self._recalled = asyncio.ensure_future(self._start_from_recalled())
        await self._recalled

    async def _start_from_recalled(self) -> None:
        assert self._rates is not None
        rate = await self._rates.recall()
        if rate is not None and self._config.model.max_rps is None:
            self._admission.start_from(rate)
            self._metrics.inc(NAMESPACE, "rate_recalled")

    async def _keep_rate(self, *, closing: bool = False) -> None:
        """Now and then, and when the worker closes: keep the share it learned."""
        rates = self._rates
        if rates is not None and (closing or rates.due(self._clock())):
            await rates.keep(self._admission.learned_rate, self._clock())

    async def _run_agent(self, ctx: AgentContext, waits: WaitLedger) -> None:
        if self._is_async:
            work: asyncio.Future[Any] = asyncio.ensure_future(self._agent(ctx))
        else:
            work = self._loop.run_in_executor(self._threads, self._call_sync, ctx)
        result = await self._within_timeout(work, waits)
        if inspect.isawaitable(result):  # a sync callable that returned a coroutine
            await self._within_timeout(asyncio.ensure_future(result), waits)

    async def _within_timeout(self, work: asyncio.Future[T], waits: WaitLedger) -> T:
        """Await `work` for at most the timeout of its own time: admission waits do not count.

        Raises:
            ActivationTimeoutError: The agent's own time (and its providers'
                answers) passed ``timeout_ms``; `work` is cancelled.
        """
        timeout_s = self._config.timeout_ms / 1000
        loop = asyncio.get_running_loop()
        started = loop.time()
        while True:
            now = loop.time()
            left = timeout_s - (now - started - waits.waited_until(now))
            if left <= 0:
                work.cancel()
                await asyncio.wait((work,))  # let it unwind; what it raises is moot now
                raise ActivationTimeoutError(timeout_ms=self._config.timeout_ms)
            try:
                done, _ = await asyncio.wait((work,), timeout=left)
            except asyncio.CancelledError:
                work.cancel()  # the activation itself was cancelled (the runtime closes)
                raise
            if done:
                return work.result()

    def _count_waits(self, waits: WaitLedger) -> None:
        """Count ``throttled`` (activations that waited for admission) and ``throttled_ms``."""
        if waits.waits:
            self._metrics.inc(NAMESPACE, "throttled")
            self._metrics.inc(NAMESPACE, "throttled_ms", round(waits.waited_s * 1000))

    def _call_sync(self, ctx: AgentContext) -> Any:
        return self._agent(ctx)

    def _longterm_handle(self, entity_key: bytes, seq: int, now_ms: int) -> LongtermHandle:
        assert self._store is not None
        # One registry per activation owns its background saves (seed 004, W01):
        # the commit joins them, and abandon cancels whatever is left.
        return LongtermHandle(store=self._store, entity_key=entity_key, seq=seq, now_ms=now_ms,
                              run_sync=self._bridge, background=TaskRegistry())

    def close(self) -> None:
        """Close the provider and the store, then the loop and the threads; idempotent."""
        if self._closed:
            return
        try:
            # Tool sources first: their connections run tasks of their own on this
            # loop, which must end through the SDK's own shutdown, not a cancel.
            for source in self._tool_sources:
                self.run(source.aclose())
            self.run(_cancel_running())  # activations nobody will apply any more
            self.run(self._provider.aclose())
            if self._store is not None:
                self.run(self._store.close())
            if self._journal is not None:
                self.run(self._keep_rate(closing=True))
                self.run(self._journal.close())
        finally:
            self._tracer.flush()
            self._closed = True
            self._threads.shutdown(wait=False, cancel_futures=True)
            self._tool_threads.shutdown(wait=False, cancel_futures=True)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop_thread.join()
            self._loop.close()

    def __enter__(self) -> ActivationRuntime:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _waits_met(pending: PendingWaits, event: AgentEvent
               ) -> tuple[WaitAnswer | None, WaitTimeout | None]:
    """What the event does to the entity's waits: answers one, or delivers its timeout."""
    answer = timed_out = None
    if event.answers:
        taken = pending.take(event.answers)
        answer = WaitAnswer(name=event.answers, payload=event.payload,
                            request=taken.request if taken is not None else b"",
                            late=taken is None)
    if event.wait_timed_out:
        taken = pending.take(event.wait_timed_out, deadline_ms=event.event_time_ms)
        if taken is not None:
            timed_out = WaitTimeout(name=taken.name, request=taken.request,
                                    deadline_ms=taken.deadline_ms)
    return answer, timed_out


def _charged(budget: TokenBudget | None) -> bytes | None:
    """The budget cell to write back, when this activation charged it."""
    return budget.to_bytes() if budget is not None and budget.dirty else None


def count_dead_letter(metrics: MetricsSink, record: ErrorRecord) -> None:
    """Count one dead letter of an activation: ``failed`` and ``errors_<stage>``."""
    metrics.inc(NAMESPACE, "failed")
    metrics.inc(NAMESPACE, f"errors_{ErrorRecord.Stage.Name(record.stage)[6:].lower()}")


async def _cancel_running() -> None:
    """Cancel every other task on the running loop and wait until they have all ended."""
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _quietly(coro: Coroutine[Any, Any, Any]) -> None:
    """Run a cleanup whose failure must not replace the error being reported."""
    with contextlib.suppress(Exception):  # the original failure is what the record reports
        await coro
