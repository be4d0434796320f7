"""The error tree of beam-agents, drawn in one place.

Every error the library raises on purpose derives from `BeamAgentsError`,
split by who has to act on it::

    BeamAgentsError
    ├── ConfigError                   the user: fix configuration or the agent reference
    ├── EventDecodeError              the producer: an input element is not a valid event
    ├── StateError                    the operator: a keyed-state blob cannot be read (invariant 8)
    │   ├── StateCorruptError         malformed bytes, broken accounting, duplicate keys
    │   │   └── RingCorruptError      a ring entry's encoding is broken; names the key
    │   └── UnsupportedSchemaVersionError
    ├── MemoryOverflow                the agent: working memory would pass its hard cap
    ├── IntentTooLargeError           the agent: an emitted payload is over max_intent_bytes
    ├── StoreError                    the long-term store
    │   ├── MemoryUnavailable         unreachable or failing; retriable
    │   ├── ScopeViolation            a write crossed a tenant boundary (invariant 7)
    │   ├── MemoryContractError       the store or caller broke the write protocol
    │   ├── StoreLimitError           a record or commit exceeds the backend's limits
    │   ├── JournalUnavailable        the call journal is unreachable or failing; retriable
    │   ├── JournalCorruptError       a stored journal row does not decode; names the key
    │   └── SnapshotUnavailable       the state snapshot cannot be read or written; the run stops
    ├── ModelError                    the model provider
    │   ├── ProviderUnavailable       5xx, timeout, open breaker; retriable
    │   │   ├── RateLimitedError      a 429: flow control, never a failure (invariant 11)
    │   │   └── QuotaExhaustedError   the account's quota is used up (a daily or billing limit)
    │   ├── ProviderRejected          other 4xx; not retriable
    │   └── StructuredOutputError     answers that kept failing their response schema
    ├── ToolError                     a tool the agent called (stage TOOL)
    │   ├── ToolUnavailable           raised by a tool: try again later; retriable, suspends
    │   ├── ToolFailedError           the tool raised anything else; names the tool
    │   ├── ToolCallLimitError        past --max_tool_calls_per_activation
    │   ├── ToolLoopError             the tool loop passed its max_steps
    │   └── ToolNotRecordedError      replay met a tool call with no record; it did not run it
    ├── WaitError                     a wait for an answer (stage WAIT)
    │   └── TooManyWaitsError         an entity has --max_pending_waits pending
    ├── BudgetExceededError           the agent: an entity spent its token budget (invariant 12)
    ├── BacklogFullError              the producer: a key has --max_queued_per_key queued; retriable
    ├── LateEventError                the producer: an event came behind the watermark; retriable
    └── ActivationTimeoutError        the agent ran past AgentConfig.timeout_ms

`MemoryOverflow`, `ScopeViolation` and `MemoryUnavailable` keep the names the
specification fixes. Errors carry structured attributes so that error records
and logs can name the key, the size and the cap without parsing messages.
Bad arguments to a facade (a key that is not text, a negative bound) raise the
builtin `TypeError`/`ValueError`, as the specification requires.
"""

from __future__ import annotations

__all__ = [
    "ActivationTimeoutError",
    "BacklogFullError",
    "BeamAgentsError",
    "BudgetExceededError",
    "ConfigError",
    "EventDecodeError",
    "IntentTooLargeError",
    "JournalCorruptError",
    "JournalUnavailable",
    "LateEventError",
    "MemoryContractError",
    "MemoryOverflow",
    "MemoryUnavailable",
    "MemoryVersionError",
    "ModelError",
    "ProviderRejected",
    "ProviderUnavailable",
    "QuotaExhaustedError",
    "RateLimitedError",
    "RingCorruptError",
    "ScopeViolation",
    "SnapshotUnavailable",
    "StateCorruptError",
    "StateError",
    "StoreError",
    "StoreLimitError",
    "StructuredOutputError",
    "TooManyWaitsError",
    "ToolCallLimitError",
    "ToolError",
    "ToolFailedError",
    "ToolLoopError",
    "ToolNotRecordedError",
    "ToolUnavailable",
    "UnsupportedSchemaVersionError",
    "WaitError",
]


