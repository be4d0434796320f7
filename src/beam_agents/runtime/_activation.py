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
import threading
from collections.abc import Callable, Coroutine
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
    ModelFacade,
    ModelProvider,
    ProviderAdmission,
    ReplayCache,
    TokenBudget,
    WaitLedger,
)
from beam_agents.runtime._config import AgentConfig
from beam_agents.runtime._context import AgentContext
from beam_agents.runtime._errors import error_record, stage_of
from beam_agents.runtime._versions import MemoryVersioning

__all__ = ["ActivationRuntime", "Committed", "Failed", "KeyedState", "Outcome"]

T = TypeVar("T")
NAMESPACE = "beam_agents.runtime"


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyedState:
    """What keyed state holds for one entity: three blobs and the last committed seq."""

    memory: bytes | None = None
    llm_cache: bytes | None = None
    seq: int = 0
    budget: bytes | None = None

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
            budget=self.budget if outcome.budget is None else outcome.budget)


@dataclass(frozen=True, slots=True, kw_only=True)
class Committed:
    """A successful activation: write the non-None blobs and `seq`, then emit `intents`."""

    seq: int
    memory: bytes | None
    llm_cache: bytes | None
    intents: tuple[Intent, ...]
    budget: bytes | None = None


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
    can call ``ctx.model.complete`` while the loop serves the provider. Many
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
    """

    def __init__(self, config: AgentConfig, *, agent: Callable[..., Any],
                 provider: ModelProvider, clock: Callable[[], float],
                 store: BufferedLongtermStore | None = None,
                 journal: CallJournal | None = None,
                 metrics: MetricsSink | None = None) -> None:
        self._config = config
        self._agent = agent
        self._versions = MemoryVersioning.of(agent, config.agent)
        self._is_async = inspect.iscoroutinefunction(self._agent) or (
            not inspect.isfunction(self._agent)
            and inspect.iscoroutinefunction(type(self._agent).__call__))
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
        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                             name="beam-agents-loop")
        self._loop_thread.start()
        self._threads = concurrent.futures.ThreadPoolExecutor(
            max_workers=config.agent_threads, thread_name_prefix="beam-agents-agent")
        self._closed = False

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
    def admission(self) -> ProviderAdmission:
        """The provider's admission on this worker, shared by every activation."""
        return self._admission

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
                          flow_control=isinstance(exc, QuotaExhaustedError | RateLimitedError))

        handle = None
        try:
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
            model = ModelFacade(
                cache=cache, provider=self._provider, metrics=self._metrics,
                breaker=self._breakers.get(self._provider.model_id, self._config.model.breaker),
                entity_key=event.entity_key, seq=seq, run_sync=self._bridge,
                journal=self._journal, journaled=journaled, now_ms=now_ms,
                journal_ttl_ms=self._config.call_journal_ttl_ms,
                event_digest=hashlib.sha256(event.SerializeToString(deterministic=True)).digest()
                if self._journal is not None else b"",
                admission=self._admission, waits=waits, budget=budget)
            ctx = AgentContext(event=event, seq=seq, memory=memory, model=model,
                               max_intent_bytes=self._config.max_intent_bytes)
            await self._run_agent(ctx, waits)
        except Exception as exc:  # every agent failure becomes a dead letter (invariant 8)
            self._count_waits(waits)
            if handle is not None:
                await _quietly(handle.abandon())
            return failed(exc)
        self._count_waits(waits)
        if handle is not None:
            try:
                await handle.commit()
            except Exception as exc:  # M22: a failed flush fails the activation closed
                await _quietly(handle.abandon())
                return failed(exc, flushing=True)
        self._metrics.inc(NAMESPACE, "committed")
        return Committed(
            seq=seq,
            memory=memory.to_bytes() if memory.dirty else None,
            llm_cache=cache.to_bytes() if cache.dirty else None,
            intents=ctx.intents,
            budget=_charged(budget),
        )

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
            self.run(_cancel_running())  # activations nobody will apply any more
            self.run(self._provider.aclose())
            if self._store is not None:
                self.run(self._store.close())
            if self._journal is not None:
                self.run(self._journal.close())
        finally:
            self._closed = True
            self._threads.shutdown(wait=False, cancel_futures=True)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop_thread.join()
            self._loop.close()

    def __enter__(self) -> ActivationRuntime:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


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
