"""A test environment that keeps an agent's state between events, as a pipeline does.

`AgentTestEnv` owns one runtime and one per-key engine for the whole test,
with keyed state held in process: the same engine, with the same retries,
event order, waits and commits, that every pipeline runs. Processing time is
a fake clock that jumps to a retry's due time, so a retry's backoff costs the
test nothing; event time is what the events carry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from beam_agents._proto.event_pb2 import AgentEvent
from beam_agents.backend import JournalEntry, JournalWrite
from beam_agents.errors import ConfigError, ProviderRejected
from beam_agents.hosting import KeyCells, KeyedEngine, model_provider, start_runtime
from beam_agents.memory import Memory
from beam_agents.model import (
    CallJournal,
    InMemoryCallJournal,
    LearnedRateRecord,
    ModelProvider,
    ModelRequest,
    ModelResponse,
)
from beam_agents.runtime import AgentConfig
from beam_agents.stores.memory import InMemoryLongtermStore
from beam_agents.testing._events import DEFAULT_EVENT_TIME_MS, make_event
from beam_agents.testing._outputs import DeadLetter, Emitted, decode_line

__all__ = ["AgentTestEnv", "Sent", "configure"]

#: What the environment provides itself, so a test cannot set it.
_OWN = ("longterm_memory", "call_journal")
_SETTINGS = frozenset(f.name for f in fields(AgentConfig)) - {"agent", *_OWN}


def configure(agent: Callable[..., Any] | str | AgentConfig,
              settings: Mapping[str, Any]) -> AgentConfig:
    """The config a test environment runs: the agent and `settings`, without stores of its own.

    Raises:
        ConfigError: the agent is not a callable, a ``"module:callable"``
            string or an `AgentConfig`; or the config names a long-term store
            or call journal, which the environment provides.
        TypeError: a setting is not an `AgentConfig` field.
    """
    unknown = sorted(set(settings) - _SETTINGS)
    if unknown:
        raise TypeError(f"unknown setting(s) {', '.join(unknown)}: pass AgentConfig fields, e.g. "
                        "max_tokens_per_entity=1000 or retry=RetryPolicy(max_attempts=2)")
    if isinstance(agent, AgentConfig):
        if settings:
            raise TypeError("give either an AgentConfig or settings, not both")
        config = agent
    elif isinstance(agent, str) or callable(agent):
        config = AgentConfig(agent=agent, **settings)
    else:
        raise ConfigError(f"the agent must be a callable taking an AgentContext, or "
                          f"'package.module:callable', got {agent!r}", field="AgentConfig.agent")
    for name in _OWN:
        if getattr(config, name) is not None:
            raise ConfigError(f"AgentConfig.{name} is set, but the test environment keeps its "
                              "own in memory; leave it unset", field=f"AgentConfig.{name}")
    return config


@dataclass(frozen=True, slots=True)
class Sent:
    """What one `AgentTestEnv.send` produced: its intents and its dead letters.

    A send also runs what became due with it: a wait's timeout whose deadline
    the event's time passed, and the retries of its own activation.
    """

    intents: tuple[Emitted, ...]
    dead_letters: tuple[DeadLetter, ...]


class _Run:
    """One runtime and engine over keyed state held in process, on a fake processing clock."""

    def __init__(self, config: AgentConfig, *, provider: ModelProvider,
                 store: InMemoryLongtermStore | None, journal: CallJournal,
                 dry_tools: bool = False) -> None:
        self.now_ms = 0
        self.watermark_ms: int | None = None
        self.cells: dict[bytes, KeyCells] = {}
        self.runtime = start_runtime(config, provider=provider, store=store, journal=journal,
                                     dry_tools=dry_tools, clock=lambda: self.now_ms / 1000)
        self.engine = KeyedEngine.over(self.runtime)

    def send(self, event: AgentEvent) -> list[tuple[str, bytes]]:
        key = event.entity_key
        cells = self.cells.setdefault(key, KeyCells.in_process())
        self.watermark_ms = max(self.watermark_ms or 0, event.event_time_ms)
        refused = self.engine.enqueue(key, cells, event.SerializeToString(deterministic=True))
        lines: list[tuple[str, bytes]] = [] if refused is None else [refused]
        return lines + self.run_due()

    def advance_to(self, time_ms: int) -> list[tuple[str, bytes]]:
        self.watermark_ms = max(self.watermark_ms or 0, time_ms)
        return self.run_due()

    def run_due(self) -> list[tuple[str, bytes]]:
        """Run every key until nothing it holds can run before the watermark moves on."""
        lines: list[tuple[str, bytes]] = []
        for key in sorted(self.cells):
            lines.extend(self._drain(key, self.cells[key]))
        return lines

    def _drain(self, key: bytes, cells: KeyCells) -> list[tuple[str, bytes]]:
        lines: list[tuple[str, bytes]] = []
        while True:
            step = self.engine.on_wake(key, cells, self.now_ms, waits_through_ms=self.watermark_ms)
            lines.extend(step.lines)
            after = self.engine.next(key, cells, self.now_ms, waits_through_ms=self.watermark_ms)
            if after.action in ("idle", "awaiting_watermark"):
                return lines
            if after.action == "running":
                self.engine.await_running(key, timeout_s=1.0)
            elif after.action == "retry" and after.at_ms is not None:
                # The backoff passes at once: processing time is this run's fake clock.
                self.now_ms = max(self.now_ms, after.at_ms)
            elif after.action == "slots_full":
                self.engine.scheduler.wait_for_slot(0.02)

    def close(self) -> None:
        self.runtime.close()


class AgentTestEnv:
    """An agent under test, its state kept from one event to the next: send events, read results.

    One runtime serves the whole test; close it with ``with`` (or `close`).
    Each `send` runs the event through the engine every pipeline runs, so a
    retriable failure is retried (at once: the backoff passes on a fake
    clock), an agent's failure becomes a dead letter, and a commit keeps the
    entity's working memory for its next event::

        with AgentTestEnv(support, model=ScriptedModel(["Hi!"])) as env:
            env.send("customer-1", text="hello")
            assert env.intents[0].payload["text"] == "Hi!"

    Long-term memory goes to a store private to the environment; model and
    tool calls are recorded, so `replay` can check that the agent's
    decisions are deterministic.

    Args:
        agent: The agent: a function taking an `AgentContext` (sync or async,
            plain or declared with ``@agent``), its ``"module:callable"``
            name, or a whole `AgentConfig`.
        model: The model the agent calls, e.g. a `ScriptedModel`; by default
            the one the config names (the local template model). The
            environment closes it when it closes.
        longterm: Give the agent a long-term store (``ctx.memory.longterm``).
        start_ms: The event time of the first event sent without one.
        step_ms: How far each such event's time is after the latest so far.
        **settings: `AgentConfig` fields, e.g. ``max_tokens_per_entity=1000``.

    Raises:
        ConfigError: the agent does not load, or a setting is out of range.
        TypeError: a setting is not an `AgentConfig` field.
    """

    def __init__(self, agent: Callable[..., Any] | str | AgentConfig, *,
                 model: ModelProvider | None = None, longterm: bool = True,
                 start_ms: int = DEFAULT_EVENT_TIME_MS, step_ms: int = 1_000,
                 **settings: Any) -> None:
        self._config = configure(agent, settings)
        self._model = model if model is not None else model_provider(self._config.model)
        self._longterm = longterm
        self._store = InMemoryLongtermStore() if longterm else None
        self._journal = InMemoryCallJournal()
        self._next_ms = start_ms
        self._step_ms = step_ms
        self._ids = 0
        #: What was sent, in order: an event, or a time the watermark moved to.
        self._inputs: list[AgentEvent | int] = []
        self._outputs: list[Emitted | DeadLetter] = []
        self._run = _Run(self._config, provider=self._model, store=self._store,
                         journal=self._journal)

    @property
    def config(self) -> AgentConfig:
        """The configuration the agent runs with."""
        return self._config

    @property
    def model(self) -> ModelProvider:
        """The model the agent calls."""
        return self._model

    @property
    def time_ms(self) -> int | None:
        """The latest event time sent or advanced to; None before the first."""
        return self._run.watermark_ms

    def send(self, entity_key: str | bytes, payload: object = None, /, *,
             event_id: str | None = None, event_time_ms: int | None = None,
             attributes: Mapping[str, str] | None = None, answers: str | None = None,
             **fields: Any) -> Sent:
        """Send one event for `entity_key` and run it, with whatever became due, to the end.

        The payload is `payload` (a dict, a str, bytes or any JSON value), or
        the keyword `fields` as a dict: ``env.send("c-1", text="hi")`` sends
        ``{"text": "hi"}``.

        Args:
            entity_key: The entity the event belongs to.
            payload: The event's payload; give it or `fields`, not both.
            event_id: Its id; ``"e-<n>"`` by default, counting every send.
            event_time_ms: Its event time (``ctx.now_ms``); by default
                `step_ms` after the latest so far. Waits whose deadline it
                passes time out first.
            attributes: String attributes of the event.
            answers: The name of a wait this event answers (``ctx.wait_for``).
            **fields: The payload's fields.

        Returns:
            The intents and dead letters this send produced.
        """
        if payload is not None and fields:
            raise TypeError("give the payload as one value or as keyword fields, not both")
        self._ids += 1
        if event_time_ms is None:
            event_time_ms = self._next_ms
        event = make_event(entity_key, fields if payload is None else payload,
                           event_id=f"e-{self._ids}" if event_id is None else event_id,
                           event_time_ms=event_time_ms, attributes=attributes)
        if answers is not None:
            event.answers = answers
        self._next_ms = max(self._next_ms, event_time_ms + self._step_ms)
        self._inputs.append(event)
        return self._record(self._run.send(event))

    def advance_to(self, time_ms: int) -> Sent:
        """Let event time reach `time_ms`: every wait whose deadline it passes times out now."""
        self._next_ms = max(self._next_ms, time_ms + self._step_ms)
        self._inputs.append(time_ms)
        return self._record(self._run.advance_to(time_ms))

    def _record(self, lines: Sequence[tuple[str, bytes]]) -> Sent:
        decoded = [decode_line(channel, line) for channel, line in lines]
        self._outputs.extend(decoded)
        return Sent(tuple(item for item in decoded if isinstance(item, Emitted)),
                    tuple(item for item in decoded if isinstance(item, DeadLetter)))

    @property
    def intents(self) -> list[Emitted]:
        """Every intent emitted so far, in the order they were committed."""
        return [item for item in self._outputs if isinstance(item, Emitted)]

    @property
    def dead_letters(self) -> list[DeadLetter]:
        """Every dead letter so far; ``stage`` is a name, such as ``"AGENT"``."""
        return [item for item in self._outputs if isinstance(item, DeadLetter)]

    def memory(self, entity_key: str | bytes) -> Memory:
        """The entity's committed working memory: ``env.memory("c-1").get("profile")``.

        A copy: changing it changes nothing the agent sees. An entity that
        never committed has an empty one.
        """
        cells = self._run.cells.get(_key_bytes(entity_key))
        blob = None if cells is None else cells.state.memory.read()
        return Memory(None if blob is None else bytes(blob), now_ms=self._run.watermark_ms or 0)

    def longterm(self, entity_key: str | bytes) -> dict[str, bytes]:
        """The entity's committed long-term rows, by key: what its agent saved and flushed.

        Raises:
            ConfigError: the environment was made with ``longterm=False``.
        """
        if self._store is None:
            raise ConfigError("this AgentTestEnv has no long-term store: it was made with "
                              "longterm=False", field="longterm")
        rows = self._store.rows(_key_bytes(entity_key))
        return {key: bytes(row.value) for (_, key), row in rows.items()}

    def replay(self) -> None:
        """Run every event sent so far again, from empty state, over the recorded calls.

        The rerun sends no model request and runs no tool: each call answers
        from what this run recorded. It checks that the agent is a function of
        its inputs and recorded calls, as every retry, restore and redrive
        requires: the same intents, the same working memory, and no call
        that would be paid again. An event whose model call failed on every
        attempt recorded no answer, so replaying it would pay.

        Raises:
            AssertionError: the rerun emitted different intents, left different
                working memory, or needed a model call or a tool run this run
                did not record; the message says which, for which events.
        """
        refusing = _RecordedOnly(self._model.model_id)
        rerun = _Run(self._config, provider=refusing,
                     store=InMemoryLongtermStore() if self._longterm else None,
                     journal=_ReadOnly(self._journal), dry_tools=True)
        lines: list[tuple[str, bytes]] = []
        try:
            for item in self._inputs:
                lines.extend(rerun.send(item) if isinstance(item, AgentEvent)
                             else rerun.advance_to(item))
            memory = {key: cells.state.memory.read() for key, cells in rerun.cells.items()}
        finally:
            rerun.close()
        _check_replay(self, [decode_line(channel, line) for channel, line in lines], memory,
                      refusing.requests)

    def close(self) -> None:
        """Close the runtime, the model and the stores; idempotent."""
        self._run.close()

    def __enter__(self) -> AgentTestEnv:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _check_replay(env: AgentTestEnv, rerun: Sequence[Emitted | DeadLetter],
                  memory: Mapping[bytes, Any], unpaid: Sequence[ModelRequest]) -> None:
    problems: list[str] = []
    if unpaid:
        problems.append(f"{len(unpaid)} model call(s) this run did not record would be paid")
    not_run = [d for d in rerun if isinstance(d, DeadLetter)
               and d.error_type.endswith("ToolNotRecordedError")]
    if not_run:
        problems.append(f"{len(not_run)} tool call(s) this run did not record would run "
                        f"(first: {not_run[0].entity_key} {not_run[0].event_id}: "
                        f"{not_run[0].message})")
    again = [item for item in rerun if isinstance(item, Emitted)]
    if again != env.intents:
        first = next((i for i, (a, b) in enumerate(zip(env.intents, again, strict=False))
                      if a != b), min(len(env.intents), len(again)))
        was = env.intents[first] if first < len(env.intents) else None
        now = again[first] if first < len(again) else None
        problems.append(f"the intents differ at #{first}: recorded {was}, replayed {now}")
    for key, cells in sorted(env._run.cells.items()):
        if cells.state.memory.read() != memory.get(key):
            problems.append(f"the working memory of {key.decode('utf-8', 'replace')!r} differs")
    if problems:
        raise AssertionError("replay is not the recorded run: " + "; ".join(problems))


def _key_bytes(entity_key: str | bytes) -> bytes:
    return entity_key.encode("utf-8") if isinstance(entity_key, str) else bytes(entity_key)


class _RecordedOnly:
    """A model that answers nothing: a request reaching it was not recorded, so would be paid."""

    def __init__(self, model_id: str) -> None:
        self.model_id = model_id
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        raise ProviderRejected("not among the recorded calls: replay sends no request",
                               model_id=self.model_id)

    async def aclose(self) -> None:
        return None


class _ReadOnly:
    """The recorded calls, read and never written, nor closed by the rerun."""

    def __init__(self, inner: CallJournal) -> None:
        self._inner = inner

    async def read(self, entity_key: bytes, seq: int) -> Mapping[str, JournalEntry]:
        return await self._inner.read(entity_key, seq)

    async def write(self, entry: JournalEntry) -> JournalWrite:
        return JournalWrite(won=True, stored=entry)

    async def read_rates(self, account: str) -> Sequence[LearnedRateRecord]:
        return ()

    async def write_rate(self, record: LearnedRateRecord) -> None:
        return None

    async def close(self) -> None:
        return None