class BeamAgentsError(Exception):
    """Root of every error beam-agents raises on purpose."""

    #: Whether redriving the same input unchanged may succeed.
    retriable: bool = False


class ConfigError(BeamAgentsError, ValueError):
    """A configuration value is unknown, missing or out of range; names the field."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class EventDecodeError(BeamAgentsError, ValueError):
    """An input element could not be decoded into an AgentEvent; names the field."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class StateError(BeamAgentsError):
    """A keyed-state blob could not be read; the state must not be overwritten (invariant 8)."""

    def __init__(self, message: str, *, cell: str | None = None) -> None:
        super().__init__(message)
        self.cell = cell


class StateCorruptError(StateError):
    """A keyed-state blob is malformed: bad bytes, broken accounting or duplicate keys."""


class RingCorruptError(StateCorruptError):
    """A ring entry's value bytes are not a valid ring encoding."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"ring entry {key!r} is corrupt: {reason}", cell="memory")
        self.key = key


class UnsupportedSchemaVersionError(StateError):
    """A blob carries a state_schema_version this library cannot read."""

    def __init__(self, *, cell: str, version: int, supported: tuple[int, ...]) -> None:
        super().__init__(
            f"{cell} blob has state_schema_version {version}; this library reads "
            f"{', '.join(map(str, supported))}. Upgrade beam-agents or redrive from a "
            "compatible snapshot.",
            cell=cell,
        )
        self.version = version
        self.supported = supported


class MemoryVersionError(StateError):
    """Working memory written by a newer `memory_version` than the running agent's.

    Reading it as the older version would reinterpret it silently; the
    activation is dead-lettered instead, state untouched, for a redrive once
    the newer agent runs again.
    """

    def __init__(self, *, found: int, supported: int) -> None:
        super().__init__(
            f"working memory has memory_version {found}, newer than this agent's "
            f"memory_version {supported}; deploy the agent that wrote it, then redrive this "
            "dead letter. The memory was left as it was.",
            cell="memory",
        )
        self.found = found
        self.supported = supported


class MemoryOverflow(BeamAgentsError):
    """A working-memory write would exceed the hard cap and was not applied."""

    def __init__(self, *, key: str, attempted_size: int, cap: int) -> None:
        super().__init__(
            f"writing {key!r} would grow working memory to {attempted_size} bytes, over the "
            f"{cap}-byte hard cap; the write was not applied. Bound the data (append with "
            "max_items, smaller values) or configure a Compactor that frees space."
        )
        self.key = key
        self.attempted_size = attempted_size
        self.cap = cap


class IntentTooLargeError(BeamAgentsError, ValueError):
    """An emitted payload exceeds AgentConfig.max_intent_bytes; the activation fails (OUTPUT)."""

    def __init__(self, *, kind: str, size: int, limit: int) -> None:
        super().__init__(f"intent {kind!r} carries {size} bytes, over AgentConfig.max_intent_bytes "
                         f"= {limit}; emit a reference (e.g. a long-term key) instead")
        self.kind, self.size, self.limit = kind, size, limit


class StoreError(BeamAgentsError):
    """The long-term store failed or was misused."""


class MemoryUnavailable(StoreError):
    """The long-term store is unreachable or failing; retrying later may succeed."""

    retriable = True


class ScopeViolation(StoreError):
    """A record addressed another entity than the handle's own (invariant 7)."""

    def __init__(self, message: str, *, expected: bytes, actual: bytes) -> None:
        super().__init__(message)
        self.expected = expected
        self.actual = actual


class MemoryContractError(StoreError):
    """The write protocol was broken: unowned background work, unpublished required ids."""


class JournalUnavailable(StoreError):
    """The call journal could not be read or written; the activation suspends (invariant 9)."""

    retriable = True


class JournalCorruptError(StoreError):
    """A stored journal row does not decode, or belongs to another key; names the store and key."""

    def __init__(self, message: str, *, store: str, key: str) -> None:
        super().__init__(message)
        self.store = store
        self.key = key


class SnapshotUnavailable(StoreError):
    """The state snapshot's folder or collection failed; the run stops, the last good one stays.

    A snapshot is read before the first activation and written after the
    last, so its store failing ends the run rather than one activation: the
    manifest of the last good generation is only replaced once a run wrote
    all of its own (docs/operations.md, "State between batch runs").
    """

    retriable = True


class StoreLimitError(StoreError, ValueError):
    """A record or a commit exceeds a backend limit; checked before any I/O."""

    def __init__(self, message: str, *, limit: int, attempted: int) -> None:
        super().__init__(message)
        self.limit = limit
        self.attempted = attempted


class ModelError(BeamAgentsError):
    """The model provider failed or refused a request."""

    def __init__(self, message: str, *, model_id: str | None = None,
                 status: int | None = None) -> None:
        super().__init__(message)
        self.model_id = model_id
        self.status = status


class ProviderUnavailable(ModelError):
    """The provider is rate-limiting, failing, timing out, or its breaker is open."""

    retriable = True


class RateLimitedError(ProviderUnavailable):
    """The provider answered 429: slow down, and send nothing before `retry_after_s`.

    Flow control, not failure (invariant 11): it never counts toward the
    circuit breaker, and the model facade waits for admission and asks again
    instead of failing the activation.

    Attributes:
        retry_after_s: How long the provider asked the whole account to wait
            (``Retry-After``, ``retry-after-ms``, Gemini's ``RetryInfo``), or
            None when it did not say.
    """

    def __init__(self, message: str, *, model_id: str | None = None,
                 status: int | None = 429, retry_after_s: float | None = None) -> None:
        super().__init__(message, model_id=model_id, status=status)
        self.retry_after_s = retry_after_s


class QuotaExhaustedError(ProviderUnavailable):
    """The account's quota is used up (``insufficient_quota``, a daily limit); not a rate limit.

    Waiting seconds does not help, so the activation suspends with the long
    backoff and the worker sends one probe per backoff period instead of a
    retry storm (invariant 11). Raised by providers, and by the admission
    gate itself, without calling the provider, while the quota is known to be
    out (`probe_in_s` says when the next probe may go).
    """

    def __init__(self, message: str, *, model_id: str | None = None,
                 status: int | None = 429, probe_in_s: float | None = None) -> None:
        super().__init__(message, model_id=model_id, status=status)
        self.probe_in_s = probe_in_s


class ProviderRejected(ModelError):
    """The provider refused the request itself (a 4xx other than 429); not retriable."""


class BacklogFullError(BeamAgentsError):
    """An entity already has ``--max_queued_per_key`` events queued (stage BACKLOG).

    Retriable: the event was never queued, so redriving it once the key has
    caught up runs it as if it had just arrived.
    """

    retriable = True

    def __init__(self, *, entity_key: bytes, queued: int, max_queued: int) -> None:
        who = entity_key.decode("utf-8", "backslashreplace")
        super().__init__(
            f"entity {who!r} has {queued} events queued, the --max_queued_per_key cap of "
            f"{max_queued}; this event was not queued. Redrive it once the key has caught up, "
            "or raise --max_queued_per_key.")
        self.entity_key = entity_key
        self.queued = queued
        self.max_queued = max_queued


class LateEventError(BeamAgentsError):
    """An event arrived behind the watermark under ``--late_events dead_letter`` (stage LATE).

    Retriable: redriving it runs it on arrival, after the events it was late for.
    """

    retriable = True

    def __init__(self, *, entity_key: bytes, event_time_ms: int, watermark_ms: int) -> None:
        who = entity_key.decode("utf-8", "backslashreplace")
        super().__init__(
            f"event of entity {who!r} at event time {event_time_ms} ms arrived behind the "
            f"watermark ({watermark_ms} ms), past --max_out_of_orderness_ms; with "
            "--late_events dead_letter it is not run. Redrive it to run it now.")
        self.entity_key = entity_key
        self.event_time_ms = event_time_ms
        self.watermark_ms = watermark_ms


class BudgetExceededError(BeamAgentsError):
    """An entity's paid tokens would pass ``--max_tokens_per_entity`` in its window (stage BUDGET).

    Not retriable: redriving the same event in the same window spends the same
    tokens. Nothing more is paid for the entity until its window resets; other
    entities are unaffected.
    """

    def __init__(self, *, entity_key: bytes, tokens_used: int, tokens_wanted: int,
                 max_tokens: int, window_start_ms: int, window_ms: int) -> None:
        who = entity_key.decode("utf-8", "backslashreplace")
        over = (f"a call estimated at {tokens_wanted} more would pass it" if tokens_wanted
                else "the last call passed it")
        super().__init__(
            f"entity {who!r} has paid for {tokens_used} tokens of its {max_tokens}-token budget "
            f"in the window from event time {window_start_ms} ms ({window_ms} ms long); "
            f"{over}, so nothing more is paid for it until "
            f"{window_start_ms + window_ms} ms. Redrive the dead letter then, or raise "
            "--max_tokens_per_entity.")
        self.entity_key = entity_key
        self.tokens_used = tokens_used
        self.tokens_wanted = tokens_wanted
        self.max_tokens = max_tokens
        self.window_start_ms = window_start_ms


class ActivationTimeoutError(BeamAgentsError):
    """The agent did not finish within AgentConfig.timeout_ms."""

    retriable = True

    def __init__(self, *, timeout_ms: int) -> None:
        super().__init__(f"the activation ran past its {timeout_ms} ms timeout")
        self.timeout_ms = timeout_ms


class StructuredOutputError(ModelError):
    """The model's answers failed the response schema every time they were asked again.

    Not retriable: the same request is answered the same way (and replayed).
    """

    def __init__(self, message: str, *, model_id: str | None = None, attempts: int,
                 errors: str) -> None:
        super().__init__(message, model_id=model_id)
        self.attempts = attempts
        self.errors = errors


class ToolError(BeamAgentsError):
    """A tool an agent called failed; names the tool (stage TOOL)."""

    def __init__(self, message: str, *, tool: str) -> None:
        super().__init__(message)
        self.tool = tool


class ToolUnavailable(ToolError):
    """Raise it from a tool for a failure that a later try may not meet (an API that is down).

    The activation suspends and is retried, as it is for a provider outage;
    the calls it already recorded are replayed, not run again.
    """

    retriable = True

    def __init__(self, message: str, *, tool: str = "") -> None:
        super().__init__(message, tool=tool)


class ToolFailedError(ToolError):
    """A tool raised something other than `ToolUnavailable`: a dead letter, not a retry."""


class ToolCallLimitError(ToolError):
    """An activation asked for more than ``--max_tool_calls_per_activation`` tool calls."""

    def __init__(self, *, tool: str, limit: int) -> None:
        super().__init__(f"tool call {limit + 1} ({tool!r}) is past "
                         f"--max_tool_calls_per_activation {limit}; the tool was not run. "
                         "Raise the limit, or check the agent for a loop.", tool=tool)
        self.limit = limit


class ToolLoopError(ToolError):
    """The tool loop still had tool calls to run after its ``max_steps`` model turns."""

    def __init__(self, *, max_steps: int, pending: tuple[str, ...]) -> None:
        super().__init__(f"the tool loop reached max_steps={max_steps} with the model still "
                         f"asking for tools ({', '.join(pending) or 'none named'}); raise "
                         "max_steps or tell the model to answer", tool=pending[0] if pending
                         else "")
        self.max_steps = max_steps


class WaitError(BeamAgentsError):
    """A wait for an answer could not be recorded (stage WAIT)."""


class TooManyWaitsError(WaitError):
    """The entity already has ``--max_pending_waits`` waits pending (invariant 4)."""

    def __init__(self, *, entity_key: bytes, name: str, limit: int) -> None:
        who = entity_key.decode("utf-8", "backslashreplace")
        super().__init__(f"entity {who!r} already has {limit} waits pending, the most "
                         f"--max_pending_waits allows; the wait {name!r} was not recorded. "
                         "Answer or time out the others first, or raise the limit.")
        self.entity_key = entity_key
        self.name = name
        self.limit = limit


class ToolNotRecordedError(ToolError):
    """``beam-agents replay`` met a tool call its journal holds no result for: it would run.

    Replay runs nothing: the activation stops there, as it does at a model
    call the journal does not hold.
    """

    def __init__(self, *, tool: str) -> None:
        super().__init__(f"tool call {tool!r} is not in the call journal: replay does not run "
                         "tools, so the activation stopped here (it would run)", tool=tool)
